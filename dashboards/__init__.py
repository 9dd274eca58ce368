"""swerve's Grafana dashboard and Prometheus alert rules, generated from code.

``python -m dashboards`` (from the repository root) writes ``swerve.json`` (the Grafana
dashboard, built with grafana-foundation-sdk for Grafana 11.x) and ``alerts.yml`` (the
Prometheus alert rules) next to this file; ``tests/dashboards/`` checks that the committed
files equal what this package generates, runs the rules' promtool unit tests, and proves the
queries and the degraded-route alert against a real Prometheus scraping a real swerve process.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

from swerve import _telemetry as _t

__all__ = ["HERE", "PROMETHEUS_NAMES", "label"]

HERE: Final = Path(__file__).parent

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
    _t.METRIC_ROUTE_DEGRADED: "swerve_route_degraded",
    _t.METRIC_BREAKER_STATE: "swerve_breaker_state",
    _t.METRIC_STORE_UP: "swerve_store_up",
    _t.METRIC_CALL_DURATION: "swerve_call_duration_seconds",
    _t.METRIC_ATTEMPT_DURATION: "swerve_attempt_duration_seconds",
    _t.METRIC_ADDED_LATENCY: "swerve_call_added_latency_seconds",
    _t.METRIC_TIME_TO_FIRST_CHUNK: "swerve_stream_time_to_first_chunk_seconds",
}


def label(attribute: str) -> str:
    """The Prometheus label of an attribute (``swerve.route`` -> ``swerve_route``)."""
    return attribute.replace(".", "_")
