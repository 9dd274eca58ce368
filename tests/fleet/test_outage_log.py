"""Redis going away is logged: one WARNING on the "swerve" logger per outage, naming the store
without its password, and one INFO when sharing resumes; never a line per failed reconnect or
per call. A real redis-server (tests/fleet/conftest.py) is killed and started again.

caplog is the handler an application configures; with none configured, Python's last-resort
handler prints the WARNING on stderr (the last test here, in a process of its own).
"""

from __future__ import annotations

import logging
import select
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable

import pytest

from swerve import RedisHealth
from swerve._health.store import CooldownRule

from .._local import free_port
from ._servers import RedisServer, wait_for

PASSWORD = "s3cret-outage-pass-0123456789"
ROUTE = "openrouter/anthropic/claude-sonnet-5"


def _lines(caplog: pytest.LogCaptureFixture, level: int) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "swerve" and r.levelno == level]


def test_one_warning_per_outage_and_one_info_when_sharing_resumes(
    start_redis: Callable[..., RedisServer], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)  # every logger, every level: none may carry the password
    server = start_redis(requirepass=PASSWORD)
    # Reconnects every 0.1 s at most, so the outage below sees many failed reconnects.
    store = RedisHealth.from_url(server.url, reconnect_max_s=0.1)
    try:
        assert store.wait_until_shared(5)
        masked = f"redis://:***@127.0.0.1:{server.port}/0"
        (info,) = _lines(caplog, logging.INFO)
        assert info.endswith(f"sharing route health through {masked}")
        for outage in (1, 2):
            server.kill()
            warnings = wait_for(
                "the outage's warning", lambda: _lines(caplog, logging.WARNING), timeout=10
            )
            # Calls go on meanwhile, and the reader keeps failing to reconnect: 1 s of real
            # time (the reconnect loop runs on real time, not a test clock) is ~10 attempts.
            deadline = time.monotonic() + 1.0
            while time.monotonic() < deadline:
                store.cool_down(ROUTE, time.time(), CooldownRule(5, 5), "unavailable")
                store.claim_probe(ROUTE, time.time() + 10, 1.0)
                time.sleep(0.05)
            assert len(_lines(caplog, logging.WARNING)) == outage, warnings
            assert f"route health is not shared ({masked} unreachable: " in warnings[-1]
            server.start()
            wait_for(
                "sharing to resume",
                lambda: len(_lines(caplog, logging.INFO)) == 1 + outage,  # noqa: B023
                timeout=10,
            )
            assert store.sharing
    finally:
        store.close()
    assert len(_lines(caplog, logging.WARNING)) == 2  # closing is not an outage
    assert all(PASSWORD not in r.getMessage() for r in caplog.records)
    assert all(PASSWORD not in str(r.args) for r in caplog.records)


def test_with_logging_unconfigured_the_outage_warning_reaches_stderr() -> None:
    """A script that configures no logging still hears that sharing stopped: one line on stderr
    (Python's last-resort handler), without the password, and nothing else from swerve."""
    port = free_port()  # nothing listens there: the store never connects
    script = textwrap.dedent(
        f"""
        import sys
        from swerve import RedisHealth
        store = RedisHealth.from_url("redis://:{PASSWORD}@127.0.0.1:{port}/0")
        sys.stdin.read()  # until the test has seen the warning
        store.close()
        """
    )
    child = subprocess.Popen(
        [sys.executable, "-c", script],
        stdin=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stderr is not None and child.stdin is not None
        ready, _, _ = select.select([child.stderr], [], [], 30)
        assert ready, "no warning within 30 s"
        first = child.stderr.readline()
        child.stdin.close()
        rest = child.stderr.read()
        assert child.wait(timeout=30) == 0, rest
    finally:
        child.kill()
    assert first.startswith(f"route health is not shared (redis://:***@127.0.0.1:{port}/0 ")
    assert rest == "", rest
    assert PASSWORD not in first
