"""End to end, on real parts: a swerve process (tests/dashboards/workload.py) sends traffic to the
fake provider and serves its metrics through the OpenTelemetry Prometheus exporter; a real
Prometheus (the Debian package) scrapes it every second and evaluates the shipped alert rules,
rendered from the same definition with second-scale durations (``E2E_TIMING``).

An outage on the fake provider must fire the alerts (read back from Prometheus's API) and
recovery must resolve them; while the outage lasts, every query of the committed dashboard
must return data from that Prometheus.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from functools import partial
from typing import Any

import pytest

from dashboards import HERE
from swerve import FallbackConfig
from swerve._dashboards import PROMETHEUS_NAMES, dashboard
from swerve._dashboards.rules import Timing, alert_rules, render
from swerve._telemetry import names as telemetry

from ._prometheus import Prometheus, Workload, wait_for

CONFIG = HERE / "fallbacks.json"
PRIMARY = "openrouter/anthropic/claude-sonnet-5"
FALLBACK = "anthropic/claude-sonnet-5"
# The shipped rules with durations a test can wait out. Same definition, same expressions.
E2E_TIMING = Timing(
    degraded_for="1s", moved_window="5s", chain_for="1s", chain_keep_firing_for="1s"
)
# What Grafana puts in place of the dashboard's variables: all routes, a rate window.
VARIABLES = {"$route": ".*", "$__rate_interval": "30s"}
TIMEOUT = 30.0  # per condition; each normally holds within a few seconds


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Workload, Prometheus]]:
    config = FallbackConfig.from_json(CONFIG.read_text())
    workload = Workload(CONFIG)
    prometheus = None
    try:
        rules = render(alert_rules(config, E2E_TIMING), "tests/dashboards (E2E_TIMING)")
        prometheus = server = Prometheus(tmp_path_factory.mktemp("prom"), workload.target, rules)
        wait_for("a scrape of swerve", lambda: server.query('up{job="swerve"} == 1'), TIMEOUT)
        yield workload, server
    finally:
        if prometheus is not None:
            prometheus.stop()
        errors = workload.stop()
    assert "Traceback" not in errors, errors


def _firing(prometheus: Prometheus, name: str, route: str) -> dict[str, Any] | None:
    for alert in prometheus.alerts(name, "firing"):
        if alert["labels"].get("swerve_route") == route:
            return alert
    return None


def _no_swerve_alerts(prometheus: Prometheus) -> bool:
    active = prometheus.api("alerts")["alerts"]
    return not [a for a in active if a["labels"]["alertname"].startswith("Swerve")]


def _panel_queries() -> list[tuple[str, str]]:
    board = json.loads(dashboard())
    queries = []
    for panel in board["panels"]:
        for target in panel.get("targets", []):
            expr = target["expr"]
            for variable, value in VARIABLES.items():
                expr = expr.replace(variable, value)
            assert not re.search(r"\$\w", expr), f"unsubstituted variable in {expr}"
            queries.append((f"{panel['title']} [{target['refId']}]", expr))
    return queries


def test_outage_fires_the_alerts_fills_every_panel_and_recovery_resolves(
    stack: tuple[Workload, Prometheus],
) -> None:
    workload, prometheus = stack
    wait_for("no swerve alert before the outage", lambda: _no_swerve_alerts(prometheus), TIMEOUT)

    workload.send("outage openrouter")
    degraded = wait_for(
        "SwerveRouteDegraded to fire for the primary",
        lambda: _firing(prometheus, "SwerveRouteDegraded", PRIMARY),
        TIMEOUT,
    )
    assert degraded["labels"]["job"] == "swerve"
    assert "instance" not in degraded["labels"]  # one alert per route, not per process
    assert float(degraded["value"]) == 1  # the processes that see it: the one workload
    assert PRIMARY in degraded["annotations"]["summary"]
    assert PRIMARY in degraded["annotations"]["description"]
    # The fallback serves every call: its route is healthy, so no chain is dead.
    assert not prometheus.alerts("SwerveChainDegraded")
    degraded_routes = {
        a["labels"]["swerve_route"] for a in prometheus.alerts("SwerveRouteDegraded")
    }
    assert degraded_routes == {PRIMARY}

    # Every panel of the committed dashboard shows data from this Prometheus.
    for title, expr in _panel_queries():
        series = wait_for(f"data for panel {title}: {expr}", partial(prometheus.query, expr), 20)
        assert series, title
    routes = prometheus.api("label/swerve_route/values", **{"match[]": "swerve_attempts_total"})
    assert {PRIMARY, FALLBACK} <= set(routes)  # the $route variable's choices

    # The names the dashboard and the rules use are the ones the exporter really produced.
    names = set(prometheus.api("label/__name__/values"))
    swerve_names = {n for n in names if n.startswith("swerve_")}
    families = {re.sub(r"_(bucket|count|sum)$", "", n) for n in swerve_names}
    assert families <= set(PROMETHEUS_NAMES.values()), families - set(PROMETHEUS_NAMES.values())
    for metric in (
        telemetry.METRIC_ROUTE_DEGRADED,
        telemetry.METRIC_BREAKER_STATE,
        telemetry.METRIC_SWAPS,
        telemetry.METRIC_RETRIES,
        telemetry.METRIC_ATTEMPTS,
    ):
        assert PROMETHEUS_NAMES[metric] in names
    for metric in (telemetry.METRIC_ADDED_LATENCY, telemetry.METRIC_TIME_TO_FIRST_CHUNK):
        assert PROMETHEUS_NAMES[metric] + "_bucket" in names

    workload.send("recover openrouter")
    wait_for("recovery to resolve every alert", lambda: _no_swerve_alerts(prometheus), TIMEOUT)


def test_every_route_of_the_chain_down_fires_the_chain_alert(
    stack: tuple[Workload, Prometheus],
) -> None:
    workload, prometheus = stack
    wait_for("no swerve alert before the outage", lambda: _no_swerve_alerts(prometheus), TIMEOUT)

    workload.send("outage openrouter")
    workload.send("outage anthropic")
    for requested, chain in ((PRIMARY, [PRIMARY, FALLBACK]), (FALLBACK, [FALLBACK, PRIMARY])):
        alert = wait_for(
            f"SwerveChainDegraded to fire for {requested}",
            partial(_firing, prometheus, "SwerveChainDegraded", requested),
            TIMEOUT,
        )
        assert alert["labels"]["swerve_chain"] == " -> ".join(chain)
        assert alert["labels"]["severity"] == "critical"
        assert "instance" not in alert["labels"] and float(alert["value"]) == 1
        assert requested in alert["annotations"]["summary"]
    # A dead chain is the chain alert's: the routes' own alerts do not start meanwhile.
    assert not prometheus.alerts("SwerveRouteDegraded", "firing")

    workload.send("recover openrouter")
    workload.send("recover anthropic")
    wait_for("recovery to resolve every alert", lambda: _no_swerve_alerts(prometheus), TIMEOUT)


def test_the_e2e_rules_are_the_shipped_rules_with_shorter_durations() -> None:
    config = FallbackConfig.from_json(CONFIG.read_text())
    shipped, fast = alert_rules(config), alert_rules(config, E2E_TIMING)
    assert [r["alert"] for g in shipped["groups"] for r in g["rules"]] == [
        r["alert"] for g in fast["groups"] for r in g["rules"]
    ]

    def shape(expr: str) -> str:  # only the moved-away window may differ
        return re.sub(r"(\[|offset )(1m|5s)\b", r"\1W", expr)

    for group_shipped, group_fast in zip(shipped["groups"], fast["groups"], strict=True):
        for a, b in zip(group_shipped["rules"], group_fast["rules"], strict=True):
            assert a["labels"] == b["labels"]
            assert shape(a["expr"]) == shape(b["expr"])
            assert a.keys() == b.keys()  # for, keep_firing_for: set in both
