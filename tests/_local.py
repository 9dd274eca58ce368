"""Plumbing shared by the tests that start real local services (Redis, Prometheus): a free
loopback port, a binary the test script installs, and bounded polling instead of sleeps."""

from __future__ import annotations

import shutil
import socket
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

# The Debian package ./scripts/test installs for each binary (scripts/services).
_PACKAGES = {
    "redis-server": "redis-server",
    "redis-cli": "redis-tools",
    "prometheus": "prometheus",
    "promtool": "prometheus",
    "chromium": "chromium",
    "prometheus-alertmanager": "prometheus-alertmanager",
    "amtool": "prometheus-alertmanager",
}


def wait_for(what: str, check: Callable[[], T | None], timeout: float, poll: float = 0.05) -> T:
    """Call ``check`` until it returns something truthy; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(poll)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def binary(name: str) -> str:
    path = shutil.which(name)
    package = _PACKAGES.get(name, name)
    assert path, f"{name} is not installed: ./scripts/test installs it (Debian package {package})"
    return path
