"""The server-side scripts of :class:`swerve.RedisHealth`: every change that races is atomic.

Each script touches the keys of one route only, which share a hash slot (``{prefix:route}``),
so they run on Redis Cluster too. Times are epoch seconds from the caller's clock; every key
expires by itself once the route no longer needs it.
"""

from __future__ import annotations

__all__ = ["ACCOUNT", "CLAIM", "CLEAR", "COOL", "DRAIN", "HALF_OPEN", "MERGE", "RECOVER", "RELEASE"]

# Times go back to Python as text, through num(): Lua's tostring() keeps 14 significant
# digits, which rounds an epoch time to 0.1 ms, so a process would read back a time other than
# the one it wrote (a half-open period named twice, a cooldown shortened). %.17g round-trips
# every double exactly.

# KEYS: cool, probe. ARGV: now, base_s, max_s, floor_s, reason.
# Grows the cooldown for a failure after the cooldown ended (a failed probe), extends it
# otherwise, never shortens it; ends any probe. Returns the stored state.
COOL = """
local function num(x) return string.format('%.17g', x) end
local now, base, maxs, floor = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]),
  tonumber(ARGV[4])
local cur = redis.call('HMGET', KEYS[1], 'until', 'streak', 'forget_at')
local streak, untl = 0, 0
if cur[1] and tonumber(cur[3]) > now then
  untl, streak = tonumber(cur[1]), tonumber(cur[2])
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

# KEYS: cool. ARGV: until, streak, forget_at, reason. A process's own view, merged in when
# Redis comes back: never shortens, never lowers the streak.
MERGE = """
local function num(x) return string.format('%.17g', x) end
local cur = redis.call('HMGET', KEYS[1], 'until', 'streak', 'forget_at', 'reason')
local untl, streak, forget = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local reason = ARGV[4]
if cur[1] then
  if tonumber(cur[1]) >= untl then reason = cur[4] end
  untl = math.max(untl, tonumber(cur[1]))
  streak = math.max(streak, tonumber(cur[2]))
  forget = math.max(forget, tonumber(cur[3]))
end
redis.call('HSET', KEYS[1], 'until', num(untl), 'streak', streak,
  'forget_at', num(forget), 'reason', reason)
redis.call('PEXPIREAT', KEYS[1], math.ceil(forget * 1000))
return {num(untl), streak, num(forget), reason}
"""

# KEYS: cool, probe. ARGV: now, lease_ms, token.
# {1} the probe is ours; {0, ms} someone holds it (or the route still cools) for ms more;
# {2} the fleet knows no cooldown: the route is healthy.
CLAIM = """
local now = tonumber(ARGV[1])
local cur = redis.call('HMGET', KEYS[1], 'until', 'forget_at')
if not cur[1] or tonumber(cur[2]) <= now then return {2, 0} end
if now < tonumber(cur[1]) then return {0, math.ceil((tonumber(cur[1]) - now) * 1000)} end
if redis.call('SET', KEYS[2], ARGV[3], 'NX', 'PX', ARGV[2]) then return {1, 0} end
return {0, redis.call('PTTL', KEYS[2])}
"""

# KEYS: probe. ARGV: token. Gives a probe back, if it is still ours.
RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""

# KEYS: cool, probe. ARGV: now. A success after the cooldown: the route is healthy.
RECOVER = """
local untl = redis.call('HGET', KEYS[1], 'until')
if untl and tonumber(untl) <= tonumber(ARGV[1]) then
  redis.call('DEL', KEYS[1], KEYS[2])
  return 1
end
return 0
"""

# KEYS: cool, probe, brk, window. An operator ends the route's cooldown and breaker.
CLEAR = """
return redis.call('DEL', KEYS[1], KEYS[2], KEYS[3], KEYS[4])
"""

# KEYS: cool, probe. ARGV: until, reason. An operator degrades the route until a time.
DRAIN = """
local streak = redis.call('HGET', KEYS[1], 'streak') or 0
redis.call('HSET', KEYS[1], 'until', ARGV[1], 'streak', streak, 'forget_at', ARGV[1],
  'reason', ARGV[2])
redis.call('PEXPIREAT', KEYS[1], math.ceil(tonumber(ARGV[1]) * 1000))
redis.call('DEL', KEYS[2])
return 1
"""

# KEYS: window, brk. ARGV: now, ok, fail, window_s, min_calls, failure_rate, open_s,
# max_open_s, open_until (a process's own opening, or 0), closed (1: a probe closed it).
# Counts outcomes per second over the fleet and opens the breaker on the fleet's failure
# rate. Returns the breaker's open_until ('0' when closed).
ACCOUNT = """
local function num(x) return string.format('%.17g', x) end
local now, window = tonumber(ARGV[1]), tonumber(ARGV[4])
local st = redis.call('HMGET', KEYS[2], 'open_until', 'opens')
local open_until, opens = tonumber(st[1] or '0'), tonumber(st[2] or '0')
if ARGV[10] == '1' then
  redis.call('DEL', KEYS[1], KEYS[2])
  return '0'
end
local max_open = tonumber(ARGV[8])
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
  if tonumber(string.sub(field, 1, sep - 1)) <= now - window then
    redis.call('HDEL', KEYS[1], field)
  elseif string.sub(field, sep + 1) == 'ok' then
    ok = ok + tonumber(all[i + 1])
  else
    fail = fail + tonumber(all[i + 1])
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

# KEYS: leases of one half-open period (the key names the period). ARGV: now, lease_s,
# token, limit. At most `limit` probes at once, fleet-wide; a lease expires by itself.
HALF_OPEN = """
local now = tonumber(ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[4]) then return 0 end
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[3])
redis.call('PEXPIRE', KEYS[1], math.ceil(tonumber(ARGV[2]) * 1000) + 1000)
return 1
"""
