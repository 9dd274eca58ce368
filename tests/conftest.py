"""Shared fixtures: real OTel SDK with in-memory exporters, and an injected clock; and how the
suite is split: the ``services`` and ``slow`` markers (``--fast`` leaves both out) and the
groups of tests that xdist keeps on one worker, so a costly service starts once."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from swerve import Failover, FallbackConfig, MemoryHealth
from swerve.testing import FakeClock, FakeProvider, Reply, TelemetryRecorder

if TYPE_CHECKING:  # the harness imports the SDKs: only the tests that use it pay for them
    from ._drive import Mode

__all__ = ["FakeClock", "Otel"]


# The shared helpers are public: users test their own configs with them too.
Otel = TelemetryRecorder

ROOT = Path(__file__).resolve().parents[1]

# Marked by where a test lives, so a new test there cannot forget its marker. ``services``:
# it starts a process (redis-server, Prometheus, Alertmanager, Phoenix, chromium, the CLI, a
# build) or drives a document's blocks through them. ``slow``: fuzzing, load and soak figures,
# and the fault matrices that wait out real time limits route by route.
_SERVICES = (
    "tests/dashboards/",
    "tests/docs/",
    "tests/e2e/",
    "tests/fleet/",
    "tests/frameworks/",
    "tests/nesting/",
    "tests/test_cli.py",
    "tests/test_bootstrap.py",
    "tests/test_cli_health.py",
    "tests/test_demo.py",
    "tests/test_packaging.py",
    "tests/test_pytest_plugin.py",
    "integrations/langchain/tests/test_middleware.py",
)
_SLOW = (
    "tests/reliability/",
    "integrations/langchain/tests/test_reliability_faults.py",
    "integrations/langchain/tests/test_faults.py",
    "integrations/langchain/tests/test_sync_limits.py",
)

# One xdist worker each: what a module (or package) starts once and shares would otherwise be
# started once per worker (the doc blocks of one page share a namespace and run in order).
_GROUPS = {
    "tests/e2e/": "phoenix",
    "tests/nesting/": "nesting",
    "tests/docs/test_python_blocks.py": "doc-blocks",
    "tests/dashboards/test_alerts_e2e.py": "prometheus",
    "tests/dashboards/test_alertmanager_e2e.py": "alertmanager",
    "tests/test_packaging.py": "packaging",
    "tests/test_demo.py": "demo",
    # Real agents, and recipes in subprocesses of their own environments: on one worker, so
    # they do not crowd the timing-sensitive tests on the others.
    "tests/frameworks/": "frameworks",
}


def _group(where: str) -> str | None:
    return next((group for prefix, group in _GROUPS.items() if where.startswith(prefix)), None)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--fast",
        action="store_true",
        help="the unit tests only: leave out the tests marked services or slow",
    )


def _where(item: pytest.Item) -> str:
    try:
        return item.path.resolve().relative_to(ROOT).as_posix()
    except ValueError:  # a test outside the checkout (pytester's)
        return ""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        where = _where(item)
        if where.startswith(_SERVICES):
            item.add_marker(pytest.mark.services)
        if where.startswith(_SLOW):
            item.add_marker(pytest.mark.slow)
    if config.getoption("fast"):
        kept = [i for i in items if not ({"services", "slow"} & {m.name for m in i.iter_markers()})]
        config.hook.pytest_deselected(items=[i for i in items if i not in kept])
        items[:] = kept


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadgroup`` with the groups above. (xdist's own reads ``xdist_group`` marks
    through a node id suffix that pytest 9 no longer shows it; a group is named here by path.)
    xdist sends the largest groups out first, so the service groups start while the single
    tests spread over the workers."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling  # type: ignore[import-untyped]

    class ByGroup(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            return _group(nodeid) or nodeid

    return ByGroup(config, log)


@pytest.fixture
def otel() -> Iterator[TelemetryRecorder]:
    recorder = TelemetryRecorder()
    yield recorder
    recorder.shutdown()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def fake(request: pytest.FixtureRequest) -> Iterator[FakeProvider]:
    """A served fake provider whose providers answer "from <name>": the test module's
    ``FAKE_PROVIDERS``, else "primary" and "fallback" (tests that need other replies, or the
    in-process fake, define their own ``fake``)."""
    names = getattr(request.module, "FAKE_PROVIDERS", ("primary", "fallback"))
    with FakeProvider() as server:
        for name in names:
            server.set_reply(name, Reply(text=f"from {name}"))
        yield server


@pytest.fixture(params=["sync", "async"])
def mode(request: pytest.FixtureRequest) -> Iterator[Mode]:
    """The one sync/async harness (tests/_drive.py): a test written once runs both ways; what
    it made is closed after. Engine tests give it their in-process fake (``mode.over``)."""
    from ._drive import Mode

    driver = Mode(request.param == "sync")
    yield driver
    driver.close()


@pytest.fixture(params=["httpx", "httpx2"])
def module(request: pytest.FixtureRequest) -> Any:
    """The client library under the transport: httpx or httpx2."""
    import httpx
    import httpx2

    return httpx if request.param == "httpx" else httpx2


@pytest.fixture
def failover(make_failover: Any) -> Failover:
    """A Failover on the transport tests' routes and config (``_drive.TRANSPORT_CONFIG``)."""
    from ._drive import TRANSPORT_CONFIG

    return make_failover(TRANSPORT_CONFIG)  # type: ignore[no-any-return]


@pytest.fixture
def health() -> MemoryHealth:
    return MemoryHealth()


@pytest.fixture
def make_failover(otel: Otel, clock: FakeClock, health: MemoryHealth):  # type: ignore[no-untyped-def]
    """Build a Failover on the test's clock, health store and in-memory telemetry."""

    def make(config: FallbackConfig | None = None, **kwargs: object) -> Failover:
        params: dict[str, object] = {
            "health": health,
            "telemetry": otel.telemetry,
            "clock": clock,
        }
        params.update(kwargs)
        return Failover(config, **params)  # type: ignore[arg-type]

    return make


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"
