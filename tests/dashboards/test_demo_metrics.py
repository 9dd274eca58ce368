"""``swerve demo --metrics-port N`` serves the demo's metrics for Prometheus while it runs."""

from __future__ import annotations

import signal
import subprocess
import sys

import httpx

from dashboards import PROMETHEUS_NAMES
from swerve._telemetry import names

from ._prometheus import Lines


def test_demo_serves_its_metrics_for_prometheus() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "swerve.cli", "demo", "--fast", "--metrics-port=0", "--hold=60"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={"PATH": "", "COLUMNS": "200", "PYTHONUNBUFFERED": "1"},
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        lines = Lines(proc.stdout)
        url = lines.expect("metrics at http://127.0.0.1:", timeout=30).split()[-1]
        lines.expect("serving metrics for 60s more", timeout=60)  # the script has run
        text = httpx.get(url, timeout=5).text
        # The outage story, in Prometheus's words: the primary failed, was retried, swapped away
        # from and cooled down; the gauges still report both routes while the demo holds.
        primary = 'swerve_route="openrouter/anthropic/claude-sonnet-5"'
        for metric in (names.METRIC_RETRIES, names.METRIC_COOLDOWNS, names.METRIC_ROUTE_DEGRADED):
            assert any(
                line.startswith(PROMETHEUS_NAMES[metric] + "{") and primary in line
                for line in text.splitlines()
            ), metric
        assert 'swerve_route_from="openrouter/anthropic/claude-sonnet-5"' in text
        assert PROMETHEUS_NAMES[names.METRIC_ADDED_LATENCY] + "_bucket{" in text
        assert PROMETHEUS_NAMES[names.METRIC_TIME_TO_FIRST_CHUNK] + "_bucket{" in text
        proc.send_signal(signal.SIGINT)  # Ctrl-C ends the hold
        assert proc.wait(timeout=15) == 130
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert "Traceback" not in (proc.stderr.read() if proc.stderr else "")
