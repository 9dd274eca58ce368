"""Time to page and to resolve with the SHIPPED alert rules and Alertmanager config, on real
parts: Debian's Prometheus (15 s scrape and evaluation, default resend delay) and Alertmanager
(the shipped alertmanager.yml, only its webhook URL changed), a swerve workload at one agent's
pace (~4 calls/s, swerve's default timings: tests/dashboards/workload.py --shipped) and a
webhook. Three scenarios, one after the other: one route down, both routes down, and each
one's recovery. Prints a table against the goals of docs/observability.md. Takes ~6 minutes.

Run from the project root: ``uv run python bench/bench_alerts.py``.
"""

from __future__ import annotations

import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/ and dashboards/

from dashboards import HERE
from dashboards.__main__ import ALERTS
from swerve._dashboards import alertmanager
from tests._local import wait_for
from tests.dashboards._alertmanager import Alertmanager, Webhook
from tests.dashboards._prometheus import Prometheus, Workload

CONFIG = HERE / "fallbacks.json"
PRIMARY = "openrouter/anthropic/claude-sonnet-5"
GOAL_S = 60.0
QUIET_S = 90.0  # watched after each resolution for a firing notification
LIMIT_S = 300.0


def _with_webhook(url: str) -> str:
    config: dict[str, Any] = yaml.safe_load(alertmanager())
    for receiver in config["receivers"]:
        for hook in receiver.get("webhook_configs", []):
            hook["url"] = url
    return yaml.safe_dump(config)


def _first(notes: Callable[[], list[dict[str, Any]]], status: str) -> Callable[[], Any]:
    return lambda: next((n for n in notes() if n["status"] == status), None)


def _names(note: dict[str, Any]) -> list[str]:
    return sorted({a["labels"]["alertname"] for a in note["alerts"] if a["status"] == "firing"})


def scenario(stack: tuple[Workload, Prometheus, Webhook], providers: list[str]) -> dict[str, Any]:
    workload, prometheus, webhook = stack
    wait_for("no swerve alert", lambda: not prometheus.api("alerts")["alerts"], LIMIT_S, 1)
    mark = len(webhook.received())

    def notes() -> list[dict[str, Any]]:
        return webhook.received()[mark:]

    start = time.monotonic()
    for provider in providers:
        workload.send(f"outage {provider}")
    wait_for("a page", _first(notes, "firing"), LIMIT_S, 0.1)
    paged = time.monotonic() - start
    time.sleep(20)  # the outage goes on a little: every alert it raises has had its chance
    order = [f"{n['groupLabels'].get('swerve_route', '')[:10]}:{','.join(_names(n))}"
             for n in notes() if n["status"] == "firing"]  # fmt: skip
    for provider in providers:
        workload.send(f"recover {provider}")
    fixed = time.monotonic()
    wait_for("swerve to see its routes healthy", workload.healthy, LIMIT_S, 0.2)
    swerve_ok = time.monotonic()
    seen = len(notes())
    wait_for("resolved", lambda: any(n["status"] == "resolved" for n in notes()[seen - 1 :]),
             LIMIT_S, 0.1)  # fmt: skip
    resolved = time.monotonic()
    after = len(notes())
    time.sleep(QUIET_S)
    late = [n for n in notes()[after:] if n["status"] == "firing"]
    late += [n for n in notes()[seen:after] if n["status"] == "firing"]
    return {
        "paged": paged,
        "order": " then ".join(order),
        "swerve_recovery": swerve_ok - fixed,
        "resolved_after_fix": resolved - fixed,
        "resolved_after_swerve": resolved - swerve_ok,
        "late_firing": len(late),
    }


def main() -> int:
    home = Path(tempfile.mkdtemp(prefix="bench_alerts-"))
    (home / "am").mkdir()
    (home / "prom").mkdir()
    webhook = Webhook()
    manager = Alertmanager(home / "am", _with_webhook(webhook.url))
    workload = Workload(CONFIG, shipped=True)
    prometheus = None
    try:
        prometheus = Prometheus(
            home / "prom", workload.target, ALERTS.read_text(), manager.address,
            interval="15s", resend_delay=None,
        )  # fmt: skip
        manager.wait_ready()
        server = prometheus
        wait_for("a scrape", lambda: server.query('up{job="swerve"} == 1'), 60, 1)
        time.sleep(70)  # past the rules' moved-away window after the process started
        stack = (workload, prometheus, webhook)
        one = scenario(stack, ["openrouter"])
        both = scenario(stack, ["openrouter", "anthropic"])
    finally:
        if prometheus is not None:
            prometheus.stop()
        manager.stop()
        webhook.stop()
        workload.stop()
    rows = [
        ("one route down: outage -> page", f"{one['paged']:.0f} s", "<= 60 s",
         one["paged"] <= GOAL_S),
        ("one route down: notifications", one["order"], "SwerveRouteDegraded only",
         one["order"] == f"{PRIMARY[:10]}:SwerveRouteDegraded"),
        ("both down: outage -> page", f"{both['paged']:.0f} s", "<= 60 s",
         both["paged"] <= GOAL_S),
        ("both down: notifications, in order", both["order"], "chain alerts only",
         "SwerveRouteDegraded" not in both["order"]),
    ]  # fmt: skip
    for name, run in (("one route", one), ("both", both)):
        rows += [
            (f"{name}: fault cleared -> swerve routes healthy", f"{run['swerve_recovery']:.0f} s",
             "(swerve's cooldown / breaker)", True),
            (f"{name}: swerve healthy -> resolved", f"{run['resolved_after_swerve']:.0f} s",
             "<= 60 s", run["resolved_after_swerve"] <= GOAL_S),
            (f"{name}: fault cleared -> resolved", f"{run['resolved_after_fix']:.0f} s",
             "<= 60 s", run["resolved_after_fix"] <= GOAL_S),
            (f"{name}: firing notifications after recovery", str(run["late_firing"]), "0",
             run["late_firing"] == 0),
        ]  # fmt: skip
    width = max(len(r[0]) for r in rows)
    print(f"{'measure':<{width}}  {'result':<40}  {'goal':<30}  ok")
    for name, result, goal, ok in rows:
        print(f"{name:<{width}}  {result:<40}  {goal:<30}  {'yes' if ok else 'NO'}")
    return 0 if all(r[3] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
