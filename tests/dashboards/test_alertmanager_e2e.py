"""Paging end to end, on real parts: a swerve process (tests/dashboards/workload.py) sends traffic
to the fake provider and serves its metrics through the OpenTelemetry Prometheus exporter; a
real Prometheus (Debian) scrapes it and evaluates the shipped rules, rendered with second-scale
durations (``PAGING_TIMING``); it sends its alerts to a real Alertmanager (Debian
``prometheus-alertmanager``) running the shipped ``src/swerve/_dashboards/alertmanager.yml``,
changed only in its webhook URL and shortened group timings (:func:`for_test`); Alertmanager
notifies a webhook receiver in this test.

One route down pages once for that route, and its recovery sends the resolved notification.
Both routes down pages with the chain alerts, and Alertmanager mutes the routes' own alerts.
The tests share one stack, in file order: each starts once Prometheus shows no swerve alert, and
the last one does not wait for its recovery.
"""

from __future__ import annotations

import json
import re
import subprocess
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
ROUTE_ALERTS = {"SwerveRouteDegraded", "SwerveHighSwapRate", "SwerveBreakerOpen"}
# The shipped rules with durations a test can wait out. The swap-rate window is short so that
# the alert resolves soon after recovery, yet longer than the workload's longest cooldown (3 s),
# so a dead route swaps away at least once in every window and the alert holds through an
# outage. The chain alert fires at once, before the routes' own alerts (1 s), so that it is
# there to mute them when their first notification is due.
PAGING_TIMING = Timing(
    degraded_for="1s",
    swap_window="5s",
    swaps_per_minute=5,
    swap_for="1s",
    chain_for="0s",
    breaker_for="0s",
)
# The shipped group timings, shortened. A route's group still waits long enough for the
# route's alerts, which fire within about a second of each other here (a few on a loaded CI
# machine), to go out together.
GROUP_TIMINGS = {"group_wait": {"30s": "4s", "10s": "1s"}, "group_interval": {"5m": "1s"}}
ROUTE_GROUP_WAIT_S = 4.0
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


def test_one_route_down_pages_once_for_it_and_its_recovery_resolves(stack: Stack) -> None:
    wait_for("no swerve alert before", lambda: _no_swerve_alerts(stack.prometheus), TIMEOUT)
    notes = _since(stack.webhook, len(stack.webhook.received()))

    stack.workload.send("outage openrouter")
    page = wait_for("a notification", _first(notes, lambda n: True), TIMEOUT)
    stack.workload.send("recover openrouter")
    resolved = wait_for(
        "the resolved notification",
        _first(notes, lambda n: n["status"] == "resolved"),
        TIMEOUT,
    )

    # One notification pages, for the degraded route only, named in its labels. It carries the
    # route's alerts together; the breaker's (if its breaker opened) is muted by the degraded one.
    assert page["status"] == "firing", page
    assert page["groupLabels"] == {"job": "swerve", "swerve_route": PRIMARY}
    assert _names(page, "firing") == {"SwerveRouteDegraded", "SwerveHighSwapRate"}
    assert all(a["labels"]["swerve_route"] == PRIMARY for a in page["alerts"])
    assert all(PRIMARY in a["annotations"]["summary"] for a in page["alerts"])
    # Everything after it is that route's recovery, alert by alert: no other route, no alert
    # paged anew; the last one says the route's alerts are all resolved.
    recovery = notes()[1 : notes().index(resolved) + 1]
    paged = {a["fingerprint"] for a in page["alerts"]}
    for later in recovery:
        assert _route(later) == PRIMARY, later
        assert {a["fingerprint"] for a in later["alerts"]} <= paged, later
        assert _names(later, "resolved"), later
    assert {a["status"] for a in resolved["alerts"]} == {"resolved"}
    assert set().union(*(_names(n, "resolved") for n in recovery)) == _names(page)
    assert all(_route(n) == PRIMARY for n in notes())


def test_both_routes_down_pages_the_chain_and_mutes_the_routes_alerts(stack: Stack) -> None:
    wait_for("no swerve alert before", lambda: _no_swerve_alerts(stack.prometheus), TIMEOUT)
    notes = _since(stack.webhook, len(stack.webhook.received()))

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

    # Both routes' own alerts reached Alertmanager and are muted by their chain's alert.
    def muted() -> bool:
        alerts = stack.alertmanager.alerts()
        own = [a for a in alerts if a["labels"]["alertname"] == "SwerveRouteDegraded"]
        return {a["labels"]["swerve_route"] for a in own} == {PRIMARY, FALLBACK} and all(
            a["status"]["state"] == "suppressed"
            and pages[a["labels"]["swerve_route"]] in a["status"]["inhibitedBy"]
            for a in own
        )

    wait_for("the routes' own alerts to be muted by the chain alerts", muted, TIMEOUT)
    # Their groups were made when the first of them arrived, before this point, and would have
    # notified group_wait later: watch that long, failing on any notification but the chains'.
    holds(
        "only the chains' notifications",
        lambda: all(_names(n) == {"SwerveChainDegraded"} for n in notes()),
        ROUTE_GROUP_WAIT_S + 0.5,
    )
    assert sorted(_route(n) for n in notes()) == sorted([PRIMARY, FALLBACK])

    stack.workload.send("recover openrouter")
    stack.workload.send("recover anthropic")
