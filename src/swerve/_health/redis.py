"""RedisHealth: route health shared by every process that points at one Redis and prefix.

A call never waits on Redis for a healthy route. Each process keeps a local view (a
:class:`MemoryHealth`) that answers every read; its own changes apply there at once and go to
Redis from a writer thread; other processes' changes arrive on a pub/sub channel, read by a
reader thread (a message only names what changed: the reader applies what the route's keys
hold, so a message no key backs changes nothing), which also resyncs the whole view on every
(re)connect (both threads: :mod:`swerve._health.redis_sync`). Only claiming a probe (of a
recovering route, or of a half-open breaker) asks Redis on the call's path, because "exactly
one, fleet-wide" needs the server's atomic answer; async callers do that on a worker thread,
so their event loop never blocks. When Redis is away, every call runs on the local view, and
what it learned meanwhile is merged back (never shortening anything) on return. Learned
latency (times to a first chunk) is counted locally too, and goes to Redis and back with the
writer's batches: each process adds its new counts to the fleet's and reads the sum.
"""

from __future__ import annotations

import asyncio
import math
import threading
import uuid
from collections.abc import Callable, Container
from typing import Any, TypeVar

from .._engine.clock import SYSTEM_CLOCK, Clock, SystemClock
from .._engine.config import BreakerConfig, FallbackConfig
from .._telemetry.telemetry import Telemetry, default_telemetry
from .breaker import Admission, Admitted, BreakerState, BreakerTransition, Outcome
from .cooldown import Cooldown, CooldownRule, RouteHealth
from .latency import DEFAULT_MIN_SAMPLES
from .memory import MemoryHealth, check_drain
from .redis_client import client_from_url, refused, safe_url
from .redis_sync import RedisSync
from .redis_wire import MAX_DRAIN_S, Bounds, RedisWire, Rejected

__all__ = ["DEFAULT_FIRST_SYNC_S", "RedisHealth", "safe_url"]  # safe_url: for the CLI

DEFAULT_FIRST_SYNC_S = 0.05
"""The longest a call waits for a new store's first sync (see :meth:`RedisHealth.ready`)."""


class RedisHealth:
    """A :class:`~swerve.HealthStore` shared through Redis (or Redis Cluster, or Sentinel).

    ``client`` is a redis-py client (``redis.Redis``, ``redis.RedisCluster``, or a Sentinel's
    ``master_for(...)``); give it short socket timeouts, or build it with :meth:`from_url`,
    which does. ``prefix`` namespaces the keys and the channel, so fleets can share a Redis.
    ``reconnect_max_s`` bounds the backoff between reconnects while Redis is away. ``clock``
    stamps what the store writes to Redis on its own (calls pass their ``now``).

    Every value read from Redis is checked, and a time is cut to what a legitimate writer
    could have written: a cooldown ends at most ``max_cooldown_s`` from now (the config's
    ``longest_cooldown_s``), a breaker opens for at most ``max_open_s`` (its
    ``breaker.max_open_s``), a drain lasts at most :data:`MAX_DRAIN_S`. Unset, each bound is
    the default config's, grown to the longest this process's own calls use and to the
    bounds of every config a :class:`~swerve.Failover` on the store runs (:meth:`ready`).

    ``first_sync_s`` bounds how long a call waits for the store's first sync (:meth:`ready`;
    0: never wait).
    """

    def __init__(
        self,
        client: Any,
        *,
        prefix: str = "swerve",
        telemetry: Telemetry | None = None,
        reconnect_max_s: float = 10.0,
        clock: Clock = SYSTEM_CLOCK,
        description: str = "redis",
        max_cooldown_s: float | None = None,
        max_open_s: float | None = None,
        first_sync_s: float = DEFAULT_FIRST_SYNC_S,
    ) -> None:
        if not (math.isfinite(first_sync_s) and 0 <= first_sync_s <= 5):
            raise ValueError(
                f"RedisHealth first_sync_s: {first_sync_s!r} is not a number of seconds in [0, 5]"
            )
        self._first_sync_s = float(first_sync_s)
        self._waited = False  # a call waited the whole bound once: no call waits again
        self._wire = RedisWire(client, prefix)
        bounds = Bounds()
        for name, value in (("cooldown_s", max_cooldown_s), ("open_s", max_open_s)):
            if value is not None:
                if not (math.isfinite(value) and 0 < value <= MAX_DRAIN_S):
                    raise ValueError(
                        f"RedisHealth max_{name}: {value!r} is not a number of seconds in "
                        f"(0, {MAX_DRAIN_S:g}]"
                    )
                setattr(bounds, name, float(value))
        bounds.fixed = frozenset(
            name
            for name, value in (("cooldown_s", max_cooldown_s), ("open_s", max_open_s))
            if value is not None
        )
        self._bounds = bounds
        self._clock = clock
        self.description = description
        """Where the store points, without credentials (for logs and ``swerve routes``)."""
        # The local view watches the monotonic clock for wall-clock steps, unless the clock is
        # a test's own (whose steps are the test's business).
        self._local = MemoryHealth(clock=clock if isinstance(clock, SystemClock) else None)
        self._tokens: dict[str, str] = {}  # route -> the token of the probe this process holds
        # route -> (key, token) of each half-open breaker slot this process's probes hold
        self._slots: dict[str, list[tuple[int, str, str]]] = {}  # (local period, key, token)
        self._lock = threading.Lock()
        self._sync = RedisSync(
            self._wire,
            self._local,
            clock=clock,
            telemetry=telemetry if telemetry is not None else default_telemetry(),
            description=description,
            reconnect_max_s=reconnect_max_s,
            bounds=bounds,
        )

    @classmethod
    def from_url(
        cls,
        url: str,
        *,
        prefix: str = "swerve",
        timeout_s: float = 0.25,
        telemetry: Telemetry | None = None,
        clock: Clock = SYSTEM_CLOCK,
        reconnect_max_s: float = 10.0,
        max_cooldown_s: float | None = None,
        max_open_s: float | None = None,
        first_sync_s: float = DEFAULT_FIRST_SYNC_S,
        **kwargs: Any,
    ) -> RedisHealth:
        """A store on ``url``: ``redis://`` or ``rediss://`` (TLS) or ``unix://``, with the
        password in the URL as redis-py reads it; ``?cluster=1`` for Redis Cluster;
        ``redis+sentinel://host:port[,host:port]/service`` for Sentinel. Every Redis operation
        is bounded by ``timeout_s``; ``reconnect_max_s`` is the store's (see the class); other
        keywords go to the redis-py client. ``max_cooldown_s`` and ``max_open_s``: see the
        class."""
        client = client_from_url(url, timeout_s=timeout_s, **kwargs)
        return cls(
            client,
            prefix=prefix,
            telemetry=telemetry,
            clock=clock,
            description=safe_url(url),
            reconnect_max_s=reconnect_max_s,
            max_cooldown_s=max_cooldown_s,
            max_open_s=max_open_s,
            first_sync_s=first_sync_s,
        )

    # -- sharing state ----------------------------------------------------------------------
    @property
    def sharing(self) -> bool:
        """Whether health is shared right now (False while Redis is away)."""
        return bool(self._sync.up)

    def wait_until_shared(self, timeout: float = 5.0) -> bool:
        """Block until the store has connected and synced, ``timeout`` at most; True if it
        has. Calls need not: a Failover's first calls wait ``first_sync_s`` by themselves
        (:meth:`ready`). This is for a process that wants to know, or to wait longer."""
        return self._sync.wait_until_up(timeout)

    def ready(self, config: FallbackConfig | None = None, *, wait: bool = True) -> bool:
        """What a :class:`~swerve.Failover` asks before a call's first decision: the
        ``config``'s bounds (its longest cooldown and breaker open period) become the store's,
        so the fleet's longer cooldowns are not cut short here; and, until the store's first
        sync, the call waits for it, ``first_sync_s`` at most (a process that starts during an
        outage the fleet knows must not walk into it). Redis refusing the connection ends the
        wait at once; one call that waited the whole bound ends it for every later call.
        Returns True once nothing is left to wait for."""
        if config is not None:
            self._learn(config)
        if self._sync.settled.is_set() or self._waited:
            return True
        if not wait:
            return False
        self._sync.settled.wait(self._first_sync_s)
        self._waited = True
        return True

    async def aready(self, config: FallbackConfig | None = None) -> bool:
        """:meth:`ready` for async callers: the loop sleeps meanwhile, it never blocks."""
        if self.ready(config, wait=False):
            return True
        # On a worker thread (the first calls only): the loop goes on meanwhile.
        await asyncio.to_thread(self._sync.settled.wait, self._first_sync_s)
        self._waited = True
        return True

    def _learn(self, config: FallbackConfig) -> None:
        self._bounds.learn("cooldown_s", config.longest_cooldown_s)
        if config.breaker.enabled:
            self._bounds.learn("open_s", config.breaker.max_open_s)

    def close(self) -> None:
        """Stop the reader and writer threads and close the client."""
        self._sync.close()
        self._wire.close()

    # -- reads: always local ------------------------------------------------------------------
    def unavailable(self, now: float) -> Container[str]:
        self._sync.catch_up()  # what the fleet already said is in the view this call decides on
        return self._local.unavailable(now)

    def probe_due(self, route: str, now: float) -> bool:
        return self._local.probe_due(route, now)

    def snapshot(self, now: float) -> list[RouteHealth]:
        return self._local.snapshot(now)

    def take_notices(self) -> list[tuple[str, str]]:
        return self._local.take_notices()

    def first_chunk_quantile(
        self, route: str, q: float, now: float, min_samples: int = DEFAULT_MIN_SAMPLES
    ) -> float | None:
        """The ``q`` quantile of ``route``'s times to a first chunk, the fleet's as of the last
        sync (a quarter second behind for a route this process observes) and this process's
        since: see :meth:`MemoryHealth.first_chunk_quantile`. Never a round trip."""
        return self._local.first_chunk_quantile(route, q, now, min_samples)

    # -- writes: local at once, shared in the background --------------------------------------
    def observe_first_chunk(self, route: str, seconds: float, now: float) -> None:
        """One more time to a first chunk on ``route``: in this process's view at once, in
        the fleet's with the writer's next batch."""
        self._sync.observe_latency(route, seconds, now)

    def cool_down(self, route: str, now: float, rule: CooldownRule, reason: str = "") -> Cooldown:
        self._bounds.learn("cooldown_s", rule.max_s)
        cooldown = self._local.cool_down(route, now, rule, reason)
        self._tokens.pop(route, None)
        # In Redis before the call that decided it goes on: the fleet's next call finds it.
        self._sync.send_now("cool", route, (now, rule.base_s, rule.max_s, rule.floor_s, reason))
        return cooldown

    async def asettle(self) -> None:
        """What an async call awaits after it cooled a route or moved its breaker: until the
        change is in Redis and on the channel (a quarter second at most), as a sync call's
        change is before its decision returns. The loop never blocks on Redis meanwhile."""
        await self._sync.asettle()

    def release_probe(self, route: str) -> None:
        self._local.release_probe(route)
        token = self._tokens.pop(route, None)
        if token is not None:
            self._sync.send("release", route, (token,))

    def recovered(self, route: str, now: float) -> bool:
        if not self._local.recovered(route, now):
            return False
        self._tokens.pop(route, None)
        self._sync.send("recover", route, (now,))
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
        self._bounds.learn("open_s", config.max_open_s)
        if probe:
            with self._lock:
                slot = _take_slot(self._slots, route, period)
            if slot is not None:
                # The probe ended (with a verdict or without): its slot goes back now, not
                # when its lease ends, so another process may probe the next period at once.
                self._sync.send("half_open_release", route, slot)
        after = transition.after if transition is not None else None
        until = transition.open_until if transition is not None else None
        if after is BreakerState.OPEN and until is not None:
            self._sync.opened(route, until, config)  # the outcome is spent on the opening
            return transition
        self._sync.count(route, outcome, config)
        if after is BreakerState.CLOSED:
            self._sync.send("breaker", route, (None, config))
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
        self._wire.run("CLEAR", self._wire.keys(route, "cool", "probe", "brk", "window"), [])
        self._wire.publish({"op": "clear", "route": route})

    def drain(self, route: str, until: float, now: float) -> None:
        """Degrade ``route`` fleet-wide until ``until``, at most :data:`MAX_DRAIN_S` from
        ``now`` (raises ValueError beyond it, before anything is written; a redis error if
        Redis cannot be reached). Redis applies it whole or not at all."""
        check_drain(route, until, now)
        self._wire.run(
            "DRAIN",
            self._wire.keys(route, "cool", "probe"),
            [repr(until), "drained", repr(now), repr(MAX_DRAIN_S)],
        )
        self._local.drain(route, until, now)  # after Redis took it: a failed drain is no drain
        self._wire.publish({"op": "drain", "route": route, "until": until})

    # -- fleet-wide arbitration: the only round trips on a call's path ------------------------
    def claim_probe(self, route: str, now: float, lease_s: float) -> bool:
        if not self._local.probe_due(route, now):
            return False
        if not self._sync.up:
            return self._local.claim_probe(route, now, lease_s)
        bounds = self._bounds
        bounds.learn("lease_s", lease_s)
        token = uuid.uuid4().hex
        try:
            code, wait_ms = self._wire.run(
                "CLAIM",
                self._wire.keys(route, "cool", "probe"),
                [repr(now), int(lease_s * 1000), token, repr(bounds.cooldown_s),
                 int(bounds.lease_s * 1000), repr(bounds.drain_s)],
            )  # fmt: skip
        except Exception as exc:  # Redis away: the local view decides, as if alone
            if refused(exc):  # the server refused (bad data): decide alone, still sharing
                self._sync.reject(Rejected("script", f"CLAIM on {route!r}: {type(exc).__name__}"))
            else:
                self._sync.lost(exc)
            return self._local.claim_probe(route, now, lease_s)
        if code == 2:  # the fleet already knows the route is healthy
            self._local.forget(route)
            return True
        if code == 1 and self._local.claim_probe(route, now, lease_s):
            self._tokens[route] = token
            self._wire.publish({"op": "probe", "route": route, "lease_until": now + lease_s})
            return True
        if code == 1:  # taken locally meanwhile: give the fleet's lease back
            self._sync.send("release", route, (token,))
        else:  # the script bounds the wait already; bounded again, as everything from Redis
            longest = max(bounds.cooldown_s, bounds.lease_s, bounds.drain_s)
            self._local.hold(route, now + min(max(int(wait_ms), 0) / 1000.0, longest), now)
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
        if admitted.admission is not Admission.PROBE or not self._sync.up:
            return admitted
        self._bounds.learn("open_s", config.max_open_s)
        # One set of slots per route, whatever the period: a probe of an earlier period keeps
        # its slot until it ends, so the fleet never has more than half_open_probes in flight.
        (key,) = self._wire.keys(route, "half_open")
        token = uuid.uuid4().hex
        # The slot lasts as long as the probe may (so a slow probe is not doubled), and ends
        # by itself if the prober dies.
        lease = max(lease_s if lease_s is not None else config.open_s, 1.0)
        self._bounds.learn("lease_s", lease)
        try:
            ok = self._wire.run(
                "HALF_OPEN",
                [key],
                [repr(now), repr(lease), token, config.half_open_probes,
                 repr(self._bounds.lease_s)],
            )  # fmt: skip
        except Exception as exc:
            if refused(exc):
                self._sync.reject(
                    Rejected("script", f"HALF_OPEN on {route!r}: {type(exc).__name__}")
                )
            else:
                self._sync.lost(exc)
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
        if breaker is None or breaker > now or not self._sync.up:  # closed or still open: local
            return self._local.admit(route, now, config)
        admit = asyncio.ensure_future(
            asyncio.to_thread(self.admit, route, now, config, lease_s=lease_s)
        )

        def give_back(admitted: Admitted) -> None:
            if admitted.admission is Admission.PROBE:
                self.record(
                    route,
                    Outcome.NEUTRAL,
                    self._clock.time(),
                    config,
                    probe=True,
                    period=admitted.period,
                )

        return await _given_back_if_cancelled(admit, give_back)

    # -- operators: the fleet's view, read from Redis ------------------------------------------
    def fleet_view(self) -> list[RouteHealth]:
        """Every route Redis holds health for, read now (for ``swerve routes``). Operators see
        what Redis holds, each time cut to the longest drain only (so a skewed writer's
        cooldown shows as long as it is); values that fail the checks are skipped, counted
        and logged, as everywhere."""
        wide = Bounds(cooldown_s=MAX_DRAIN_S, open_s=MAX_DRAIN_S, lease_s=MAX_DRAIN_S)
        return self._wire.fleet_view(self._clock.time(), wide, self._sync.reject)


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
