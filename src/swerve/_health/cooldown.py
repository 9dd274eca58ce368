"""Cooldowns (the rule, what a store applied, what it keeps of a route) and
:class:`RouteHealth`, a route's cooldown and breaker as a store reports them.

Times are wall-clock epoch seconds, so a shared store (Redis) means the same thing in every
process.
"""

from __future__ import annotations

from dataclasses import dataclass

from .breaker import BreakerState

__all__ = ["Cooldown", "CooldownRule", "Cooling", "RouteHealth"]


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
