"""swerve's Grafana dashboard and Prometheus alert rules, as the wheel ships them.

``swerve.json`` beside this file is the dashboard. It is generated in swerve's repository
(``python -m dashboards``, with grafana-foundation-sdk, a development tool only), and the test
suite checks that this copy equals what the generator produces. :mod:`.rules` generates the
alert rules for any config. ``alertmanager.yml`` is an Alertmanager config for those rules
(this copy is the only one: the tests read it from here). ``swerve dashboards export`` writes
all three.
"""

from __future__ import annotations

from importlib.resources import files
from typing import Final

from .._telemetry import names as _t

__all__ = [
    "ALERTMANAGER_FILE",
    "DASHBOARD_FILE",
    "PROMETHEUS_NAMES",
    "alertmanager",
    "dashboard",
    "label",
]

DASHBOARD_FILE: Final = "swerve.json"
ALERTMANAGER_FILE: Final = "alertmanager.yml"

# Prometheus names of swerve's OpenTelemetry metrics, as the OpenTelemetry Python Prometheus
# exporter (opentelemetry-exporter-prometheus) writes them: dots become underscores, counters
# get ``_total``, ``{annotation}`` units are dropped, ``s`` becomes ``_seconds``, and the unit
# ``1`` adds no suffix (so the two gauges have none). The end-to-end test reads these names
# back from a real Prometheus, so a change in the exporter fails the suite.
PROMETHEUS_NAMES: Final = {
    _t.METRIC_ATTEMPTS: "swerve_attempts_total",
    _t.METRIC_RETRIES: "swerve_retries_total",
    _t.METRIC_SWAPS: "swerve_swaps_total",
    _t.METRIC_SWAPS_DECLINED: "swerve_swaps_declined_total",
    _t.METRIC_COOLDOWNS: "swerve_cooldowns_total",
    _t.METRIC_ROUTE_SKIPS: "swerve_route_skips_total",
    _t.METRIC_BREAKER_TRANSITIONS: "swerve_breaker_transitions_total",
    _t.METRIC_PROBES: "swerve_probes_total",
    _t.METRIC_PARTIAL_DISCARDS: "swerve_partial_discards_total",
    _t.METRIC_CACHE_FIXES: "swerve_cache_fixes_total",
    _t.METRIC_DOWNGRADES: "swerve_downgrades_total",
    _t.METRIC_HEDGES: "swerve_hedges_total",
    _t.METRIC_HEDGE_WINS: "swerve_hedge_wins_total",
    _t.METRIC_LEARNED_LIMITS: "swerve_learned_limits_total",
    _t.METRIC_FAILOVER_TOKENS: "swerve_failover_tokens_total",
    _t.METRIC_TOKENS: "swerve_tokens_total",
    _t.METRIC_COST: "swerve_cost_total",
    _t.METRIC_ROUTE_DEGRADED: "swerve_route_degraded",
    _t.METRIC_BREAKER_STATE: "swerve_breaker_state",
    _t.METRIC_STORE_UP: "swerve_store_up",
    _t.METRIC_LEARNED_FIRST_CHUNK: "swerve_route_first_chunk_learned_seconds",
    _t.METRIC_STORE_REJECTED: "swerve_store_rejected_total",
    _t.METRIC_CALL_DURATION: "swerve_call_duration_seconds",
    _t.METRIC_ATTEMPT_DURATION: "swerve_attempt_duration_seconds",
    _t.METRIC_ADDED_LATENCY: "swerve_call_added_latency_seconds",
    _t.METRIC_TIME_TO_FIRST_CHUNK: "swerve_stream_time_to_first_chunk_seconds",
    _t.METRIC_GEN_AI_OPERATION_DURATION: "gen_ai_client_operation_duration_seconds",
    _t.METRIC_GEN_AI_TOKEN_USAGE: "gen_ai_client_token_usage",
}


def label(attribute: str) -> str:
    """The Prometheus label of an attribute (``swerve.route`` -> ``swerve_route``)."""
    return attribute.replace(".", "_")


def dashboard() -> str:
    """The Grafana dashboard's JSON, as shipped."""
    return files(__package__ or __name__).joinpath(DASHBOARD_FILE).read_text(encoding="utf-8")


def alertmanager() -> str:
    """The Alertmanager config's YAML, as shipped."""
    return files(__package__ or __name__).joinpath(ALERTMANAGER_FILE).read_text(encoding="utf-8")
