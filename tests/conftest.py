"""Shared fixtures: real OTel SDK with in-memory exporters, and an injected clock."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from swerve import Failover, FallbackConfig, MemoryHealth
from swerve.testing import FakeClock, FakeProvider, Reply, TelemetryRecorder

__all__ = ["FakeClock", "Otel"]


# The shared helpers are public: users test their own configs with them too.
Otel = TelemetryRecorder


@pytest.fixture
def otel() -> Iterator[TelemetryRecorder]:
    recorder = TelemetryRecorder()
    yield recorder
    recorder.shutdown()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def fake() -> Iterator[FakeProvider]:
    """A fake provider whose "primary" and "fallback" answer by name (tests that need other
    providers or replies define their own ``fake``)."""
    with FakeProvider() as server:
        server.set_reply("primary", Reply(text="from primary"))
        server.set_reply("fallback", Reply(text="from fallback"))
        yield server


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
