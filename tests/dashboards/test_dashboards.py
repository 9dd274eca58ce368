"""The committed dashboard and rules are what the code generates, fit Grafana 11's schema, use the
names the OTel Prometheus exporter really produces, and pass their promtool unit tests."""

from __future__ import annotations

import json
import re
import subprocess
import time
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest
import yaml
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.cog.plugins import register_default_plugins
from grafana_foundation_sdk.models.dashboard import Dashboard as DashboardModel
from opentelemetry.exporter.prometheus import PrometheusMetricReader
from opentelemetry.sdk.metrics import MeterProvider
from prometheus_client import CollectorRegistry, generate_latest

from dashboards import HERE, grafana
from dashboards.__main__ import DASHBOARD, shipped_rules
from dashboards.__main__ import main as generate
from swerve import FallbackConfig, MemoryHealth, RedisHealth, Telemetry
from swerve._dashboards import PROMETHEUS_NAMES, label
from swerve._dashboards.rules import alert_rules, chain, render
from swerve._health.store import CooldownRule
from swerve._telemetry import names

from ._prometheus import binary, free_port

ALERTS = HERE / "alerts.yml"
ALERTS_TEST = HERE / "alerts_test.yml"
LABELS = {
    label(v)
    for k, v in vars(names).items()
    if k.isupper() and isinstance(v, str) and not k.startswith(("METRIC_", "EVENT_", "SPAN_"))
}


def _board() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return data


def _targets(board: dict[str, Any]) -> list[dict[str, Any]]:
    return [t for p in board["panels"] for t in p.get("targets", [])]


def _rules() -> list[dict[str, Any]]:
    return [r for g in yaml.safe_load(ALERTS.read_text())["groups"] for r in g["rules"]]


# --- generated, committed, in sync ---------------------------------------------------------------
def test_committed_dashboard_is_what_the_generator_produces() -> None:
    assert DASHBOARD.read_text() == grafana.render(), "run: uv run python -m dashboards"


def test_committed_rules_are_what_the_generator_produces() -> None:
    assert ALERTS.read_text() == shipped_rules(), "run: uv run python -m dashboards"


def test_generator_prints_rules_for_your_own_config(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "mine.json"
    path.write_text(json.dumps({"fallbackModelsByModel": {"a/x": ["b/y", "c/z"]}}))
    assert generate(["--config", str(path)]) == 0
    out = capsys.readouterr().out
    assert "swerve_chain: a/x -> b/y -> c/z" in out
    path.write_text('{"fallbacks": {"claude": "a/x"}}')
    assert generate(["--config", str(path)]) == 1
    assert "provider/model" in capsys.readouterr().err


# --- Grafana 11.x ------------------------------------------------------------------------------
def test_sdk_is_the_grafana_11_flavour() -> None:
    assert version("grafana-foundation-sdk").split("!")[-1].startswith("11.")
    assert _board()["schemaVersion"] == 41  # Grafana 11.6's dashboard schema


def _lost(original: Any, decoded: Any, path: str = "") -> list[str]:
    """Where ``decoded`` lost or changed something of ``original`` (defaults it adds are fine)."""
    if isinstance(original, dict) and isinstance(decoded, dict):
        lost = [f"{path}/{key}" for key in original if key not in decoded]
        for key in original.keys() & decoded.keys():
            lost += _lost(original[key], decoded[key], f"{path}/{key}")
        return lost
    if isinstance(original, list) and isinstance(decoded, list) and len(original) == len(decoded):
        pairs = enumerate(zip(original, decoded, strict=True))
        return [x for i, (a, b) in pairs for x in _lost(a, b, f"{path}[{i}]")]
    return [] if original == decoded else [f"{path}: {original!r} became {decoded!r}"]


def test_dashboard_decodes_with_the_sdk_models_without_losing_anything() -> None:
    # The 11.x models drop what their schema does not know: decoding and encoding again must keep
    # every field and value of the committed JSON (the models may add their defaults).
    register_default_plugins()
    decoded = json.loads(JSONEncoder().encode(DashboardModel.from_json(_board())))
    assert _lost(_board(), decoded) == []
    assert [p["type"] for p in decoded["panels"]] == [p["type"] for p in _board()["panels"]]


def test_dashboard_has_the_panels_and_variables() -> None:
    board = _board()
    panels = {p["title"]: p for p in board["panels"] if p["type"] != "row"}
    assert {title: p["type"] for title, p in panels.items()} == {
        "Degraded routes": "state-timeline",
        "Circuit breaker state": "state-timeline",
        "swerve alerts (route and chain)": "state-timeline",
        "Currently degraded routes": "table",
        "Health store": "timeseries",
        "Error rate by requested route": "timeseries",
        "Calls moved away per minute (skips + swaps) by route": "timeseries",
        "Swaps per minute (from -> to, reason)": "timeseries",
        "Retries per minute by route and error type": "timeseries",
        "Attempt outcomes per minute by route and error type": "timeseries",
        "Call duration by requested route (p50 / p95)": "timeseries",
        "Attempt duration by route (p50 / p95)": "timeseries",
        "Added latency from failover (p50 / p95)": "timeseries",
        "Time to first chunk (p50 / p95)": "timeseries",
        "Learned time to first chunk by route (p50 / p95 / p99)": "timeseries",
        "Hedges per minute and their wins": "timeseries",
        "Learned first-token timeouts per minute by route": "timeseries",
        "Cooldowns per minute by route": "timeseries",
        "Recovery probes per minute by route and outcome": "timeseries",
        "Swaps declined per minute by route and reason": "timeseries",
        "Tokens used by failed attempts per minute by route and type": "timeseries",
        "Tokens per minute by route and what they were spent on": "timeseries",
        "Cost per hour by route and what it was spent on": "timeseries",
    }
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    assert variables["route"]["type"] == "query"
    assert variables["route"]["includeAll"] and variables["route"]["multi"]
    for panel in panels.values():
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        assert panel["targets"], panel["title"]
        if panel["title"] == "Health store":
            continue  # per store, not per route: a store serves every route
        for target in panel["targets"]:
            assert '=~"$route"' in target["expr"], target["expr"]
    store = panels["Health store"]["targets"]
    assert [(t["legendFormat"], t["expr"]) for t in store] == [
        (
            "sharing {{swerve_store_name}}",
            "count by (swerve_store_name) (swerve_store_up == 1) or on() vector(0)",
        ),
        (
            "not sharing {{swerve_store_name}}",
            "count by (swerve_store_name) (swerve_store_up == 0) or on() vector(0)",
        ),
    ]
    latency = panels["Added latency from failover (p50 / p95)"]["targets"]
    assert [t["expr"].split(",")[0] for t in latency] == [
        "histogram_quantile(0.5",
        "histogram_quantile(0.95",
    ]
    assert "swerve_call_added_latency_seconds_bucket" in latency[0]["expr"]
    for title, metric, by in (
        ("Call duration by requested route (p50 / p95)", "call_duration", "route_requested"),
        ("Attempt duration by route (p50 / p95)", "attempt_duration", "route"),
    ):
        exprs = [t["expr"] for t in panels[title]["targets"]]
        assert [e.split(",")[0] for e in exprs] == [
            "histogram_quantile(0.5",
            "histogram_quantile(0.95",
        ]
        assert all(
            f"swerve_{metric}_seconds_bucket" in e and f"(le, swerve_{by})" in e for e in exprs
        )
    moved = panels["Calls moved away per minute (skips + swaps) by route"]["targets"]
    assert [t["expr"].split("(rate(")[1].split("{")[0] for t in moved] == [
        "swerve_route_skips_total",
        "swerve_swaps_total",
    ]
    ids = [p["id"] for p in board["panels"]]
    assert ids == list(range(1, len(ids) + 1))  # numbered in grid order: stable across builds


def test_dashboard_reads_top_down_health_errors_latency_decisions_waste() -> None:
    # What an on-call engineer reads first is at the top; every row is filled edge to edge.
    panels = _board()["panels"]
    rows = [p["title"] for p in panels if p["type"] == "row"]
    assert rows == [
        "Route health",
        "Errors and calls moved away",
        "Latency",
        "Tail latency: hedges and learned limits",
        "Cooldowns, probes and declined swaps",
        "Tokens, waste and cost",
    ]
    cells = [p["gridPos"] for p in panels]
    assert cells == sorted(cells, key=lambda g: (g["y"], g["x"]))
    widths: dict[int, int] = {}
    for cell in cells:
        widths[cell["y"]] = widths.get(cell["y"], 0) + cell["w"]
    assert set(widths.values()) == {24}


def test_queries_and_rules_name_only_real_metrics_and_labels() -> None:
    exprs = [t["expr"] for t in _targets(_board())] + [r["expr"] for r in _rules()]
    used = set()
    for expr in exprs:
        for token in re.findall(r"\bswerve_\w+", expr):
            metric = re.sub(r"_(bucket|count)$", "", token)
            assert metric in PROMETHEUS_NAMES.values() or token in LABELS, (token, expr)
            used.add(metric)
    assert {
        PROMETHEUS_NAMES[m]
        for m in (
            names.METRIC_ROUTE_DEGRADED,
            names.METRIC_BREAKER_STATE,
            names.METRIC_SWAPS,
            names.METRIC_RETRIES,
            names.METRIC_ATTEMPTS,
            names.METRIC_ADDED_LATENCY,
            names.METRIC_TIME_TO_FIRST_CHUNK,
            names.METRIC_STORE_UP,
            names.METRIC_ROUTE_SKIPS,
            names.METRIC_CALL_DURATION,
            names.METRIC_ATTEMPT_DURATION,
            names.METRIC_COOLDOWNS,
            names.METRIC_PROBES,
            names.METRIC_SWAPS_DECLINED,
            names.METRIC_FAILOVER_TOKENS,
        )
    } <= used


def _panel_expr(title: str) -> str:
    """The panel's one query, with what Grafana puts for its variables (all routes)."""
    [target] = next(p for p in _board()["panels"] if p["title"] == title)["targets"]
    expr: str = target["expr"]
    return expr.replace("$route", ".*").replace("$__rate_interval", "5m")


def _count(requested: str, per_minute: int, error_type: str = "") -> dict[str, str]:
    failed = f',error_type="{error_type}"' if error_type else f',swerve_route_served="{requested}"'
    labels = f'swerve_route_requested="{requested}"{failed}'
    return {
        "series": f"swerve_call_duration_seconds_count{{{labels}}}",
        "values": f"0+{per_minute}x10",
    }


def test_promtool_evaluates_the_panels_that_compute_more_than_a_rate(tmp_path: Path) -> None:
    # Error rate: failed / all calls per requested route, 0 (not nothing) with no failure.
    # Rare decisions: one 0 when nothing happened, only the real series once something did.
    # Alerts: firing 2, pending 1. Evaluated by promtool, Prometheus's own engine.
    declined = _panel_expr("Swaps declined per minute by route and reason")
    tokens = _panel_expr("Tokens used by failed attempts per minute by route and type")
    series = [
        _count("a/x", 3),
        _count("a/x", 1, "503"),
        _count("b/y", 2),
        {"series": 'swerve_swaps_declined_total{swerve_route="a/x",swerve_reason="deadline"}',
         "values": "0+2x10"},
        {"series": 'ALERTS{alertname="SwerveRouteDegraded",alertstate="firing",swerve_route="a/x"}',
         "values": "1x10"},
        {"series": 'ALERTS{alertname="SwerveHighSwapRate",alertstate="pending",swerve_route="a/x"}',
         "values": "1x10"},
    ]  # fmt: skip
    zero = [{"labels": '{swerve_route="none"}', "value": 0}]
    cases = [
        (
            _panel_expr("Error rate by requested route"),
            [
                {"labels": '{swerve_route_requested="a/x"}', "value": 0.25},
                {"labels": '{swerve_route_requested="b/y"}', "value": 0},
            ],
        ),
        (declined, [{"labels": '{swerve_route="a/x",swerve_reason="deadline"}', "value": 2}]),
        (declined.replace("swerve_swaps_declined_total", "swerve_nothing_total"), zero),
        (tokens, zero),
        (
            _panel_expr("swerve alerts (route and chain)"),
            [
                {"labels": '{alertname="SwerveRouteDegraded",swerve_route="a/x"}', "value": 2},
                {"labels": '{alertname="SwerveHighSwapRate",swerve_route="a/x"}', "value": 1},
            ],
        ),
    ]
    test = {
        "interval": "1m",
        "input_series": series,
        "promql_expr_test": [
            {"expr": expr, "eval_time": "10m", "exp_samples": samples} for expr, samples in cases
        ],
    }
    (tmp_path / "rules.yml").write_text("groups: []\n")
    (tmp_path / "test.yml").write_text(
        json.dumps({"rule_files": ["rules.yml"], "evaluation_interval": "1m", "tests": [test]})
    )
    run = subprocess.run(
        [binary("promtool"), "test", "rules", "test.yml"],
        cwd=tmp_path, capture_output=True, text=True,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr


def test_prometheus_names_are_what_the_exporter_produces() -> None:
    # Every swerve instrument through the real exporter, into a private registry.
    registry = CollectorRegistry()
    provider = MeterProvider(metric_readers=[PrometheusMetricReader(registry=registry)])
    try:
        tel = Telemetry(meter_provider=provider)
        health = MemoryHealth()
        health.cool_down("a/x", 0.0, CooldownRule(4e9, 4e9))
        health.observe_first_chunk("a/x", 0.2, time.time())  # a learned time to first chunk
        tel.seed(FallbackConfig(fallbacks={"a/x": "b/x"}))  # of a configured route
        tel.watch(health)
        store = RedisHealth.from_url(f"redis://127.0.0.1:{free_port()}/0", telemetry=tel)
        tel.watch(store)  # the store.up gauge: 0, nothing listens on that port
        fields = list(vars(tel).values())
        # The decision counters sit in a table keyed by the decision kind.
        instruments = fields + [v for f in fields if isinstance(f, dict) for v in f.values()]
        for instrument in instruments:
            if hasattr(instrument, "observe"):  # counters, read when collected
                instrument.add(1, {names.ROUTE: "a/x"})
            elif hasattr(instrument, "record"):  # histograms
                instrument.record(0.1, {names.ROUTE: "a/x"})
        text = generate_latest(registry).decode()
    finally:
        store.close()
        provider.shutdown()
    samples = {line.split("{")[0].split(" ")[0] for line in text.splitlines() if line[:1] != "#"}
    ours = ("swerve", "gen_ai")  # swerve's own metrics, and the GenAI conventions' client ones
    families = {re.sub(r"_(bucket|count|sum)$", "", s) for s in samples if s.startswith(ours)}
    assert families == set(PROMETHEUS_NAMES.values())
    assert 'swerve_route_degraded{otel_scope_name="swerve"' in text
    assert 'swerve_route="a/x"' in text  # the attribute's label name


# --- alert rules -------------------------------------------------------------------------------
def test_promtool_checks_the_rules_and_runs_their_unit_tests() -> None:
    promtool = binary("promtool")
    check = subprocess.run(
        [promtool, "check", "rules", ALERTS.name], cwd=HERE, capture_output=True, text=True
    )
    assert check.returncode == 0, check.stdout + check.stderr
    assert f"SUCCESS: {len(_rules())} rules found" in check.stdout
    tests = subprocess.run(
        [promtool, "test", "rules", ALERTS_TEST.name], cwd=HERE, capture_output=True, text=True
    )
    assert tests.returncode == 0, tests.stdout + tests.stderr
    assert "SUCCESS" in tests.stdout


def test_every_alert_has_promtool_cases_that_fire_and_that_do_not() -> None:
    cases = [
        c for t in yaml.safe_load(ALERTS_TEST.read_text())["tests"] for c in t["alert_rule_test"]
    ]
    for name in {r["alert"] for r in _rules()}:
        mine = [c for c in cases if c["alertname"] == name]
        assert any(c["exp_alerts"] for c in mine), f"{name}: no case where it fires"
        assert any(not c["exp_alerts"] for c in mine), f"{name}: no case where it stays quiet"


def test_every_alert_names_what_it_is_about() -> None:
    # the route, or for the store alert the store (by its URL without the password)
    for rule in _rules():
        annotations = rule["annotations"]
        assert set(annotations) == {"summary", "description"}
        if rule["alert"] == "SwerveHealthNotShared":
            assert "{{ $labels.swerve_store_name }}" in annotations["description"]
            continue
        for text in annotations.values():
            assert "{{ $labels.swerve_route }}" in text or rule["labels"]["swerve_route"] in text


def test_alerts_are_per_route_not_per_process() -> None:
    # A fleet's processes each export the same route (instance differs): every rule first judges
    # each process, then aggregates over them, so no alert carries an instance label.
    for rule in _rules():
        outer = rule["expr"].split("(", 2)[:2]
        assert outer[0].strip() in {"count by", "sum by"}, rule["expr"]
        assert "instance" not in outer[1] and "job" in outer[1], rule["expr"]
        assert "$labels.instance" not in str(rule["annotations"])
    # ... and alerts_test.yml proves it with processes that report the same route.
    cases = yaml.safe_load(ALERTS_TEST.read_text())["tests"]
    fleet = [c for c in cases if "exactly one alert" in c["name"]]
    assert fleet and all(
        len({re.findall(r'instance="([^"]*)"', s["series"])[0] for s in c["input_series"]}) > 1
        for c in fleet
    )


def test_chains_are_walked_like_the_engine_walks_them() -> None:
    config = FallbackConfig.model_validate(
        {"fallbacks": {"a/x": ["b/y", "c/z"], "b/y": "a/x", "d/w": "a/x"}, "max_swaps": 1}
    )
    assert chain(config, "a/x") == ["a/x", "b/y", "c/z"]
    assert chain(config, "b/y") == ["b/y", "a/x"]  # a/x's own chain starts at b/y: a cycle
    # past its own entry a walk follows each route's map entry (a list's first route)
    assert chain(config, "d/w") == ["d/w", "a/x", "b/y"]
    chain_rules = alert_rules(config)["groups"][1]["rules"]
    assert [r["labels"]["swerve_chain"] for r in chain_rules] == [
        "a/x -> b/y -> c/z",
        "b/y -> a/x",
        "d/w -> a/x -> b/y",
    ]
    off = FallbackConfig.model_validate({"fallbacks": {"a/x": "b/y"}, "max_swaps": 0})
    assert alert_rules(off)["groups"][1]["rules"] == []  # swerve is off: no chain to lose


SUMMARY = "every route of the swerve chain for a/x is degraded"
DESCRIPTION = (
    "In 1 process(es) of j, a/x, b/y and c/z are all cooling down or behind an open breaker: "
    "calls for a/x there have no healthy route left and will fail until one recovers."
)


def _series(metric: str, route: str, values: str) -> dict[str, str]:
    labels = f'job="j",instance="i",swerve_route="{route}"'
    return {"series": f"swerve_{metric}{{{labels}}}", "values": values}


def test_a_three_route_chain_fires_only_when_all_three_are_down(tmp_path: Path) -> None:
    config = FallbackConfig.model_validate({"fallbacks": {"a/x": ["b/y", "c/z"]}})
    (tmp_path / "rules.yml").write_text(render(alert_rules(config), "test"))
    fired = {
        "exp_labels": {
            "severity": "critical",
            "job": "j",
            "swerve_route": "a/x",
            "swerve_chain": "a/x -> b/y -> c/z",
        },
        "exp_annotations": {"summary": SUMMARY, "description": DESCRIPTION},
    }
    case = {
        "interval": "1m",
        "input_series": [
            _series("route_degraded", "a/x", "1x5"),
            _series("route_degraded", "b/y", "1x5"),
            _series("breaker_state", "c/z", "0 0 2 2 2 2"),  # healthy, then open from 2m
        ],
        "alert_rule_test": [
            {"eval_time": "2m", "alertname": "SwerveChainDegraded", "exp_alerts": []},
            {"eval_time": "4m", "alertname": "SwerveChainDegraded", "exp_alerts": [fired]},
        ],
    }
    tests = {"rule_files": ["rules.yml"], "evaluation_interval": "1m", "tests": [case]}
    (tmp_path / "test.yml").write_text(json.dumps(tests))
    run = subprocess.run(
        [binary("promtool"), "test", "rules", "test.yml"],
        cwd=tmp_path, capture_output=True, text=True,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
