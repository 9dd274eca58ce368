"""swerve's pytest plugin costs a user's test run nothing until a test asks for its fixture: no
fake server, no thread, no OpenTelemetry SDK. Checked in fresh interpreters, through the
installed pytest11 entry point, with every other plugin left out (theirs are not ours to judge).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

HEAVY = ("swerve.testing", "opentelemetry.sdk")

USER_TESTS = f"""
import sys
import threading


def test_a_test_without_the_fixture_sees_nothing_of_swerve(request):
    assert request.config.pluginmanager.has_plugin("swerve")
    assert [m for m in sys.modules if m.startswith({HEAVY!r})] == []
    assert threading.enumerate() == [threading.main_thread()]


def test_the_fixture_still_serves(fake_provider):
    assert fake_provider.url("p").startswith("http://127.0.0.1:")
"""


def test_importing_the_plugin_imports_no_server_thread_or_sdk() -> None:
    code = (
        "import sys, threading, swerve._pytest_plugin\n"
        f"print([m for m in sys.modules if m.startswith({HEAVY!r})], threading.active_count())"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.split() == ["[]", "1"]


def test_a_user_test_run_loads_the_plugin_and_starts_nothing_until_the_fixture(
    tmp_path: Path,
) -> None:
    (tmp_path / "test_user.py").write_text(USER_TESTS)
    env = {**os.environ, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "swerve"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "2 passed" in run.stdout
