"""The server-side scripts of :class:`swerve.RedisHealth`: every change that races is atomic.

Each script touches the keys of one route only, which share a hash slot (``{prefix:route}``),
so they run on Redis Cluster too. Times are epoch seconds from the caller's clock; every key
expires by itself once the route no longer needs it.
"""

from __future__ import annotations

__all__ = [
    "ACCOUNT",
    "CLAIM",
    "CLEAR",
    "COOL",
    "DRAIN",
    "HALF_OPEN",
    "LATENCY",
    "MERGE",
    "RECOVER",
    "RELEASE",
]

# What a script reads from Redis is untrusted (another writer, a skewed clock, a hand-made key):
# _CHECKS turns a field that is not a finite number into a default, drops a key of the wrong
# type, and every time read back is cut to now + the longest it could legitimately be, so no
# stored value makes a script fail (the store would reconnect over and over) or take a route
# out for longer than the config allows.
_CHECKS = """
local function num(x) return string.format('%.17g', x) end
local function finite(x, default)
  local v = tonumber(x)
  if v == nil or v ~= v or v == math.huge or v == -math.huge then return default end
  return v
end
local function typed(key, want)
  local t = redis.call('TYPE', key)['ok']
  if t ~= want and t ~= 'none' then redis.call('DEL', key) end
end
"""

# Times go back to Python as text, through num(): Lua's tostring() keeps 14 significant
# digits, which rounds an epoch time to 0.1 ms, so a process would read back a time other than
# the one it wrote (a half-open period named twice, a cooldown shortened). %.17g round-trips
# every double exactly.

# KEYS: cool, probe. ARGV: now, base_s, max_s, floor_s, reason, longest_drain_s.
# Grows the cooldown for a failure after the cooldown ended (a failed probe), extends it
# otherwise, never shortens it (but never keeps one that ends later than now + max_s: no
# legitimate writer could have set it); ends any probe. Returns the stored state.
COOL = (
    _CHECKS
    + """
local now, base, maxs, floor = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]),
  tonumber(ARGV[4])
typed(KEYS[1], 'hash')
local cur = redis.call('HMGET', KEYS[1], 'until', 'streak', 'forget_at', 'reason')
local streak, untl = 0, 0
local cur_until, cur_forget = finite(cur[1], nil), finite(cur[3], 0)
local longest = maxs
if cur[4] == 'drained' then longest = tonumber(ARGV[6]) end
if cur_until and cur_forget > now then
  untl = math.min(cur_until, now + longest)
  streak = math.min(math.max(math.floor(finite(cur[2], 0)), 0), 64)
  if now >= untl then streak = streak + 1 end
end
local secs = math.min(maxs, math.max(base * 2 ^ math.min(streak, 32), floor))
untl = math.max(untl, now + secs)
local forget = untl + maxs
redis.call('HSET', KEYS[1], 'until', num(untl), 'streak', streak,
  'forget_at', num(forget), 'reason', ARGV[5])
redis.call('PEXPIREAT', KEYS[1], math.ceil(forget * 1000))
redis.call('DEL', KEYS[2])
return {num(untl), streak, num(forget), ARGV[5]}
"""
)

# KEYS: cool. ARGV: until, streak, forget_at, reason, now, longest_s, longest_drain_s (the
# longest the stored cooldown, or drain, may last from now). A process's own view, merged in
# when Redis comes back: never shortens, never lowers the streak.
MERGE = (
    _CHECKS
    + """
typed(KEYS[1], 'hash')
local cur = redis.call('HMGET', KEYS[1], 'until', 'streak', 'forget_at', 'reason')
local untl, streak, forget = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local reason = ARGV[4]
local longest = tonumber(ARGV[6])
if cur[4] == 'drained' then longest = tonumber(ARGV[7]) end
local cur_until = finite(cur[1], nil)
if cur_until then
  cur_until = math.min(cur_until, tonumber(ARGV[5]) + longest)
  if cur_until >= untl and type(cur[4]) == 'string' and #cur[4] <= 64 then reason = cur[4] end
  untl = math.max(untl, cur_until)
  streak = math.max(streak, math.min(math.max(math.floor(finite(cur[2], 0)), 0), 64))
  forget = math.max(forget, math.min(finite(cur[3], 0), cur_until + longest))
end
redis.call('HSET', KEYS[1], 'until', num(untl), 'streak', streak,
  'forget_at', num(forget), 'reason', reason)
redis.call('PEXPIREAT', KEYS[1], math.ceil(forget * 1000))
return {num(untl), streak, num(forget), reason}
"""
)

# KEYS: cool, probe. ARGV: now, lease_ms, token, longest_s (the longest a cooldown may last
# from now), longest_lease_ms, longest_drain_s. {1} the probe is ours; {0, ms} someone holds
# it (or the route still cools) for ms more; {2} the fleet knows no cooldown: healthy.
# A cooldown that ends later than any legitimate writer's could is over (in Redis too), and a
# lease longer than any prober's is dropped: a skewed clock or a bad writer takes a route out
# for the bound at most, fleet-wide.
CLAIM = (
    _CHECKS
    + """
local now, longest = tonumber(ARGV[1]), tonumber(ARGV[4])
typed(KEYS[1], 'hash')
typed(KEYS[2], 'string')
local cur = redis.call('HMGET', KEYS[1], 'until', 'forget_at', 'reason')
if cur[3] == 'drained' then longest = tonumber(ARGV[6]) end
local untl, forget = finite(cur[1], nil), finite(cur[2], nil)
if not untl then
  if cur[1] or cur[2] then redis.call('DEL', KEYS[1]) end
  return {2, 0}
end
if not forget then forget = untl end
if forget <= now then return {2, 0} end
if untl > now + longest then
  -- Asked once this process's own view (bounded when it read the cooldown) ended: a time so
  -- far ahead is a skewed clock's or a bad writer's, and its cooldown is over now.
  untl = now
  forget = math.min(forget, now + longest)
  redis.call('HSET', KEYS[1], 'until', num(untl), 'forget_at', num(forget))
  redis.call('PEXPIREAT', KEYS[1], math.ceil(forget * 1000))
end
if now < untl then return {0, math.ceil((untl - now) * 1000)} end
local ttl = redis.call('PTTL', KEYS[2])
if ttl == -1 or ttl > tonumber(ARGV[5]) then redis.call('DEL', KEYS[2]) end
if redis.call('SET', KEYS[2], ARGV[3], 'NX', 'PX', ARGV[2]) then return {1, 0} end
return {0, redis.call('PTTL', KEYS[2])}
"""
)

# KEYS: probe. ARGV: token. Gives a probe back, if it is still ours.
RELEASE = (
    _CHECKS
    + """
typed(KEYS[1], 'string')
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""
)

# KEYS: cool, probe. ARGV: now. A success after the cooldown: the route is healthy.
RECOVER = (
    _CHECKS
    + """
typed(KEYS[1], 'hash')
local untl = finite(redis.call('HGET', KEYS[1], 'until'), nil)
if untl == nil or untl <= tonumber(ARGV[1]) then
  redis.call('DEL', KEYS[1], KEYS[2])
  return 1
end
return 0
"""
)

# KEYS: cool, probe, brk, window. An operator ends the route's cooldown and breaker.
CLEAR = """
return redis.call('DEL', KEYS[1], KEYS[2], KEYS[3], KEYS[4])
"""

# KEYS: cool, probe. ARGV: until, reason, now, longest_s. An operator degrades the route
# until a time. The arguments are checked before anything is written, so a drain applies
# whole (HSET and PEXPIREAT) or not at all.
DRAIN = (
    _CHECKS
    + """
local untl, now, longest = finite(ARGV[1], nil), finite(ARGV[3], nil), finite(ARGV[4], nil)
if not untl or not now or not longest or untl <= now or untl > now + longest then
  return redis.error_reply('swerve DRAIN: until must be a finite time after now, ' ..
    'at most ' .. tostring(longest) .. ' s ahead')
end
typed(KEYS[1], 'hash')
local streak = math.min(math.max(math.floor(finite(redis.call('HGET', KEYS[1], 'streak'), 0)),
  0), 64)
redis.call('HSET', KEYS[1], 'until', num(untl), 'streak', streak, 'forget_at', num(untl),
  'reason', ARGV[2])
redis.call('PEXPIREAT', KEYS[1], math.ceil(untl * 1000))
redis.call('DEL', KEYS[2])
return 1
"""
)

# KEYS: window, brk. ARGV: now, ok, fail, window_s, min_calls, failure_rate, open_s,
# max_open_s, open_until (a process's own opening, or 0), closed (1: a probe closed it).
# Counts outcomes per second over the fleet and opens the breaker on the fleet's failure
# rate. Returns the breaker's open_until ('0' when closed).
ACCOUNT = (
    _CHECKS
    + """
local now, window = tonumber(ARGV[1]), tonumber(ARGV[4])
if ARGV[10] == '1' then
  redis.call('DEL', KEYS[1], KEYS[2])
  return '0'
end
typed(KEYS[1], 'hash')
typed(KEYS[2], 'hash')
local max_open = tonumber(ARGV[8])
local st = redis.call('HMGET', KEYS[2], 'open_until', 'opens')
local open_until = math.min(finite(st[1], 0), now + max_open)
local opens = math.min(math.max(math.floor(finite(st[2], 0)), 0), 64)
if tonumber(ARGV[9]) > open_until then
  open_until = tonumber(ARGV[9])
  redis.call('HSET', KEYS[2], 'open_until', num(open_until), 'opens', opens + 1)
  redis.call('PEXPIREAT', KEYS[2], math.ceil((open_until + max_open) * 1000))
  redis.call('DEL', KEYS[1])
  return num(open_until)
end
if open_until > now then return num(open_until) end
local bucket = math.floor(now)
if tonumber(ARGV[2]) > 0 then redis.call('HINCRBY', KEYS[1], bucket .. ':ok', ARGV[2]) end
if tonumber(ARGV[3]) > 0 then redis.call('HINCRBY', KEYS[1], bucket .. ':fail', ARGV[3]) end
redis.call('PEXPIRE', KEYS[1], math.ceil(window * 1000) + 1000)
local all = redis.call('HGETALL', KEYS[1])
local ok, fail = 0, 0
for i = 1, #all, 2 do
  local field = all[i]
  local sep = string.find(field, ':', 1, true)
  local at = sep and finite(string.sub(field, 1, sep - 1), nil)
  local count = finite(all[i + 1], nil)
  local kind = sep and string.sub(field, sep + 1)
  if not at or not count or count < 0 or at > now + 1 or at <= now - window
     or (kind ~= 'ok' and kind ~= 'fail') then
    redis.call('HDEL', KEYS[1], field)  -- expired, or not a count this script wrote
  elseif kind == 'ok' then
    ok = ok + count
  else
    fail = fail + count
  end
end
local total = ok + fail
if total >= tonumber(ARGV[5]) and fail / total >= tonumber(ARGV[6]) then
  open_until = now + math.min(max_open, tonumber(ARGV[7]) * 2 ^ math.min(opens, 32))
  redis.call('HSET', KEYS[2], 'open_until', num(open_until), 'opens', opens + 1)
  redis.call('PEXPIREAT', KEYS[2], math.ceil((open_until + max_open) * 1000))
  redis.call('DEL', KEYS[1])
  return num(open_until)
end
if open_until > 0 then return num(open_until) end
return '0'
"""
)

# KEYS: leases of one half-open period (the key names the period). ARGV: now, lease_s,
# token, limit, longest_lease_s. At most `limit` probes at once, fleet-wide; a lease expires
# by itself, and one that ends later than any legitimate prober's could is dropped.
HALF_OPEN = (
    _CHECKS
    + """
local now = tonumber(ARGV[1])
typed(KEYS[1], 'zset')
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '(' .. num(now + tonumber(ARGV[5])), '+inf')
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[4]) then return 0 end
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[3])
redis.call('PEXPIRE', KEYS[1], math.ceil(tonumber(ARGV[2]) * 1000) + 1000)
return 1
"""
)

# KEYS: the latency hashes of a route's windows (bucket index -> count). ARGV: ttl_ms,
# max_fields, max_count, then per key: how many (bucket, count) pairs follow, and the pairs.
# Adds this process's new counts (HINCRBY) and returns each hash whole, or 'too_many' for one
# with more fields than there are buckets (not ours: never sent back whole). A field that is
# not a count this script could have written (not a plain integer, or one that would pass
# max_count) is replaced by ours instead of failing HINCRBY: a bad writer cannot stop the
# fleet sharing. The hashes expire two windows after their last write.
LATENCY = (
    _CHECKS
    + """
local ttl, maxf, maxc = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local at = 4
local out = {}
for k = 1, #KEYS do
  local n = tonumber(ARGV[at])
  at = at + 1
  if n > 0 then typed(KEYS[k], 'hash') end
  for j = 1, n do
    local field, by = ARGV[at], tonumber(ARGV[at + 1])
    at = at + 2
    local cur = redis.call('HGET', KEYS[k], field)
    if cur and (#cur > 15 or not (cur == '0' or string.match(cur, '^[1-9]%d*$'))
                or tonumber(cur) + by > maxc) then
      redis.call('HSET', KEYS[k], field, by)
    else
      redis.call('HINCRBY', KEYS[k], field, by)
    end
  end
  if n > 0 then redis.call('PEXPIRE', KEYS[k], ttl) end
  local t = redis.call('TYPE', KEYS[k])['ok']
  if t ~= 'hash' and t ~= 'none' then
    out[k] = 'wrong_type'
  elseif redis.call('HLEN', KEYS[k]) > maxf then
    out[k] = 'too_many'
  else
    out[k] = redis.call('HGETALL', KEYS[k])
  end
end
return out
"""
)
