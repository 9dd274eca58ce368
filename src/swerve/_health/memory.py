"""MemoryHealth: route health kept in this process, thread-safe and bounded.

Times are wall-clock epoch seconds, as every store takes them. A wall clock can be stepped
(NTP, an operator, a VM resumed), so the store watches for steps and moves its own times with
the clock: a cooldown granted for 10 s lasts 10 s whichever way the clock jumps meanwhile.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Container
from dataclasses import replace

from .._engine.clock import Clock
from .._engine.config import BreakerConfig
from .breaker import Admission, Admitted, Breaker, BreakerState, BreakerTransition, Outcome
from .cooldown import Cooldown, CooldownRule, Cooling, RouteHealth
from .latency import DEFAULT_MIN_SAMPLES, LatencySketch

__all__ = ["DEFAULT_MAX_ROUTES", "MAX_DRAIN_S", "STEP_TOLERANCE_S", "MemoryHealth", "check_drain"]


STEP_TOLERANCE_S = 0.25
"""How far the wall clock may drift from the monotonic clock, all steps together since the
store last corrected for one, before the store corrects: anything smaller is scheduling noise
between reading the clock and reaching the store. Steps are measured against a fixed
baseline, so many small steps add up to one that is corrected: no series of them shortens a
cooldown by more than this."""
DEFAULT_MAX_ROUTES = 10_000
"""Routes a :class:`MemoryHealth` keeps cooldowns, breakers, and first-chunk times for (each,
separately)."""
MAX_DRAIN_S = 7 * 86400.0
"""The longest drain: every store refuses more (``swerve routes drain --for`` too), and a drain
read from Redis never lasts longer than this from now."""
# What a closed breaker of the first period (or none) answers: made once, a tuple, shared.
_ALLOWED = Admitted(Admission.ALLOWED, None)


def check_drain(route: str, until: float, now: float) -> None:
    """Raise ValueError unless a drain of ``route`` until ``until`` is one any store takes:
    finite, after ``now``, at most :data:`MAX_DRAIN_S` from it."""
    if not (math.isfinite(until) and now < until <= now + MAX_DRAIN_S):
        raise ValueError(
            f"drain {route}: it must end after now and at most {MAX_DRAIN_S:g} s "
            f"({MAX_DRAIN_S / 86400:g} days) from now, not {until - now:.6g} s"
        )


class MemoryHealth:
    """Thread-safe in-process health store: cooldowns and breakers for this process.

    Bounded: at most ``max_routes`` cooldowns and as many breakers. Past that, entries that say
    nothing (a cooldown forgotten, a closed breaker whose window has emptied) go first, then
    the closed breakers that were created first, then the oldest entries of any kind.

    ``clock`` (a :class:`~swerve.Clock`; ``swerve._engine.clock.SYSTEM_CLOCK`` for the real clocks)
    lets the store tell a wall-clock step from time passing, both ways, by its ``monotonic``
    time; without one it still sees backward steps (the wall time it is given going back) and
    holds each entry to the time it had left. The store never reads the clock's wall time:
    callers pass ``now``.
    """

    def __init__(
        self,
        *,
        max_routes: int = DEFAULT_MAX_ROUTES,
        clock: Clock | None = None,
    ) -> None:
        if max_routes < 1:
            raise ValueError(f"max_routes must be at least 1, not {max_routes}")
        self._lock = threading.Lock()
        self._cooling: dict[str, Cooling] = {}
        self._breakers: dict[str, Breaker] = {}
        self._latency: dict[str, LatencySketch] = {}  # route -> its times to a first chunk
        self._notices: list[tuple[str, str]] = []
        self._max = max_routes
        self._monotonic = clock.monotonic if clock is not None else None
        self._seen: tuple[float, float] | None = None  # (wall, monotonic) last observed
        # Without a monotonic clock: the latest wall time seen. With one: wall minus monotonic
        # as of the last correction, the baseline every step is measured from (never moved by
        # a step within tolerance, so sub-tolerance steps accumulate instead of vanishing).
        self._window_s = 0.0  # the longest breaker window recorded with, for pruning
        self.steps = 0
        """Wall-clock steps seen and corrected for (for tests and diagnostics)."""

    # -- the clock ------------------------------------------------------------------------------
    def _step(self, seen: tuple[float, float], now: float, mono: float) -> float:
        if self._monotonic is None:
            return min(now - seen[0], 0.0)  # only a backward step is visible without it
        return (now - mono) - (seen[0] - seen[1])

    def _observe(self, now: float) -> None:
        """Compare ``now`` with the wall time expected from the monotonic clock; on a step, move
        every entry with the clock so each keeps the time it had left. Lock-free unless the
        clock stepped: call it before taking the lock."""
        monotonic = self._monotonic
        mono = monotonic() if monotonic is not None else 0.0
        seen = self._seen
        if seen is None:
            self._seen = (now, mono)
            return
        # _step, written out: every decision of every call observes the clock.
        step = (
            (now - mono) - (seen[0] - seen[1]) if monotonic is not None else min(now - seen[0], 0.0)
        )
        if abs(step) > STEP_TOLERANCE_S:
            with self._lock:
                seen = self._seen  # another thread may have corrected for this step already
                if seen is not None:
                    step = self._step(seen, now, mono)
                    if abs(step) > STEP_TOLERANCE_S:
                        self._shift(step)
                        self._seen = (now, mono)
                    return
                self._seen = (now, mono)
            return
        if monotonic is None and now >= seen[0]:
            # With a monotonic clock the baseline stays until a correction: a step within the
            # tolerance is still counted by the next comparison, not forgotten.
            self._seen = (now, mono)

    def _shift(self, delta: float) -> None:
        self.steps += 1
        for entry in self._cooling.values():
            entry.shift(delta)
        for breaker in self._breakers.values():
            breaker.shift(delta)

    # -- bounds ---------------------------------------------------------------------------------
    def _make_room(self, now: float) -> None:
        """Keep each table within ``max_routes``. Called on insertion; it prunes to 90% of the
        bound, so its O(n) pass runs once per tenth of the bound of new routes."""
        target = self._max - self._max // 10
        if len(self._cooling) > self._max:
            cooling = self._cooling
            for route in [r for r, e in cooling.items() if now >= e.forget_at]:
                del cooling[route]
            excess = len(cooling) - target
            if excess > 0:  # still full of live cooldowns: the first to end go first
                for route in sorted(cooling, key=lambda r: cooling[r].forget_at)[:excess]:
                    del cooling[route]
        if len(self._breakers) > self._max:
            breakers, horizon = self._breakers, now - self._window_s
            for route in [r for r, b in breakers.items() if b.says_nothing(horizon)]:
                del breakers[route]
            excess = len(breakers) - target
            if excess > 0:
                closed = [r for r, b in breakers.items() if b.state is BreakerState.CLOSED]
                for route in closed[:excess]:
                    del breakers[route]
                excess -= min(excess, len(closed))
            if excess > 0:
                for route in list(breakers)[:excess]:
                    del breakers[route]

    def _breaker(self, route: str, now: float) -> Breaker:
        breaker = self._breakers.get(route)
        if breaker is None:
            breaker = self._breakers[route] = Breaker()
            if len(self._breakers) > self._max:
                self._make_room(now)
                self._breakers[route] = breaker  # never the one being recorded
        return breaker

    def _set_cooling(self, route: str, entry: Cooling, now: float) -> None:
        fresh = route not in self._cooling
        self._cooling[route] = entry
        if fresh and len(self._cooling) > self._max:
            self._make_room(now)
            self._cooling[route] = entry

    # -- cooldowns ------------------------------------------------------------------------------
    def cool_down(self, route: str, now: float, rule: CooldownRule, reason: str = "") -> Cooldown:
        self._observe(now)
        with self._lock:
            entry = self._live(route, now)
            if entry is None:
                streak, until = 0, 0.0
            else:
                # Failing again once its cooldown is over is a failed probe: cool longer.
                streak = entry.streak + 1 if now >= entry.until else entry.streak
                until = entry.until
            until = max(until, now + rule.seconds(streak))  # never shortens
            self._set_cooling(route, Cooling(until, streak, until + rule.max_s, reason=reason), now)
            return Cooldown(route, until, until - now, streak)

    def unavailable(self, now: float) -> Container[str]:
        self._observe(now)
        return _Unavailable(self._cooling, self._breakers, now)

    def _live(self, route: str, now: float) -> Cooling | None:
        entry = self._cooling.get(route)
        if entry is not None and now >= entry.forget_at:
            self._cooling.pop(route, None)
            return None
        return entry

    def probe_due(self, route: str, now: float) -> bool:
        if route not in self._cooling:  # the hot path: one dict lookup for a healthy route
            return False
        self._observe(now)
        entry = self._cooling.get(route)
        return (
            entry is not None
            and now < entry.forget_at
            and now >= entry.until
            and now >= entry.lease_until
        )

    def claim_probe(self, route: str, now: float, lease_s: float) -> bool:
        self._observe(now)
        with self._lock:
            entry = self._live(route, now)
            if entry is None or now < entry.until or now < entry.lease_until:
                return False
            entry.lease_until = now + lease_s
            return True

    async def aclaim_probe(self, route: str, now: float, lease_s: float) -> bool:
        return self.claim_probe(route, now, lease_s)  # memory: never waits

    def release_probe(self, route: str) -> None:
        with self._lock:
            entry = self._cooling.get(route)
            if entry is not None:
                entry.lease_until = 0.0

    def recovered(self, route: str, now: float) -> bool:
        if route not in self._cooling:  # the hot path: no lock for a healthy route
            return False
        self._observe(now)
        with self._lock:
            entry = self._live(route, now)
            if entry is None or now < entry.until:
                return False
            del self._cooling[route]
            return True

    # -- breakers -------------------------------------------------------------------------------
    def admit(
        self, route: str, now: float, config: BreakerConfig, *, lease_s: float | None = None
    ) -> Admitted:
        # lease_s is for shared stores: in one process every probe's end reaches record()
        if not config.enabled:
            return _ALLOWED
        breaker = self._breakers.get(route)
        if breaker is None:
            # No breaker: closed with an empty window. None is made until an outcome needs one.
            return _ALLOWED
        if breaker.state is BreakerState.CLOSED:
            # The healthy path, without the lock: a closed breaker admits whatever the time
            # (Breaker.admit moves nothing), and a state read is atomic; a breaker that opens
            # meanwhile is one the attempt had already been admitted by.
            period = breaker.period
            return _ALLOWED if period == 0 else Admitted(Admission.ALLOWED, None, period)
        self._observe(now)
        with self._lock:
            breaker = self._breakers.get(route)
            if breaker is None:
                return _ALLOWED
            admission, moved_from = breaker.admit(now, config)
            return Admitted(admission, breaker.transition(route, moved_from), breaker.period)

    async def aadmit(
        self, route: str, now: float, config: BreakerConfig, *, lease_s: float | None = None
    ) -> Admitted:
        return self.admit(route, now, config)

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
        if not config.enabled:
            return None
        self._observe(now)
        with self._lock:
            if outcome is Outcome.NEUTRAL:
                breaker = self._breakers.get(route)
                if breaker is None:
                    return None  # nothing to count and no slot to give back
            else:
                if config.window_s > self._window_s:
                    self._window_s = config.window_s
                # _breaker(), written out for the breaker that exists: every success records.
                breaker = self._breakers.get(route) or self._breaker(route, now)
            moved_from = breaker.record(outcome, now, config, probe, period)
            return None if moved_from is None else breaker.transition(route, moved_from)

    # -- views ----------------------------------------------------------------------------------
    def snapshot(self, now: float) -> list[RouteHealth]:
        # A view, not a decision: it does not watch the clock (gauges read it on a clock of
        # their own). Copy under the lock, build outside it: a large table never stalls calls.
        with self._lock:
            cooling = [(r, e.until, e.forget_at, e.reason) for r, e in self._cooling.items()]
            breakers = {r: (b.state_at(now), b.open_until) for r, b in self._breakers.items()}
        out = []
        for route, until, forget_at, reason in cooling:
            if now >= forget_at:
                continue
            state, open_until = breakers.pop(route, (BreakerState.CLOSED, 0.0))
            out.append(
                RouteHealth(
                    route,
                    until if until > now else None,
                    state,
                    recovering=until <= now,
                    reason=reason,
                    breaker_until=open_until if state is BreakerState.OPEN else None,
                )
            )
        for route, (state, open_until) in breakers.items():
            out.append(
                RouteHealth(
                    route,
                    None,
                    state,
                    breaker_until=open_until if state is BreakerState.OPEN else None,
                )
            )
        out.sort(key=lambda h: h.route)
        return out

    def __len__(self) -> int:
        """Routes with an entry (a cooldown, a breaker, or both), expired ones included."""
        return len(self._cooling.keys() | self._breakers.keys())

    def clear(self, route: str | None = None) -> None:
        with self._lock:
            if route is None:  # a config change: learned latency stays, it is the routes' own
                self._cooling.clear()
                self._breakers.clear()
                return
            self._cooling.pop(route, None)
            self._breakers.pop(route, None)
            self._notices.append((route, "cleared"))
            del self._notices[: -self._max]  # nobody calls: keep the newest only

    def drain(self, route: str, until: float, now: float) -> None:
        """Degrade ``route`` until ``until`` (see :func:`check_drain`: ValueError otherwise)."""
        check_drain(route, until, now)
        self._observe(now)
        with self._lock:
            entry = self._live(route, now)
            streak = entry.streak if entry is not None else 0
            self._set_cooling(route, Cooling(until, streak, until, reason="drained"), now)
            self._notices.append((route, "drained"))
            del self._notices[: -self._max]

    def take_notices(self) -> list[tuple[str, str]]:
        if not self._notices:  # the hot path: nothing happened
            return []
        with self._lock:
            notices, self._notices = self._notices, []
            return notices

    # -- learned latency (optional for a store: the engine looks for these by name) ----------
    def observe_first_chunk(self, route: str, seconds: float, now: float) -> None:
        """An attempt on ``route`` got its first chunk ``seconds`` after it began (at wall
        time ``now``): one more time for :meth:`first_chunk_quantile`."""
        if seconds != seconds:  # NaN: refused before a route is made for it
            raise ValueError(f"observe_first_chunk {route}: seconds is NaN")
        with self._lock:
            sketch = self._latency.get(route)
            if sketch is None:
                sketch = LatencySketch()
                sketch.window(now)  # a bad time is refused before the route is kept
                self._latency[route] = sketch
                if len(self._latency) > self._max:
                    self._make_room_latency(now)
                    self._latency[route] = sketch
            sketch.observe(seconds, now)

    def first_chunk_quantile(
        self, route: str, q: float, now: float, min_samples: int = DEFAULT_MIN_SAMPLES
    ) -> float | None:
        """The ``q`` quantile of ``route``'s times to a first chunk over the last five to ten
        minutes (within 5 %), or None with fewer than ``min_samples`` of them."""
        sketch = self._latency.get(route)
        if sketch is None:  # never observed: no lock
            if not 0.0 <= q <= 1.0:
                raise ValueError(f"first_chunk_quantile: q must be in [0, 1], not {q!r}")
            return None
        with self._lock:
            return sketch.quantile(q, now, min_samples)

    def _make_room_latency(self, now: float) -> None:
        """Keep the latency table within ``max_routes``, pruning to 90% as _make_room does:
        routes a read at ``now`` finds empty first, then those observed longest ago."""
        table, target = self._latency, self._max - self._max // 10
        for route in [r for r, s in table.items() if s.count(now) == 0]:
            del table[route]
        excess = len(table) - target
        if excess > 0:
            newest = {r: max(s.windows, default=0) for r, s in table.items()}
            for route in sorted(table, key=newest.__getitem__)[:excess]:
                del table[route]

    def first_chunks(self, route: str) -> LatencySketch | None:
        """A copy of ``route``'s times to a first chunk, or None when it has none."""
        with self._lock:
            sketch = self._latency.get(route)
            return None if sketch is None else sketch.copy()

    def first_chunk_routes(self) -> list[str]:
        """Every route with times to a first chunk held."""
        with self._lock:
            return list(self._latency)

    def adopt_first_chunks(self, route: str, sketch: LatencySketch, now: float) -> None:
        """``route``'s times become ``sketch`` (the fleet's, read from a shared store)."""
        with self._lock:
            fresh = route not in self._latency
            self._latency[route] = sketch
            if fresh and len(self._latency) > self._max:
                self._make_room_latency(now)
                self._latency[route] = sketch

    # -- the fleet's view, from a shared store (RedisHealth keeps this store as its local view)
    def cooling(self, route: str, now: float) -> Cooling | None:
        """A copy of ``route``'s cooldown entry, or None when it has none."""
        self._observe(now)
        with self._lock:
            entry = self._live(route, now)
            return None if entry is None else replace(entry)

    def adopt(self, route: str, shared: Cooling, now: float) -> None:
        """Take another process's view of ``route``'s cooldown: a cooldown is never shortened
        and a probe held elsewhere keeps calls here off the route until its lease ends."""
        self._observe(now)
        with self._lock:
            entry = self._live(route, now)
            if entry is None or shared.streak > entry.streak or shared.until > entry.until:
                merged = replace(shared)
                if entry is not None:
                    merged.until = max(entry.until, shared.until)
                    merged.forget_at = max(entry.forget_at, shared.forget_at)
                    merged.lease_until = max(entry.lease_until, shared.lease_until)
                self._set_cooling(route, merged, now)
            else:
                entry.lease_until = max(entry.lease_until, shared.lease_until)

    def hold(self, route: str, lease_until: float, now: float) -> None:
        """Another process probes ``route`` until ``lease_until``: calls here walk past it."""
        self._observe(now)
        with self._lock:
            entry = self._live(route, now)
            if entry is not None:
                entry.lease_until = max(entry.lease_until, lease_until)

    def forget(self, route: str) -> None:
        """The route recovered elsewhere: it is healthy here too."""
        with self._lock:
            self._cooling.pop(route, None)

    def adopt_breaker(self, route: str, open_until: float | None, now: float) -> None:
        """Another process opened ``route``'s breaker until ``open_until`` (or closed it: None)."""
        self._observe(now)
        with self._lock:
            breaker = self._breakers.get(route)
            if open_until is None:
                if breaker is not None and breaker.state is not BreakerState.CLOSED:
                    # A new breaker, but in a later period: probes of the old one stay stale.
                    self._breakers[route] = Breaker(
                        period=breaker.period + 1, stale=breaker.stale + breaker.probes
                    )
                return
            if breaker is None:
                breaker = self._breaker(route, now)
            if breaker.state is not BreakerState.OPEN or breaker.open_until < open_until:
                breaker.force_open(open_until)

    def breaker_open_until(self, route: str) -> float | None:
        """When ``route``'s breaker, open here, lets probes through; None if it is not open."""
        breaker = self._breakers.get(route)
        if breaker is None or breaker.state is BreakerState.CLOSED:
            return None
        return breaker.open_until


class _Unavailable:
    """The routes unavailable at one instant, asked one at a time (most calls ask of one):
    cooling down, recovering with its probe taken, or breaker open. Read without the lock, as
    every lookup of one route's entry is."""

    __slots__ = ("_breakers", "_cooling", "_now")

    def __init__(
        self, cooling: dict[str, Cooling], breakers: dict[str, Breaker], now: float
    ) -> None:
        self._cooling = cooling
        self._breakers = breakers
        self._now = now

    def __contains__(self, route: object) -> bool:
        if not isinstance(route, str):
            return False
        now = self._now
        entry = self._cooling.get(route)
        if (
            entry is not None
            and now < entry.forget_at
            and (now < entry.until or now < entry.lease_until)
        ):
            return True
        breaker = self._breakers.get(route)
        # Breaker.state_at(now) is OPEN, written out: every call asks of its route.
        return (
            breaker is not None and breaker.state is BreakerState.OPEN and now < breaker.open_until
        )
