"""Telemetry: the one object that emits swerve's spans, events, metrics and logs.

Every name it emits lives in :mod:`swerve._telemetry.names`; the metric attribute caps live in
:mod:`swerve._telemetry.bounded`. A call's lifecycle (its span, its attempts' spans, their
durations) has a method each; every decision between them reaches :meth:`Telemetry.emit` as
one record of :mod:`swerve._telemetry.decisions`, whose table says what it becomes. Prompt and
completion text are never recorded, nor are credentials: failure messages pass through
redaction before they reach a span.
"""

from __future__ import annotations

import logging
import math
import weakref
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from opentelemetry import metrics, trace
from opentelemetry._logs import LoggerProvider, SeverityNumber, get_logger
from opentelemetry.context import Context, create_key, get_value, set_value
from opentelemetry.metrics import CallbackOptions, Observation
from opentelemetry.trace import NonRecordingSpan, Span, SpanKind, Status, StatusCode
from opentelemetry.util.types import AttributeValue

from .._engine.clock import SYSTEM_CLOCK, Clock
from .._engine.results import Attempt, Usage
from .._failures import Failure
from .._version import __version__
from . import names as n
from .bounded import ERROR_TYPE_LIMIT, OVERFLOW, ROUTE_LIMIT, AttributeBounds, Attributes
from .counts import Counts, configured_routes, zero_series
from .decisions import DECISIONS, Decision, On, StoreChanged, Swapped
from .redact import printable

if TYPE_CHECKING:
    from .._engine.config import FallbackConfig
    from .._health.store import HealthStore

__all__ = ["ERROR_TYPE_LIMIT", "OVERFLOW", "ROUTE_LIMIT", "Telemetry"]
__all__ += ["default_telemetry", "in_llm_span"]
__all__ += n.__all__  # every name swerve emits

_log = logging.getLogger("swerve")

# The global providers that trace nothing: none installed yet (the proxy), or the no-op one.
_NO_TRACING = (trace.ProxyTracerProvider, trace.NoOpTracerProvider)
try:  # The metrics API names its proxy privately; without it, every meter counts as metered.
    from opentelemetry.metrics._internal import _ProxyMeter, _ProxyMeterProvider

    _NO_METERS: tuple[type, ...] = (_ProxyMeterProvider, metrics.NoOpMeterProvider)
    _PROXY_METERS: tuple[type, ...] = (_ProxyMeter,)
except ImportError:  # pragma: no cover - an API that moved them
    _NO_METERS, _PROXY_METERS = (metrics.NoOpMeterProvider,), ()
# The GenAI operations that are an inference: a span of one is an LLM call.
_INFERENCE = frozenset({"chat", "text_completion", "generate_content"})
_IN_LLM_SPAN = create_key("swerve.in_llm_span")
_INPUT, _OUTPUT = n.TOKEN_INPUT.value, n.TOKEN_OUTPUT.value
_LEARNED_QUANTILES = (("p50", 0.5), ("p95", 0.95), ("p99", 0.99))


def _answered_by(attempt: Attempt, attrs: dict[str, AttributeValue]) -> None:
    """The response id and the server ``attempt`` reported (what the wire said of who
    answered), added to a span's ``attrs``."""
    if attempt.response_id is not None:
        attrs[n.GEN_AI_RESPONSE_ID] = attempt.response_id
    if attempt.server is not None:
        attrs[n.SERVER_ADDRESS] = attempt.server[0]
        if attempt.server[1] is not None:
            attrs[n.SERVER_PORT] = attempt.server[1]


def _checked_prices(
    prices: Mapping[str, tuple[float, float]] | None,
) -> dict[str, tuple[float, float]]:
    """``prices`` (per million input and output tokens, by route or model name) as given, or a
    ValueError naming the entry that is not two finite numbers >= 0."""
    checked: dict[str, tuple[float, float]] = {}
    for key, value in (prices or {}).items():
        pair = tuple(value) if isinstance(value, tuple | list) else ()
        if not (
            isinstance(key, str)
            and len(pair) == 2
            and all(
                isinstance(p, int | float)
                and not isinstance(p, bool)
                and math.isfinite(p)
                and p >= 0
                for p in pair
            )
        ):
            raise ValueError(
                f"Telemetry prices[{key!r}]: {value!r} is not (input, output), two prices "
                ">= 0 per million tokens"
            )
        checked[key] = (float(pair[0]), float(pair[1]))
    return checked


def in_llm_span(context: Context) -> Context:
    """``context`` marked as inside a framework's LLM span (one an adapter made current, whose
    attributes may come only when it ends): a swerve call started in it leaves the call's token
    usage (the ``gen_ai.usage.*`` attributes, the GenAI client metrics) to that span."""
    return set_value(_IN_LLM_SPAN, True, context)


def _loggable(value: object) -> str:
    """``value`` for one log line: control characters (newlines, ANSI escapes) escaped, so a
    route name or a reason cannot forge or recolour lines of an operator's log."""
    return printable(str(value))


class Telemetry:
    """Emits swerve's spans, events, metrics and logs through the given (or global) providers.

    Instruments are created once here, never on the call path. ``record_messages`` is the
    opt-in for failure messages on spans (redacted either way; off by default). ``clock``'s
    wall time is the instant the route-health gauges read the stores at. ``prices``: per
    million input and output tokens, by route or model name, for ``swerve.cost``.
    ``log_decisions``: every decision is also emitted as a log-based event (the same name and
    attributes as its span event, tied to that span) through ``logger_provider`` (or the
    global one), for a logs pipeline.
    """

    def __init__(
        self,
        tracer_provider: trace.TracerProvider | None = None,
        meter_provider: metrics.MeterProvider | None = None,
        *,
        record_messages: bool = False,
        clock: Clock = SYSTEM_CLOCK,
        prices: Mapping[str, tuple[float, float]] | None = None,
        log_decisions: bool = False,
        logger_provider: LoggerProvider | None = None,
    ) -> None:
        self._prices = _checked_prices(prices)
        # Opt-in: each decision also as a log-based event (OTEP 4430), tied to its span.
        self._decision_log = (
            get_logger(n.INSTRUMENTATION_NAME, __version__, logger_provider)
            if log_decisions
            else None
        )
        self.tracer = trace.get_tracer(n.INSTRUMENTATION_NAME, __version__, tracer_provider)
        meter = metrics.get_meter(n.INSTRUMENTATION_NAME, __version__, meter_provider)
        # Tracing off (the API's no-op tracer): a span's name and attributes go nowhere, so
        # none is built (its context still comes from the parent, as the no-op tracer's does).
        self._traced = not isinstance(self.tracer, trace.NoOpTracer)
        # The global provider's tracer: tracing is off until an SDK provider is installed,
        # which may happen after this object is made (so it is asked per call).
        self._proxy = isinstance(self.tracer, trace.ProxyTracer)
        # Metrics alike: on the no-op meter a call's measurements go nowhere, so none is made;
        # on the global one, until an SDK provider is installed (then for good: it stays).
        self._metered = not isinstance(meter, metrics.NoOpMeter)
        self._meter_proxy = isinstance(meter, _PROXY_METERS)
        self.record_messages = record_messages
        self._health: weakref.WeakSet[HealthStore] = weakref.WeakSet()
        self._clock = clock
        self._bounds = AttributeBounds()
        # Routes of the configs seeded (bounded): the gauges report them healthy from the start.
        self._configured: frozenset[str] = frozenset()

        def counter(name: str, unit: str, description: str) -> Counts:
            counts = Counts(self._bounds)
            meter.create_observable_counter(name, [counts.observe], unit, description)
            return counts

        def histogram(name: str, description: str) -> metrics.Histogram:
            return meter.create_histogram(
                name, "s", description, explicit_bucket_boundaries_advisory=n.DURATION_BUCKETS
            )

        self.attempts = counter(n.METRIC_ATTEMPTS, "{attempt}", "Attempts, by route and outcome")
        # One counter per decision kind that has one, as the decision table says.
        self._decisions: dict[type[Decision], Counts] = {
            kind: counter(emits.metric, emits.unit, emits.description)
            for kind, emits in DECISIONS.items()
            if emits.metric is not None
        }
        self.failover_tokens = counter(
            n.METRIC_FAILOVER_TOKENS, "{token}", "Tokens the failed attempts used, by type"
        )
        self.tokens = counter(
            n.METRIC_TOKENS,
            "{token}",
            "Tokens used, by route, type and outcome (success: the answers calls got; "
            "failure: attempts that failed, what failover cost)",
        )
        self.cost = counter(
            n.METRIC_COST,
            "{USD}",
            "What the tokens cost at the prices Telemetry was given, by route and outcome",
        )
        self.store_rejected = counter(
            n.METRIC_STORE_REJECTED,
            "{value}",
            "Values read from a shared health store (Redis) that failed validation, by reason",
        )
        self.call_duration = histogram(
            n.METRIC_CALL_DURATION, "Logical call duration, waits included"
        )
        self.attempt_duration = histogram(n.METRIC_ATTEMPT_DURATION, "Duration of one attempt")
        self.added_latency = histogram(
            n.METRIC_ADDED_LATENCY, "Call duration minus the serving attempt's: what failover cost"
        )
        self.time_to_first_chunk = histogram(
            n.METRIC_TIME_TO_FIRST_CHUNK, "From attempt start to its first content chunk"
        )
        self.operation_duration = meter.create_histogram(
            n.METRIC_GEN_AI_OPERATION_DURATION,
            "s",
            "GenAI operation duration: one logical call, retries and swaps included",
            explicit_bucket_boundaries_advisory=n.GEN_AI_DURATION_BUCKETS,
        )
        self.token_usage = meter.create_histogram(
            n.METRIC_GEN_AI_TOKEN_USAGE,
            "{token}",
            "Number of input and output tokens of the answer a call got",
            explicit_bucket_boundaries_advisory=n.GEN_AI_TOKEN_BUCKETS,
        )
        self._models: set[str] = set()  # response models seen: bounded like routes
        for name, observe, description in (
            (n.METRIC_ROUTE_DEGRADED, self._observe_degraded, "1 while a route is cooling down"),
            (n.METRIC_BREAKER_STATE, self._observe_breaker, "Breaker state per route: 0 closed, "
             "1 half-open, 2 open"),
            (n.METRIC_STORE_UP, self._observe_store, "1 while a shared health store (Redis) "
             "shares health, 0 while each process is alone"),
        ):  # fmt: skip
            meter.create_observable_gauge(name, [observe], "1", description)
        meter.create_observable_gauge(
            n.METRIC_LEARNED_FIRST_CHUNK,
            [self._observe_learned],
            "s",
            "Each configured route's learned time to first chunk on streams (p50, p95, p99), "
            "as adaptive limits and hedges read it",
        )

    # -- gauges ---------------------------------------------------------------------------------
    def watch(self, health: HealthStore) -> None:
        """Report ``health``'s routes in the degraded and breaker-state gauges."""
        self._health.add(health)

    def _snapshots(self) -> dict[str, tuple[int, int]]:
        """Route -> (degraded, breaker state value), bounded like every route attribute: the
        routes past the limit are one OVERFLOW route, degraded if any of them is, its breaker
        in the worst state any of them is in. A configured route no store knows is healthy."""
        now = self._clock.time()
        out = dict.fromkeys(self._configured, (0, 0))
        for store in list(self._health):
            for health in store.snapshot(now):
                route = self._bounds.route(health.route)
                degraded, state = int(health.degraded), n.BREAKER_STATE_VALUES[health.breaker.value]
                seen = out.get(route)
                if seen is not None:
                    degraded, state = max(degraded, seen[0]), max(state, seen[1])
                out[route] = (degraded, state)
        return out

    def _observe_degraded(self, _: CallbackOptions) -> Iterable[Observation]:
        # Degraded means what calls act on: walked past because it is cooling down, awaiting a
        # successful probe, or has its breaker open. It drops to 0 only when a probe succeeds.
        return [
            Observation(degraded, {n.ROUTE: route})
            for route, (degraded, _) in self._snapshots().items()
        ]

    def _observe_store(self, _: CallbackOptions) -> Iterable[Observation]:
        return [
            Observation(int(sharing), {n.STORE: str(getattr(store, "description", "store"))})
            for store in list(self._health)
            if isinstance(sharing := getattr(store, "sharing", None), bool)
        ]

    def _observe_breaker(self, _: CallbackOptions) -> Iterable[Observation]:
        return [
            Observation(state, {n.ROUTE: route}) for route, (_, state) in self._snapshots().items()
        ]

    def _observe_learned(self, _: CallbackOptions) -> Iterable[Observation]:
        now = self._clock.time()
        found: list[Observation] = []
        for store in list(self._health):
            learned = getattr(store, "first_chunk_quantile", None)
            if learned is None:
                continue
            for route in sorted(self._configured):
                for name, q in _LEARNED_QUANTILES:
                    seconds = learned(route, q, now, 1)  # what is known, however little
                    if seconds is not None:
                        found.append(Observation(seconds, {n.ROUTE: route, n.QUANTILE: name}))
        return found

    def seed(self, config: FallbackConfig) -> None:
        """A 0 in every counter series ``config``'s routes can count that is known before
        anything happens (:func:`~swerve._telemetry.counts.zero_series`), and its routes in the
        gauges as healthy: a backend's ``rate()`` then counts the first burst. When a Failover
        is built or its config changes, never per call."""
        if not config.enabled:  # swerve passes calls straight through: nothing is counted
            return
        zeros = zero_series(config)
        self.attempts.seed(zeros[n.METRIC_ATTEMPTS])
        self.failover_tokens.seed(zeros[n.METRIC_FAILOVER_TOKENS])
        self.tokens.seed(zeros[n.METRIC_TOKENS])
        self.cost.seed(zeros[n.METRIC_COST])
        for kind, counts in self._decisions.items():
            counts.seed(zeros.get(DECISIONS[kind].metric or "", ()))
        routes = {self._bounds.route(route) for route in configured_routes(config)}
        self._configured = self._configured | routes  # one assignment: the reader sees either

    # -- metric attributes ---------------------------------------------------------------------
    def bounded(self, attributes: Attributes) -> dict[str, AttributeValue]:
        """``attributes`` for a metric: route names and error types past their limits become
        OVERFLOW (see ROUTE_LIMIT, ERROR_TYPE_LIMIT)."""
        return self._bounds(attributes)

    def attempt_ended(
        self, route: str, outcome: str, error_type: str | None, duration: float
    ) -> None:
        """One attempt ended: the attempts counter and the attempt duration histogram."""
        attrs: dict[str, AttributeValue] = {n.ROUTE: route, n.ATTEMPT_OUTCOME: outcome}
        if error_type is not None:
            attrs[n.ERROR_TYPE] = error_type
        attrs = self._bounds(attrs)  # not self.bounded: one call less per call
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
        inference: tuple[str, Attempt, bool] | None = None,
        context: Context | None = None,
        metered: bool = True,
    ) -> None:
        """A call ended, served (``served``) or failed (``error_type``): its duration and, when
        failover happened, the latency it added. ``inference``: the GenAI operation, the
        attempt that answered (or failed last), and whether another instrumentation's LLM span
        holds the call (it records the GenAI client metrics then); a served call's tokens and
        their cost count for its route. ``context``: the
        call span's, so a backend that keeps exemplars links each duration to its trace."""
        if not metered:
            return  # what start_call said of this call's measurements (metering())
        # self.bounded(), written out: every call's measurements are bounded here.
        bounds = self._bounds
        attrs: dict[str, AttributeValue] = {n.ROUTE_REQUESTED: bounds.route(requested)}
        if served is not None:
            attrs[n.ROUTE_SERVED] = bounds.route(served)
        if error_type is not None:
            attrs[n.ERROR_TYPE] = bounds.error_type(error_type)
        self.call_duration.record(duration, attrs, context)
        if added is not None:
            self.added_latency.record(added, attrs, context)
        if inference is None:
            return
        operation, attempt, nested = inference
        # The GenAI client metrics' attributes, unless another instrumentation records them.
        genai: dict[str, AttributeValue] | None = None
        if not nested:
            genai = {
                n.GEN_AI_OPERATION_NAME: operation,
                n.GEN_AI_PROVIDER_NAME: attempt.route.provider,
                n.GEN_AI_REQUEST_MODEL: attempt.request_model,
            }
        if error_type is not None:
            if genai is not None:
                genai[n.ERROR_TYPE] = attrs[n.ERROR_TYPE]  # bounded above
                self.operation_duration.record(duration, genai, context)
            return
        usage = attempt.usage
        # spent(attempt, "success", usage), written out: every served call counts here (the
        # served route is bounded in attrs already).
        route = attrs[n.ROUTE_SERVED]
        if usage.input_tokens:
            self.tokens.add_bounded(
                usage.input_tokens,
                {n.ROUTE: route, n.GEN_AI_TOKEN_TYPE: _INPUT, n.ATTEMPT_OUTCOME: "success"},
            )
        if usage.output_tokens:
            self.tokens.add_bounded(
                usage.output_tokens,
                {n.ROUTE: route, n.GEN_AI_TOKEN_TYPE: _OUTPUT, n.ATTEMPT_OUTCOME: "success"},
            )
        if self._prices and (usage.input_tokens or usage.output_tokens):
            self._cost(attempt, "success", usage)
        if genai is None:
            return
        if (model := attempt.response_model) is not None:
            # A name from the wire: bounded like route names (the first ROUTE_LIMIT kept).
            seen = self._models
            if model not in seen:
                if len(seen) >= ROUTE_LIMIT:
                    model = OVERFLOW
                else:
                    seen.add(model)
            genai[n.GEN_AI_RESPONSE_MODEL] = model
        self.operation_duration.record(duration, genai, context)
        for kind, count in ((_INPUT, usage.input_tokens), (_OUTPUT, usage.output_tokens)):
            if count is not None:
                self.token_usage.record(count, {**genai, n.GEN_AI_TOKEN_TYPE: kind})

    def metering(self) -> bool:
        """Whether a measurement made now goes anywhere: an SDK meter provider is given, or
        installed globally by now. When not, a call's durations and counts are not made (as
        an untraced call makes no span); the route-health gauges are read only by a reader."""
        if self._meter_proxy:
            if isinstance(metrics.get_meter_provider(), _NO_METERS):
                return False
            self._meter_proxy = False  # a global provider, once set, is never replaced
        return self._metered

    def first_chunk(self, route: str, seconds: float) -> None:
        """A stream attempt's first content chunk came ``seconds`` after the attempt began."""
        if not self.metering():
            return
        self.time_to_first_chunk.record(seconds, {n.ROUTE: self._bounds.route(route)})

    # -- spans ----------------------------------------------------------------------------------
    def tracing(self) -> bool:
        """Whether a span started now goes anywhere: an SDK tracer provider is given, or
        installed globally by now. When not, a call makes no span of its own and leaves the
        current context alone (the no-op tracer's spans would only copy the parent's)."""
        if self._proxy:
            return not isinstance(trace.get_tracer_provider(), _NO_TRACING)
        return self._traced

    def start_call(
        self, operation: str, requested: str, provider: str, model: str, stream: bool
    ) -> tuple[Span, Context | None, bool, bool]:
        """The call's span, the GenAI inference span of the call as its caller sees it; the
        context its attempts run in; and whether the call runs inside another
        instrumentation's LLM span. Untraced (see :meth:`tracing`)
        the span is the caller's, recording nothing (what the no-op tracer's spans are), and
        the context None: nothing is attached, the caller's context stays current. Last,
        whether the call's measurements go anywhere (:meth:`metering`, asked once a call: its
        ends are told, ``metered=``)."""
        parent = trace.get_current_span()
        # tracing(), written out
        if self._proxy:
            traced = not isinstance(trace.get_tracer_provider(), _NO_TRACING)
        else:
            traced = self._traced
        # Inside another instrumentation's LLM span: OpenInference marks one with
        # openinference.span.kind, the GenAI conventions (OpenLLMetry, the SDKs' own
        # instrumentations) with an inference gen_ai.operation.name. A span whose attributes
        # cannot be read (not an SDK span) is not one. Only spans and measurements read it.
        nested = False
        # metering(), its settled answer written out: every call asks it here.
        metered = self.metering() if self._meter_proxy else self._metered
        if traced or metered:
            given = getattr(parent, "attributes", None)
            nested = get_value(_IN_LLM_SPAN) is True or (
                given is not None
                and (
                    given.get("openinference.span.kind") == "LLM"
                    or given.get(n.GEN_AI_OPERATION_NAME) in _INFERENCE
                )
            )
        if not traced:
            if not isinstance(parent, NonRecordingSpan):
                parent = NonRecordingSpan(parent.get_span_context())
            return parent, None, nested, metered
        attributes: dict[str, AttributeValue] = {
            n.GEN_AI_OPERATION_NAME: operation,
            n.GEN_AI_PROVIDER_NAME: provider,
            n.GEN_AI_REQUEST_MODEL: model,
            n.ROUTE_REQUESTED: requested,
        }
        if stream:
            attributes[n.STREAM] = True
        span = self.tracer.start_span(
            n.SPAN_CALL.format(operation=operation, model=model),
            kind=SpanKind.CLIENT,
            attributes=attributes,
        )
        return span, trace.set_span_in_context(span), nested, metered

    def answered(
        self, span: Span, operation: str, named: str, asked: str, attempt: Attempt, nested: bool
    ) -> dict[str, AttributeValue]:
        """The GenAI attributes of a served call's span, from what the wire said on the
        attempt that served it (the call span is the inference span: it carries them once).
        ``named``: the model the span was named with when the call began (its route's);
        ``asked``: the model the call asked for on the wire, which names it from now on.
        ``nested``: the call runs inside another instrumentation's LLM span, which counts the
        tokens already; its span then carries no usage, so a backend counts them once."""
        attrs: dict[str, AttributeValue] = {
            n.GEN_AI_RESPONSE_MODEL: attempt.response_model or attempt.request_model
        }
        # The span began with the requested route's model and provider: set again only when
        # they changed (each attribute set costs the SDK a check and a lock).
        if asked != named:
            span.update_name(n.SPAN_CALL.format(operation=operation, model=asked))
            attrs[n.GEN_AI_REQUEST_MODEL] = asked
        if (provider := attempt.route.provider) != attempt.requested.provider:
            attrs[n.GEN_AI_PROVIDER_NAME] = provider
        _answered_by(attempt, attrs)
        usage = attempt.usage
        if usage.finish_reasons:
            attrs[n.GEN_AI_RESPONSE_FINISH_REASONS] = usage.finish_reasons
        if not nested:
            for key, count in (
                (n.GEN_AI_USAGE_INPUT_TOKENS, usage.input_tokens),
                (n.GEN_AI_USAGE_OUTPUT_TOKENS, usage.output_tokens),
                (n.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS, usage.cache_read_tokens),
                (n.GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS, usage.cache_write_tokens),
            ):
                if count is not None:
                    attrs[key] = count
        return attrs

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
        # No gen_ai.operation.name: an attempt is part of the inference (the call's span), not
        # one of its own, so a GenAI backend shows one LLM call however many attempts it took.
        attributes: dict[str, AttributeValue] = {
            n.GEN_AI_PROVIDER_NAME: provider,
            n.GEN_AI_REQUEST_MODEL: model,
            n.ROUTE: route,
            n.ATTEMPT_NUMBER: number,
        }
        if number > 1:  # the HTTP conventions' count of resends: every attempt after the first
            attributes[n.HTTP_REQUEST_RESEND_COUNT] = number - 1
        if retry:  # absent means 0: each attribute costs on the hot path
            attributes[n.ATTEMPT_RETRY] = retry
        if swap:
            attributes[n.SWAP_INDEX] = swap
        return self.tracer.start_span(
            n.SPAN_ATTEMPT.format(route=route),
            context=context,
            kind=SpanKind.INTERNAL,
            attributes=attributes,
        )

    def end_attempt(
        self,
        span: Span,
        route: str,
        attempt: Attempt,
        outcome: str,
        failure: Failure | None,
        duration: float,
        metered: bool = True,
    ) -> None:
        """End an attempt's span (its outcome, its failure, and what the wire said: the model
        asked for and the one that answered, the response id, the server, the usage) and count
        it, its duration linked to the span (an exemplar); a failed attempt's tokens count as
        failover's cost."""
        context = None
        if span.is_recording():  # else what it would carry goes nowhere: none is built
            context = trace.set_span_in_context(span)
            usage = attempt.usage
            attrs: dict[str, AttributeValue] = {n.ATTEMPT_OUTCOME: outcome}
            sent = attempt.request_model
            if sent != attempt.route.model:  # the route's name is not the provider's
                attrs[n.GEN_AI_REQUEST_MODEL] = sent
            if failure is None:
                attrs[n.GEN_AI_RESPONSE_MODEL] = attempt.response_model or sent
            else:
                attrs[n.ERROR_TYPE] = failure.error_type
                attrs[n.FAILURE_KIND] = failure.kind.value
                attrs[n.FAILURE_IN_STREAM] = failure.in_stream
                if failure.status is not None:
                    attrs[n.HTTP_RESPONSE_STATUS_CODE] = failure.status
                if self.record_messages and failure.message:
                    attrs[n.FAILURE_MESSAGE] = failure.message
                span.set_status(Status(StatusCode.ERROR, failure.kind.value))
            _answered_by(attempt, attrs)
            if usage.input_tokens is not None:
                attrs[n.ATTEMPT_INPUT_TOKENS] = usage.input_tokens
            if usage.output_tokens is not None:
                attrs[n.ATTEMPT_OUTPUT_TOKENS] = usage.output_tokens
            # A failure before the provider said how the answer ended (a truncated stream, an
            # error status, a reset) ended it in an error.
            reasons = usage.finish_reasons or (("error",) if outcome == "failure" else ())
            if reasons:
                attrs[n.GEN_AI_RESPONSE_FINISH_REASONS] = reasons
            span.set_attributes(attrs)
        span.end()
        # attempt_ended(), written out: every attempt ends here (``metered``: start_call's word).
        if not metered:
            return
        bounds = self._bounds  # bounded as self.bounded() would, written out
        counted: dict[str, AttributeValue] = {
            n.ROUTE: bounds.route(route),
            n.ATTEMPT_OUTCOME: outcome,
        }
        if failure is not None:
            counted[n.ERROR_TYPE] = bounds.error_type(failure.error_type)
        self.attempts.add_bounded(1, counted)
        self.attempt_duration.record(duration, counted, context)
        if outcome == "failure":
            self.wasted(attempt)

    def wasted(self, attempt: Attempt) -> None:
        """The tokens an attempt that did not serve its call reported (it failed, or lost a
        hedge race), counted as what failover cost."""
        if not self.metering():
            return
        usage, route = attempt.usage, attempt.route.name
        for kind, count in (
            (n.TOKEN_INPUT, usage.input_tokens),
            (n.TOKEN_OUTPUT, usage.output_tokens),
        ):
            if count:
                self.failover_tokens.add(count, {n.ROUTE: route, n.GEN_AI_TOKEN_TYPE: kind.value})
        self.spent(attempt, "failure", usage)

    def spent(self, attempt: Attempt, outcome: str, usage: Usage) -> None:
        """The tokens ``attempt`` reported, counted for its route by ``outcome`` (``success``:
        the answer a call got; ``failure``: what failover cost), and their cost at the price
        given for its route or model, if any."""
        route = attempt.route.name
        for kind, count in ((_INPUT, usage.input_tokens), (_OUTPUT, usage.output_tokens)):
            if count:
                self.tokens.add(
                    count, {n.ROUTE: route, n.GEN_AI_TOKEN_TYPE: kind, n.ATTEMPT_OUTCOME: outcome}
                )
        if self._prices and (usage.input_tokens or usage.output_tokens):
            self._cost(attempt, outcome, usage)

    def _cost(self, attempt: Attempt, outcome: str, usage: Usage) -> None:
        route = attempt.route.name
        price = self._prices.get(route) or self._prices.get(attempt.request_model)
        if price is not None:
            spent = (usage.input_tokens or 0) * price[0] + (usage.output_tokens or 0) * price[1]
            self.cost.add(spent / 1_000_000, {n.ROUTE: route, n.ATTEMPT_OUTCOME: outcome})

    # -- decisions ------------------------------------------------------------------------------
    def emit(self, record: Decision, span: Span | None = None) -> None:
        """Report one decision: its event, on ``span`` or where the decision table says (see
        :class:`~swerve._telemetry.decisions.On`), and its counter, if its kind has one."""
        emits = DECISIONS[type(record)]
        attrs = record.attributes()
        if span is None:
            if emits.on is On.ATTEMPT:
                # Untraced, the current span is the caller's, not an attempt of swerve's.
                span = trace.get_current_span() if self.tracing() else None
            elif emits.on is On.STORE:
                own = self.tracer.start_span(n.SPAN_STORE, kind=SpanKind.INTERNAL, attributes=attrs)
                own.add_event(emits.event, attrs)
                own.end()
        if span is not None:
            span.add_event(emits.event, attrs)
        if self._decision_log is not None:
            self._decision_log.emit(
                event_name=emits.event,
                attributes=attrs,
                severity_number=SeverityNumber.INFO,
                # The span the event is on: the record carries its trace and span ids.
                context=trace.set_span_in_context(span) if span is not None else None,
            )
        counts = self._decisions.get(type(record))
        if counts is not None:
            counts.add(1, {key: attrs[key] for key in emits.counted_by})
        # Two decisions are log lines too: an operator looks for them in the log.
        if isinstance(record, Swapped):
            _log_swap(record, span or trace.INVALID_SPAN)
        elif isinstance(record, StoreChanged):
            _log_store(record)

    # Shorthands kept for callers outside the engine (the wire rules, the Redis store, a test of
    # the swap log line); each is emit() with one record.


def _log_swap(record: Swapped, span: Span) -> None:
    # The log line the seed's operators grep for. It carries the call span's ids under the
    # names opentelemetry-instrumentation-logging uses, so log and trace join up.
    context = span.get_span_context()
    _log.warning(
        "[model-fallback] switched model from %s to %s (%s)",
        _loggable(record.source),
        _loggable(record.target),
        _loggable(record.reason),
        extra={
            "swerve_route_from": record.source,
            "swerve_route_to": record.target,
            "swerve_reason": record.reason,
            "otelTraceID": trace.format_trace_id(context.trace_id),
            "otelSpanID": trace.format_span_id(context.span_id),
        },
    )


def _log_store(record: StoreChanged) -> None:
    if record.up:
        _log.info("sharing route health through %s", _loggable(record.description))
    else:
        _log.warning(
            "route health is not shared (%s unreachable: %s); each process "
            "decides alone until it returns",
            _loggable(record.description),
            _loggable(record.reason or "not connected"),
        )


_default: Telemetry | None = None


def default_telemetry() -> Telemetry:
    """The process-wide Telemetry on the global providers (proxies until they are set)."""
    global _default
    if _default is None:
        _default = Telemetry()
    return _default
