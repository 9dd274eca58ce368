"""The vocabulary of :class:`swerve.HealthStore`: what its methods take and return.

Import from here to write a health store of your own (a database, a service) without touching
swerve's private packages. Every name is the very object the engine and the built-in stores
(:class:`swerve.MemoryHealth`, :class:`swerve.RedisHealth`) use. docs/extending.md shows a
small store written against these names only.
"""

from __future__ import annotations

from ._engine.config import BreakerConfig
from ._health.breaker import Admission, Admitted, BreakerState, BreakerTransition, Outcome
from ._health.cooldown import Cooldown, CooldownRule, RouteHealth
from ._health.store import HealthStore, LatencySketch

__all__ = [
    "Admission",
    "Admitted",
    "BreakerConfig",
    "BreakerState",
    "BreakerTransition",
    "Cooldown",
    "CooldownRule",
    "HealthStore",
    "LatencySketch",
    "Outcome",
    "RouteHealth",
]
