"""What a :class:`~swerve.RedisHealth` keeps in Redis and says on its channel: the keys of a
route, the scripts that change them, the messages, and the fleet's view read back."""

from __future__ import annotations

import hashlib
import json
import math
import re
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from .._engine.config import DEFAULT_COOLDOWN_MAX_S
from . import redis_scripts as scripts
from .breaker import BreakerState
from .cooldown import Cooling, RouteHealth
from .latency import BUCKETS, MAX_COUNT, LatencySketch
from .memory import MAX_DRAIN_S  # one bound for every store, and for what Redis holds

__all__ = [
    "MAX_DRAIN_S",
    "MAX_MESSAGE_BYTES",
    "REJECT_REASONS",
    "Bounds",
    "Message",
    "RedisWire",
    "Rejected",
    "breaker_from_hash",
    "cooling_from_hash",
    "cooling_message",
    "latency_from_reply",
    "message_from_json",
]

# -- what another process may legitimately have written ---------------------------------------
# Everything read from Redis (the channel and the keys) is untrusted input: another swerve with
# a skewed clock, an older or newer swerve, or anything else with access to the Redis. It is
# checked here, in one place, into typed values; what fails is dropped (and counted by the
# caller), and epoch times are bounded by what a legitimate writer could have written.

MAX_MESSAGE_BYTES = 4096
"""A channel message longer than this is dropped before it is parsed (swerve's are ~200 B)."""
MAX_STREAK = 64  # failed probes in a row: 2**32 times any base cooldown is past any cap already
MAX_REASON_CHARS = 64  # a failure kind ("rate_limited") or "drained"
MAX_ROUTE_CHARS = 512
# The longest breaker open period a peer is trusted with before this process's config says:
# generous (a fleet may raise breaker.max_open_s), not the config's 30 s default, so a process
# that has made no call yet does not cut its peers' longer open periods short.
DEFAULT_MAX_OPEN_S = 300.0
DEFAULT_LEASE_S = 600.0  # an attempt's default time limit: the longest probe lease by default

REJECT_REASONS = frozenset(
    {"too_large", "not_json", "shape", "route", "value", "out_of_bounds", "wrong_type", "script",
     "unbacked"}
)  # fmt: skip
"""The values of ``swerve.reason`` on ``swerve.store.rejected``: why a value was dropped (or,
for ``out_of_bounds``, cut to its bound; ``unbacked``: a channel message the route's keys do
not hold)."""


@dataclass(slots=True)
class Bounds:
    """The longest a legitimate writer could take a route out for, from now: a cooldown
    (``cooldown_s``, the config's ``longest_cooldown_s``), a breaker's open period
    (``open_s``, ``breaker.max_open_s``), a probe's lease (``lease_s``) and a drain
    (``drain_s``). Unless set, each grows to the largest this process's own calls use."""

    cooldown_s: float = DEFAULT_COOLDOWN_MAX_S
    open_s: float = DEFAULT_MAX_OPEN_S
    lease_s: float = DEFAULT_LEASE_S
    drain_s: float = MAX_DRAIN_S
    fixed: frozenset[str] = field(default_factory=frozenset)

    def learn(self, name: str, seconds: float) -> None:
        """A call of this process used ``seconds`` for ``name``: the fleet may too."""
        if name not in self.fixed and math.isfinite(seconds) and seconds > getattr(self, name):
            setattr(self, name, seconds)


@dataclass(frozen=True, slots=True)
class Rejected:
    """A value that failed validation: why (one of :data:`REJECT_REASONS`) and what, escaped
    and short, for one log line."""

    reason: str
    detail: str


@dataclass(frozen=True, slots=True)
class Message:
    """One message of the channel, checked. ``at`` is the op's epoch time: a probe's lease
    end, a breaker's open end (None: closed), a drain's end. ``bounded``: a time was cut to
    its bound (the message still applies, counted as ``out_of_bounds``)."""

    op: str
    route: str
    sender: str
    cooling: Cooling | None = None
    at: float | None = None
    bounded: bool = False


_OPS = frozenset({"cool", "probe", "release", "recover", "breaker", "clear", "drain", "bye"})


class RedisWire:
    """One fleet's keys and channel (``prefix``) on a redis-py ``client``."""

    def __init__(self, client: Any, prefix: str) -> None:
        if not prefix or any(c in "{}*?[]" or not c.isprintable() or c.isspace() for c in prefix):
            # the prefix is part of a hash tag and of SCAN patterns: braces or globs break both
            raise ValueError(
                f"RedisHealth prefix {prefix!r}: use letters, digits and punctuation other than "
                "{ } * ? [ ], and no spaces"
            )
        self._client = client
        self._prefix = prefix
        self.channel = f"{prefix}:events"
        self.me = uuid.uuid4().hex  # tells this process's own messages apart
        self._scripts = {
            name: client.register_script(getattr(scripts, name))
            for name in scripts.__all__  # registered once; EVALSHA after the first call
        }

    def keys(self, route: str, *names: str) -> list[str]:
        # One hash tag per route: a route's keys share a slot, so scripts run on Cluster.
        tag = route if "{" not in route and "}" not in route else _digest(route)
        return [f"{{{self._prefix}:{tag}}}:{name}" for name in names]

    def run(self, script: str, keys: list[str], args: list[Any]) -> Any:
        return self._scripts[script](keys=keys, args=args)

    def publish(self, message: dict[str, Any], *, delivered: bool = False) -> None:
        """Send ``message`` on the channel. ``delivered``: return only once Redis has written
        it to every subscriber's socket. Redis answers PUBLISH before it writes the message
        out (its last reply queued is written first), so a peer's next call could begin
        before the message reaches it; one more round trip ends after that write."""
        message["from"] = self.me
        self._client.publish(self.channel, json.dumps(message))
        if delivered:
            self._client.ping()

    def subscribe(self) -> Any:
        """A pub/sub connection listening on the channel."""
        pubsub = self._client.pubsub(ignore_subscribe_messages=True)
        pubsub.subscribe(self.channel)
        return pubsub

    def ping(self) -> None:
        self._client.ping()

    def backed(self, message: Message, now: float, bounds: Bounds) -> Message | Rejected:
        """``message`` as the route's keys hold it now, or why they do not back it. The keys
        are the truth (``swerve routes`` and every later process read them); a message only
        says which route changed. So a message nobody's key holds (forged, or superseded by a
        later change) cannot take a route out, or bring one back, here alone. One or two key
        reads, checked like the resync's: for the reader thread, never a call's path."""
        op, route = message.op, message.route
        unbacked = Rejected(
            "unbacked", f"a {op} message for {_shown(route)}: Redis holds no such state"
        )
        if op in ("cool", "drain", "recover", "clear"):
            fields = self._hash(self.keys(route, "cool")[0])
            cooling = (
                fields if isinstance(fields, Rejected) else cooling_from_hash(fields, now, bounds)
            )
            if isinstance(cooling, Rejected):
                return cooling
            if cooling is not None and cooling.forget_at <= now:
                cooling = None  # ended: the same as no key
            if op in ("cool", "drain"):  # the key's cooldown, not the message's
                return unbacked if cooling is None else replace(message, cooling=cooling)
            if cooling is not None:  # a recover or clear leaves no cooldown behind
                return unbacked
            if op == "recover":
                return message
        if op in ("breaker", "clear"):
            fields = self._hash(self.keys(route, "brk")[0])
            open_until = (
                fields if isinstance(fields, Rejected) else breaker_from_hash(fields, now, bounds)
            )
            if isinstance(open_until, Rejected):
                return open_until
            if op == "clear" or message.at is None:  # closed: its key is gone
                return message if open_until is None else unbacked
            return unbacked if open_until is None else replace(message, at=open_until)
        if op in ("probe", "release"):
            left_ms = int(self._client.pttl(self.keys(route, "probe")[0]))  # -2: none, -1: no TTL
            if op == "release":
                return message if left_ms == -2 else unbacked
            if left_ms <= 0 or message.at is None:
                return unbacked
            return replace(message, at=min(message.at, now + min(left_ms / 1000, bounds.lease_s)))
        return message

    def _hash(self, name: str) -> Mapping[Any, Any] | Rejected:
        """The fields of the hash ``name`` (empty when it does not exist)."""
        import redis

        try:
            fields: Mapping[Any, Any] = self._client.hgetall(name)
        except redis.ResponseError:  # WRONGTYPE: not a hash, not ours
            return Rejected("wrong_type", f"{_shown(name)} is not a hash")
        return fields

    def release_slot(self, key: str, token: str) -> None:
        """Give back the half-open breaker slot ``token`` holds in ``key``."""
        self._client.zrem(key, token)

    def fleet_state(
        self, now: float, bounds: Bounds, reject: Callable[[Rejected], None]
    ) -> tuple[dict[str, Cooling], dict[str, float]]:
        """Every route's cooldown and every breaker's open end (open or half-open) that Redis
        holds, read now and checked: a key that fails (a wrong type, a bad field) is passed to
        ``reject`` and skipped, never raised, so one bad key cannot stop a resync."""
        coolings: dict[str, Cooling] = {}
        breakers: dict[str, float] = {}
        for kind in ("cool", "brk"):
            for route, name in self._scan(kind):
                if (bad := _bad_route(route, keyed=True)) is not None:
                    reject(bad)
                    continue
                fields = self._hash(name)
                if isinstance(fields, Rejected):
                    reject(fields)
                    continue
                if kind == "cool":
                    cooling = cooling_from_hash(fields, now, bounds)
                    if isinstance(cooling, Rejected):
                        reject(cooling)
                    elif cooling is not None and cooling.forget_at > now:
                        coolings[route] = cooling
                else:
                    open_until = breaker_from_hash(fields, now, bounds)
                    if isinstance(open_until, Rejected):
                        reject(open_until)
                    elif open_until is not None:
                        breakers[route] = open_until
        return coolings, breakers

    def fleet_view(
        self, now: float, bounds: Bounds, reject: Callable[[Rejected], None]
    ) -> list[RouteHealth]:
        """Every route Redis holds health for, read now (bad keys skipped, see fleet_state)."""
        coolings, breakers = self.fleet_state(now, bounds, reject)
        found: dict[str, RouteHealth] = {}
        for route, cooling in coolings.items():
            found[route] = RouteHealth(
                route,
                cooling.until if cooling.until > now else None,
                BreakerState.CLOSED,
                recovering=cooling.until <= now,
                reason=cooling.reason,
            )
        for route, open_until in breakers.items():
            state = BreakerState.OPEN if open_until > now else BreakerState.HALF_OPEN
            base = found.get(route, RouteHealth(route, None, BreakerState.CLOSED))
            found[route] = RouteHealth(
                route,
                base.degraded_until,
                state,
                base.recovering,
                base.reason,
                breaker_until=open_until if state is BreakerState.OPEN else None,
            )
        return [found[r] for r in sorted(found)]

    def _scan(self, kind: str) -> list[tuple[str, str]]:
        """(route, key) of every key of ``kind`` under the prefix."""
        out = []
        for key in self._client.scan_iter(match=f"{{{self._prefix}:*}}:{kind}", count=500):
            name = _text(key)
            out.append((name[len(self._prefix) + 2 : name.rindex("}")], name))
        return out

    def latency(
        self, route: str, windows: tuple[int, int], adds: tuple[dict[int, int], ...], ttl_ms: int
    ) -> list[Any]:
        """Add ``adds`` (one ``{bucket: count}`` per window of ``windows``) to ``route``'s
        latency hashes and read both back, in one script: per window, the hash's fields and
        values (flat, as HGETALL gives them), or ``b"too_many"`` / ``b"wrong_type"``."""
        args: list[Any] = [ttl_ms, BUCKETS, MAX_COUNT]
        for counts in adds:
            args.append(len(counts))
            for index, count in counts.items():
                args += [index, count]
        reply = self.run("LATENCY", self.keys(route, *(f"lat:{w}" for w in windows)), args)
        return list(reply)

    def latency_windows(
        self, limit: int, reject: Callable[[Rejected], None]
    ) -> dict[str, set[int]]:
        """The latency windows Redis holds, per route (SCAN, as the resync does for the other
        keys). A key name that is not a route's window is passed to ``reject``; routes past
        ``limit`` are left out, and so are routes hashed for their braces (see keys()): those
        are learned from pushes only."""
        found: dict[str, set[int]] = {}
        for route, name in self._scan("lat:*"):
            window = name.rpartition(":")[2]
            if _HEX40.fullmatch(route):
                continue
            if (bad := _bad_route(route)) is not None:
                reject(bad)
            elif not _WINDOW.fullmatch(window):
                reject(Rejected("shape", f"latency key {_shown(name)}"))
            elif route in found or len(found) < limit:
                found.setdefault(route, set()).add(int(window))
        return found

    def prefixes(self, *, limit: int = 10_000) -> tuple[dict[str, int], bool]:
        """The prefixes swerve keys in this Redis are under, each with how many routes it
        holds, and whether the look was complete: a SCAN of at most ``limit`` matching keys
        (in batches of 500; never KEYS, which blocks the server), for ``swerve routes``."""
        routes: dict[str, set[str]] = {}
        for seen, key in enumerate(self._client.scan_iter(match="{*:*}:*", count=500)):
            if seen >= limit:
                return _counted(routes), False
            found = _prefix_of(_text(key))
            if found is not None:
                routes.setdefault(found[0], set()).add(found[1])
        return _counted(routes), True

    def close(self) -> None:
        self._client.close()


_KINDS = frozenset({"cool", "probe", "brk", "window", "half_open"})  # see keys()
_DIGEST_TAG = re.compile(r"(.+):[0-9a-f]{40}")
_WINDOW = re.compile(r"-?[0-9]{1,15}")  # a latency window's number, in its key's name
_LATENCY_KIND = re.compile(r"lat:-?[0-9]{1,15}")


def _prefix_of(key: str) -> tuple[str, str] | None:
    """(prefix, route tag) of one of swerve's keys, ``{prefix:tag}:kind``; None for another's."""
    tag, close, kind = key[1:].rpartition("}:")
    if not close or (kind not in _KINDS and not _LATENCY_KIND.fullmatch(kind)):
        return None
    if (digest := _DIGEST_TAG.fullmatch(tag)) is not None:
        return digest[1], tag[len(digest[1]) + 1 :]
    # The tag is the route, "provider/model": the prefix ends at the last ":" before its "/".
    prefix, colon, _ = tag.partition("/")[0].rpartition(":")
    return (prefix, tag[len(prefix) + 1 :]) if colon and prefix and "/" in tag else None


def _counted(routes: dict[str, set[str]]) -> dict[str, int]:
    return {prefix: len(tags) for prefix, tags in sorted(routes.items())}


def latency_from_reply(item: Any, route: str, window: int) -> LatencySketch | Rejected:
    """One window's part of the LATENCY script's reply, checked into a sketch."""
    what = f"latency of {_shown(route)} in window {window}"
    if isinstance(item, (bytes, str)):
        reason = "wrong_type" if _text(item) == "wrong_type" else "too_large"
        return Rejected(reason, f"{what}: {_shown(_text(item))}")
    if not isinstance(item, list) or len(item) % 2:
        return Rejected("shape", f"{what}: not a hash's fields")
    if len(item) > 2 * BUCKETS:  # the script checks this too; never walk a huge reply
        return Rejected("too_large", f"{what}: {len(item) // 2} fields")
    try:
        return LatencySketch.from_counts(dict(zip(item[::2], item[1::2], strict=True)), window)
    except ValueError as exc:
        return Rejected("value", f"{what}: {exc}")


def cooling_message(state: list[Any]) -> dict[str, Any]:
    """The fields of a ``cool`` message, from the state a script returned."""
    until, streak, forget_at, reason = state
    return {
        "until": float(_text(until)),
        "streak": int(streak),
        "forget_at": float(_text(forget_at)),
        "reason": _text(reason),
    }


class _Invalid(Exception):
    def __init__(self, reason: str, detail: str) -> None:
        self.rejected = Rejected(reason, detail)


def message_from_json(data: bytes | str, now: float, bounds: Bounds) -> Message | Rejected:
    """A channel message, checked: its size (before parsing), its shape, its route, and each
    value's type, finiteness and bound (times later than a legitimate writer could have
    written are cut to the bound). Never raises."""
    if len(data) > MAX_MESSAGE_BYTES:
        return Rejected("too_large", f"a message of {len(data)} bytes")
    try:
        raw = json.loads(data)
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
        return Rejected("not_json", f"a message that is not JSON ({type(exc).__name__})")
    try:
        return _message(raw, now, bounds)
    except _Invalid as exc:
        return exc.rejected


def _message(raw: Any, now: float, bounds: Bounds) -> Message:
    if not isinstance(raw, dict):
        raise _Invalid("shape", f"a message that is a JSON {type(raw).__name__}, not an object")
    op, route, sender = raw.get("op"), raw.get("route"), raw.get("from", "")
    if not isinstance(op, str) or op not in _OPS:
        raise _Invalid("shape", f"a message with op {_shown(op)}")
    if not isinstance(sender, str):
        raise _Invalid("shape", "a message whose sender is not a string")
    if op == "bye":
        return Message(op, "", sender)
    if not isinstance(route, str) or _bad_route(route) is not None:
        raise _Invalid("route", f"a {op} message for route {_shown(route)}")
    what = f"a {op} message for {route}"
    if op == "cool":
        cooling, bounded = _checked_cooling(raw, now, bounds, what)
        return Message(op, route, sender, cooling=cooling, bounded=bounded)
    if op in ("probe", "drain", "breaker"):
        name, limit = {
            "probe": ("lease_until", bounds.lease_s),
            "drain": ("until", bounds.drain_s),
            "breaker": ("open_until", bounds.open_s),
        }[op]
        value = raw.get(name)
        if op == "breaker" and value is None:
            return Message(op, route, sender)  # closed
        at, bounded = _epoch(value, now, limit, f"{what}: {name}")
        return Message(op, route, sender, at=at, bounded=bounded)
    return Message(op, route, sender)


def cooling_from_hash(
    fields: Mapping[Any, Any], now: float, bounds: Bounds
) -> Cooling | Rejected | None:
    """A route's cooldown from its ``cool`` hash (HGETALL), checked like a message's; None
    when the hash is empty (no cooldown)."""
    if not fields:
        return None
    try:
        values = {_text(k): _number_or_text(v) for k, v in fields.items()}
        values.setdefault("streak", 0)
        values.setdefault("reason", "")
        if "until" in values:
            values.setdefault("forget_at", values["until"])
        cooling, _ = _checked_cooling(values, now, bounds, "a cool key")
    except _Invalid as exc:
        return exc.rejected
    return cooling


def breaker_from_hash(
    fields: Mapping[Any, Any], now: float, bounds: Bounds
) -> float | Rejected | None:
    """A breaker's open end from its ``brk`` hash, checked and bounded; None when empty."""
    if not fields:
        return None
    values = {_text(k): v for k, v in fields.items()}
    try:
        at, _ = _epoch(_number_or_text(values.get("open_until")), now, bounds.open_s, "a brk key")
    except _Invalid as exc:
        return exc.rejected
    return at


def _checked_cooling(
    raw: Mapping[str, Any], now: float, bounds: Bounds, what: str
) -> tuple[Cooling, bool]:
    reason = raw.get("reason", "")
    if not isinstance(reason, str) or not _REASON.fullmatch(reason):
        raise _Invalid("value", f"{what}: reason {_shown(reason)}")
    streak = raw.get("streak")
    if isinstance(streak, bool) or not isinstance(streak, int) or not 0 <= streak <= MAX_STREAK:
        raise _Invalid("value", f"{what}: streak {_shown(streak)}")
    # A drain is an operator's, bounded by the longest drain; a cooldown by the longest one.
    limit = bounds.drain_s if reason == "drained" else bounds.cooldown_s
    until, cut = _epoch(raw.get("until"), now, limit, f"{what}: until")
    forget_at, cut_forget = _epoch(raw.get("forget_at"), until, limit, f"{what}: forget_at")
    return Cooling(until, streak, forget_at, reason=reason), cut or cut_forget


def _epoch(value: Any, now: float, limit: float, what: str) -> tuple[float, bool]:
    """``value`` as an epoch time no later than ``now + limit``, and whether it was cut."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _Invalid("value", f"{what} {_shown(value)} is not a number")
    number = float(value)
    if not math.isfinite(number):
        raise _Invalid("value", f"{what} {_shown(value)} is not finite")
    if number > now + limit:
        return now + limit, True
    return number, False


def _number_or_text(value: Any) -> Any:
    """A field of a hash (bytes) as the number it spells, else as text (which then fails the
    type check, named)."""
    text = _text(value) if value is not None else None
    if text is None:
        return None
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)  # "inf" and "nan" parse, and fail the finiteness check
    except ValueError:
        return text


def _bad_route(route: str, *, keyed: bool = False) -> Rejected | None:
    """Why ``route`` is no route swerve writes; None if it is one. ``keyed``: read from a key
    name, where a route holding braces is its digest (see RedisWire.keys)."""
    if keyed and _HEX40.fullmatch(route):
        return None
    if not route or len(route) > MAX_ROUTE_CHARS or not route.isprintable() or "/" not in route:
        return Rejected("route", f"route {_shown(route)}")
    return None


_HEX40 = re.compile(r"[0-9a-f]{40}")
_REASON = re.compile(rf"[A-Za-z0-9_.:-]{{0,{MAX_REASON_CHARS}}}")  # a failure kind, "drained"


def _shown(value: Any, limit: int = 60) -> str:
    """``value`` for a log line: repr (control characters escaped), cut to ``limit``."""
    text = repr(value) if not isinstance(value, bytes) else repr(value[:limit])
    text = text.encode("ascii", "backslashreplace").decode()
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _digest(route: str) -> str:
    return hashlib.sha1(route.encode(), usedforsecurity=False).hexdigest()


def _text(value: Any) -> str:
    # Not UTF-8 is not swerve's: escaped, so it fails the checks named instead of raising.
    return value.decode(errors="backslashreplace") if isinstance(value, bytes) else str(value)
