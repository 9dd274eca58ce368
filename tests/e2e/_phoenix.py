"""A real Arize Phoenix (an OTLP trace backend with a web UI) on 127.0.0.1, for the e2e tests.

Phoenix is a test tool, never a dependency of swerve: it runs from its own pinned environment
(:mod:`._tools`), so its pins never meet the project's lock.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import httpx

from .._local import free_port, wait_for
from ._tools import PHOENIX, tool, tool_env

PROJECT = "swerve-e2e"  # where Phoenix files the spans (resource openinference.project.name)
# Importing Phoenix takes ~20 s of CPU; on a loaded 2-core machine the start takes ~30-60 s.
# The first run of all also installs it (~850 MB) into uv's cache.
START_TIMEOUT = 300.0


class Phoenix:
    """``phoenix serve`` with a temporary working dir, free ports and nothing fetched from
    the internet. Constructing it only starts the process: :meth:`ready` waits for it."""

    def __init__(self) -> None:
        self._home = tempfile.TemporaryDirectory(prefix="swerve-phoenix-")
        self.log = Path(self._home.name) / "phoenix.log"
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = tool_env(
            PHOENIX_WORKING_DIR=self._home.name,
            PHOENIX_HOST="127.0.0.1",
            PHOENIX_PORT=str(self.port),
            PHOENIX_GRPC_PORT=str(free_port()),
            # A closed network: no fonts, telemetry pixels, WASM download or docs assistant.
            PHOENIX_ALLOW_EXTERNAL_RESOURCES="false",
            PHOENIX_TELEMETRY_ENABLED="false",
            PHOENIX_DISABLE_AGENT_ASSISTANT="true",
            PHOENIX_ALLOWED_SANDBOX_PROVIDERS="NONE",
        )
        with self.log.open("w") as log:
            # Its own session: uv and the server it runs are stopped together.
            self.proc = subprocess.Popen(
                tool(PHOENIX, "phoenix", "serve"),
                stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True,
            )  # fmt: skip
        self.client = httpx.Client(base_url=self.url, timeout=10)

    def ready(self) -> Phoenix:
        try:
            wait_for("Phoenix to be healthy", self._healthy, timeout=START_TIMEOUT, poll=0.25)
        except AssertionError as e:
            raise AssertionError(f"{e}; Phoenix's log:\n{self._tail()}") from None
        return self

    def _healthy(self) -> bool:
        if self.proc.poll() is not None:
            raise AssertionError(f"Phoenix exited ({self.proc.returncode}):\n{self._tail()}")
        try:
            return self.client.get("/healthz").status_code == 200
        except httpx.TransportError:
            return False

    def _tail(self) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-40:])

    def spans(self, project: str = PROJECT) -> list[dict[str, Any]]:
        """Every span of ``project``, through Phoenix's REST API, all pages."""
        spans: list[dict[str, Any]] = []
        params: dict[str, str | int] = {"limit": 1000}
        while True:
            response = self.client.get(f"/v1/projects/{project}/spans", params=params)
            if response.status_code == 404:  # no span has created the project yet
                return []
            response.raise_for_status()
            body = response.json()
            spans += body["data"]
            if not body.get("next_cursor"):
                return spans
            params["cursor"] = body["next_cursor"]

    def stop(self) -> None:
        self.client.close()
        _signal_group(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            _signal_group(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self._home.cleanup()


def _signal_group(pid: int, sig: int) -> None:
    """Signal the process group ``pid`` leads (uv and the server it started)."""
    with contextlib.suppress(ProcessLookupError):  # it has ended by itself
        os.killpg(pid, sig)
