"""The reliability suite: fuzzed inputs, faults, load, resources and secrets.

Every test here states its bound and reports what it measured through the ``figure`` fixture:
``figure("connection dropped at every byte offset", "0 calls lost", measured="412 offsets, 0
lost")``. The figures print at the end of the run, and ``$SWERVE_RELIABILITY_REPORT`` (a path)
also writes them as JSON, which ``bench/reliability.py`` renders into docs/reliability.md.

The suite runs short in CI. ``$SWERVE_SOAK_S`` (seconds, default 0) makes the load tests run
that long instead: ``bench/reliability.py --soak 600`` sets it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import pytest

REPORT_VAR = "SWERVE_RELIABILITY_REPORT"
SOAK_VAR = "SWERVE_SOAK_S"


@dataclass(frozen=True)
class Figure:
    test: str
    what: str
    bound: str
    measured: str


_FIGURES: list[Figure] = []

Report = Callable[..., None]


@pytest.fixture
def figure(request: pytest.FixtureRequest) -> Report:
    """``figure(what, bound, measured=...)``: record one figure of this test."""

    def report(what: str, bound: str, *, measured: str) -> None:
        _FIGURES.append(Figure(request.node.nodeid, what, bound, measured))

    return report


@pytest.fixture(scope="session")
def soak_s() -> float:
    """How long the load tests run: 0 (their short CI form) unless ``$SWERVE_SOAK_S`` is set."""
    raw = os.environ.get(SOAK_VAR, "").strip()
    try:
        value = float(raw) if raw else 0.0
    except ValueError:
        raise pytest.UsageError(f"${SOAK_VAR}={raw!r} is not a number of seconds") from None
    if not 0 <= value <= 24 * 3600:
        raise pytest.UsageError(f"${SOAK_VAR}={raw!r}: give 0 to 86400 seconds")
    return value


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not _FIGURES:
        return
    terminalreporter.section("reliability figures")
    for f in _FIGURES:
        terminalreporter.write_line(f"{f.what}: {f.measured} (bound: {f.bound})  [{f.test}]")
    path = os.environ.get(REPORT_VAR, "").strip()
    if path:
        Path(path).write_text(json.dumps([asdict(f) for f in _FIGURES], indent=2) + "\n")
