"""The seam between the engine's decisions and the health store's I/O, for sync and async alike.

A decision that may need the store's answer (may this call probe a recovering route? may it
pass a half-open breaker?) is written once, as a generator that yields what it asks. The sync
drivers answer with the store's blocking method, the async drivers await its async twin, so
a shared store (Redis) never blocks an event loop and the decision is never written twice.
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from ._config import BreakerConfig
    from ._health import HealthStore

__all__ = ["Admit", "Ask", "Claim", "Steps", "run_async", "run_sync"]

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Claim:
    """Take ``route``'s recovery probe for ``lease_s`` seconds; answered with a bool."""

    route: str
    now: float
    lease_s: float

    def run(self, health: HealthStore) -> object:
        return health.claim_probe(self.route, self.now, self.lease_s)

    async def arun(self, health: HealthStore) -> object:
        return await health.aclaim_probe(self.route, self.now, self.lease_s)


@dataclass(frozen=True, slots=True)
class Admit:
    """Ask ``route``'s breaker to admit an attempt; answered with (admission, transition)."""

    route: str
    now: float
    config: BreakerConfig
    lease_s: float

    def run(self, health: HealthStore) -> object:
        return health.admit(self.route, self.now, self.config, lease_s=self.lease_s)

    async def arun(self, health: HealthStore) -> object:
        return await health.aadmit(self.route, self.now, self.config, lease_s=self.lease_s)


Ask = Claim | Admit
Steps = Generator[Ask, Any, T]


def run_sync(steps: Steps[T], health: HealthStore) -> T:
    """Drive ``steps`` to its result, answering each ask with the store's blocking call."""
    try:
        ask = next(steps)
        while True:
            ask = steps.send(ask.run(health))
    except StopIteration as done:
        result: T = done.value
        return result


async def run_async(steps: Steps[T], health: HealthStore) -> T:
    """Drive ``steps`` to its result, awaiting the store's async twin of each ask."""
    try:
        ask = next(steps)
        while True:
            ask = steps.send(await ask.arun(health))
    except StopIteration as done:
        result: T = done.value
        return result
