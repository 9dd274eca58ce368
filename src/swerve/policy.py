"""The pure failover policy: after a failure, retry (after a delay), swap (to a route), or give up.

No clock, no I/O: every input is an argument and randomness is injected, so the rules can be
tested exhaustively. The engine owns time; both its sync and async paths ask this module.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Iterator
from dataclasses import dataclass
from enum import StrEnum

from ._config import FallbackConfig
from .failures import NEVER_SWAP_KINDS, STATUSLESS_QUALIFYING_KINDS, Failure

__all__ = [
    "Decision",
    "GiveUp",
    "GiveUpReason",
    "Retry",
    "Swap",
    "backoff",
    "decide",
    "next_route",
    "qualifies",
    "start_route",
    "wait_bound",
]


class GiveUpReason(StrEnum):
    NOT_QUALIFYING = "not_qualifying"  # the error is not one swerve acts on: surface it
    EFFECTS = "effects"  # something really happened during the attempt: replaying it is unsafe
    SWAP_BUDGET = "swap_budget"  # max_swaps reached
    NO_FALLBACK = "no_fallback"  # the map names no route after this one
    DEADLINE = "deadline"  # no time left for a wait or another attempt


@dataclass(frozen=True, slots=True)
class Retry:
    """Try the same route again after ``delay`` seconds."""

    delay: float


@dataclass(frozen=True, slots=True)
class Swap:
    """Move the call to ``route``; ``skipped`` are degraded routes the walk passed over."""

    route: str
    skipped: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class GiveUp:
    """Surface the error. ``qualifying`` says whether the route is to blame (cool it down)."""

    reason: GiveUpReason
    qualifying: bool


Decision = Retry | Swap | GiveUp


def qualifies(config: FallbackConfig, failure: Failure) -> bool:
    """Whether the route is to blame: a listed status, or no answer at all (reset, timeout)."""
    if failure.kind in NEVER_SWAP_KINDS:
        return False
    if failure.status is not None:
        return failure.status in config.fallback_on
    return failure.kind in STATUSLESS_QUALIFYING_KINDS


def next_route(config: FallbackConfig, requested: str, current: str) -> str | None:
    """The route a swap from ``current`` goes to, in a call that asked for ``requested``.

    A chain given as a list for the requested route is walked in order; past its end (or when
    the requested route has a single sibling) each route's own map entry is followed, which is
    how a bidirectional pair bounces back.
    """
    chain = config.fallbacks.get(requested)
    if isinstance(chain, list):
        if current == requested:
            return chain[0]
        if current in chain:
            i = chain.index(current)
            if i + 1 < len(chain):
                return chain[i + 1]
    target = config.fallbacks.get(current)
    if target is None:
        return None
    return target if isinstance(target, str) else target[0]


def _walk(config: FallbackConfig, requested: str, first: str) -> Iterator[str]:
    """Routes from ``first`` onward along the map, each at most once (the cycle guard)."""
    seen: set[str] = set()
    route: str | None = first
    while route is not None and route not in seen:
        seen.add(route)
        yield route
        route = next_route(config, requested, route)


def _first_healthy(
    config: FallbackConfig, requested: str, first: str, degraded: Container[str]
) -> tuple[str, tuple[str, ...]]:
    skipped: list[str] = []
    for route in _walk(config, requested, first):
        if route not in degraded:
            return route, tuple(skipped)
        skipped.append(route)
    # Every reachable route is cooling: start where the map says, and fail the same way a
    # call without swerve would, rather than invent a route.
    return first, ()


def start_route(
    config: FallbackConfig, requested: str, degraded: Container[str]
) -> tuple[str, tuple[str, ...]]:
    """Where a call for ``requested`` starts: the first route of its chain that is healthy.

    Returns the route and the degraded routes passed over; when every route is degraded (or the
    walk hits a cycle first) the requested route itself.
    """
    return _first_healthy(config, requested, requested, degraded)


def backoff(config: FallbackConfig, retries_done: int, rand: Callable[[], float]) -> float:
    """Exponential backoff for the next retry on a route, with full jitter when enabled."""
    ceiling = min(
        config.backoff_max_s, config.backoff_initial_s * config.backoff_factor**retries_done
    )
    return ceiling * rand() if config.jitter else ceiling


def decide(
    config: FallbackConfig,
    failure: Failure,
    *,
    requested: str,
    current: str,
    retries: int,
    swaps: int,
    degraded: Container[str] = frozenset(),
    effects: bool = False,
    remaining_s: float | None = None,
    rand: Callable[[], float] = lambda: 1.0,
) -> Decision:
    """What to do after ``failure`` on ``current``.

    ``retries`` counts retries on ``current`` since the last swap, ``swaps`` the swaps made in
    this call, ``degraded`` the routes cooling down (``current`` counts as cooling once it is
    given up on), ``effects`` whether the attempt did something that must not be repeated (a
    tool ran), ``remaining_s`` the time left before the call's deadline.
    """
    if not qualifies(config, failure):
        return GiveUp(GiveUpReason.NOT_QUALIFYING, qualifying=False)
    if effects:
        return GiveUp(GiveUpReason.EFFECTS, qualifying=True)
    if remaining_s is not None and remaining_s <= 0:
        return GiveUp(GiveUpReason.DEADLINE, qualifying=True)
    if failure.retryable and retries < config.max_retries:
        if failure.retry_after is not None:
            delay = min(max(failure.retry_after, 0.0), config.retry_after_max_s)
        else:
            delay = backoff(config, retries, rand)
        # A wait that would outlast the deadline is better spent on the next route.
        if remaining_s is None or delay < remaining_s:
            return Retry(delay)
    if swaps >= config.max_swaps:
        return GiveUp(GiveUpReason.SWAP_BUDGET, qualifying=True)
    first = next_route(config, requested, current)
    if first is None:
        return GiveUp(GiveUpReason.NO_FALLBACK, qualifying=True)
    route, skipped = _first_healthy(config, requested, first, _With(degraded, current))
    return Swap(route, skipped)


class _With:
    """``degraded`` plus the route just given up on, without copying the store's view."""

    __slots__ = ("_base", "_extra")

    def __init__(self, base: Container[str], extra: str) -> None:
        self._base = base
        self._extra = extra

    def __contains__(self, route: object) -> bool:
        return route == self._extra or route in self._base


def wait_bound(config: FallbackConfig) -> float:
    """An upper bound on the total waiting one call can plan (retries on every route)."""
    per_wait = max(config.backoff_max_s, config.retry_after_max_s)
    return (config.max_swaps + 1) * config.max_retries * per_wait
