"""RedisHealth: route health shared by every process that points at one Redis and prefix.

A call never waits on Redis for a healthy route. Each process keeps a local view (a
:class:`MemoryHealth`) that answers every read; its own changes apply there at once and go to
Redis from a writer thread; other processes' changes arrive on a pub/sub channel, read by a
reader thread, which also resyncs the whole view on every (re)connect. Only claiming a probe
(of a recovering route, or of a half-open breaker) asks Redis on the call's path, because
"exactly one, fleet-wide" needs the server's atomic answer; async callers do that on a worker
thread, so their event loop never blocks. When Redis is away, every call runs on the local
view, and what it learned meanwhile is merged back (never shortening anything) on return.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Container
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from . import _redis_scripts as scripts
from ._config import BreakerConfig
from ._health import (
    Admission,
    Admitted,
    BreakerState,
    BreakerTransition,
    Cooldown,
    CooldownRule,
    Cooling,
    MemoryHealth,
    Outcome,
    RouteHealth,
)
from ._telemetry import Telemetry, default_telemetry

__all__ = ["RedisHealth", "safe_url"]

_log = logging.getLogger("swerve")
_RECONNECT_MIN_S = 0.1


@dataclass(slots=True)
class _Counts:
    ok: int
    fail: int
    config: BreakerConfig


class RedisHealth:
    """A :class:`~swerve.HealthStore` shared through Redis (or Redis Cluster, or Sentinel).

    ``client`` is a redis-py client (``redis.Redis``, ``redis.RedisCluster``, or a Sentinel's
    ``master_for(...)``); give it short socket timeouts, or build it with :meth:`from_url`,
    which does. ``prefix`` namespaces the keys and the channel, so fleets can share a Redis.
    ``reconnect_max_s`` bounds the backoff between reconnects while Redis is away.
    """

    def __init__(
        self,
        client: Any,
        *,
        prefix: str = "swerve",
        telemetry: Telemetry | None = None,
        reconnect_max_s: float = 10.0,
        clock: Callable[[], float] = time.time,
        description: str = "redis",
    ) -> None:
        if not prefix or any(c in "{}*?[]" or not c.isprintable() or c.isspace() for c in prefix):
            # the prefix is part of a hash tag and of SCAN patterns: braces or globs break both
            raise ValueError(
                f"RedisHealth prefix {prefix!r}: use letters, digits and punctuation other than "
                "{ } * ? [ ], and no spaces"
            )
        self._client = client
        self._prefix = prefix
        self._channel = f"{prefix}:events"
        self._telemetry = telemetry if telemetry is not None else default_telemetry()
        self._reconnect_max_s = reconnect_max_s
        self._clock = clock
        self.description = description
        """Where the store points, without credentials (for logs and ``swerve routes``)."""
        # The local view watches the monotonic clock for wall-clock steps, unless the wall
        # clock is a test's own (whose steps are the test's business).
        self._local = MemoryHealth(monotonic=time.monotonic if clock is time.time else None)
        self._me = uuid.uuid4().hex  # tells this process's own messages apart
        self._tokens: dict[str, str] = {}  # route -> the token of the probe this process holds
        # route -> (key, token) of each half-open breaker slot this process's probes hold
        self._slots: dict[str, list[tuple[int, str, str]]] = {}  # (local period, key, token)
        self._scripts = {
            name: client.register_script(getattr(scripts, name))
            for name in scripts.__all__  # registered once; EVALSHA after the first call
        }
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._ops: deque[tuple[str, str, tuple[Any, ...]]] = deque(maxlen=10_000)
        self._counts: dict[str, _Counts] = {}
        self._up: bool | None = None  # None until the first connect settles it
        self._stop = threading.Event()
        self._reader = threading.Thread(target=self._read, name="swerve-redis-reader", daemon=True)
        self._writer = threading.Thread(target=self._write, name="swerve-redis-writer", daemon=True)
        self._reader.start()
        self._writer.start()

    @classmethod
    def from_url(
        cls,
        url: str,
        *,
        prefix: str = "swerve",
        timeout_s: float = 0.25,
        telemetry: Telemetry | None = None,
        **kwargs: Any,
    ) -> RedisHealth:
        """A store on ``url``: ``redis://`` or ``rediss://`` (TLS) or ``unix://``, with the
        password in the URL as redis-py reads it; ``?cluster=1`` for Redis Cluster;
        ``redis+sentinel://host:port[,host:port]/service`` for Sentinel. Every Redis operation
        is bounded by ``timeout_s``; other keywords go to the redis-py client."""
        import redis
        from redis.backoff import NoBackoff
        from redis.retry import Retry

        options: dict[str, Any] = {
            "socket_timeout": timeout_s,
            "socket_connect_timeout": timeout_s,
            "retry": Retry(NoBackoff(), 0),  # swerve backs off itself, and never on a call
            **kwargs,
        }
        parts = urlsplit(url)
        query = dict(parse_qsl(parts.query))
        description = safe_url(url)
        if parts.scheme in ("redis+sentinel", "rediss+sentinel"):
            from redis.sentinel import Sentinel

            hosts = [
                (h.rsplit(":", 1)[0], int(h.rsplit(":", 1)[1]) if ":" in h else 26379)
                for h in parts.netloc.rpartition("@")[2].split(",")
            ]
            service = parts.path.strip("/") or "mymaster"
            if parts.password:
                options["password"] = parts.password
            if parts.scheme.startswith("rediss"):
                options["ssl"] = True
            sentinel = Sentinel(  # type: ignore[no-untyped-call]
                hosts, sentinel_kwargs={"socket_timeout": timeout_s}, **options
            )
            client = sentinel.master_for(service, **options)  # type: ignore[no-untyped-call]
        elif query.pop("cluster", "").lower() in ("1", "true", "yes"):
            rest = urlunsplit(parts._replace(query=urlencode(query)))
            client = redis.RedisCluster.from_url(rest, **options)
        else:
            client = redis.Redis.from_url(url, **options)
        return cls(client, prefix=prefix, telemetry=telemetry, description=description)

    # -- keys -------------------------------------------------------------------------------
    def _keys(self, route: str, *names: str) -> list[str]:
        # One hash tag per route: a route's keys share a slot, so scripts run on Cluster.
        tag = route if "{" not in route and "}" not in route else _digest(route)
        return [f"{{{self._prefix}:{tag}}}:{name}" for name in names]

    # -- sharing state ----------------------------------------------------------------------
    @property
    def sharing(self) -> bool:
        """Whether health is shared right now (False while Redis is away)."""
        return bool(self._up)

    def wait_until_shared(self, timeout: float = 5.0) -> bool:
        """Block until the store has connected and synced (for scripts and tests)."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self._up:
                return True
            self._stop.wait(0.01)
        return bool(self._up)

    def close(self) -> None:
        """Stop the reader and writer threads and close the client."""
        self._stop.set()
        with self._wake:
            self._wake.notify_all()
        if self._up:
            # The reader sleeps in a pub/sub read: a message on its own channel wakes it now
            # (other processes ignore an op they do not know).
            with contextlib.suppress(Exception):
                self._publish({"op": "bye", "route": ""})
        self._reader.join(timeout=2)
        self._writer.join(timeout=2)
        self._client.close()

    def _set_up(self, up: bool, reason: str = "") -> None:
        if self._up is up:
            return
        self._up = up
        self._telemetry.store(self.description, up, reason)

    # -- reads: always local ------------------------------------------------------------------
    def unavailable(self, now: float) -> Container[str]:
        return self._local.unavailable(now)

    def probe_due(self, route: str, now: float) -> bool:
        return self._local.probe_due(route, now)

    def snapshot(self, now: float) -> list[RouteHealth]:
        return self._local.snapshot(now)

    def take_notices(self) -> list[tuple[str, str]]:
        return self._local.take_notices()

    # -- writes: local at once, shared in the background --------------------------------------
    def cool_down(self, route: str, now: float, rule: CooldownRule, reason: str = "") -> Cooldown:
        cooldown = self._local.cool_down(route, now, rule, reason)
        self._tokens.pop(route, None)
        self._send("cool", route, (now, rule.base_s, rule.max_s, rule.floor_s, reason))
        return cooldown

    def release_probe(self, route: str) -> None:
        self._local.release_probe(route)
        token = self._tokens.pop(route, None)
        if token is not None:
            self._send("release", route, (token,))

    def recovered(self, route: str, now: float) -> bool:
        if not self._local.recovered(route, now):
            return False
        self._tokens.pop(route, None)
        self._send("recover", route, (now,))
        return True

    def record(
        self,
        route: str,
        outcome: Outcome,
        now: float,
        config: BreakerConfig,
        *,
        probe: bool,
        period: int | None = None,
    ) -> BreakerTransition | None:
        transition = self._local.record(route, outcome, now, config, probe=probe, period=period)
        if not config.enabled:
            return transition
        if probe:
            with self._lock:
                slot = _take_slot(self._slots, route, period)
            if slot is not None:
                # The probe ended (with a verdict or without): its slot goes back now, not
                # when its lease ends, so another process may probe the next period at once.
                self._send("half_open_release", route, slot)
        with self._wake:
            counts = self._counts.get(route)
            if counts is None:
                counts = self._counts[route] = _Counts(0, 0, config)
            counts.ok += outcome is Outcome.SUCCESS
            counts.fail += outcome is Outcome.FAILURE
            self._wake.notify()
        if transition is not None:
            if transition.after is BreakerState.OPEN and transition.open_until is not None:
                self._send("breaker", route, (transition.open_until, config))
            elif transition.after is BreakerState.CLOSED:
                self._send("breaker", route, (None, config))
        return transition

    def clear(self, route: str | None = None) -> None:
        """``route``: end its cooldown and breaker fleet-wide (an operator's ``swerve routes
        clear``). None: forget this process's view only (a config change); the fleet's view
        comes back with the next resync."""
        if route is None:
            self._local.clear()
            self._tokens.clear()
            self._slots.clear()
            return
        self._local.clear(route)
        self._run("CLEAR", self._keys(route, "cool", "probe", "brk", "window"), [])
        self._publish({"op": "clear", "route": route})

    def drain(self, route: str, until: float, now: float) -> None:
        """Degrade ``route`` fleet-wide until ``until`` (raises if Redis cannot be reached)."""
        self._local.drain(route, until, now)
        self._run("DRAIN", self._keys(route, "cool", "probe"), [repr(until), "drained"])
        self._publish({"op": "drain", "route": route, "until": until})

    # -- fleet-wide arbitration: the only round trips on a call's path ------------------------
    def claim_probe(self, route: str, now: float, lease_s: float) -> bool:
        if not self._local.probe_due(route, now):
            return False
        if not self._up:
            return self._local.claim_probe(route, now, lease_s)
        token = uuid.uuid4().hex
        try:
            code, wait_ms = self._run(
                "CLAIM", self._keys(route, "cool", "probe"), [repr(now), int(lease_s * 1000), token]
            )
        except Exception as exc:  # Redis away: the local view decides, as if alone
            self._lost(exc)
            return self._local.claim_probe(route, now, lease_s)
        if code == 2:  # the fleet already knows the route is healthy
            self._local.forget(route)
            return True
        if code == 1 and self._local.claim_probe(route, now, lease_s):
            self._tokens[route] = token
            self._publish({"op": "probe", "route": route, "lease_until": now + lease_s})
            return True
        if code == 1:  # taken locally meanwhile: give the fleet's lease back
            self._send("release", route, (token,))
        else:
            self._hold(route, now + int(wait_ms) / 1000.0, now)
        return False

    async def aclaim_probe(self, route: str, now: float, lease_s: float) -> bool:
        if not self._local.probe_due(route, now):
            return False
        claim = asyncio.ensure_future(asyncio.to_thread(self.claim_probe, route, now, lease_s))

        def give_back(claimed: bool) -> None:
            if claimed:
                self.release_probe(route)

        return await _given_back_if_cancelled(claim, give_back)

    def admit(
        self, route: str, now: float, config: BreakerConfig, *, lease_s: float | None = None
    ) -> Admitted:
        admitted = self._local.admit(route, now, config)
        if admitted.admission is not Admission.PROBE or not self._up:
            return admitted
        # One set of slots per route, whatever the period: a probe of an earlier period keeps
        # its slot until it ends, so the fleet never has more than half_open_probes in flight.
        (key,) = self._keys(route, "half_open")
        token = uuid.uuid4().hex
        # The slot lasts as long as the probe may (so a slow probe is not doubled), and ends
        # by itself if the prober dies.
        lease = max(lease_s if lease_s is not None else config.open_s, 1.0)
        try:
            ok = self._run(
                "HALF_OPEN", [key], [repr(now), repr(lease), token, config.half_open_probes]
            )
        except Exception as exc:
            self._lost(exc)
            return admitted
        if ok:
            with self._lock:
                self._slots.setdefault(route, []).append((admitted.period, key, token))
            return admitted
        # Another process holds this period's probes: give the local admission back.
        self._local.record(route, Outcome.NEUTRAL, now, config, probe=True, period=admitted.period)
        return Admitted(Admission.REJECTED, admitted.transition, admitted.period)

    async def aadmit(
        self, route: str, now: float, config: BreakerConfig, *, lease_s: float | None = None
    ) -> Admitted:
        breaker = self._local.breaker_open_until(route)
        if breaker is None or breaker > now or not self._up:  # closed or still open: local
            return self._local.admit(route, now, config)
        admit = asyncio.ensure_future(
            asyncio.to_thread(self.admit, route, now, config, lease_s=lease_s)
        )

        def give_back(admitted: Admitted) -> None:
            if admitted.admission is Admission.PROBE:
                self.record(
                    route,
                    Outcome.NEUTRAL,
                    self._clock(),
                    config,
                    probe=True,
                    period=admitted.period,
                )

        return await _given_back_if_cancelled(admit, give_back)

    # -- operators: the fleet's view, read from Redis ------------------------------------------
    def fleet_view(self) -> list[RouteHealth]:
        """Every route Redis holds health for, read now (for ``swerve routes``)."""
        now = self._clock()
        found: dict[str, RouteHealth] = {}
        for key in self._client.scan_iter(match=f"{{{self._prefix}:*}}:cool", count=500):
            name = key.decode() if isinstance(key, bytes) else key
            route = name[len(self._prefix) + 2 : name.rindex("}")]
            state = self._client.hgetall(name)
            cooling = _cooling(state)
            if cooling is None or cooling.forget_at <= now:
                continue
            found[route] = RouteHealth(
                route,
                cooling.until if cooling.until > now else None,
                BreakerState.CLOSED,
                recovering=cooling.until <= now,
                reason=cooling.reason,
            )
        for key in self._client.scan_iter(match=f"{{{self._prefix}:*}}:brk", count=500):
            name = key.decode() if isinstance(key, bytes) else key
            route = name[len(self._prefix) + 2 : name.rindex("}")]
            raw = self._client.hget(name, "open_until")
            open_until = float(raw) if raw else 0.0
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

    # -- the writer thread ----------------------------------------------------------------------
    def _send(self, op: str, route: str, args: tuple[Any, ...]) -> None:
        if self._up is False:
            return  # merged back from the local view when Redis returns
        with self._wake:
            self._ops.append((op, route, args))
            self._wake.notify()

    def _write(self) -> None:
        while not self._stop.is_set():
            with self._wake:
                if not self._ops and not self._counts:
                    self._wake.wait(timeout=1.0)
                ops, self._ops = list(self._ops), deque(maxlen=10_000)
                counts, self._counts = self._counts, {}
            if not self._up:
                continue
            try:
                for op, route, args in ops:
                    self._apply(op, route, args)
                for route, c in counts.items():
                    self._account(route, c)
            except Exception as exc:
                self._lost(exc)

    def _apply(self, op: str, route: str, args: tuple[Any, ...]) -> None:
        if op == "cool":
            now, base, longest, floor, reason = args
            state = self._run(
                "COOL",
                self._keys(route, "cool", "probe"),
                [repr(now), repr(base), repr(longest), repr(floor), reason],
            )
            self._publish({"op": "cool", "route": route, **_state(state)})
        elif op == "release":
            self._run("RELEASE", self._keys(route, "probe"), [args[0]])
            self._publish({"op": "release", "route": route})
        elif op == "recover":
            if self._run("RECOVER", self._keys(route, "cool", "probe"), [repr(args[0])]):
                self._publish({"op": "recover", "route": route})
        elif op == "half_open_release":
            key, token = args
            self._client.zrem(key, token)
        elif op == "breaker":
            open_until, config = args
            self._account(
                route, _Counts(0, 0, config), open_until=open_until, closed=open_until is None
            )

    def _account(
        self, route: str, c: _Counts, *, open_until: float | None = None, closed: bool = False
    ) -> None:
        cfg, now = c.config, self._clock()
        result = self._run(
            "ACCOUNT",
            self._keys(route, "window", "brk"),
            [
                repr(now), c.ok, c.fail, repr(cfg.window_s), cfg.min_calls,
                repr(cfg.failure_rate), repr(cfg.open_s), repr(cfg.max_open_s),
                repr(open_until or 0.0), "1" if closed else "0",
            ],
        )  # fmt: skip
        fleet = float(result.decode() if isinstance(result, bytes) else result)
        if closed:
            self._publish({"op": "breaker", "route": route, "open_until": None})
        elif fleet > now:
            if fleet != self._local.breaker_open_until(route):
                self._local.adopt_breaker(route, fleet, now)
            self._publish({"op": "breaker", "route": route, "open_until": fleet})

    def _run(self, script: str, keys: list[str], args: list[Any]) -> Any:
        return self._scripts[script](keys=keys, args=args)

    def _publish(self, message: dict[str, Any]) -> None:
        message["from"] = self._me
        self._client.publish(self._channel, json.dumps(message))

    def _lost(self, exc: BaseException) -> None:
        self._set_up(False, type(exc).__name__)

    # -- the reader thread: pub/sub, resync, reconnects ------------------------------------------
    def _read(self) -> None:
        backoff = _RECONNECT_MIN_S
        while not self._stop.is_set():
            pubsub = None
            try:
                pubsub = self._client.pubsub(ignore_subscribe_messages=True)
                pubsub.subscribe(self._channel)
                self._merge_local()
                self._resync()
                self._set_up(True)
                backoff = _RECONNECT_MIN_S
                last_ping = last_heard = time.monotonic()
                while not self._stop.is_set():
                    message = pubsub.get_message(timeout=0.5)
                    if message is not None:  # a message or a pong: the server is alive
                        last_heard = time.monotonic()
                        if message.get("type") == "message":
                            self._on_message(message["data"])
                    if time.monotonic() - last_ping > 1.0:
                        # A ping only sends: its pong comes back as a message. A paused server
                        # shows up here, as a ping that went a whole interval unanswered.
                        if last_heard < last_ping:
                            raise ConnectionError("redis did not answer a ping")
                        pubsub.ping()
                        last_ping = time.monotonic()
                    if self._up is False:  # the writer or a claim lost it: reconnect
                        raise ConnectionError("redis operation failed")
            except Exception as exc:
                self._lost(exc)
                self._stop.wait(backoff)
                backoff = min(backoff * 2, self._reconnect_max_s)
            finally:
                if pubsub is not None:
                    try:
                        pubsub.close()
                    except Exception:  # already broken: nothing left to close cleanly
                        _log.debug("swerve: closing a broken pub/sub connection failed")

    def _merge_local(self) -> None:
        """Health learned while Redis was away goes back in, never shortening anything."""
        now = self._clock()
        for health in self._local.snapshot(now):
            cooling = self._local.cooling(health.route, now)
            if cooling is None:
                continue
            state = self._run(
                "MERGE",
                self._keys(health.route, "cool"),
                [repr(cooling.until), cooling.streak, repr(cooling.forget_at), cooling.reason],
            )
            self._publish({"op": "cool", "route": health.route, **_state(state)})

    def _resync(self) -> None:
        now = self._clock()
        for route_health in self.fleet_view():
            route = route_health.route
            (cool,) = self._keys(route, "cool")
            cooling = _cooling(self._client.hgetall(cool))
            if cooling is not None:
                self._local.adopt(route, cooling, now)
            if route_health.breaker is BreakerState.OPEN:
                (brk,) = self._keys(route, "brk")
                self._local.adopt_breaker(route, float(self._client.hget(brk, "open_until")), now)

    def _on_message(self, data: bytes | str) -> None:
        try:
            self._dispatch(json.loads(data))
        except (ValueError, KeyError, TypeError, AttributeError):
            # Not ours (another writer on the channel) or from a newer swerve: a message we
            # cannot read is dropped, never mistaken for a broken connection.
            _log.debug("swerve: ignored a message on %s it cannot read", self._channel)

    def _dispatch(self, message: dict[str, Any]) -> None:
        route = message["route"]
        op = message["op"]
        if not isinstance(route, str):
            raise TypeError("route")
        mine = message.get("from") == self._me
        now = self._clock()
        if op == "cool":
            self._local.adopt(route, _from_message(message), now)
        elif op == "probe" and not mine:
            self._hold(route, float(message["lease_until"]), now)
        elif op == "release" and not mine:
            self._local.release_probe(route)
        elif op == "recover" and not mine:
            self._local.forget(route)
        elif op == "breaker":
            self._local.adopt_breaker(route, message.get("open_until"), now)
        elif op == "clear" and not mine:
            self._local.clear(route)
        elif op == "clear":
            # Our own clear, back after every message published before it: what those put
            # back into the local view since clear() (our own cooldown's echo) is older.
            self._local.forget(route)
            self._local.adopt_breaker(route, None, now)
        elif op == "drain" and not mine:
            self._local.drain(route, float(message["until"]), now)

    def _hold(self, route: str, lease_until: float, now: float) -> None:
        """Someone else probes ``route`` until ``lease_until``: calls here walk past it."""
        cooling = self._local.cooling(route, now)
        if cooling is not None:
            cooling.lease_until = max(cooling.lease_until, lease_until)
            self._local.adopt(route, cooling, now)


R = TypeVar("R")


async def _given_back_if_cancelled(future: asyncio.Future[R], give_back: Callable[[R], None]) -> R:
    """Await a store round trip running in a thread. If the caller is cancelled meanwhile, the
    thread still finishes, and what it was granted (a probe, a half-open slot) would be held by
    nobody until its lease ends: it is given back as soon as the answer comes."""
    try:
        return await asyncio.shield(future)
    except asyncio.CancelledError:

        def settle(done: asyncio.Future[R]) -> None:
            if not done.cancelled() and done.exception() is None:
                give_back(done.result())

        future.add_done_callback(settle)
        raise


def _take_slot(
    slots: dict[str, list[tuple[int, str, str]]], route: str, period: int | None
) -> tuple[str, str] | None:
    """The (key, token) of a slot this process holds for ``route``: the one of the probe's own
    period when it names one (None if it has none), else the oldest. Emptied lists go, so the
    table stays small."""
    held = slots.get(route)
    if not held:
        return None
    index = 0 if period is None else next((i for i, s in enumerate(held) if s[0] == period), -1)
    if index < 0:
        return None  # its period holds no slot of ours (the fleet was away when it began)
    _, key, token = held.pop(index)
    if not held:
        del slots[route]
    return key, token


def safe_url(url: str) -> str:
    """``url`` without its password (for logs, telemetry and CLI output)."""
    parts = urlsplit(url)
    # redis-py also reads a password from the query string (``?password=...``).
    secret_query = "password" in parts.query.lower()
    if parts.password is None and not secret_query:
        return url
    if parts.password is not None:
        netloc = parts.netloc.rpartition("@")
        user = parts.username or ""
        parts = parts._replace(netloc=f"{user}:***@{netloc[2]}")
    if secret_query:
        query = parse_qsl(parts.query, keep_blank_values=True)
        masked = [(k, "***" if "password" in k.lower() else v) for k, v in query]
        parts = parts._replace(query=urlencode(masked, safe="*"))
    return urlunsplit(parts)


def _digest(route: str) -> str:
    import hashlib

    return hashlib.sha1(route.encode(), usedforsecurity=False).hexdigest()


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _state(state: list[Any]) -> dict[str, Any]:
    until, streak, forget_at, reason = state
    return {
        "until": float(_text(until)),
        "streak": int(streak),
        "forget_at": float(_text(forget_at)),
        "reason": _text(reason),
    }


def _from_message(message: dict[str, Any]) -> Cooling:
    return Cooling(
        float(message["until"]),
        int(message["streak"]),
        float(message["forget_at"]),
        reason=str(message.get("reason", "")),
    )


def _cooling(state: dict[Any, Any]) -> Cooling | None:
    fields = {_text(k): _text(v) for k, v in state.items()}
    try:
        return Cooling(
            float(fields["until"]),
            int(fields.get("streak", "0")),
            float(fields.get("forget_at", fields["until"])),
            reason=fields.get("reason", ""),
        )
    except (KeyError, ValueError):
        return None
