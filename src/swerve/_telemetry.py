"""Every span, event, metric and attribute name swerve emits, and the one object that emits them.

docs/telemetry.md documents each name here; a test holds the two together. Prompt and
completion text are never recorded, nor are credentials: failure messages pass through
redaction before they reach a span.
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Final

from opentelemetry import metrics, trace
from opentelemetry.context import Context
from opentelemetry.metrics import CallbackOptions, Observation
from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as _gen_ai
from opentelemetry.semconv.attributes import error_attributes as _error
from opentelemetry.semconv.attributes import http_attributes as _http
from opentelemetry.trace import Span, SpanKind, Status, StatusCode
from opentelemetry.util.types import AttributeValue

from ._failures import Failure
from ._version import __version__

if TYPE_CHECKING:
    from ._health import BreakerTransition, HealthStore

__all__ = ["INSTRUMENTATION_NAME", "Telemetry"]

INSTRUMENTATION_NAME: Final = "swerve"
_log = logging.getLogger("swerve")

# --- attributes: semantic conventions where they have the name -------------------------------
GEN_AI_OPERATION_NAME: Final = _gen_ai.GEN_AI_OPERATION_NAME
GEN_AI_PROVIDER_NAME: Final = _gen_ai.GEN_AI_PROVIDER_NAME
GEN_AI_REQUEST_MODEL: Final = _gen_ai.GEN_AI_REQUEST_MODEL
GEN_AI_RESPONSE_MODEL: Final = _gen_ai.GEN_AI_RESPONSE_MODEL
ERROR_TYPE: Final = _error.ERROR_TYPE
HTTP_RESPONSE_STATUS_CODE: Final = _http.HTTP_RESPONSE_STATUS_CODE

# --- attributes: swerve's own ----------------------------------------------------------------
ROUTE: Final = "swerve.route"
ROUTE_REQUESTED: Final = "swerve.route.requested"
ROUTE_SERVED: Final = "swerve.route.served"
ROUTE_FROM: Final = "swerve.route.from"
ROUTE_TO: Final = "swerve.route.to"
ATTEMPT_NUMBER: Final = "swerve.attempt.number"
ATTEMPT_RETRY: Final = "swerve.attempt.retry"
ATTEMPT_OUTCOME: Final = "swerve.attempt.outcome"
SWAP_INDEX: Final = "swerve.swap.index"
REASON: Final = "swerve.reason"
FAILURE_KIND: Final = "swerve.failure.kind"
FAILURE_IN_STREAM: Final = "swerve.failure.in_stream"
FAILURE_MESSAGE: Final = "swerve.failure.message"
RETRY_DELAY: Final = "swerve.retry.delay_s"
COOLDOWN_SECONDS: Final = "swerve.cooldown.seconds"
COOLDOWN_UNTIL: Final = "swerve.cooldown.until"
PROBE_OUTCOME: Final = "swerve.probe.outcome"
OPERATOR_ACTION: Final = "swerve.operator.action"
STORE: Final = "swerve.store.name"
STORE_UP: Final = "swerve.store.up"
STORE_REASON: Final = "swerve.store.reason"
ATTEMPT_PROBE: Final = "swerve.attempt.probe"
BREAKER_FROM: Final = "swerve.breaker.from"
BREAKER_TO: Final = "swerve.breaker.to"
CALL_ATTEMPTS: Final = "swerve.attempts"
CALL_RETRIES: Final = "swerve.retries"
CALL_SWAPS: Final = "swerve.swaps"
STREAM: Final = "swerve.stream"
DISCARDED_TEXT: Final = "swerve.discarded.text"
DISCARDED_REASONING: Final = "swerve.discarded.reasoning"
DISCARDED_TOOL_CALL: Final = "swerve.discarded.tool_call"
DISCARDED_OTHER: Final = "swerve.discarded.other"
CACHE_FIX_BLOCKS: Final = "swerve.cache_fix.blocks"
CACHE_FIX_MOVED_TO: Final = "swerve.cache_fix.moved_to"
DOWNGRADE_REMOVED: Final = "swerve.downgrade.removed"

DISCARDED_BY_PART: Final = {
    "text": DISCARDED_TEXT,
    "reasoning": DISCARDED_REASONING,
    "tool_call": DISCARDED_TOOL_CALL,
    "other": DISCARDED_OTHER,
}

# --- span names ------------------------------------------------------------------------------
SPAN_CALL: Final = "swerve {operation} {route}"  # INTERNAL, one per logical call
SPAN_ATTEMPT: Final = "{operation} {model}"  # CLIENT, one per attempt (GenAI convention)
SPAN_STORE: Final = "swerve store"  # INTERNAL, when a shared store starts or stops sharing

# --- events (on the call span) ---------------------------------------------------------------
EVENT_RETRY: Final = "swerve.retry"
EVENT_SWAP: Final = "swerve.swap"
EVENT_SWAP_DECLINED: Final = "swerve.swap_declined"
EVENT_COOLDOWN: Final = "swerve.cooldown"
EVENT_ROUTE_SKIPPED: Final = "swerve.route_skipped"
EVENT_BREAKER: Final = "swerve.breaker"
EVENT_PROBE: Final = "swerve.probe"
EVENT_OPERATOR: Final = "swerve.operator"
EVENT_STORE: Final = "swerve.store"
EVENT_PARTIAL_DISCARDED: Final = "swerve.partial_discarded"
EVENT_STREAM_RESET: Final = "swerve.stream_reset"
EVENT_CACHE_FIX: Final = "swerve.cache_fix"
EVENT_DOWNGRADE: Final = "swerve.downgrade"

# --- metrics ---------------------------------------------------------------------------------
METRIC_ATTEMPTS: Final = "swerve.attempts"
METRIC_RETRIES: Final = "swerve.retries"
METRIC_SWAPS: Final = "swerve.swaps"
METRIC_SWAPS_DECLINED: Final = "swerve.swaps_declined"
METRIC_COOLDOWNS: Final = "swerve.cooldowns"
METRIC_ROUTE_SKIPS: Final = "swerve.route_skips"
METRIC_BREAKER_TRANSITIONS: Final = "swerve.breaker.transitions"
METRIC_PROBES: Final = "swerve.probes"
METRIC_PARTIAL_DISCARDS: Final = "swerve.partial_discards"
METRIC_CACHE_FIXES: Final = "swerve.cache_fixes"
METRIC_DOWNGRADES: Final = "swerve.downgrades"
METRIC_ROUTE_DEGRADED: Final = "swerve.route.degraded"
METRIC_BREAKER_STATE: Final = "swerve.breaker.state"
METRIC_STORE_UP: Final = "swerve.store.up"
METRIC_CALL_DURATION: Final = "swerve.call.duration"
METRIC_ATTEMPT_DURATION: Final = "swerve.attempt.duration"
METRIC_ADDED_LATENCY: Final = "swerve.call.added_latency"
METRIC_TIME_TO_FIRST_CHUNK: Final = "swerve.stream.time_to_first_chunk"

# Second-scale buckets: LLM calls take seconds, failover waits tens of seconds.
DURATION_BUCKETS: Final = (
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0,
)  # fmt: skip
BREAKER_STATE_VALUES: Final = {"closed": 0, "half_open": 1, "open": 2}

Attributes = Mapping[str, AttributeValue]

# --- cardinality ---------------------------------------------------------------------------
# Every metric series is kept in memory until the process ends, and every one costs at each
# collection, so metric attributes whose values come from outside (route names, error types a
# provider sent) are bounded: the first values seen keep their names, later new ones are
# reported together under OVERFLOW. Spans and events, which are not aggregated, keep the real
# value.
ROUTE_LIMIT: Final = 1000
"""Distinct route names a Telemetry reports in metric attributes."""
ERROR_TYPE_LIMIT: Final = 100
"""Distinct ``error.type`` values a Telemetry reports in metric attributes."""
OVERFLOW: Final = "_OTHER"
"""The value reported for a route or error type past its limit (OTel's ``error.type`` fallback)."""
_ROUTE_KEYS: Final = frozenset({ROUTE, ROUTE_REQUESTED, ROUTE_SERVED, ROUTE_FROM, ROUTE_TO})


class _Bounded:
    """The first ``limit`` distinct values pass as they are; every later new one is OVERFLOW."""

    __slots__ = ("_limit", "_lock", "_seen")

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._seen: set[str] = set()
        self._lock = threading.Lock()

    def __call__(self, value: str) -> str:
        if value in self._seen:  # the hot path: a value already known
            return value
        with self._lock:
            if len(self._seen) < self._limit:
                self._seen.add(value)
                return value
        return OVERFLOW


def _loggable(value: object) -> str:
    """``value`` for one log line: control characters (newlines, ANSI escapes) escaped, so a
    route name or a reason cannot forge or recolour lines of an operator's log."""
    text = str(value)
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


class Telemetry:
    """Emits swerve's spans, events, metrics and logs through the given (or global) providers.

    Instruments are created once here, never on the call path. ``record_messages`` is the
    opt-in for failure messages on spans (redacted either way; off by default).
    """

    def __init__(
        self,
        tracer_provider: trace.TracerProvider | None = None,
        meter_provider: metrics.MeterProvider | None = None,
        *,
        record_messages: bool = False,
    ) -> None:

        self.tracer = trace.get_tracer(INSTRUMENTATION_NAME, __version__, tracer_provider)
        meter = metrics.get_meter(INSTRUMENTATION_NAME, __version__, meter_provider)
        self.record_messages = record_messages
        self._health: weakref.WeakSet[HealthStore] = weakref.WeakSet()
        self._clock = time.time
        self._routes = _Bounded(ROUTE_LIMIT)
        self._errors = _Bounded(ERROR_TYPE_LIMIT)

        def counter(name: str, unit: str, description: str) -> _Counts:
            counts = _Counts(self.bounded)
            meter.create_observable_counter(name, [counts.observe], unit, description)
            return counts

        def histogram(name: str, description: str) -> metrics.Histogram:
            return meter.create_histogram(
                name, "s", description, explicit_bucket_boundaries_advisory=DURATION_BUCKETS
            )

        self.attempts = counter(METRIC_ATTEMPTS, "{attempt}", "Attempts, by route and outcome")
        self.retries = counter(METRIC_RETRIES, "{retry}", "Same-route retries")
        self.swaps = counter(METRIC_SWAPS, "{swap}", "Swaps from one route to another")
        self.swaps_declined = counter(
            METRIC_SWAPS_DECLINED, "{decision}", "Failures surfaced instead of swapped"
        )
        self.cooldowns = counter(METRIC_COOLDOWNS, "{cooldown}", "Cooldowns started or extended")
        self.route_skips = counter(
            METRIC_ROUTE_SKIPS, "{skip}", "Degraded routes a call walked past"
        )
        self.breaker_transitions = counter(
            METRIC_BREAKER_TRANSITIONS, "{transition}", "Circuit breaker state changes"
        )
        self.probes = counter(
            METRIC_PROBES, "{probe}", "Recovery probes of routes whose cooldown ended, by outcome"
        )
        self.partial_discards = counter(
            METRIC_PARTIAL_DISCARDS, "{discard}", "Failed attempts whose partial output was dropped"
        )
        self.cache_fixes = counter(
            METRIC_CACHE_FIXES, "{fix}", "Request bodies whose empty-text cache markers were moved"
        )
        self.downgrades = counter(
            METRIC_DOWNGRADES,
            "{downgrade}",
            "Request bodies adapted for another provider on a swap",
        )
        self.call_duration = histogram(
            METRIC_CALL_DURATION, "Logical call duration, waits included"
        )
        self.attempt_duration = histogram(METRIC_ATTEMPT_DURATION, "Duration of one attempt")
        self.added_latency = histogram(
            METRIC_ADDED_LATENCY, "Call duration minus the serving attempt's: what failover cost"
        )
        self.time_to_first_chunk = histogram(
            METRIC_TIME_TO_FIRST_CHUNK, "From attempt start to its first content chunk"
        )
        meter.create_observable_gauge(
            METRIC_ROUTE_DEGRADED, [self._observe_degraded], "1", "1 while a route is cooling down"
        )
        meter.create_observable_gauge(
            METRIC_BREAKER_STATE,
            [self._observe_breaker],
            "1",
            "Breaker state per route: 0 closed, 1 half-open, 2 open",
        )

        meter.create_observable_gauge(
            METRIC_STORE_UP,
            [self._observe_store],
            "1",
            "1 while a shared health store (Redis) shares health, 0 while each process is alone",
        )

    # -- gauges ---------------------------------------------------------------------------------
    def watch(self, health: HealthStore) -> None:
        """Report ``health``'s routes in the degraded and breaker-state gauges."""
        self._health.add(health)

    def _snapshots(self) -> dict[str, tuple[int, int]]:
        """Route -> (degraded, breaker state value), bounded like every route attribute: the
        routes past the limit are one OVERFLOW route, degraded if any of them is, its breaker
        in the worst state any of them is in."""
        now = self._clock()
        out: dict[str, tuple[int, int]] = {}
        for store in list(self._health):
            for health in store.snapshot(now):
                route = self._routes(health.route)
                degraded, state = int(health.degraded), BREAKER_STATE_VALUES[health.breaker.value]
                seen = out.get(route)
                if seen is not None:
                    degraded, state = max(degraded, seen[0]), max(state, seen[1])
                out[route] = (degraded, state)
        return out

    def _observe_degraded(self, _: CallbackOptions) -> Iterable[Observation]:
        # Degraded means what calls act on: walked past because it is cooling down, awaiting a
        # successful probe, or has its breaker open. It drops to 0 only when a probe succeeds.
        return [
            Observation(degraded, {ROUTE: route})
            for route, (degraded, _) in self._snapshots().items()
        ]

    def _observe_store(self, _: CallbackOptions) -> Iterable[Observation]:
        return [
            Observation(int(sharing), {STORE: str(getattr(store, "description", "store"))})
            for store in list(self._health)
            if isinstance(sharing := getattr(store, "sharing", None), bool)
        ]

    def store(self, description: str, up: bool, reason: str) -> None:
        """A shared health store started or stopped sharing (a span of its own with one event:
        it happens outside any call)."""
        attrs: dict[str, AttributeValue] = {STORE: description, STORE_UP: up}
        if reason:
            attrs[STORE_REASON] = reason
        span = self.tracer.start_span(SPAN_STORE, kind=SpanKind.INTERNAL, attributes=attrs)
        span.add_event(EVENT_STORE, attrs)
        span.end()
        if up:
            _log.info("swerve: sharing route health through %s", _loggable(description))
        else:
            _log.warning(
                "swerve: route health is not shared (%s unreachable: %s); each process "
                "decides alone until it returns",
                _loggable(description),
                _loggable(reason or "not connected"),
            )

    def _observe_breaker(self, _: CallbackOptions) -> Iterable[Observation]:
        return [
            Observation(state, {ROUTE: route}) for route, (_, state) in self._snapshots().items()
        ]

    # -- metric attributes ---------------------------------------------------------------------
    def bounded(self, attributes: Attributes) -> dict[str, AttributeValue]:
        """``attributes`` for a metric: route names and error types past their limits become
        OVERFLOW (see ROUTE_LIMIT, ERROR_TYPE_LIMIT)."""
        out = dict(attributes)
        for key, value in out.items():
            if key in _ROUTE_KEYS:
                out[key] = self._routes(str(value))
            elif key == ERROR_TYPE:
                out[key] = self._errors(str(value))
        return out

    def attempt_ended(
        self, route: str, outcome: str, error_type: str | None, duration: float
    ) -> None:
        """One attempt ended: the attempts counter and the attempt duration histogram."""
        attrs: dict[str, AttributeValue] = {ROUTE: route, ATTEMPT_OUTCOME: outcome}
        if error_type is not None:
            attrs[ERROR_TYPE] = error_type
        attrs = self.bounded(attrs)
        self.attempts.add_bounded(1, attrs)
        self.attempt_duration.record(duration, attrs)

    def call_ended(
        self,
        requested: str,
        duration: float,
        *,
        served: str | None = None,
        error_type: str | None = None,
        added: float | None = None,
    ) -> None:
        """A call ended, served (``served``) or failed (``error_type``): its duration and, when
        failover happened, the latency it added."""
        attrs: dict[str, AttributeValue] = {ROUTE_REQUESTED: requested}
        if served is not None:
            attrs[ROUTE_SERVED] = served
        if error_type is not None:
            attrs[ERROR_TYPE] = error_type
        attrs = self.bounded(attrs)
        self.call_duration.record(duration, attrs)
        if added is not None:
            self.added_latency.record(added, attrs)

    def first_chunk(self, route: str, seconds: float) -> None:
        """A stream attempt's first content chunk came ``seconds`` after the attempt began."""
        self.time_to_first_chunk.record(seconds, {ROUTE: self._routes(route)})

    # -- spans ----------------------------------------------------------------------------------
    def start_call(self, operation: str, requested: str, provider: str, model: str) -> Span:
        return self.tracer.start_span(
            SPAN_CALL.format(operation=operation, route=requested),
            kind=SpanKind.INTERNAL,
            attributes={
                GEN_AI_OPERATION_NAME: operation,
                GEN_AI_PROVIDER_NAME: provider,
                GEN_AI_REQUEST_MODEL: model,
                ROUTE_REQUESTED: requested,
            },
        )

    def start_attempt(
        self,
        operation: str,
        route: str,
        provider: str,
        model: str,
        number: int,
        retry: int,
        swap: int,
        context: Context | None,
    ) -> Span:
        attributes: dict[str, AttributeValue] = {
            GEN_AI_OPERATION_NAME: operation,
            GEN_AI_PROVIDER_NAME: provider,
            GEN_AI_REQUEST_MODEL: model,
            ROUTE: route,
            ATTEMPT_NUMBER: number,
        }
        if retry:  # absent means 0: each attribute costs on the hot path
            attributes[ATTEMPT_RETRY] = retry
        if swap:
            attributes[SWAP_INDEX] = swap
        return self.tracer.start_span(
            SPAN_ATTEMPT.format(operation=operation, model=model),
            context=context,
            kind=SpanKind.CLIENT,
            attributes=attributes,
        )

    def fail_span(self, span: Span, failure: Failure, outcome: str) -> None:
        attrs: dict[str, AttributeValue] = {
            ATTEMPT_OUTCOME: outcome,
            ERROR_TYPE: failure.error_type,
            FAILURE_KIND: failure.kind.value,
            FAILURE_IN_STREAM: failure.in_stream,
        }
        if failure.status is not None:
            attrs[HTTP_RESPONSE_STATUS_CODE] = failure.status
        if self.record_messages and failure.message:
            attrs[FAILURE_MESSAGE] = failure.message
        span.set_attributes(attrs)
        span.set_status(Status(StatusCode.ERROR, failure.kind.value))

    # -- decisions ------------------------------------------------------------------------------
    def retry(self, span: Span, route: str, attempt: int, delay: float, failure: Failure) -> None:
        attrs: dict[str, AttributeValue] = {
            ROUTE: route,
            ATTEMPT_NUMBER: attempt,
            RETRY_DELAY: delay,
            ERROR_TYPE: failure.error_type,
            FAILURE_KIND: failure.kind.value,
        }
        if failure.status is not None:
            attrs[HTTP_RESPONSE_STATUS_CODE] = failure.status
        span.add_event(EVENT_RETRY, attrs)
        self.retries.add(1, {ROUTE: route, ERROR_TYPE: failure.error_type})

    def swap(self, span: Span, source: str, target: str, reason: str, index: int) -> None:
        span.add_event(
            EVENT_SWAP, {ROUTE_FROM: source, ROUTE_TO: target, REASON: reason, SWAP_INDEX: index}
        )
        self.swaps.add(1, {ROUTE_FROM: source, ROUTE_TO: target, REASON: reason})
        # The log line the seed's operators grep for. It carries the call span's ids under the
        # names opentelemetry-instrumentation-logging uses, so log and trace join up.
        context = span.get_span_context()
        _log.warning(
            "[model-fallback] switched model from %s to %s (%s)",
            _loggable(source),
            _loggable(target),
            _loggable(reason),
            extra={
                "swerve_route_from": source,
                "swerve_route_to": target,
                "swerve_reason": reason,
                "otelTraceID": trace.format_trace_id(context.trace_id),
                "otelSpanID": trace.format_span_id(context.span_id),
            },
        )

    def swap_declined(self, span: Span, route: str, reason: str) -> None:
        span.add_event(EVENT_SWAP_DECLINED, {ROUTE: route, REASON: reason})
        self.swaps_declined.add(1, {ROUTE: route, REASON: reason})

    def cooldown(self, span: Span | None, route: str, seconds: float, until: float) -> None:
        if span is not None:
            span.add_event(
                EVENT_COOLDOWN, {ROUTE: route, COOLDOWN_SECONDS: seconds, COOLDOWN_UNTIL: until}
            )
        self.cooldowns.add(1, {ROUTE: route})

    def probe(self, span: Span, route: str, outcome: str) -> None:
        """A recovery probe's verdict: ``success`` (the route is healthy again), ``failure``
        (cooled down again, for longer) or ``inconclusive`` (given back unjudged)."""
        span.add_event(EVENT_PROBE, {ROUTE: route, PROBE_OUTCOME: outcome})
        self.probes.add(1, {ROUTE: route, PROBE_OUTCOME: outcome})

    def operator(self, span: Span, route: str, action: str) -> None:
        """An operator ``cleared`` or ``drained`` the route (``swerve routes``)."""
        span.add_event(EVENT_OPERATOR, {ROUTE: route, OPERATOR_ACTION: action})

    def route_skipped(self, span: Span, route: str) -> None:
        span.add_event(EVENT_ROUTE_SKIPPED, {ROUTE: route, REASON: "degraded"})
        self.route_skips.add(1, {ROUTE: route})

    def breaker(self, span: Span | None, transition: BreakerTransition) -> None:
        attrs = {
            ROUTE: transition.route,
            BREAKER_FROM: transition.before.value,
            BREAKER_TO: transition.after.value,
        }
        if span is not None:
            span.add_event(EVENT_BREAKER, attrs)
        self.breaker_transitions.add(1, attrs)

    def partial_discarded(self, span: Span, route: str, counts: Mapping[str, int]) -> None:
        attrs: dict[str, AttributeValue] = {ROUTE: route}
        for part, n in counts.items():
            attrs[DISCARDED_BY_PART.get(part, DISCARDED_OTHER)] = n
        span.add_event(EVENT_PARTIAL_DISCARDED, attrs)
        self.partial_discards.add(1, {ROUTE: route})

    def stream_reset(self, span: Span, route: str, target: str) -> None:
        span.add_event(EVENT_STREAM_RESET, {ROUTE_FROM: route, ROUTE_TO: target})

    def cache_fix(self, route: str, blocks: int, moved_to: Sequence[str]) -> None:
        """Empty-text ``cache_control`` markers moved (or dropped) in an outgoing body."""
        span = trace.get_current_span()
        span.add_event(
            EVENT_CACHE_FIX, {ROUTE: route, CACHE_FIX_BLOCKS: blocks, CACHE_FIX_MOVED_TO: moved_to}
        )
        self.cache_fixes.add(1, {ROUTE: route})

    def downgrade(self, route: str, removed: Sequence[str]) -> None:
        """Fields another provider's target does not accept were removed from a swapped body."""
        trace.get_current_span().add_event(
            EVENT_DOWNGRADE, {ROUTE: route, DOWNGRADE_REMOVED: removed}
        )
        self.downgrades.add(1, {ROUTE: route})


class _Counts:
    """A counter kept in process and read by an observable counter when metrics are collected.

    An increment is a dict update under a lock, not an SDK measurement (an order of magnitude
    cheaper), so counting stays off the call path like exporting does.
    """

    __slots__ = ("_bound", "_lock", "_values")

    def __init__(self, bound: Callable[[Attributes], Attributes] = dict) -> None:
        self._bound = bound
        self._lock = threading.Lock()
        self._values: dict[tuple[tuple[str, AttributeValue], ...], int] = {}

    def add(self, amount: int, attributes: Attributes) -> None:
        """Count ``amount`` under ``attributes``, bounded (route names, error types)."""
        self.add_bounded(amount, self._bound(attributes))

    def add_bounded(self, amount: int, attributes: Attributes) -> None:
        """:meth:`add` for attributes that are bounded already."""
        key = tuple(attributes.items())
        with self._lock:
            self._values[key] = self._values.get(key, 0) + amount

    def __len__(self) -> int:
        return len(self._values)

    def observe(self, _: CallbackOptions) -> Iterable[Observation]:
        with self._lock:
            items = list(self._values.items())
        return [Observation(value, dict(key)) for key, value in items]


_default: Telemetry | None = None


def default_telemetry() -> Telemetry:
    """The process-wide Telemetry on the global providers (proxies until they are set)."""
    global _default
    if _default is None:
        _default = Telemetry()
    return _default
