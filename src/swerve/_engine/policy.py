"""The pure failover policy: after a failure, retry (after a delay), swap (to a route), or give up.

No clock, no I/O: every input is an argument and randomness is injected, so the rules can be
tested exhaustively. The engine owns time; both its sync and async paths ask this module.
"""

from __future__ import annotations

import itertools
import logging
import math
from collections.abc import Callable, Container, Iterator
from dataclasses import dataclass
from enum import StrEnum

from .._failures import Failure, FailureKind, FailurePredicate, status_kind
from .._telemetry.redact import printable, redact
from .config import Action, FallbackConfig, FallbackMap

__all__ = [
    "Decision",
    "GiveUp",
    "GiveUpReason",
    "Retry",
    "Swap",
    "action",
    "backoff",
    "decide",
    "next_route",
    "qualifies",
    "start_route",
    "walk",
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
    # The route's health refused a retry (it is cooling, drained or behind an open breaker,
    # learned here or elsewhere): the swap says so rather than naming the failure's kind.
    degraded: bool = False


@dataclass(frozen=True, slots=True)
class GiveUp:
    """Surface the error. ``qualifying`` says whether the route is to blame (cool it down)."""

    reason: GiveUpReason
    qualifying: bool


Decision = Retry | Swap | GiveUp


def action(config: FallbackConfig, failure: Failure) -> Action:
    """What ``failure`` does: its kind's action (``on_failure`` over the defaults), where the
    status list has the last word on HTTP statuses.

    A status not in ``fallback_on`` is not the route's fault: it surfaces. A status listed
    there that the defaults would surface (401, 402, 400, ...) is the route's fault because
    the config says so: it swaps, once the failure says no more than its status does (a
    context overflow or a content filter on a listed 400 still surfaces).

    A predicate ``fallback_on`` is asked about every failure but a cancellation and an open
    breaker (swerve's own, which keep their actions): False surfaces it, True gives it the
    action a listed status would. A predicate that raises counts as False (logged once).
    """
    kind, status = failure.kind, failure.status
    rule = config.fallback_on
    if callable(rule):
        if kind in _OWN_KINDS:
            return config.action(kind)
        if not _asks(rule, failure):
            return "surface"
    elif status is None:
        return config.action(kind)
    elif status not in rule:
        return "surface"
    act = config.action(kind)
    if (
        act == "surface"
        and status is not None
        and kind not in config.on_failure
        and kind is status_kind(status)
    ):
        return "swap"
    return act


_OWN_KINDS = frozenset({FailureKind.ABORTED, FailureKind.BREAKER_OPEN})
_log = logging.getLogger("swerve")
_WARNED_MAX = 64  # predicates warned about, by id: a bound, not a registry
_warned: set[int] = set()


def _asks(rule: FailurePredicate, failure: Failure) -> bool:
    try:
        return bool(rule(failure))
    except Exception as problem:
        # A bug in the rule must not replace the upstream's error: that error surfaces.
        if id(rule) not in _warned and len(_warned) < _WARNED_MAX:
            _warned.add(id(rule))
            name = getattr(rule, "__qualname__", None) or type(rule).__qualname__
            # The rule's name and its error's text are the user's: escaped for the log.
            _log.warning(
                "fallback_on predicate %s raised %s: %s; the failure surfaces",
                printable(redact(str(name), 64)),
                printable(type(problem).__name__),
                printable(redact(_text(problem))),
            )
        return False


def _text(exc: BaseException) -> str:
    try:
        return str(exc)
    except Exception:
        return ""


def qualifies(config: FallbackConfig, failure: Failure) -> bool:
    """Whether the route is to blame (so it cools down): the failure's action is not surface."""
    return action(config, failure) != "surface"


def next_route(
    config: FallbackConfig, requested: str, current: str, kind: FailureKind | None = None
) -> str | None:
    """The route a swap from ``current`` goes to, in a call that asked for ``requested``.

    A chain given as a list for the requested route is walked in order; past its end (or when
    the requested route has a single sibling) each route's own map entry is followed, which is
    how a bidirectional pair bounces back. ``kind`` follows that failure kind's map
    (``fallbacks_by_failure``) instead of ``fallbacks``.
    """
    mapping = config.fallbacks if kind is None else config.fallbacks_by_failure.get(kind, {})
    return _next_in(mapping, requested, current)


def _next_in(mapping: FallbackMap, requested: str, current: str) -> str | None:
    chain = mapping.get(requested)
    if isinstance(chain, list):
        if current == requested:
            return chain[0]
        if current in chain:
            i = chain.index(current)
            if i + 1 < len(chain):
                return chain[i + 1]
    target = mapping.get(current)
    if target is None:
        return None
    return target if isinstance(target, str) else target[0]


def walk(
    config: FallbackConfig,
    requested: str,
    first: str,
    kind: FailureKind | None = None,
    *,
    max_swaps: int | None = None,
) -> Iterator[str]:
    """Routes from ``first`` onward along the map (``kind``'s map when given), in a call that
    asked for ``requested``: the one walk of the fallback map, as the engine makes it.

    Without ``max_swaps``: each route at most once (the cycle guard). This is the walk of one
    route choice: where a call starts (from ``requested``) and where a swap lands, each the
    first route of the walk that is not degraded; so a call may reach any of these routes,
    however few swaps it may make.

    With ``max_swaps``: the routes a call tries when every attempt fails, ``first`` then one
    route per swap, at most ``max_swaps`` of them. A route may come again: the cycle guard
    holds within one choice, not across a call's swaps (a swap whose every route is degraded
    lands where the map says, on a route the call already tried).
    """
    seen: set[str] = set()
    route: str | None = first
    for _ in itertools.count() if max_swaps is None else range(max_swaps + 1):
        if route is None or (max_swaps is None and route in seen):
            return
        seen.add(route)
        yield route
        route = next_route(config, requested, route, kind)


def _first_healthy(
    config: FallbackConfig,
    requested: str,
    first: str,
    degraded: Container[str],
    kind: FailureKind | None = None,
) -> tuple[str, tuple[str, ...]]:
    skipped: list[str] = []
    for route in walk(config, requested, first, kind):
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
    """Exponential backoff for the next retry on a route, with full jitter when enabled.

    Always finite and within ``[0, backoff_max_s]``, however large ``retries_done`` and
    ``backoff_factor`` are (``rand`` is expected in ``[0, 1]``; anything else is clamped).
    """
    ceiling = _grown(
        config.backoff_initial_s, config.backoff_factor, max(retries_done, 0), config.backoff_max_s
    )
    if not config.jitter:
        return ceiling
    return ceiling * min(max(rand(), 0.0), 1.0)


def _grown(initial: float, factor: float, retries: int, cap: float) -> float:
    """``min(cap, initial * factor ** retries)`` without computing a power that overflows."""
    if initial >= cap:
        return cap
    if initial <= 0 or factor <= 1 or retries == 0:
        return initial
    # Compare in log space: 10.0 ** 400 raises OverflowError (which once masked the upstream
    # error), long after the cap has made the exact value irrelevant.
    exponent = retries * math.log(factor)
    if exponent >= math.log(cap) - math.log(initial):
        return cap
    # Below the cap the product is finite; the plain form keeps small values exact.
    return min(
        cap, initial * factor**retries if exponent < 700 else math.exp(math.log(initial) + exponent)
    )


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
    probe: bool = False,
    rand: Callable[[], float] = lambda: 1.0,
    act: Action | None = None,
) -> Decision:
    """What to do after ``failure`` on ``current``.

    ``retries`` counts retries on ``current`` since the last swap, ``swaps`` the swaps made in
    this call, ``degraded`` the routes to walk past (``current`` counts as one once it is
    given up on), ``effects`` whether the attempt did something that must not be repeated (a
    tool ran), ``remaining_s`` the time left before the call's deadline, ``probe`` whether the
    attempt was the route's recovery probe (one request: never retried). A retry is refused
    while ``current`` is in ``degraded``: the call swaps instead (:attr:`Swap.degraded`), or
    gives up when there is nowhere to go. ``act`` is
    :func:`action`'s answer when the caller has it already: a ``fallback_on`` predicate is
    asked once per failure, however often the engine decides about it.
    """
    if act is None:
        act = action(config, failure)
    kind = failure.kind if failure.kind in config.fallbacks_by_failure else None
    kind_target = next_route(config, requested, current, kind) if kind is not None else None
    if act == "surface" and kind_target is None:
        return GiveUp(GiveUpReason.NOT_QUALIFYING, qualifying=False)
    qualifying = act != "surface"
    if effects:
        return GiveUp(GiveUpReason.EFFECTS, qualifying=qualifying)
    if remaining_s is not None and remaining_s <= 0:
        return GiveUp(GiveUpReason.DEADLINE, qualifying=qualifying)
    # A retry asks the route's health first: a route the store already walks past (cooled,
    # drained, breaker open; by this call, another, or the fleet) gets no more of the budget.
    retrying = act == "retry" and not probe and retries < config.max_retries
    refused = retrying and current in degraded
    if retrying and not refused:
        retry_after = failure.retry_after
        if retry_after is None:
            delay: float | None = backoff(config, retries, rand)
        else:
            # A server that asks for longer than the cap is better left for another route.
            delay = max(retry_after, 0.0) if retry_after <= config.retry_after_max_s else None
        # A wait that would outlast the deadline is better spent on the next route.
        if delay is not None and (remaining_s is None or delay < remaining_s):
            return Retry(delay)
    if swaps >= config.max_swaps:
        return GiveUp(GiveUpReason.SWAP_BUDGET, qualifying=qualifying)
    first = kind_target or next_route(config, requested, current)
    if first is None:
        return GiveUp(GiveUpReason.NO_FALLBACK, qualifying=qualifying)
    route, skipped = _first_healthy(
        config, requested, first, _With(degraded, current), kind if kind_target else None
    )
    return Swap(route, skipped, degraded=refused)


class _With:
    """``degraded`` plus the route just given up on, without copying the store's view."""

    __slots__ = ("_base", "_extra")

    def __init__(self, base: Container[str], extra: str) -> None:
        self._base = base
        self._extra = extra

    def __contains__(self, route: object) -> bool:
        return route == self._extra or route in self._base
