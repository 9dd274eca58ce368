"""The decisions swerve reports: one small frozen record per kind, and the one table that says
what each becomes.

A decision (a retry, a swap, a cooldown, ...) is handed to :meth:`Telemetry.emit
<swerve._telemetry.telemetry.Telemetry.emit>` as a record; :data:`DECISIONS` maps its kind to
exactly one span event, which span carries it, and at most one counter (with the event
attributes it is counted by). Nothing else decides what a decision looks like in telemetry:
docs/telemetry.md's Events table is checked against this one (tests/test_telemetry_doc.py).

A call that goes well makes no decision, so it builds no record: only its spans and durations.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final, TypeAlias

from opentelemetry.util.types import AttributeValue

from .._failures import Failure
from . import names as n

__all__ = [
    "DECISIONS",
    "BreakerChanged",
    "CacheFixed",
    "CooledDown",
    "Decision",
    "Downgraded",
    "Emits",
    "HedgeWon",
    "Hedged",
    "LearnedLimitHit",
    "On",
    "OperatorNoticed",
    "PartialDiscarded",
    "Probed",
    "Retried",
    "RouteSkipped",
    "StoreChanged",
    "StreamRestarted",
    "SwapDeclined",
    "Swapped",
]

Attrs: TypeAlias = dict[str, AttributeValue]


@dataclass(frozen=True, slots=True)
class Retried:
    """A failed attempt will be retried on the same route after ``delay`` seconds."""

    route: str
    attempt: int
    delay: float
    failure: Failure

    def attributes(self) -> Attrs:
        failure = self.failure
        attrs: Attrs = {
            n.ROUTE: self.route,
            n.ATTEMPT_NUMBER: self.attempt,
            n.RETRY_DELAY: self.delay,
            n.ERROR_TYPE: failure.error_type,
            n.FAILURE_KIND: failure.kind.value,
        }
        if failure.status is not None:
            attrs[n.HTTP_RESPONSE_STATUS_CODE] = failure.status
        return attrs


@dataclass(frozen=True, slots=True)
class Swapped:
    """The call moves from ``source`` to ``target``; ``index``: swaps made so far, this one
    included. Also logged (see :meth:`Telemetry.emit`)."""

    source: str
    target: str
    reason: str
    index: int

    def attributes(self) -> Attrs:
        return {
            n.ROUTE_FROM: self.source,
            n.ROUTE_TO: self.target,
            n.REASON: self.reason,
            n.SWAP_INDEX: self.index,
        }


@dataclass(frozen=True, slots=True)
class SwapDeclined:
    """The error surfaces instead of moving, for ``reason`` (a GiveUpReason or ``mid_stream``)."""

    route: str
    reason: str

    def attributes(self) -> Attrs:
        return {n.ROUTE: self.route, n.REASON: self.reason}


@dataclass(frozen=True, slots=True)
class CooledDown:
    """``route`` is degraded for ``seconds`` from now, until epoch ``until``."""

    route: str
    seconds: float
    until: float

    def attributes(self) -> Attrs:
        return {n.ROUTE: self.route, n.COOLDOWN_SECONDS: self.seconds, n.COOLDOWN_UNTIL: self.until}


@dataclass(frozen=True, slots=True)
class Probed:
    """A recovery probe's verdict: ``success`` (the route is healthy again), ``failure``
    (cooled down again, for longer) or ``inconclusive`` (given back unjudged)."""

    route: str
    outcome: str

    def attributes(self) -> Attrs:
        return {n.ROUTE: self.route, n.PROBE_OUTCOME: self.outcome}


@dataclass(frozen=True, slots=True)
class OperatorNoticed:
    """An operator ``cleared`` or ``drained`` the route (``swerve routes``)."""

    route: str
    action: str

    def attributes(self) -> Attrs:
        return {n.ROUTE: self.route, n.OPERATOR_ACTION: self.action}


@dataclass(frozen=True, slots=True)
class RouteSkipped:
    """A call walked past ``route``, degraded by a cooldown or breaker ``learned`` by its own
    Failover (``this_failover``) or by another sharing its store (``elsewhere``)."""

    route: str
    learned: str

    def attributes(self) -> Attrs:
        return {n.ROUTE: self.route, n.REASON: "degraded", n.COOLDOWN_LEARNED: self.learned}


@dataclass(frozen=True, slots=True)
class BreakerChanged:
    """``route``'s circuit breaker went from state ``before`` to ``after``."""

    route: str
    before: str
    after: str

    def attributes(self) -> Attrs:
        return {n.ROUTE: self.route, n.BREAKER_FROM: self.before, n.BREAKER_TO: self.after}


@dataclass(frozen=True, slots=True)
class PartialDiscarded:
    """A failed attempt's output was dropped: ``counts`` of chunks by part kind."""

    route: str
    counts: Mapping[str, int]

    def attributes(self) -> Attrs:
        attrs: Attrs = {n.ROUTE: self.route}
        for part, count in self.counts.items():
            attrs[n.DISCARDED_BY_PART.get(part, n.DISCARDED_OTHER)] = count
        return attrs


@dataclass(frozen=True, slots=True)
class StreamRestarted:
    """``mid_stream="restart"``: the consumer was told to drop what it had of ``source``."""

    source: str
    target: str

    def attributes(self) -> Attrs:
        return {n.ROUTE_FROM: self.source, n.ROUTE_TO: self.target}


@dataclass(frozen=True, slots=True)
class CacheFixed:
    """Empty-text ``cache_control`` markers moved (or dropped) in a body sent to ``route``."""

    route: str
    blocks: int
    moved_to: Sequence[str]

    def attributes(self) -> Attrs:
        return {
            n.ROUTE: self.route,
            n.CACHE_FIX_BLOCKS: self.blocks,
            n.CACHE_FIX_MOVED_TO: self.moved_to,
        }


@dataclass(frozen=True, slots=True)
class Downgraded:
    """Fields another provider's target does not accept were removed from a swapped body."""

    route: str
    removed: Sequence[str]

    def attributes(self) -> Attrs:
        return {n.ROUTE: self.route, n.DOWNGRADE_REMOVED: self.removed}


@dataclass(frozen=True, slots=True)
class StoreChanged:
    """A shared health store started (``up``) or stopped sharing, for ``reason``. Also logged."""

    description: str
    up: bool
    reason: str = ""

    def attributes(self) -> Attrs:
        attrs: Attrs = {n.STORE: self.description, n.STORE_UP: self.up}
        if self.reason:
            attrs[n.STORE_REASON] = self.reason
        return attrs


@dataclass(frozen=True, slots=True)
class Hedged:
    """A stream's first chunk was late on ``source``: the same request started on ``target``
    ``after`` seconds into the attempt, both racing for the first content."""

    source: str
    target: str
    after: float

    def attributes(self) -> Attrs:
        return {n.ROUTE_FROM: self.source, n.ROUTE_TO: self.target, n.HEDGE_AFTER: self.after}


@dataclass(frozen=True, slots=True)
class HedgeWon:
    """A hedge's race ended: ``route`` delivered content first (``hedge``: the route hedged
    to; else the primary) and ``loser`` was closed."""

    route: str
    loser: str
    hedge: bool

    def attributes(self) -> Attrs:
        return {
            n.ROUTE: self.route,
            n.ROUTE_FROM: self.loser,
            n.HEDGE_WINNER: "hedge" if self.hedge else "primary",
        }


@dataclass(frozen=True, slots=True)
class LearnedLimitHit:
    """A stream attempt on ``route`` waited ``limit`` seconds for its first chunk, the limit
    learned from the route (its ``p99`` times the multiplier, within the floor and ceiling;
    None: not learned yet, the ceiling), and timed out."""

    route: str
    limit: float
    p99: float | None

    def attributes(self) -> Attrs:
        attrs: Attrs = {n.ROUTE: self.route, n.LEARNED_LIMIT: self.limit}
        if self.p99 is not None:
            attrs[n.LEARNED_P99] = self.p99
        return attrs


Decision: TypeAlias = (
    Retried
    | Swapped
    | SwapDeclined
    | CooledDown
    | Probed
    | OperatorNoticed
    | RouteSkipped
    | BreakerChanged
    | PartialDiscarded
    | StreamRestarted
    | CacheFixed
    | Downgraded
    | StoreChanged
    | Hedged
    | HedgeWon
    | LearnedLimitHit
)
"""Every decision a Telemetry reports: the kinds :data:`DECISIONS` has a row for."""


class On(enum.Enum):
    """Which span a decision's event goes on, when :meth:`Telemetry.emit` is given none."""

    CALL = "call"
    """The call span, which the engine passes (given none, the decision is only counted)."""
    ATTEMPT = "attempt"
    """The current span: the attempt whose request body changed, where the transport or an
    adapter prepares it."""
    STORE = "store"
    """A ``swerve store`` span of its own (it happens outside any call), carrying the event's
    attributes too."""


@dataclass(frozen=True, slots=True)
class Emits:
    """What one kind of decision becomes: one event and at most one counter."""

    event: str
    on: On
    metric: str | None = None
    """The counter each record adds 1 to; None: the event alone."""
    counted_by: tuple[str, ...] = ()
    """The event attributes the counter is counted by (a metric's attributes are bounded)."""
    unit: str = ""
    description: str = ""


# The one table. Its order is the counters' creation order (as before the table existed).
DECISIONS: Final[Mapping[type[Decision], Emits]] = {
    Retried: Emits(
        n.EVENT_RETRY, On.CALL, n.METRIC_RETRIES, (n.ROUTE, n.ERROR_TYPE),
        "{retry}", "Same-route retries",
    ),
    Swapped: Emits(
        n.EVENT_SWAP, On.CALL, n.METRIC_SWAPS, (n.ROUTE_FROM, n.ROUTE_TO, n.REASON),
        "{swap}", "Swaps from one route to another",
    ),
    SwapDeclined: Emits(
        n.EVENT_SWAP_DECLINED, On.CALL, n.METRIC_SWAPS_DECLINED, (n.ROUTE, n.REASON),
        "{decision}", "Failures surfaced instead of swapped",
    ),
    CooledDown: Emits(
        n.EVENT_COOLDOWN, On.CALL, n.METRIC_COOLDOWNS, (n.ROUTE,),
        "{cooldown}", "Cooldowns started or extended",
    ),
    RouteSkipped: Emits(
        n.EVENT_ROUTE_SKIPPED, On.CALL, n.METRIC_ROUTE_SKIPS, (n.ROUTE,),
        "{skip}", "Degraded routes a call walked past",
    ),
    BreakerChanged: Emits(
        n.EVENT_BREAKER, On.CALL, n.METRIC_BREAKER_TRANSITIONS,
        (n.ROUTE, n.BREAKER_FROM, n.BREAKER_TO),
        "{transition}", "Circuit breaker state changes",
    ),
    Probed: Emits(
        n.EVENT_PROBE, On.CALL, n.METRIC_PROBES, (n.ROUTE, n.PROBE_OUTCOME),
        "{probe}", "Recovery probes of routes whose cooldown ended, by outcome",
    ),
    OperatorNoticed: Emits(n.EVENT_OPERATOR, On.CALL),
    PartialDiscarded: Emits(
        n.EVENT_PARTIAL_DISCARDED, On.CALL, n.METRIC_PARTIAL_DISCARDS, (n.ROUTE,),
        "{discard}", "Failed attempts whose partial output was dropped",
    ),
    StreamRestarted: Emits(n.EVENT_STREAM_RESET, On.CALL),
    CacheFixed: Emits(
        n.EVENT_CACHE_FIX, On.ATTEMPT, n.METRIC_CACHE_FIXES, (n.ROUTE,),
        "{fix}", "Request bodies whose empty-text cache markers were moved",
    ),
    Downgraded: Emits(
        n.EVENT_DOWNGRADE, On.ATTEMPT, n.METRIC_DOWNGRADES, (n.ROUTE,),
        "{downgrade}", "Request bodies adapted for another provider on a swap",
    ),
    StoreChanged: Emits(n.EVENT_STORE, On.STORE),
    Hedged: Emits(
        n.EVENT_HEDGE, On.CALL, n.METRIC_HEDGES, (n.ROUTE_FROM, n.ROUTE_TO),
        "{hedge}", "Stream requests started on a second route while the first was slow",
    ),
    HedgeWon: Emits(
        n.EVENT_HEDGE_WON, On.CALL, n.METRIC_HEDGE_WINS, (n.ROUTE, n.HEDGE_WINNER),
        "{hedge}", "Hedges settled, by the route that delivered first",
    ),
    LearnedLimitHit: Emits(
        n.EVENT_LEARNED_LIMIT, On.CALL, n.METRIC_LEARNED_LIMITS, (n.ROUTE,),
        "{timeout}", "Stream attempts timed out at a first-token limit learned from the route",
    ),
}  # fmt: skip
