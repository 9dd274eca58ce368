"""tests/e2e/traced_app.py as a running process, configured only by OTel environment variables.

It is started before the backend is up (to overlap their starts): it runs its failovers at
once and holds the spans in its batch processor until :meth:`TracedApp.flush` says the
backend is listening.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).parents[2]


class TracedApp:
    def __init__(self, traces_endpoint: str, project: str) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
        env |= {
            "OTEL_SERVICE_NAME": "swerve-e2e-app",
            # Phoenix files spans under the resource's openinference.project.name.
            "OTEL_RESOURCE_ATTRIBUTES": f"openinference.project.name={project}",
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": traces_endpoint,
            "OTEL_BSP_SCHEDULE_DELAY": "600000",  # ms: no export before the flush
        }
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.e2e.traced_app"],
            cwd=ROOT, env=env, text=True,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )  # fmt: skip

    def flush(self, timeout: float = 120) -> dict[str, Any]:
        """Tell the app to export its spans; its report once it has (and has exited)."""
        try:
            out, err = self.proc.communicate("flush\n", timeout=timeout)
        except subprocess.TimeoutExpired:
            self.stop()
            raise AssertionError(f"traced_app did not finish within {timeout:g}s") from None
        assert self.proc.returncode == 0, err
        report: dict[str, Any] = json.loads(out.splitlines()[-1])
        return report

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.communicate()
