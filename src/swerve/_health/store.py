"""Route health: cooldowns and circuit breakers behind one small store protocol.

:class:`HealthStore` is the protocol. The values it takes and gives (from
:mod:`swerve._health.cooldown` and :mod:`swerve._health.breaker`) and the in-process store
(:mod:`swerve._health.memory`) are importable from here too, where the rest of swerve looks for
them; what only a store needs (:class:`~swerve._health.breaker.Breaker`,
:class:`~swerve._health.cooldown.Cooling`) is not.
"""

from __future__ import annotations

from collections.abc import Container
from typing import Protocol, runtime_checkable

from .._engine.config import BreakerConfig
from .breaker import Admission, Admitted, BreakerState, BreakerTransition, Outcome
from .cooldown import Cooldown, CooldownRule, RouteHealth
from .latency import LatencySketch
from .memory import DEFAULT_MAX_ROUTES, MemoryHealth

__all__ = [
    "DEFAULT_MAX_ROUTES",
    "Admission",
    "Admitted",
    "BreakerState",
    "BreakerTransition",
    "Cooldown",
    "CooldownRule",
    "HealthStore",
    "LatencySketch",
    "MemoryHealth",
    "Outcome",
    "RouteHealth",
]


@runtime_checkable
class HealthStore(Protocol):
    """Where route health lives. Every method is atomic with respect to the others.

    A failed route cools down (:meth:`cool_down`); when its cooldown ends it is *recovering*:
    still walked past, except by the one call that claims its probe (:meth:`claim_probe`). A
    success on it (:meth:`recovered`) makes it healthy and resets its cooldown; a failure
    cools it down again, for longer.

    Two more methods are optional (not members of this protocol: the engine looks for them by
    name, and a store without them runs every call as before, with nothing learned):

    - ``observe_first_chunk(route, seconds, now)``: an attempt on ``route`` got its first
      chunk ``seconds`` after it began, at wall time ``now``. Runs once per stream attempt:
      keep it cheap, and never wait on I/O in it.
    - ``first_chunk_quantile(route, q, now, min_samples=20) -> float | None``: the ``q``
      quantile (0 to 1) of the route's recent times to a first chunk, or None with fewer
      than ``min_samples`` of them. A :class:`~swerve.stores.LatencySketch` does
      both (the built-in stores keep one per route).
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
