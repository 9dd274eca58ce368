"""Helpers for the paging end-to-end test: a real Alertmanager (the Debian package) on
127.0.0.1, and a webhook receiver that records what it is sent."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from .._local import binary, free_port
from ._prometheus import Server


def holds(what: str, check: Callable[[], bool], seconds: float, poll: float = 0.05) -> None:
    """Call ``check`` for ``seconds``; fail as soon as it is false. For what must not happen,
    such as a notification, within a window the test knows it would have happened in."""
    deadline = time.monotonic() + seconds
    while True:
        assert check(), f"{what} no longer held"
        if time.monotonic() > deadline:
            return
        time.sleep(poll)


class Webhook:
    """An HTTP server on 127.0.0.1 that keeps every notification POSTed to it, in order."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._received: list[dict[str, Any]] = []
        received, lock = self._received, self._lock

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                with lock:
                    received.append(json.loads(body))
                self.send_response(200)
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass  # keep the test's output clean

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_port}/swerve"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def received(self) -> list[dict[str, Any]]:
        """The notifications so far, oldest first."""
        with self._lock:
            return list(self._received)

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()


class Alertmanager(Server):
    """The Debian package's prometheus-alertmanager on 127.0.0.1, one instance (no cluster),
    with its config and storage in ``home``. ``config`` is the config as text (JSON is YAML).
    It starts at once; :meth:`wait_ready` waits for it, so it can start while other parts do."""

    def __init__(self, home: Path, config: str) -> None:
        (home / "alertmanager.yml").write_text(config)
        self.address = f"127.0.0.1:{free_port()}"
        command = [
            binary("prometheus-alertmanager"),
            f"--config.file={home / 'alertmanager.yml'}",
            f"--storage.path={home / 'data'}",
            f"--web.listen-address={self.address}",
            "--cluster.listen-address=",  # a single instance: no gossip port, no peers
        ]
        super().__init__("Alertmanager", command, home, f"http://{self.address}")

    def alerts(self) -> list[dict[str, Any]]:
        """Every alert Alertmanager holds (active, suppressed or unprocessed), as API v2 gives."""
        response = self.client.get("/api/v2/alerts")
        response.raise_for_status()
        alerts: list[dict[str, Any]] = response.json()
        return alerts
