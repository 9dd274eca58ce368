"""Route health: cooldowns and circuit breakers behind one small store protocol.

Times are wall-clock epoch seconds so a shared store (Redis) means the same thing in every
process. The breaker's rules live in :class:`Breaker`, a plain state machine, so every store
applies the same ones; a store only has to keep its state atomic.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Container
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Protocol, runtime_checkable

from ._config import BreakerConfig

__all__ = [
    "Admission",
    "Breaker",
    "BreakerState",
    "BreakerTransition",
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
    route: str
    degraded_until: float | None
    breaker: BreakerState


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

    def state_at(self, now: float) -> BreakerState:
        if self.state is BreakerState.OPEN and now >= self.open_until:
            return BreakerState.HALF_OPEN  # what the next admission will see
        return self.state


@runtime_checkable
class HealthStore(Protocol):
    """Where route health lives. Every method is atomic with respect to the others."""

    def mark_degraded(self, route: str, until: float) -> float:
        """Degrade ``route`` until ``until`` unless it already is for longer; the effective end."""
        ...

    def degraded_until(self, route: str) -> float | None: ...

    def unavailable(self, now: float) -> Container[str]:
        """Routes a call should walk past at ``now``: cooling down, or breaker open."""
        ...

    def admit(
        self, route: str, now: float, config: BreakerConfig
    ) -> tuple[Admission, BreakerTransition | None]: ...

    def record(
        self, route: str, outcome: Outcome, now: float, config: BreakerConfig, *, probe: bool
    ) -> BreakerTransition | None: ...

    def snapshot(self, now: float) -> list[RouteHealth]:
        """Every route the store knows of, for gauges and ``swerve health``."""
        ...

    def clear(self) -> None:
        """Forget all cooldowns and breaker state (a config change does this)."""
        ...


class MemoryHealth:
    """Thread-safe in-process health store: cooldowns and breakers for this process."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._until: dict[str, float] = {}
        self._breakers: dict[str, Breaker] = {}

    def mark_degraded(self, route: str, until: float) -> float:
        with self._lock:
            # Never shortens: a new failure can only extend a cooldown.
            effective = max(until, self._until.get(route, 0.0))
            self._until[route] = effective
            return effective

    def degraded_until(self, route: str) -> float | None:
        return self._until.get(route)

    def unavailable(self, now: float) -> Container[str]:
        return _Unavailable(self, now)

    def _is_unavailable(self, route: str, now: float) -> bool:
        if self._until.get(route, 0.0) > now:
            return True
        breaker = self._breakers.get(route)
        return breaker is not None and breaker.state_at(now) is BreakerState.OPEN

    def admit(
        self, route: str, now: float, config: BreakerConfig
    ) -> tuple[Admission, BreakerTransition | None]:
        with self._lock:
            breaker = self._breakers.get(route)
            if breaker is None:
                if not config.enabled:
                    return Admission.ALLOWED, None
                breaker = self._breakers[route] = Breaker()
            admission, moved_from = breaker.admit(now, config)
            return admission, _transition(route, moved_from, breaker)

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
            routes = sorted(self._until.keys() | self._breakers.keys())
            return [
                RouteHealth(
                    route,
                    until if (until := self._until.get(route, 0.0)) > now else None,
                    b.state_at(now) if (b := self._breakers.get(route)) else BreakerState.CLOSED,
                )
                for route in routes
            ]

    def clear(self) -> None:
        with self._lock:
            self._until.clear()
            self._breakers.clear()


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
