"""Counters kept in process and read by observable counters when metrics are collected, and the
zero samples a config's routes start them with (:func:`zero_series`)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Final

from opentelemetry.metrics import CallbackOptions, Observation
from opentelemetry.util.types import AttributeValue

from .._engine.policy import GiveUpReason, next_route, walk
from .._failures import FailureKind, status_kind
from . import names as n
from .bounded import Attributes
from .decisions import (
    DECISIONS,
    BreakerChanged,
    Hedged,
    HedgeWon,
    Probed,
    Retried,
    SwapDeclined,
    Swapped,
)

if TYPE_CHECKING:
    from .._engine.config import FallbackConfig

__all__ = ["SEED_LIMIT", "Counts", "configured_routes", "zero_series"]

SEED_LIMIT: Final = 10_000
"""Zero series one counter is given for one config, at most (a huge map stays bounded)."""

# error.type values swerve itself gives a failure, with their kinds (see _failures.classify).
_OWN_ERROR_TYPES: Final = (
    ("timeout", FailureKind.TIMEOUT),
    ("incomplete", FailureKind.INCOMPLETE),
    ("malformed", FailureKind.TRANSPORT),
)
# Every move a breaker reports (breaker.py: admit and record).
_BREAKER_MOVES: Final = (
    ("closed", "open"),
    ("open", "half_open"),
    ("half_open", "closed"),
    ("half_open", "open"),
)
_PROBE_OUTCOMES: Final = ("success", "failure", "inconclusive")
_HEDGE_WINNERS: Final = ("hedge", "primary")
_TOKEN_TYPES: Final = (n.TOKEN_INPUT.value, n.TOKEN_OUTPUT.value)
# What tokens were spent on: the answer a call got, or an attempt that failed (failover's cost).
_SPENT: Final = ("success", "failure")


class Counts:
    """One counter's values by attributes.

    An increment is a dict update under a lock, not an SDK measurement (an order of magnitude
    cheaper), so counting stays off the call path like exporting does.
    """

    __slots__ = ("_bound", "_lock", "_values")

    def __init__(self, bound: Callable[[Attributes], Attributes] = dict) -> None:
        self._bound = bound
        self._lock = threading.Lock()
        self._values: dict[tuple[tuple[str, AttributeValue], ...], float] = {}

    def add(self, amount: float, attributes: Attributes) -> None:
        """Count ``amount`` under ``attributes``, bounded (route names, error types)."""
        self.add_bounded(amount, self._bound(attributes))

    def add_bounded(self, amount: float, attributes: Attributes) -> None:
        """:meth:`add` for attributes that are bounded already."""
        key = tuple(attributes.items())
        with self._lock:
            self._values[key] = self._values.get(key, 0) + amount

    def seed(self, series: Iterable[Attributes]) -> None:
        """A 0 for each of ``series`` not counted yet, so a backend's ``rate()`` sees its first
        increment. Bounded like :meth:`add`, so a zero is the series the increments go to (the
        key is the attributes in order: the caller gives them in the order they are counted)."""
        keys = [tuple(self._bound(attributes).items()) for attributes in series]
        with self._lock:
            for key in keys:
                self._values.setdefault(key, 0)

    def __len__(self) -> int:
        return len(self._values)

    def observe(self, _: CallbackOptions) -> Iterable[Observation]:
        with self._lock:
            items = list(self._values.items())
        return [Observation(value, dict(key)) for key, value in items]


def configured_routes(config: FallbackConfig) -> list[str]:
    """Every route ``config`` names (``fallbacks`` and ``fallbacks_by_failure``, keys and
    values), in the order it names them."""
    routes: dict[str, None] = {}
    for mapping in (config.fallbacks, *config.fallbacks_by_failure.values()):
        for key, value in mapping.items():
            routes[key] = None
            for route in [value] if isinstance(value, str) else value:
                routes[route] = None
    return list(routes)


def _error_types(config: FallbackConfig) -> list[tuple[str, FailureKind]]:
    """The ``error.type`` values a failure that swerve acts on can carry, known before it
    happens: each listed status (an HTTP failure's error.type is its status) and swerve's own
    words. Exception class names (a transport error) and provider words are only known then."""
    statuses = [] if callable(config.fallback_on) else sorted(config.fallback_on)
    return [(str(s), status_kind(s)) for s in statuses] + list(_OWN_ERROR_TYPES)


def _swap_kinds(config: FallbackConfig) -> list[str]:
    """The swap reasons along ``fallbacks``: each kind that does not surface (a status listed
    in ``fallback_on`` swaps even when its kind would surface), and ``degraded``."""
    listed = set() if callable(config.fallback_on) else {status_kind(s) for s in config.fallback_on}
    kinds = [
        kind.value
        for kind in FailureKind
        if kind is not FailureKind.ABORTED
        and (config.action(kind) != "surface" or (kind in listed and kind not in config.on_failure))
    ]
    return [*kinds, "degraded"]


def _swaps(config: FallbackConfig) -> dict[tuple[str, str, str], None]:
    """(from, to, reason) of every swap ``config`` allows, as :func:`policy.decide` moves: from
    any route a call may be on, to any route of the walk from the map's next one."""
    default = _swap_kinds(config)
    maps: list[tuple[FailureKind | None, list[str]]] = [(None, default)]
    maps += [(kind, [kind.value, "degraded"]) for kind in config.fallbacks_by_failure]
    out: dict[tuple[str, str, str], None] = {}
    # A call may ask for any route a map has an entry for.
    requests = dict.fromkeys(
        r for m in (config.fallbacks, *config.fallbacks_by_failure.values()) for r in m
    )
    for requested in requests:
        on, todo = {requested}, [requested]
        while todo:
            source = todo.pop()
            for kind, reasons in maps:
                first = next_route(config, requested, source, kind)
                if first is None:
                    continue
                for target in walk(config, requested, first, kind):
                    if target == source:
                        continue
                    for reason in reasons:
                        out[(source, target, reason)] = None
                    if target not in on:
                        on.add(target)
                        todo.append(target)
    return out


def zero_series(config: FallbackConfig) -> dict[str, list[dict[str, AttributeValue]]]:
    """Metric name -> the attribute sets (keys in the order they are counted) that ``config``'s
    routes can count and that are known before anything happens, for a 0 in each at the start.

    Not here, because their values are only known when a failure happens: failed and aborted
    attempts and retries whose ``error.type`` is an exception's name or a provider's word, and
    the store counters (per store, not per route).
    """
    routes = configured_routes(config)
    errors = _error_types(config)
    retried = {e for e, kind in errors if config.action(kind) == "retry"}
    attempts: list[dict[str, AttributeValue]] = []
    for route in routes:
        attempts.append({n.ROUTE: route, n.ATTEMPT_OUTCOME: "success"})
        # An open breaker's refusal: a failure swerve classifies itself.
        if config.breaker.enabled:
            attempts.append(
                {n.ROUTE: route, n.ATTEMPT_OUTCOME: "rejected", n.ERROR_TYPE: "breaker_open"}
            )
        for error, _ in errors:
            attempts.append({n.ROUTE: route, n.ATTEMPT_OUTCOME: "failure", n.ERROR_TYPE: error})
    given_up = [reason.value for reason in GiveUpReason] + ["mid_stream"]
    by_kind: dict[type, list[Mapping[str, AttributeValue]]] = {
        Retried: (
            [{n.ROUTE: r, n.ERROR_TYPE: e} for r in routes for e in sorted(retried)]
            if config.max_retries
            else []
        ),
        Swapped: [
            {n.ROUTE_FROM: source, n.ROUTE_TO: target, n.REASON: reason}
            for source, target, reason in _swaps(config)
        ],
        SwapDeclined: [{n.ROUTE: r, n.REASON: reason} for r in routes for reason in given_up],
        BreakerChanged: (
            [
                {n.ROUTE: r, n.BREAKER_FROM: before, n.BREAKER_TO: after}
                for r in routes
                for before, after in _BREAKER_MOVES
            ]
            if config.breaker.enabled
            else []
        ),
        Probed: [{n.ROUTE: r, n.PROBE_OUTCOME: o} for r in routes for o in _PROBE_OUTCOMES],
        # A hedge goes where a swap would: every pair a swap may make.
        Hedged: [
            {n.ROUTE_FROM: source, n.ROUTE_TO: target}
            for source, target in dict.fromkeys((s, t) for s, t, _ in _swaps(config))
        ],
        HedgeWon: [{n.ROUTE: r, n.HEDGE_WINNER: w} for r in routes for w in _HEDGE_WINNERS],
    }
    out: dict[str, list[dict[str, AttributeValue]]] = {
        n.METRIC_ATTEMPTS: attempts,
        n.METRIC_FAILOVER_TOKENS: [
            {n.ROUTE: r, n.GEN_AI_TOKEN_TYPE: t} for r in routes for t in _TOKEN_TYPES
        ],
        n.METRIC_TOKENS: [
            {n.ROUTE: r, n.GEN_AI_TOKEN_TYPE: t, n.ATTEMPT_OUTCOME: o}
            for r in routes
            for t in _TOKEN_TYPES
            for o in _SPENT
        ],
        n.METRIC_COST: [{n.ROUTE: r, n.ATTEMPT_OUTCOME: o} for r in routes for o in _SPENT],
    }
    for kind, emits in DECISIONS.items():
        if emits.metric is None:
            continue
        # Counters by route alone (cooldowns, skips, ...) need no more than the route.
        alone = [{n.ROUTE: r} for r in routes] if emits.counted_by == (n.ROUTE,) else []
        series = by_kind.get(kind, alone)
        # In the order emit() counts them: the decision table's counted_by.
        out[emits.metric] = [{key: s[key] for key in emits.counted_by} for s in series]
    return {name: series[:SEED_LIMIT] for name, series in out.items()}
