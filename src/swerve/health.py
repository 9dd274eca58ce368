"""Route health: cooldowns and circuit breakers behind one small store protocol.

Times are wall-clock epoch seconds so a shared store (Redis) means the same thing in every
process. The breaker's rules live in :class:`Breaker`, a plain state machine, so every store
applies the same ones; a store only has to keep its state atomic.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Container
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Protocol, runtime_checkable

from ._config import BreakerConfig

__all__ = [
    "Admission",
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


_MAX_OUTCOMES = 1000


@dataclass(slots=True)
class Breaker:
    """One route's breaker. Not thread-safe: the store holds it under its lock."""

    state: BreakerState = BreakerState.CLOSED
    outcomes: deque[tuple[float, bool]] = field(default_factory=deque)
    failures: int = 0  # failures in ``outcomes``, kept so a record is O(1), not O(window)
    open_until: float = 0.0
    opens: int = 0  # consecutive opens, for the growing open duration
    probes: int = 0  # half-open probes in flight

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
            if self.probes >= config.half_open_probes:
                return Admission.REJECTED, moved_from
            self.probes += 1
            return Admission.PROBE, moved_from
        return Admission.ALLOWED, None

    def record(
        self, outcome: Outcome, now: float, config: BreakerConfig, probe: bool
    ) -> BreakerState | None:
        """Account for a finished attempt; returns the state it moved from, if it moved."""
        if probe and self.probes > 0:
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
        self.outcomes.clear()
        self.failures = 0

    def force_open(self, until: float) -> None:
        """Open until ``until`` because the fleet says so (the next open doubles as usual)."""
        if self.state is BreakerState.CLOSED:
            self.opens += 1
        self.state, self.open_until, self.probes = BreakerState.OPEN, until, 0
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
    ) -> tuple[Admission, BreakerTransition | None]:
        """Whether ``route``'s breaker lets an attempt start now (a half-open breaker admits
        ``config.half_open_probes`` at once). ``lease_s`` bounds how long an admitted probe may
        take: a shared store frees its slot after that even if its process died."""
        ...

    async def aadmit(
        self, route: str, now: float, config: BreakerConfig, *, lease_s: float | None = None
    ) -> tuple[Admission, BreakerTransition | None]:
        """:meth:`admit` for async callers."""
        ...

    def record(
        self, route: str, outcome: Outcome, now: float, config: BreakerConfig, *, probe: bool
    ) -> BreakerTransition | None: ...

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


class MemoryHealth:
    """Thread-safe in-process health store: cooldowns and breakers for this process."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._cooling: dict[str, Cooling] = {}
        self._breakers: dict[str, Breaker] = {}
        self._notices: list[tuple[str, str]] = []

    def cool_down(self, route: str, now: float, rule: CooldownRule, reason: str = "") -> Cooldown:
        with self._lock:
            entry = self._live(route, now)
            if entry is None:
                streak, until = 0, 0.0
            else:
                # Failing again once its cooldown is over is a failed probe: cool longer.
                streak = entry.streak + 1 if now >= entry.until else entry.streak
                until = entry.until
            until = max(until, now + rule.seconds(streak))  # never shortens
            self._cooling[route] = Cooling(until, streak, until + rule.max_s, reason=reason)
            return Cooldown(route, until, until - now, streak)

    def unavailable(self, now: float) -> Container[str]:
        return _Unavailable(self, now)

    def _live(self, route: str, now: float) -> Cooling | None:
        entry = self._cooling.get(route)
        if entry is not None and now >= entry.forget_at:
            self._cooling.pop(route, None)
            return None
        return entry

    def _is_unavailable(self, route: str, now: float) -> bool:
        entry = self._live(route, now)
        if entry is not None and (now < entry.until or now < entry.lease_until):
            return True
        breaker = self._breakers.get(route)
        return breaker is not None and breaker.state_at(now) is BreakerState.OPEN

    def probe_due(self, route: str, now: float) -> bool:
        if route not in self._cooling:  # the hot path: one dict lookup for a healthy route
            return False
        entry = self._live(route, now)
        return entry is not None and now >= entry.until and now >= entry.lease_until

    def claim_probe(self, route: str, now: float, lease_s: float) -> bool:
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
        with self._lock:
            entry = self._live(route, now)
            if entry is None or now < entry.until:
                return False
            del self._cooling[route]
            return True

    def admit(
        self, route: str, now: float, config: BreakerConfig, *, lease_s: float | None = None
    ) -> tuple[Admission, BreakerTransition | None]:
        # lease_s is for shared stores: in one process every probe's end reaches record()
        with self._lock:
            breaker = self._breakers.get(route)
            if breaker is None:
                if not config.enabled:
                    return Admission.ALLOWED, None
                breaker = self._breakers[route] = Breaker()
            admission, moved_from = breaker.admit(now, config)
            return admission, _transition(route, moved_from, breaker)

    async def aadmit(
        self, route: str, now: float, config: BreakerConfig, *, lease_s: float | None = None
    ) -> tuple[Admission, BreakerTransition | None]:
        return self.admit(route, now, config)

    def record(
        self, route: str, outcome: Outcome, now: float, config: BreakerConfig, *, probe: bool
    ) -> BreakerTransition | None:
        with self._lock:
            breaker = self._breakers.get(route)
            if breaker is None:
                if not config.enabled:
                    return None
                breaker = self._breakers[route] = Breaker()
            moved_from = breaker.record(outcome, now, config, probe)
            return _transition(route, moved_from, breaker)

    def snapshot(self, now: float) -> list[RouteHealth]:
        with self._lock:
            routes = sorted(self._cooling.keys() | self._breakers.keys())
            out = []
            for route in routes:
                entry = self._live(route, now)
                if entry is None and route not in self._breakers:
                    continue
                breaker = self._breakers.get(route)
                state = breaker.state_at(now) if breaker is not None else BreakerState.CLOSED
                out.append(
                    RouteHealth(
                        route,
                        entry.until if entry is not None and entry.until > now else None,
                        state,
                        recovering=entry is not None and entry.until <= now,
                        reason=entry.reason if entry is not None else "",
                        breaker_until=(
                            breaker.open_until
                            if breaker is not None and state is BreakerState.OPEN
                            else None
                        ),
                    )
                )
            return out

    def clear(self, route: str | None = None) -> None:
        with self._lock:
            if route is None:
                self._cooling.clear()
                self._breakers.clear()
                return
            self._cooling.pop(route, None)
            self._breakers.pop(route, None)
            self._notices.append((route, "cleared"))

    def drain(self, route: str, until: float, now: float) -> None:
        with self._lock:
            entry = self._live(route, now)
            streak = entry.streak if entry is not None else 0
            self._cooling[route] = Cooling(until, streak, until, reason="drained")
            self._notices.append((route, "drained"))

    def take_notices(self) -> list[tuple[str, str]]:
        if not self._notices:  # the hot path: nothing happened
            return []
        with self._lock:
            notices, self._notices = self._notices, []
            return notices

    # -- the fleet's view, from a shared store (RedisHealth keeps this store as its local view)
    def cooling(self, route: str, now: float) -> Cooling | None:
        """A copy of ``route``'s cooldown entry, or None when it has none."""
        with self._lock:
            entry = self._live(route, now)
            return None if entry is None else replace(entry)

    def adopt(self, route: str, shared: Cooling, now: float) -> None:
        """Take another process's view of ``route``'s cooldown: a cooldown is never shortened
        and a probe held elsewhere keeps calls here off the route until its lease ends."""
        with self._lock:
            entry = self._live(route, now)
            if entry is None or shared.streak > entry.streak or shared.until > entry.until:
                merged = replace(shared)
                if entry is not None:
                    merged.until = max(entry.until, shared.until)
                    merged.forget_at = max(entry.forget_at, shared.forget_at)
                    merged.lease_until = max(entry.lease_until, shared.lease_until)
                self._cooling[route] = merged
            else:
                entry.lease_until = max(entry.lease_until, shared.lease_until)

    def forget(self, route: str) -> None:
        """The route recovered elsewhere: it is healthy here too."""
        with self._lock:
            self._cooling.pop(route, None)

    def adopt_breaker(self, route: str, open_until: float | None, now: float) -> None:
        """Another process opened ``route``'s breaker until ``open_until`` (or closed it: None)."""
        with self._lock:
            breaker = self._breakers.get(route)
            if open_until is None:
                if breaker is not None and breaker.state is not BreakerState.CLOSED:
                    self._breakers[route] = Breaker()
                return
            if breaker is None:
                breaker = self._breakers[route] = Breaker()
            if breaker.state is not BreakerState.OPEN or breaker.open_until < open_until:
                breaker.force_open(open_until)

    def breaker_open_until(self, route: str) -> float | None:
        """When ``route``'s breaker, open here, lets probes through; None if it is not open."""
        breaker = self._breakers.get(route)
        if breaker is None or breaker.state is BreakerState.CLOSED:
            return None
        return breaker.open_until


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
