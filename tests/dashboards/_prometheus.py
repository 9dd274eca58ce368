"""Helpers for the end-to-end tests: a real Prometheus and a swerve workload, as subprocesses
on 127.0.0.1, and bounded polling (no fixed sleeps that a slow machine could break)."""

from __future__ import annotations

import json
import math
import queue
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO, Any

import httpx

from .._local import binary, free_port, wait_for

WORKLOAD = Path(__file__).with_name("workload.py")


class Lines:
    """A subprocess's stdout, read by a thread so a read can time out."""

    def __init__(self, stream: IO[str]) -> None:
        self._queue: queue.Queue[str] = queue.Queue()
        self.seen: list[str] = []
        threading.Thread(target=self._pump, args=(stream,), daemon=True).start()

    def _pump(self, stream: IO[str]) -> None:
        for line in stream:
            self._queue.put(line.rstrip("\n"))
        self._queue.put("")  # EOF

    def expect(self, prefix: str, timeout: float = 15.0) -> str:
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            try:
                line = self._queue.get(timeout=left)
            except queue.Empty:
                break
            self.seen.append(line)
            if line.startswith(prefix):
                return line
            if line == "" and self._queue.empty():
                break
        raise AssertionError(f"no line starting {prefix!r}; output so far: {self.seen}")


class Workload:
    """tests/dashboards/workload.py: swerve traffic against the fake provider, metrics on HTTP."""

    def __init__(self, config: Path, *, shipped: bool = False) -> None:
        """``shipped``: swerve's default timings at one agent's pace (see workload.py)."""
        self.proc = subprocess.Popen(
            [sys.executable, str(WORKLOAD), str(config), *(["--shipped"] if shipped else [])],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env={"PATH": "", "PYTHONUNBUFFERED": "1"},
        )  # fmt: skip
        assert self.proc.stdout is not None
        self.lines = Lines(self.proc.stdout)
        self.target = self.lines.expect("metrics ").split()[1]  # 127.0.0.1:PORT

    def send(self, command: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        self.lines.expect(f"ok {command}")

    def healthy(self) -> bool:
        """Whether swerve itself sees every route in service again (read from the workload's
        own metrics, not Prometheus): recovery as swerve sees it, the start of the alerts'
        resolve budget."""
        text = httpx.get(f"http://{self.target}/metrics", timeout=5).text
        values = [
            (line.split("{")[0], float(line.rsplit(" ", 1)[1]))
            for line in text.splitlines()
            if line.startswith(("swerve_route_degraded{", "swerve_breaker_state{"))
        ]
        return bool(values) and all(
            value == 0 if name == "swerve_route_degraded" else value != 2 for name, value in values
        )

    def stop(self) -> str:
        """Stop the workload; returns its stderr."""
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            try:
                self.proc.stdin.write("quit\n")
                self.proc.stdin.close()
            except BrokenPipeError:
                pass
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        return self.proc.stderr.read() if self.proc.stderr else ""


class Server:
    """A service binary on 127.0.0.1 started by a test, its output in ``home/<name>.log``, ready
    once ``/-/ready`` answers 200 (Prometheus and Alertmanager both serve it)."""

    def __init__(self, name: str, command: list[str], home: Path, url: str) -> None:
        self.name = name
        self.log = home / f"{name.lower()}.log"
        with self.log.open("w") as log:
            self.proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, cwd=home)
        self.client = httpx.Client(base_url=url, timeout=5)

    def wait_ready(self) -> None:
        try:
            wait_for(f"{self.name} to be ready", self._ready, timeout=30)
        except AssertionError:
            self.stop()
            raise AssertionError(f"{self.name} did not start:\n{self.log.read_text()}") from None

    def _ready(self) -> bool:
        if self.proc.poll() is not None:
            raise AssertionError(f"{self.name} exited:\n{self.log.read_text()}")
        try:
            return self.client.get("/-/ready").status_code == 200
        except httpx.TransportError:
            return False

    def stop(self) -> None:
        self.client.close()
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class Prometheus(Server):
    """The Debian package's prometheus on 127.0.0.1, with its config and storage in ``home``;
    it sends its alerts to the Alertmanager at ``alertmanager`` (``host:port``), if given.

    ``interval`` is the scrape and evaluation interval: 1 s for the tests, 15 s (a common
    production setting) for bench/bench_alerts.py, which also keeps Prometheus's default
    ``resend_delay`` (None) where the tests resend every second."""

    def __init__(
        self,
        home: Path,
        target: str,
        rules: str,
        alertmanager: str | None = None,
        *,
        interval: str = "1s",
        resend_delay: str | None = "1s",
    ) -> None:
        (home / "rules.yml").write_text(rules)
        config: dict[str, Any] = {
            "global": {
                "scrape_interval": interval,
                "scrape_timeout": "1s",
                "evaluation_interval": interval,
            },
            "rule_files": [str(home / "rules.yml")],
            "scrape_configs": [{"job_name": "swerve", "static_configs": [{"targets": [target]}]}],
        }
        if alertmanager is not None:
            config["alerting"] = {
                "alertmanagers": [{"static_configs": [{"targets": [alertmanager]}]}]
            }
        (home / "prometheus.yml").write_text(json.dumps(config))  # JSON is YAML
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        command = [
            binary("prometheus"),
            f"--config.file={home / 'prometheus.yml'}",
            f"--storage.tsdb.path={home / 'data'}",
            f"--web.listen-address=127.0.0.1:{self.port}",
            *([f"--rules.alert.resend-delay={resend_delay}"] if resend_delay else []),
        ]
        super().__init__("Prometheus", command, home, self.url)
        self.wait_ready()

    def api(self, path: str, **params: str) -> Any:
        response = self.client.get(f"/api/v1/{path}", params=params)
        body = response.json()
        assert body["status"] == "success", body
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        """An instant query's series that hold a number (NaN, as from an empty rate, is no data)."""
        data = self.api("query", query=expr)
        assert data["resultType"] == "vector", data
        return [s for s in data["result"] if not math.isnan(float(s["value"][1]))]

    def alerts(self, name: str, state: str | None = None) -> list[dict[str, Any]]:
        """Active (pending or firing) alerts called ``name``, optionally in one state."""
        found = self.api("alerts")["alerts"]
        return [
            a
            for a in found
            if a["labels"]["alertname"] == name and (state is None or a["state"] == state)
        ]
