"""Every span, event, metric and attribute name swerve emits.

docs/telemetry.md documents each name here; a test holds the two together. Attribute names
come from the OpenTelemetry semantic conventions where those have one.
"""

from __future__ import annotations

from typing import Final

from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as _gen_ai
from opentelemetry.semconv._incubating.metrics import gen_ai_metrics as _gen_ai_metrics
from opentelemetry.semconv.attributes import error_attributes as _error
from opentelemetry.semconv.attributes import http_attributes as _http
from opentelemetry.semconv.attributes import server_attributes as _server

__all__ = [
    "ATTEMPT_INPUT_TOKENS",
    "ATTEMPT_NUMBER",
    "ATTEMPT_OUTCOME",
    "ATTEMPT_OUTPUT_TOKENS",
    "ATTEMPT_PROBE",
    "ATTEMPT_RETRY",
    "BREAKER_FROM",
    "BREAKER_STATE_VALUES",
    "BREAKER_TO",
    "CACHE_FIX_BLOCKS",
    "CACHE_FIX_MOVED_TO",
    "CALL_ATTEMPTS",
    "CALL_RETRIES",
    "CALL_SWAPS",
    "COOLDOWN_LEARNED",
    "COOLDOWN_SECONDS",
    "COOLDOWN_UNTIL",
    "DISCARDED_BY_PART",
    "DISCARDED_OTHER",
    "DISCARDED_REASONING",
    "DISCARDED_TEXT",
    "DISCARDED_TOOL_CALL",
    "DOWNGRADE_REMOVED",
    "DURATION_BUCKETS",
    "ERROR_TYPE",
    "EVENT_BREAKER",
    "EVENT_CACHE_FIX",
    "EVENT_COOLDOWN",
    "EVENT_DOWNGRADE",
    "EVENT_HEDGE",
    "EVENT_HEDGE_WON",
    "EVENT_LEARNED_LIMIT",
    "EVENT_OPERATOR",
    "EVENT_PARTIAL_DISCARDED",
    "EVENT_PROBE",
    "EVENT_RETRY",
    "EVENT_ROUTE_SKIPPED",
    "EVENT_STORE",
    "EVENT_STREAM_RESET",
    "EVENT_SWAP",
    "EVENT_SWAP_DECLINED",
    "FAILURE_IN_STREAM",
    "FAILURE_KIND",
    "FAILURE_MESSAGE",
    "GEN_AI_DURATION_BUCKETS",
    "GEN_AI_OPERATION_NAME",
    "GEN_AI_PROVIDER_NAME",
    "GEN_AI_REQUEST_MODEL",
    "GEN_AI_RESPONSE_FINISH_REASONS",
    "GEN_AI_RESPONSE_ID",
    "GEN_AI_RESPONSE_MODEL",
    "GEN_AI_TOKEN_BUCKETS",
    "GEN_AI_TOKEN_TYPE",
    "GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS",
    "GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS",
    "GEN_AI_USAGE_INPUT_TOKENS",
    "GEN_AI_USAGE_OUTPUT_TOKENS",
    "HEDGE_AFTER",
    "HEDGE_WINNER",
    "HTTP_REQUEST_RESEND_COUNT",
    "HTTP_RESPONSE_STATUS_CODE",
    "INSTRUMENTATION_NAME",
    "LEARNED_LIMIT",
    "LEARNED_P99",
    "METRIC_ADDED_LATENCY",
    "METRIC_ATTEMPTS",
    "METRIC_ATTEMPT_DURATION",
    "METRIC_BREAKER_STATE",
    "METRIC_BREAKER_TRANSITIONS",
    "METRIC_CACHE_FIXES",
    "METRIC_CALL_DURATION",
    "METRIC_COOLDOWNS",
    "METRIC_COST",
    "METRIC_DOWNGRADES",
    "METRIC_FAILOVER_TOKENS",
    "METRIC_GEN_AI_OPERATION_DURATION",
    "METRIC_GEN_AI_TOKEN_USAGE",
    "METRIC_HEDGES",
    "METRIC_HEDGE_WINS",
    "METRIC_LEARNED_FIRST_CHUNK",
    "METRIC_LEARNED_LIMITS",
    "METRIC_PARTIAL_DISCARDS",
    "METRIC_PROBES",
    "METRIC_RETRIES",
    "METRIC_ROUTE_DEGRADED",
    "METRIC_ROUTE_SKIPS",
    "METRIC_STORE_REJECTED",
    "METRIC_STORE_UP",
    "METRIC_SWAPS",
    "METRIC_SWAPS_DECLINED",
    "METRIC_TIME_TO_FIRST_CHUNK",
    "METRIC_TOKENS",
    "OPERATOR_ACTION",
    "PROBE_OUTCOME",
    "QUANTILE",
    "REASON",
    "RETRY_DELAY",
    "ROUTE",
    "ROUTE_FROM",
    "ROUTE_REQUESTED",
    "ROUTE_SERVED",
    "ROUTE_TO",
    "SERVER_ADDRESS",
    "SERVER_PORT",
    "SPAN_ATTEMPT",
    "SPAN_CALL",
    "SPAN_STORE",
    "STORE",
    "STORE_REASON",
    "STORE_UP",
    "STREAM",
    "SWAP_INDEX",
    "TOKEN_INPUT",
    "TOKEN_OUTPUT",
]

INSTRUMENTATION_NAME: Final = "swerve"

# --- attributes: semantic conventions where they have the name -------------------------------
GEN_AI_OPERATION_NAME: Final = _gen_ai.GEN_AI_OPERATION_NAME
GEN_AI_PROVIDER_NAME: Final = _gen_ai.GEN_AI_PROVIDER_NAME
GEN_AI_REQUEST_MODEL: Final = _gen_ai.GEN_AI_REQUEST_MODEL
GEN_AI_RESPONSE_MODEL: Final = _gen_ai.GEN_AI_RESPONSE_MODEL
GEN_AI_RESPONSE_FINISH_REASONS: Final = _gen_ai.GEN_AI_RESPONSE_FINISH_REASONS
GEN_AI_USAGE_INPUT_TOKENS: Final = _gen_ai.GEN_AI_USAGE_INPUT_TOKENS
GEN_AI_USAGE_OUTPUT_TOKENS: Final = _gen_ai.GEN_AI_USAGE_OUTPUT_TOKENS
GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS: Final = _gen_ai.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS
GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS: Final = _gen_ai.GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS
GEN_AI_RESPONSE_ID: Final = _gen_ai.GEN_AI_RESPONSE_ID
SERVER_ADDRESS: Final = _server.SERVER_ADDRESS
SERVER_PORT: Final = _server.SERVER_PORT
GEN_AI_TOKEN_TYPE: Final = _gen_ai.GEN_AI_TOKEN_TYPE
# The values of gen_ai.token.type (an enum, so that it is no attribute name of its own).
TOKEN_INPUT: Final = _gen_ai.GenAiTokenTypeValues.INPUT
TOKEN_OUTPUT: Final = _gen_ai.GenAiTokenTypeValues.COMPLETION
ERROR_TYPE: Final = _error.ERROR_TYPE
HTTP_RESPONSE_STATUS_CODE: Final = _http.HTTP_RESPONSE_STATUS_CODE
HTTP_REQUEST_RESEND_COUNT: Final = _http.HTTP_REQUEST_RESEND_COUNT

# --- attributes: swerve's own ----------------------------------------------------------------
ROUTE: Final = "swerve.route"
ROUTE_REQUESTED: Final = "swerve.route.requested"
ROUTE_SERVED: Final = "swerve.route.served"
ROUTE_FROM: Final = "swerve.route.from"
ROUTE_TO: Final = "swerve.route.to"
ATTEMPT_NUMBER: Final = "swerve.attempt.number"
ATTEMPT_RETRY: Final = "swerve.attempt.retry"
ATTEMPT_OUTCOME: Final = "swerve.attempt.outcome"
# An attempt's own token usage: swerve's names, not gen_ai.usage.*, which only the inference
# span (the call's) carries, so that a GenAI backend counts a call's tokens once.
ATTEMPT_INPUT_TOKENS: Final = "swerve.attempt.input_tokens"
ATTEMPT_OUTPUT_TOKENS: Final = "swerve.attempt.output_tokens"
SWAP_INDEX: Final = "swerve.swap.index"
REASON: Final = "swerve.reason"
FAILURE_KIND: Final = "swerve.failure.kind"
FAILURE_IN_STREAM: Final = "swerve.failure.in_stream"
FAILURE_MESSAGE: Final = "swerve.failure.message"
RETRY_DELAY: Final = "swerve.retry.delay_s"
COOLDOWN_SECONDS: Final = "swerve.cooldown.seconds"
COOLDOWN_UNTIL: Final = "swerve.cooldown.until"
COOLDOWN_LEARNED: Final = "swerve.cooldown.learned"
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
STREAM: Final = _gen_ai.GEN_AI_REQUEST_STREAM
DISCARDED_TEXT: Final = "swerve.discarded.text"
DISCARDED_REASONING: Final = "swerve.discarded.reasoning"
DISCARDED_TOOL_CALL: Final = "swerve.discarded.tool_call"
DISCARDED_OTHER: Final = "swerve.discarded.other"
CACHE_FIX_BLOCKS: Final = "swerve.cache_fix.blocks"
CACHE_FIX_MOVED_TO: Final = "swerve.cache_fix.moved_to"
DOWNGRADE_REMOVED: Final = "swerve.downgrade.removed"
HEDGE_AFTER: Final = "swerve.hedge.after_s"
HEDGE_WINNER: Final = "swerve.hedge.winner"  # "hedge" (the route hedged to) or "primary"
LEARNED_LIMIT: Final = "swerve.learned_limit.seconds"
LEARNED_P99: Final = "swerve.learned_limit.p99_s"
QUANTILE: Final = "swerve.quantile"

DISCARDED_BY_PART: Final = {
    "text": DISCARDED_TEXT,
    "reasoning": DISCARDED_REASONING,
    "tool_call": DISCARDED_TOOL_CALL,
    "other": DISCARDED_OTHER,
}

# --- span names ------------------------------------------------------------------------------
# The GenAI inference span covers the logical call as the caller sees it, retries included
# (semantic conventions, GenAI spans); each attempt is an INTERNAL child that names its route.
SPAN_CALL: Final = "{operation} {model}"  # CLIENT, one per logical call
SPAN_ATTEMPT: Final = "swerve attempt {route}"  # INTERNAL, one per attempt
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
EVENT_HEDGE: Final = "swerve.hedge"
EVENT_HEDGE_WON: Final = "swerve.hedge_won"
EVENT_LEARNED_LIMIT: Final = "swerve.learned_limit"

# --- metrics ---------------------------------------------------------------------------------
# The GenAI conventions' client metrics, one record per logical call (as the inference span).
METRIC_GEN_AI_OPERATION_DURATION: Final = _gen_ai_metrics.GEN_AI_CLIENT_OPERATION_DURATION
METRIC_GEN_AI_TOKEN_USAGE: Final = _gen_ai_metrics.GEN_AI_CLIENT_TOKEN_USAGE
# Their advisory bucket boundaries, as the conventions give them.
GEN_AI_DURATION_BUCKETS: Final = (
    0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92,
)  # fmt: skip
GEN_AI_TOKEN_BUCKETS: Final = (
    1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864,
)  # fmt: skip
METRIC_ATTEMPTS: Final = "swerve.attempts"
METRIC_TOKENS: Final = "swerve.tokens"
METRIC_COST: Final = "swerve.cost"
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
METRIC_FAILOVER_TOKENS: Final = "swerve.failover.tokens"
METRIC_ROUTE_DEGRADED: Final = "swerve.route.degraded"
METRIC_BREAKER_STATE: Final = "swerve.breaker.state"
METRIC_STORE_UP: Final = "swerve.store.up"
METRIC_STORE_REJECTED: Final = "swerve.store.rejected"
METRIC_CALL_DURATION: Final = "swerve.call.duration"
METRIC_ATTEMPT_DURATION: Final = "swerve.attempt.duration"
METRIC_ADDED_LATENCY: Final = "swerve.call.added_latency"
METRIC_TIME_TO_FIRST_CHUNK: Final = "swerve.stream.time_to_first_chunk"
METRIC_HEDGES: Final = "swerve.hedges"
METRIC_HEDGE_WINS: Final = "swerve.hedge_wins"
METRIC_LEARNED_LIMITS: Final = "swerve.learned_limits"
METRIC_LEARNED_FIRST_CHUNK: Final = "swerve.route.first_chunk.learned"

# Second-scale buckets: LLM calls take seconds, failover waits tens of seconds.
DURATION_BUCKETS: Final = (
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0,
)  # fmt: skip
BREAKER_STATE_VALUES: Final = {"closed": 0, "half_open": 1, "open": 2}
