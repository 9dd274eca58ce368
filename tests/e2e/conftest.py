"""A real trace backend for the session, and swerve's failovers traced into it once.

``phoenix`` is Arize Phoenix (tests/e2e/_phoenix.py). It takes ~30 s to start on these 2-core
machines, mostly importing itself, so it is started as soon as collection knows that a
selected test needs it, together with tests/e2e/traced_app.py (which runs its failovers and
holds the spans until Phoenix listens): their starts overlap each other and the tests that
run first. Both are stopped at the end of the session. ``failover_run`` is what Phoenix
stored from the app.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from swerve._telemetry import names as n

from .._local import wait_for
from ._app import TracedApp
from ._flows import FLOWS
from ._phoenix import PROJECT, Phoenix
from ._trace import SPANS_PER_FLOW, FailoverRun, Span, traces


@dataclass(frozen=True, slots=True)
class _Started:
    phoenix: Phoenix
    app: TracedApp

    def stop(self) -> None:
        self.app.stop()
        self.phoenix.stop()


_STARTED = pytest.StashKey[_Started]()


def _started(config: pytest.Config) -> _Started:
    if _STARTED not in config.stash:
        phoenix = Phoenix()
        config.stash[_STARTED] = _Started(phoenix, TracedApp(f"{phoenix.url}/v1/traces", PROJECT))
    return config.stash[_STARTED]


@pytest.hookimpl(trylast=True)  # after -k / -m have deselected what will not run
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    needed = any("phoenix" in getattr(item, "fixturenames", ()) for item in items)
    # Under xdist every worker collects every test but only one runs the "phoenix" group
    # (tests/conftest.py): there it starts with its first test, which that worker runs first.
    if needed and not config.option.collectonly and not hasattr(config, "workerinput"):
        _started(config)


def pytest_unconfigure(config: pytest.Config) -> None:
    started = config.stash.get(_STARTED, None)
    if started is not None:
        started.stop()


@pytest.fixture(scope="session")
def phoenix(pytestconfig: pytest.Config) -> Phoenix:
    return _started(pytestconfig).phoenix.ready()


@pytest.fixture(scope="session")
def failover_run(pytestconfig: pytest.Config, phoenix: Phoenix) -> FailoverRun:
    answers = _started(pytestconfig).app.flush()
    expected = SPANS_PER_FLOW * len(FLOWS)

    def stored() -> list[Span] | None:
        spans = phoenix.spans()
        return spans if len(spans) >= expected else None

    spans = wait_for(f"Phoenix to store {expected} spans", stored, timeout=30, poll=0.2)
    by_request = {t.root["attributes"].get(n.ROUTE_REQUESTED): t for t in traces(spans)}
    return FailoverRun(
        answers=answers, spans=spans, traces={f.name: by_request[f.primary] for f in FLOWS}
    )
