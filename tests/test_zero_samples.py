"""Counters that exist from the start: as soon as a Failover is built (or its env config
changes), every counter and gauge series its routes can count is there at 0, with exactly the
attributes (keys and order) later increments use, so a backend's ``rate()`` / ``increase()``
counts the first burst instead of starting from it.

Real parts only: the OTel SDK's MeterProvider on an InMemoryMetricReader, or on the Prometheus
exporter, and real httpx through the failover transport to the served FakeProvider.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from opentelemetry import trace
from opentelemetry.exporter.prometheus import PrometheusMetricReader
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from swerve import Failover, FallbackConfig, MemoryHealth, Telemetry
from swerve._dashboards import PROMETHEUS_NAMES, dashboard, label
from swerve._dashboards.rules import alert_rules
from swerve._telemetry import names as n
from swerve._telemetry.counts import configured_routes
from swerve._telemetry.decisions import DECISIONS
from swerve.httpx import FailoverTransport, Upstream
from swerve.testing import FakeProvider, Fault

from .conftest import FakeClock

FAKE_PROVIDERS = ("openrouter", "backup")
OR, BK = "openrouter/claude-sonnet-5", "backup/claude-sonnet-5"
LONG = "backup/claude-long"  # only where a context overflow goes
CONFIG = FallbackConfig(
    fallbacks={OR: BK, BK: OR},
    fallbacks_by_failure={"context_overflow": {OR: LONG}},
    max_retries=1,
    max_swaps=1,
    jitter=False,
    cooldown_s=30,
)
ROUTES = [OR, BK, LONG]
# Counted per route: every counter but the shared store's (per store, not per route).
COUNTERS = [n.METRIC_ATTEMPTS, n.METRIC_FAILOVER_TOKENS] + [
    e.metric for e in DECISIONS.values() if e.metric is not None
]
GAUGES = [n.METRIC_ROUTE_DEGRADED, n.METRIC_BREAKER_STATE]
ROUTE_LABELS = {label(a) for a in (n.ROUTE, n.ROUTE_FROM, n.ROUTE_TO, n.ROUTE_REQUESTED)}
# Histograms are SDK instruments: a series exists once something is recorded in it.
HISTOGRAMS = {n.METRIC_CALL_DURATION, n.METRIC_ATTEMPT_DURATION}
HISTOGRAMS |= {n.METRIC_ADDED_LATENCY, n.METRIC_TIME_TO_FIRST_CHUNK}
PER_STORE = {n.METRIC_STORE_UP, n.METRIC_STORE_REJECTED}
# A learned figure has no zero: 0 s would be a claim. Its series starts when the route is learned.
MEASURED = {n.METRIC_LEARNED_FIRST_CHUNK}
BY_PROMETHEUS_NAME = {v: k for k, v in PROMETHEUS_NAMES.items()}

Points = dict[str, dict[frozenset[tuple[str, Any]], Any]]


class Meter:
    """A real SDK meter provider on an in-memory reader (no tracing), read by metric name."""

    def __init__(self) -> None:
        self.reader = InMemoryMetricReader()
        self.provider = MeterProvider(metric_readers=[self.reader])
        self.telemetry = Telemetry(trace.NoOpTracerProvider(), self.provider)

    def points(self) -> Points:
        """Metric name -> {attributes: value}."""
        data = self.reader.get_metrics_data()
        out: Points = {}
        for rm in data.resource_metrics if data is not None else ():
            for sm in rm.scope_metrics:
                for metric in sm.metrics:
                    series = out.setdefault(metric.name, {})
                    for point in metric.data.data_points:
                        value = getattr(point, "value", None)
                        attrs = frozenset((point.attributes or {}).items())
                        series[attrs] = getattr(point, "count", None) if value is None else value
        return out


@pytest.fixture
def meter() -> Iterator[Meter]:
    recorder = Meter()
    yield recorder
    recorder.provider.shutdown()


def _routes_at_zero(series: dict[frozenset[tuple[str, Any]], Any]) -> set[str]:
    """The routes (any route attribute) that have a series at 0."""
    routes = set()
    for attrs, value in series.items():
        if value == 0:
            routes |= {v for k, v in attrs if k in (n.ROUTE, n.ROUTE_FROM, n.ROUTE_TO)}
    return routes


# --- right after Failover(...) ----------------------------------------------------------------
def test_every_counter_and_gauge_has_a_zero_per_route_once_the_failover_is_built(
    meter: Meter, clock: FakeClock
) -> None:
    assert configured_routes(CONFIG) == ROUTES
    Failover(CONFIG, MemoryHealth(), telemetry=meter.telemetry, clock=clock)
    points = meter.points()
    for name in COUNTERS + GAUGES:
        assert _routes_at_zero(points.get(name, {})) == set(ROUTES), name
    attempts = points[n.METRIC_ATTEMPTS]
    for route in ROUTES:  # the enumerable values of the attempt's labels
        ok = {n.ROUTE: route, n.ATTEMPT_OUTCOME: "success"}
        refused = {n.ROUTE: route, n.ATTEMPT_OUTCOME: "rejected", n.ERROR_TYPE: "breaker_open"}
        assert attempts[frozenset(ok.items())] == 0
        assert attempts[frozenset(refused.items())] == 0
        for status in sorted(CONFIG.fallback_on):  # type: ignore[arg-type]
            failed = {n.ROUTE: route, n.ATTEMPT_OUTCOME: "failure", n.ERROR_TYPE: str(status)}
            assert attempts[frozenset(failed.items())] == 0
    swaps = {dict(a)[n.ROUTE_FROM] + ">" + dict(a)[n.ROUTE_TO] for a in points[n.METRIC_SWAPS]}
    # The chains' swaps, and the context overflow's own map; LONG has no way out.
    assert swaps == {f"{OR}>{BK}", f"{BK}>{OR}", f"{OR}>{LONG}"}
    reasons = {dict(a)[n.REASON] for a in points[n.METRIC_SWAPS]}
    assert {"unavailable", "rate_limited", "timeout", "degraded", "context_overflow"} <= reasons
    assert "auth" not in reasons  # surfaces, and no listed status stands for it
    assert all(v == 0 for series in points.values() for v in series.values())


def test_a_disabled_config_counts_nothing_so_seeds_nothing(meter: Meter, clock: FakeClock) -> None:
    config = CONFIG.model_copy(update={"max_swaps": 0})
    Failover(config, MemoryHealth(), telemetry=meter.telemetry, clock=clock)
    points = meter.points()
    assert not any(points.get(name) for name in COUNTERS + GAUGES)


# --- the first failure lands on the series that had the 0 -------------------------------------
def test_the_first_failure_increments_the_series_that_had_the_zero(
    meter: Meter, clock: FakeClock, fake: FakeProvider
) -> None:
    fo = Failover(CONFIG, MemoryHealth(), telemetry=meter.telemetry, clock=clock)
    before = meter.points()
    fake.set_fault("openrouter", Fault.status(503))
    backup = f"{fake.url('backup')}/v1"
    ups = {
        OR: Upstream(f"{fake.url('openrouter')}/v1"),
        BK: Upstream(backup),
        LONG: Upstream(backup),
    }
    with httpx.Client(transport=FailoverTransport(ups, failover=fo)) as client:
        body = {"model": OR, "messages": [{"role": "user", "content": "hi"}]}
        r = client.post("http://swerve.invalid/v1/chat/completions", json=body)
    assert r.status_code == 200 and fake.requests("openrouter") == 2
    after = meter.points()
    moved = {
        name: {dict(a).get(n.ROUTE) or dict(a)[n.ROUTE_FROM] for a, v in after[name].items() if v}
        for name in COUNTERS
    }
    assert moved[n.METRIC_ATTEMPTS] == {OR, BK}
    assert moved[n.METRIC_RETRIES] == moved[n.METRIC_SWAPS] == moved[n.METRIC_COOLDOWNS] == {OR}
    for name in COUNTERS:
        # No new series: each increment went to a series that was there at 0.
        assert set(after[name]) == set(before[name]), name
    failed = {n.ROUTE: OR, n.ATTEMPT_OUTCOME: "failure", n.ERROR_TYPE: "503"}
    assert after[n.METRIC_ATTEMPTS][frozenset(failed.items())] == 2
    swap = {n.ROUTE_FROM: OR, n.ROUTE_TO: BK, n.REASON: "unavailable"}
    assert after[n.METRIC_SWAPS][frozenset(swap.items())] == 1
    # The same attributes in the same order: a zero kept under another key order would be a
    # second observation of the same series, which the SDK reports as one (a lost count).
    tel = meter.telemetry
    counted = [tel.attempts, tel.failover_tokens, *tel._decisions.values()]
    assert sum(len(c) for c in counted) == sum(len(after[name]) for name in COUNTERS)


# --- an env config ----------------------------------------------------------------------------
def test_an_env_config_seeds_its_routes_when_read_and_when_it_changes(
    meter: Meter, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    var = "SWERVE_ZERO_SAMPLES_CONFIG"
    monkeypatch.setenv(var, json.dumps({"fallbacks": {OR: BK}}))
    fo = Failover(env_var=var, health=MemoryHealth(), telemetry=meter.telemetry, clock=clock)
    points = meter.points()
    assert _routes_at_zero(points[n.METRIC_ROUTE_SKIPS]) == {OR, BK}
    assert _routes_at_zero(points[n.METRIC_ROUTE_DEGRADED]) == {OR, BK}
    other = "third/model-c"
    monkeypatch.setenv(var, json.dumps({"fallbacks": {OR: [BK, other]}}))
    assert fo.config is not None  # how every call reads it
    points = meter.points()
    for name in COUNTERS + GAUGES:
        assert other in _routes_at_zero(points[name]), name
    swap = {n.ROUTE_FROM: BK, n.ROUTE_TO: other, n.REASON: "server_error"}
    assert points[n.METRIC_SWAPS][frozenset(swap.items())] == 0


# --- what the dashboard and the rules read, through the Prometheus exporter --------------------
def _queries() -> list[str]:
    board = json.loads(dashboard())
    exprs = [t["expr"] for p in board["panels"] for t in p.get("targets", [])]
    exprs += [v["query"] for v in board["templating"]["list"] if v.get("type") == "query"]
    for group in alert_rules(CONFIG)["groups"]:
        exprs += [rule["expr"] for rule in group["rules"]]
    return exprs


def _reads(expr: str) -> Iterator[tuple[str, dict[str, str], set[str]]]:
    """(Prometheus metric, its label matchers, the swerve labels the query groups by) for each
    per-route counter or gauge ``expr`` reads."""
    by = {x.strip() for g in re.findall(r"\bby\s*\(([^)]*)\)", expr) for x in g.split(",")}
    # label_replace's target is made by the query from its source, which is read.
    replaced = re.findall(r'label_replace\([^,]+,\s*"([^"]+)",\s*"[^"]*",\s*"([^"]+)"', expr)
    # Both kept: one expression may read a label as it is and, elsewhere, made from another.
    by |= {source for _, source in replaced}
    by |= set(re.findall(r"label_values\(\w+,\s*(\w+)\)", expr))  # a variable's values
    wanted = {x for x in by if x.startswith("swerve_")}
    for metric, selector in re.findall(r"\b(swerve_[a-z0-9_]+)(\{[^}]*\})?", expr):
        name = BY_PROMETHEUS_NAME.get(metric)
        if name is None or name in HISTOGRAMS | PER_STORE | MEASURED:
            continue  # a histogram's series (_bucket, ...), not per route, or a measurement
        matchers = dict(re.findall(r'(\w+)=~?"([^"]*)"', selector))
        yield metric, matchers, wanted


def _exported(config: FallbackConfig, clock: FakeClock) -> list[tuple[str, dict[str, str], float]]:
    registry = CollectorRegistry()
    provider = MeterProvider(metric_readers=[PrometheusMetricReader(registry=registry)])
    try:
        Failover(config, MemoryHealth(), telemetry=Telemetry(meter_provider=provider), clock=clock)
        text = generate_latest(registry).decode()
    finally:
        provider.shutdown()
    return [
        (s.name, s.labels, s.value)
        for family in text_string_to_metric_families(text)
        for s in family.samples
    ]


def test_every_series_the_dashboard_and_rules_read_has_a_zero_in_the_exporter_text(
    clock: FakeClock,
) -> None:
    samples = _exported(CONFIG, clock)
    keys: dict[str, set[str]] = {}  # the labels each metric's series have
    for name, labels, _ in samples:
        keys.setdefault(name, set()).update(labels)
    checked = set()
    for expr in _queries():
        for metric, matchers, grouped in _reads(expr):
            wanted = grouped & keys.get(metric, grouped)  # what this metric is grouped by
            route_label = next((m for m in matchers if m in ROUTE_LABELS), None)
            route_label = route_label or next((w for w in wanted if w in ROUTE_LABELS), None)
            fixed = matchers.get(route_label or "", "$route")
            routes = ROUTES if fixed == "$route" else [fixed]  # a chain rule names its routes
            for route in routes if route_label is not None else [""]:
                if route_label == label(n.ROUTE_FROM) and route == LONG:
                    continue  # no swap leaves LONG: it has no fallback
                need = {k: v for k, v in matchers.items() if v != "$route"}
                if route_label is not None:
                    need[route_label] = re.escape(route)
                found = [
                    labels
                    for name, labels, value in samples
                    if name == metric
                    and value == 0
                    and wanted <= set(labels)
                    and all(re.fullmatch(v, labels.get(k, "")) for k, v in need.items())
                ]
                assert found, f"no zero series of {metric} for {route} ({need}) in: {expr}"
                checked.add(metric)
    # What the shipped dashboard and rules read today, at least.
    assert {
        PROMETHEUS_NAMES[name]
        for name in (n.METRIC_ATTEMPTS, n.METRIC_SWAPS, n.METRIC_RETRIES, *GAUGES)
    } <= checked
