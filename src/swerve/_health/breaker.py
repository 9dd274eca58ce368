"""The circuit breaker: its states and answers, and :class:`Breaker`, the state machine every
health store applies, so the rules are the same whichever store keeps the state (a store only
has to keep it atomic).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from enum import StrEnum
from typing import NamedTuple

from .._engine.config import BreakerConfig

__all__ = [
    "Admission",
    "Admitted",
    "Breaker",
    "BreakerState",
    "BreakerTransition",
    "Outcome",
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

    def says_nothing(self, horizon: float) -> bool:
        """Closed, with nothing in its window newer than ``horizon``: forgetting it loses
        nothing (a new one starts from the same empty window)."""
        if self.state is not BreakerState.CLOSED:
            return False
        return not self.outcomes or self.outcomes[-1][0] <= horizon

    def transition(self, route: str, moved_from: BreakerState | None) -> BreakerTransition | None:
        """The move :meth:`admit` or :meth:`record` reported (``moved_from``), as an event;
        None if it did not move."""
        if moved_from is None or moved_from is self.state:
            return None
        open_until = self.open_until if self.state is BreakerState.OPEN else None
        return BreakerTransition(route, moved_from, self.state, open_until)
