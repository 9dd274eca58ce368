"""Paging end to end, on real parts: a swerve process (tests/dashboards/workload.py) sends traffic
to the fake provider and serves its metrics through the OpenTelemetry Prometheus exporter; a
real Prometheus (Debian) scrapes it and evaluates the shipped rules, rendered with second-scale
durations (``PAGING_TIMING``); it sends its alerts to a real Alertmanager (Debian
``prometheus-alertmanager``) running the shipped ``src/swerve/_dashboards/alertmanager.yml``,
changed only in its webhook URL and shortened group timings (:func:`for_test`); Alertmanager
notifies a webhook receiver in this test.

One route down pages once for that route, within the budget of docs/observability.md (scaled to
the test's 1 s intervals); its recovery sends the resolved notification within one group
interval of Prometheus seeing it, and nothing pages after it. Both routes down pages with the
chain alerts, never with the routes' own; their recovery resolves them and nothing pages after.
The tests share one stack, in file order: each starts once Prometheus shows no swerve alert.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from dashboards import HERE
from swerve import FallbackConfig
from swerve import _dashboards as swerve_dashboards
from swerve._dashboards import ALERTMANAGER_FILE
from swerve._dashboards.rules import Timing, alert_rules, render

from .._local import binary, wait_for
from ._alertmanager import Alertmanager, Webhook, holds
from ._prometheus import Prometheus, Workload

CONFIG = HERE / "fallbacks.json"
ALERTMANAGER = Path(swerve_dashboards.__file__).with_name(ALERTMANAGER_FILE)  # the shipped one
PRIMARY = "openrouter/anthropic/claude-sonnet-5"
FALLBACK = "anthropic/claude-sonnet-5"
ROUTE_ALERTS = {"SwerveRouteDegraded"}
# The shipped rules with 1 s intervals in place of 15 s: every `for` and keep_firing_for one
# evaluation interval, as shipped; the moved-away window five intervals (shipped: four).
PAGING_TIMING = Timing(
    degraded_for="1s", moved_window="5s", chain_for="1s", chain_keep_firing_for="1s"
)
# The shipped group timings, scaled the same way.
GROUP_TIMINGS = {"group_wait": {"5s": "1s"}, "group_interval": {"15s": "1s"}}
# Outage to page: the workload's first swap (under 0.2 s), a scrape and an evaluation (1 s
# each), `for` (1 s), group_wait (1 s); the rest is slack for a loaded machine.
PAGE_WITHIN_S = 10.0
# Swerve's own recovery to the resolved notification: a scrape, an evaluation, the chain's
# keep_firing_for and group_interval (1 s each), and slack.
RESOLVED_WITHIN_S = 8.0
# How long to watch for a firing notification after the resolved one: several group intervals.
QUIET_AFTER_S = 5.0
TIMEOUT = 30.0  # per condition; each normally holds within a few seconds

Notification = dict[str, Any]


def for_test(shipped: dict[str, Any], webhook: str) -> dict[str, Any]:
    """The shipped config with every webhook sent to ``webhook`` and shorter group timings;
    routing, grouping, repeat intervals, receivers and inhibition stay as shipped."""

    def route(node: dict[str, Any]) -> dict[str, Any]:
        node = dict(node)
        for key, shorter in GROUP_TIMINGS.items():
            if key in node:
                assert node[key] in shorter, f"no test timing for {key}: {node[key]}"
                node[key] = shorter[node[key]]
        if "routes" in node:
            node["routes"] = [route(child) for child in node["routes"]]
        return node

    def receiver(node: dict[str, Any]) -> dict[str, Any]:
        hooks = [{**hook, "url": webhook} for hook in node.get("webhook_configs", [])]
        return {**node, "webhook_configs": hooks} if hooks else node

    return {
        **shipped,
        "route": route(shipped["route"]),
        "receivers": [receiver(r) for r in shipped["receivers"]],
    }


@dataclass(frozen=True)
class Stack:
    workload: Workload
    prometheus: Prometheus
    alertmanager: Alertmanager
    webhook: Webhook


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    config = FallbackConfig.from_json(CONFIG.read_text())
    rules = render(alert_rules(config, PAGING_TIMING), "tests/dashboards (PAGING_TIMING)")
    webhook = Webhook()
    am_config = for_test(yaml.safe_load(ALERTMANAGER.read_text()), webhook.url)
    # Alertmanager starts while the workload does; both are waited for below.
    alertmanager = Alertmanager(tmp_path_factory.mktemp("am"), yaml.safe_dump(am_config))
    workload = prometheus = None
    try:
        workload = Workload(CONFIG)
        home = tmp_path_factory.mktemp("prom")
        prometheus = Prometheus(home, workload.target, rules, alertmanager.address)
        alertmanager.wait_ready()
        server = prometheus
        wait_for("a scrape of swerve", lambda: server.query('up{job="swerve"} == 1'), TIMEOUT)
        yield Stack(workload, prometheus, alertmanager, webhook)
    finally:
        if prometheus is not None:
            prometheus.stop()
        alertmanager.stop()
        webhook.stop()
        errors = workload.stop() if workload is not None else ""
    assert "Traceback" not in errors, errors


def _no_swerve_alerts(prometheus: Prometheus) -> bool:
    active = prometheus.api("alerts")["alerts"]
    return not [a for a in active if a["labels"]["alertname"].startswith("Swerve")]


def _route(notification: Notification) -> str:
    return str(notification["groupLabels"].get("swerve_route"))


def _names(notification: Notification, status: str | None = None) -> set[str]:
    alerts = notification["alerts"]
    return {a["labels"]["alertname"] for a in alerts if status in (None, a["status"])}


def _since(webhook: Webhook, mark: int) -> Callable[[], list[Notification]]:
    return lambda: webhook.received()[mark:]


def _about(route: str) -> Callable[[Notification], bool]:
    return lambda notification: _route(notification) == route


def _first(
    notifications: Callable[[], list[Notification]], match: Callable[[Notification], bool]
) -> Callable[[], Notification | None]:
    return lambda: next((n for n in notifications() if match(n)), None)


def test_config_example_is_valid_for_amtool(tmp_path: Path) -> None:
    shipped = yaml.safe_load(ALERTMANAGER.read_text())
    for name, config in (("shipped", shipped), ("test", for_test(shipped, "http://127.0.0.1/"))):
        path = tmp_path / f"{name}.yml"
        path.write_text(yaml.safe_dump(config))
        check = subprocess.run(
            [binary("amtool"), "check-config", str(path)], capture_output=True, text=True
        )
        assert check.returncode == 0, f"{name}: {check.stdout}{check.stderr}"


def test_the_test_config_is_the_example_with_a_webhook_url_and_shorter_group_timings() -> None:
    shipped = yaml.safe_load(ALERTMANAGER.read_text())

    def rest(config: dict[str, Any]) -> str:
        text = re.sub(r'"url": "[^"]*"', '"url": URL', json.dumps(config))
        return re.sub(r'"(group_wait|group_interval)": "\w+"', r'"\1": T', text)

    assert rest(for_test(shipped, "http://127.0.0.1:1/x")) == rest(shipped)
    assert "http://127.0.0.1:1/x" in json.dumps(for_test(shipped, "http://127.0.0.1:1/x"))


def test_config_example_names_the_shipped_alerts_and_labels() -> None:
    shipped = yaml.safe_load((HERE / "alerts.yml").read_text())
    rules = {r["alert"]: r for g in shipped["groups"] for r in g["rules"]}
    config = yaml.safe_load(ALERTMANAGER.read_text())
    named = set(re.findall(r"Swerve\w+", json.dumps(config["inhibit_rules"])))
    assert named == ROUTE_ALERTS | {"SwerveChainDegraded"} and named <= set(rules)
    # Grouped and inhibited by labels every alert about a route has: the routes' own rules
    # aggregate by them, the chain rule labels its alert with its requested route.
    assert config["route"]["routes"][0]["group_by"] == ["job", "swerve_route"]
    assert {tuple(r["equal"]) for r in config["inhibit_rules"]} == {("job", "swerve_route")}
    for name in ROUTE_ALERTS:
        assert re.match(r"(count|sum) by \(job, swerve_route\)", rules[name]["expr"]), name
    assert rules["SwerveChainDegraded"]["labels"]["severity"] == "critical"
    assert "swerve_route" in rules["SwerveChainDegraded"]["labels"]


def _recovered(stack: Stack) -> float:
    """When swerve itself sees every route in service again (its own metrics, polled)."""
    wait_for("swerve to see every route healthy", stack.workload.healthy, TIMEOUT)
    return time.monotonic()


def _no_firing(notes: Callable[[], list[Notification]], after: int) -> bool:
    return all(n["status"] == "resolved" for n in notes()[after:])


def test_one_route_down_pages_once_for_it_and_its_recovery_resolves(stack: Stack) -> None:
    wait_for("no swerve alert before", lambda: _no_swerve_alerts(stack.prometheus), TIMEOUT)
    notes = _since(stack.webhook, len(stack.webhook.received()))

    start = time.monotonic()
    stack.workload.send("outage openrouter")
    page = wait_for("a notification", _first(notes, lambda n: True), TIMEOUT)
    paged_after = time.monotonic() - start
    assert paged_after <= PAGE_WITHIN_S, f"paged {paged_after:.1f}s after the outage began"
    stack.workload.send("recover openrouter")
    recovered = _recovered(stack)
    resolved = wait_for(
        "the resolved notification",
        _first(notes, lambda n: n["status"] == "resolved"),
        TIMEOUT,
    )
    resolved_after = time.monotonic() - recovered
    assert resolved_after <= RESOLVED_WITHIN_S, f"resolved {resolved_after:.1f}s after recovery"
    # Nothing pages after the recovery: watch several group intervals.
    count = len(notes())
    holds("no firing notification after recovery", lambda: _no_firing(notes, count), QUIET_AFTER_S)

    # One notification pages, for the degraded route only, named in its labels.
    assert page["status"] == "firing", page
    assert page["groupLabels"] == {"job": "swerve", "swerve_route": PRIMARY}
    assert _names(page, "firing") == {"SwerveRouteDegraded"}
    assert all(a["labels"]["swerve_route"] == PRIMARY for a in page["alerts"])
    assert all(PRIMARY in a["annotations"]["summary"] for a in page["alerts"])
    # Everything after it is that route's recovery: no other route, no alert paged anew.
    paged = {a["fingerprint"] for a in page["alerts"]}
    for later in notes()[1:]:
        assert later["status"] == "resolved", later
        assert _route(later) == PRIMARY, later
        assert {a["fingerprint"] for a in later["alerts"]} <= paged, later
    assert {a["status"] for a in resolved["alerts"]} == {"resolved"}


def test_both_routes_down_pages_the_chain_and_never_the_routes(stack: Stack) -> None:
    wait_for("no swerve alert before", lambda: _no_swerve_alerts(stack.prometheus), TIMEOUT)
    notes = _since(stack.webhook, len(stack.webhook.received()))

    start = time.monotonic()
    stack.workload.send("outage openrouter")
    stack.workload.send("outage anthropic")
    pages: dict[str, str] = {}  # route -> fingerprint of its chain alert
    for route, chain in ((PRIMARY, [PRIMARY, FALLBACK]), (FALLBACK, [FALLBACK, PRIMARY])):
        page = wait_for(
            f"the chain notification for {route}",
            _first(notes, _about(route)),
            TIMEOUT,
        )
        assert page["status"] == "firing"
        assert [a["labels"]["alertname"] for a in page["alerts"]] == ["SwerveChainDegraded"]
        (alert,) = page["alerts"]
        assert alert["labels"]["severity"] == "critical"
        assert alert["labels"]["swerve_chain"] == " -> ".join(chain)
        pages[route] = alert["fingerprint"]
    paged_after = time.monotonic() - start
    assert paged_after <= PAGE_WITHIN_S, f"chains paged {paged_after:.1f}s after the outage began"
    # Each route's group would have notified group_wait after a route alert arrived: watch
    # longer than that, failing on any notification but the chains'.
    holds(
        "only the chains' notifications",
        lambda: all(_names(n) == {"SwerveChainDegraded"} for n in notes()),
        3.0,
    )

    stack.workload.send("recover openrouter")
    stack.workload.send("recover anthropic")
    recovered = _recovered(stack)
    for route in (PRIMARY, FALLBACK):
        wait_for(
            f"the chain for {route} to resolve",
            _first(notes, lambda n, r=route: _about(r)(n) and n["status"] == "resolved"),
            TIMEOUT,
        )
    resolved_after = time.monotonic() - recovered
    assert resolved_after <= RESOLVED_WITHIN_S, f"resolved {resolved_after:.1f}s after recovery"
    count = len(notes())
    holds("no firing notification after recovery", lambda: _no_firing(notes, count), QUIET_AFTER_S)
    # The chain alerts were the only alerts ever notified: the routes' own never paged, not
    # during the outage, not when the chain alerts resolved.
    summary = [(n["status"], _route(n), sorted(_names(n, "firing"))) for n in notes()]
    assert all(_names(n) == {"SwerveChainDegraded"} for n in notes()), summary
    assert {a["fingerprint"] for n in notes() for a in n["alerts"]} == set(pages.values())
