"""Route health: cooldowns and circuit breakers behind one small store protocol.

Times are wall-clock epoch seconds so a shared store (Redis) means the same thing in every
process. A wall clock can be stepped (NTP, an operator, a VM resumed), so :class:`MemoryHealth`
watches for steps and moves its own times with the clock: a cooldown granted for 10 s lasts
10 s whichever way the clock jumps meanwhile. The breaker's rules live in :class:`Breaker`, a
plain state machine, so every store applies the same ones; a store only has to keep its state
atomic.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Container
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import NamedTuple, Protocol, runtime_checkable

from ._config import BreakerConfig

__all__ = [
    "DEFAULT_MAX_ROUTES",
    "STEP_TOLERANCE_S",
    "Admission",
    "Admitted",
    "Breaker",
    "BreakerState",
    "BreakerTransition",
    "Cooldown",
    "CooldownRule",
    "Cooling",
    "HealthStore",
    "MemoryHealth",
    "Outcome",
    "RouteHealth",
]


class BreakerState(StrEnum):
    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open"


class Admission(StrEnum):
    ALLOWED = "allowed"
    PROBE = "probe"  # let through as one of the half-open breaker's limited probes
    REJECTED = "rejected"


class Outcome(StrEnum):
    SUCCESS = "success"
    FAILURE = "failure"  # the route is to blame
    NEUTRAL = "neutral"  # says nothing about the route (cancelled, the caller's own error)


@dataclass(frozen=True, slots=True)
class BreakerTransition:
    route: str
    before: BreakerState
    after: BreakerState
    open_until: float | None = None


class Admitted(NamedTuple):
    """A breaker's answer to an attempt. ``period`` names the half-open period a ``PROBE``
    belongs to: hand it back to :meth:`HealthStore.record`, so a probe that outlives its period
    (the breaker opened again meanwhile) neither frees a slot of the next period nor gives it
    its verdict."""

    admission: Admission
    transition: BreakerTransition | None
    period: int = 0


@dataclass(frozen=True, slots=True)
class RouteHealth:
    """One route as a store sees it. ``degraded_until`` is set while the route cools down;
    ``recovering`` once its cooldown is over and until a call on it succeeds (its probe)."""

    route: str
    degraded_until: float | None
    breaker: BreakerState
    recovering: bool = False
    reason: str = ""
    """Why the route cooled down: the failure kind, or ``drained`` (by an operator)."""
    breaker_until: float | None = None
    """While the breaker is open: when it turns half-open and lets a probe through."""

    @property
    def degraded(self) -> bool:
        """Whether calls walk past the route: cooling, awaiting its probe, or breaker open."""
        return bool(self.degraded_until) or self.recovering or self.breaker is BreakerState.OPEN


_MAX_STREAK = 32  # doublings past this are far beyond any cap; it keeps 2**streak a float


@dataclass(frozen=True, slots=True)
class CooldownRule:
    """How long a route cools down: ``base_s`` the first time, doubled for each failed probe
    since the route last worked, never longer than ``max_s``; at least ``floor_s`` (what the
    server asked for with Retry-After), which ``max_s`` bounds too."""

    base_s: float
    max_s: float
    floor_s: float = 0.0

    def seconds(self, streak: int) -> float:
        grown = self.base_s * 2.0 ** min(streak, _MAX_STREAK)
        return min(self.max_s, max(grown, self.floor_s))


@dataclass(frozen=True, slots=True)
class Cooldown:
    """A cooldown as a store applied it: until when, how long from now, and ``streak``, the
    failed probes since the route last worked (0 for the first cooldown of an outage)."""

    route: str
    until: float
    seconds: float
    streak: int


@dataclass(slots=True)
class Cooling:
    """One route's cooldown as a store keeps it (and a shared store shares it)."""

    until: float
    streak: int
    # A recovering route nobody calls is never probed: after one more longest cooldown with
    # no verdict it is forgotten (healthy until it fails again), so no entry lives forever.
    forget_at: float
    lease_until: float = 0.0  # a recovery probe holds the route until then
    reason: str = ""

    def shift(self, delta: float) -> None:
        """The wall clock stepped by ``delta``: move every time kept here with it."""
        self.until += delta
        self.forget_at += delta
        if self.lease_until:
            self.lease_until += delta


_MAX_OUTCOMES = 1000


@dataclass(slots=True)
class Breaker:
    """One route's breaker. Not thread-safe: the store holds it under its lock."""

    state: BreakerState = BreakerState.CLOSED
    outcomes: deque[tuple[float, bool]] = field(default_factory=deque)
    failures: int = 0  # failures in ``outcomes``, kept so a record is O(1), not O(window)
    open_until: float = 0.0
    opens: int = 0  # consecutive opens, for the growing open duration
    probes: int = 0  # half-open probes in flight, of this period only
    # Probes of earlier periods still in flight: they decide nothing, but they still hold
    # their slots, so no more than half_open_probes are ever in flight on the route.
    stale: int = 0
    # Each opening starts a new period; a probe counts only for the period that admitted it.
    period: int = 0

    def admit(self, now: float, config: BreakerConfig) -> tuple[Admission, BreakerState | None]:
        """Whether an attempt may start; returns the state it moved from, if it moved."""
        if not config.enabled:
            return Admission.ALLOWED, None
        moved_from = None
        if self.state is BreakerState.OPEN:
            if now < self.open_until:
                return Admission.REJECTED, None
            moved_from, self.state, self.probes = self.state, BreakerState.HALF_OPEN, 0
        if self.state is BreakerState.HALF_OPEN:
            if self.probes + self.stale >= config.half_open_probes:
                return Admission.REJECTED, moved_from
            self.probes += 1
            return Admission.PROBE, moved_from
        return Admission.ALLOWED, None

    def record(
        self,
        outcome: Outcome,
        now: float,
        config: BreakerConfig,
        probe: bool,
        period: int | None = None,
    ) -> BreakerState | None:
        """Account for a finished attempt; returns the state it moved from, if it moved.

        ``period``: the period that admitted the probe (None: the current one). A probe of an
        earlier period is ignored: its slot was already handed to the new period's probes.
        """
        if probe:
            if period is not None and period != self.period:
                self.stale = max(self.stale - 1, 0)  # its slot frees now; no verdict
                return None
            if self.probes > 0:
                self.probes -= 1
        if outcome is Outcome.NEUTRAL or not config.enabled:
            return None
        before = self.state
        if before is BreakerState.HALF_OPEN:
            if not probe:  # started before the breaker opened; the probes decide
                return None
            if outcome is Outcome.SUCCESS:
                self.state, self.opens = BreakerState.CLOSED, 0
            else:
                self._open(now, config)
            return before
        if before is BreakerState.OPEN:
            return None  # a late result from before the breaker opened
        outcomes = self.outcomes
        ok = outcome is Outcome.SUCCESS
        outcomes.append((now, ok))
        self.failures += not ok
        # Memory stays bounded under any load: past _MAX_OUTCOMES the oldest leave early.
        while outcomes and (
            outcomes[0][0] <= now - config.window_s or len(outcomes) > _MAX_OUTCOMES
        ):
            self.failures -= not outcomes.popleft()[1]
        total = len(outcomes)
        if total >= config.min_calls and self.failures / total >= config.failure_rate:
            self._open(now, config)
            return before
        return None

    def _open(self, now: float, config: BreakerConfig) -> None:
        self.open_until = now + min(config.max_open_s, config.open_s * 2**self.opens)
        self.opens += 1
        self.state = BreakerState.OPEN
        self.period += 1
        self.stale, self.probes = self.stale + self.probes, 0
        self.outcomes.clear()
        self.failures = 0

    def shift(self, delta: float) -> None:
        """The wall clock stepped by ``delta``: move every time kept here with it."""
        if self.open_until:
            self.open_until += delta
        if self.outcomes:
            self.outcomes = deque((t + delta, ok) for t, ok in self.outcomes)

    def force_open(self, until: float) -> None:
        """Open until ``until`` because the fleet says so (the next open doubles as usual)."""
        if self.state is BreakerState.CLOSED:
            self.opens += 1
        self.state, self.open_until = BreakerState.OPEN, until
        self.stale, self.probes = self.stale + self.probes, 0
        self.period += 1
        self.outcomes.clear()
        self.failures = 0

    def state_at(self, now: float) -> BreakerState:
        if self.state is BreakerState.OPEN and now >= self.open_until:
            return BreakerState.HALF_OPEN  # what the next admission will see
        return self.state


@runtime_checkable
class HealthStore(Protocol):
    """Where route health lives. Every method is atomic with respect to the others.

    A failed route cools down (:meth:`cool_down`); when its cooldown ends it is *recovering*:
    still walked past, except by the one call that claims its probe (:meth:`claim_probe`). A
    success on it (:meth:`recovered`) makes it healthy and resets its cooldown; a failure
    cools it down again, for longer.
    """

    def cool_down(self, route: str, now: float, rule: CooldownRule, reason: str = "") -> Cooldown:
        """Degrade ``route`` per ``rule``; never shortens a cooldown already running.

        A failure while the route is recovering grows the cooldown (one more failed probe); a
        failure while it is still cooling extends it at its current length. Ends any probe. A
        route left recovering with no call on it for ``rule.max_s`` more is forgotten.
        """
        ...

    def unavailable(self, now: float) -> Container[str]:
        """Routes a call should walk past at ``now``: cooling down, recovering with its probe
        taken, or breaker open. A recovering route whose probe is free is not in it."""
        ...

    def probe_due(self, route: str, now: float) -> bool:
        """Whether ``route`` is recovering and its probe is free to claim."""
        ...

    def claim_probe(self, route: str, now: float, lease_s: float) -> bool:
        """Take ``route``'s probe for ``lease_s`` seconds; False if it is not due or taken."""
        ...

    async def aclaim_probe(self, route: str, now: float, lease_s: float) -> bool:
        """:meth:`claim_probe` for async callers: a shared store must not block their loop."""
        ...

    def release_probe(self, route: str) -> None:
        """Give the probe back without a verdict (the call was cancelled, or its failure says
        nothing about the route); the next call may probe."""
        ...

    def recovered(self, route: str, now: float) -> bool:
        """A call on ``route`` succeeded: if the route was recovering it is healthy again (True);
        a success while it still cools down changes nothing (False)."""
        ...

    def admit(
        self, route: str, now: float, config: BreakerConfig, *, lease_s: float | None = None
    ) -> Admitted:
        """Whether ``route``'s breaker lets an attempt start now (a half-open breaker admits
        ``config.half_open_probes`` at once). ``lease_s`` bounds how long an admitted probe may
        take: a shared store frees its slot after that even if its process died."""
        ...

    async def aadmit(
        self, route: str, now: float, config: BreakerConfig, *, lease_s: float | None = None
    ) -> Admitted:
        """:meth:`admit` for async callers."""
        ...

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
        """Account for a finished attempt; a probe passes the ``period`` its admission named."""
        ...

    def snapshot(self, now: float) -> list[RouteHealth]:
        """Every route the store knows of, for gauges and ``swerve health``."""
        ...

    def clear(self, route: str | None = None) -> None:
        """Forget ``route``'s cooldown and breaker (an operator ends them), or every route's (a
        config change does this)."""
        ...

    def drain(self, route: str, until: float, now: float) -> None:
        """Degrade ``route`` on purpose until ``until`` (before a provider's maintenance, say)."""
        ...

    def take_notices(self) -> list[tuple[str, str]]:
        """What operators did to routes since the last call (``(route, "cleared" | "drained")``),
        for the next call to report; empty almost always, and cheap then."""
        ...


STEP_TOLERANCE_S = 1.0
"""A wall-clock jump larger than this, against the monotonic clock, is a step (NTP, an
operator, a resumed VM); anything smaller is scheduling noise between reading the clock and
reaching the store, and slewing."""
DEFAULT_MAX_ROUTES = 10_000
"""Routes a :class:`MemoryHealth` keeps cooldowns, and breakers, for (each, separately)."""


class MemoryHealth:
    """Thread-safe in-process health store: cooldowns and breakers for this process.

    Bounded: at most ``max_routes`` cooldowns and as many breakers. Past that, entries that say
    nothing (a cooldown forgotten, a closed breaker whose window has emptied) go first, then
    the closed breakers that were created first, then the oldest entries of any kind.

    ``monotonic`` (a clock such as :func:`time.monotonic`) lets the store tell a wall-clock
    step from time passing, both ways; without one it still sees backward steps (the wall time
    it is given going back) and holds each entry to the time it had left.
    """

    def __init__(
        self,
        *,
        max_routes: int = DEFAULT_MAX_ROUTES,
        monotonic: Callable[[], float] | None = None,
    ) -> None:
        if max_routes < 1:
            raise ValueError(f"max_routes must be at least 1, not {max_routes}")
        self._lock = threading.Lock()
        self._cooling: dict[str, Cooling] = {}
        self._breakers: dict[str, Breaker] = {}
        self._notices: list[tuple[str, str]] = []
        self._max = max_routes
        self._monotonic = monotonic
        self._seen: tuple[float, float] | None = None  # (wall, monotonic) last observed
        self._window_s = 0.0  # the longest breaker window recorded with, for pruning
        self.steps = 0
        """Wall-clock steps seen and corrected for (for tests and diagnostics)."""

    # -- the clock ------------------------------------------------------------------------------
    def _step(self, seen: tuple[float, float], now: float, mono: float) -> float:
        if self._monotonic is None:
            return min(now - seen[0], 0.0)  # only a backward step is visible without it
        return (now - seen[0]) - (mono - seen[1])

    def _observe(self, now: float) -> None:
        """Compare ``now`` with the last wall time seen; on a step, move every entry with the
        clock so each keeps the time it had left. Lock-free unless the clock stepped: call it
        before taking the lock."""
        mono = self._monotonic() if self._monotonic is not None else 0.0
        seen = self._seen
        if seen is not None and abs(self._step(seen, now, mono)) > STEP_TOLERANCE_S:
            with self._lock:
                seen = self._seen  # another thread may have corrected for this step already
                if seen is not None:
                    step = self._step(seen, now, mono)
                    if abs(step) > STEP_TOLERANCE_S:
                        self._shift(step)
                self._seen = (now, mono)
            return
        if seen is None or now >= seen[0] or self._monotonic is not None:
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
            for route in [r for r, b in breakers.items() if _says_nothing(b, horizon)]:
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
        return _Unavailable(self, now)

    def _live(self, route: str, now: float) -> Cooling | None:
        entry = self._cooling.get(route)
        if entry is not None and now >= entry.forget_at:
            self._cooling.pop(route, None)
            return None
        return entry

    def _is_unavailable(self, route: str, now: float) -> bool:
        entry = self._cooling.get(route)
        if (
            entry is not None
            and now < entry.forget_at
            and (now < entry.until or now < entry.lease_until)
        ):
            return True
        breaker = self._breakers.get(route)
        return breaker is not None and breaker.state_at(now) is BreakerState.OPEN

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
        if not config.enabled or route not in self._breakers:
            # No breaker: closed with an empty window. None is made until an outcome needs one.
            return Admitted(Admission.ALLOWED, None)
        self._observe(now)
        with self._lock:
            breaker = self._breakers.get(route)
            if breaker is None:
                return Admitted(Admission.ALLOWED, None)
            admission, moved_from = breaker.admit(now, config)
            return Admitted(admission, _transition(route, moved_from, breaker), breaker.period)

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
                self._window_s = max(self._window_s, config.window_s)
                breaker = self._breaker(route, now)
            moved_from = breaker.record(outcome, now, config, probe, period)
            return _transition(route, moved_from, breaker)

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
            if route is None:
                self._cooling.clear()
                self._breakers.clear()
                return
            self._cooling.pop(route, None)
            self._breakers.pop(route, None)
            self._notices.append((route, "cleared"))
            del self._notices[: -self._max]  # nobody calls: keep the newest only

    def drain(self, route: str, until: float, now: float) -> None:
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


def _says_nothing(breaker: Breaker, horizon: float) -> bool:
    """A closed breaker whose window holds nothing newer than ``horizon``: forgetting it loses
    nothing (a new one starts from the same empty window)."""
    if breaker.state is not BreakerState.CLOSED:
        return False
    return not breaker.outcomes or breaker.outcomes[-1][0] <= horizon


class _Unavailable:
    __slots__ = ("_now", "_store")

    def __init__(self, store: MemoryHealth, now: float) -> None:
        self._store = store
        self._now = now

    def __contains__(self, route: object) -> bool:
        return isinstance(route, str) and self._store._is_unavailable(route, self._now)


def _transition(
    route: str, moved_from: BreakerState | None, breaker: Breaker
) -> BreakerTransition | None:
    if moved_from is None or moved_from is breaker.state:
        return None
    open_until = breaker.open_until if breaker.state is BreakerState.OPEN else None
    return BreakerTransition(route, moved_from, breaker.state, open_until)
