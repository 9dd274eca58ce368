"""Shared fixtures: real OTel SDK with in-memory exporters, and an injected clock."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from swerve import Failover, FallbackConfig, MemoryHealth, Telemetry


@dataclass
class FakeClock:
    """Wall and monotonic time that only move when the engine waits (no real sleeping)."""

    now: float = 1_800_000_000.0
    sleeps: list[float] = field(default_factory=list)

    def time(self) -> float:
        return self.now

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds

    async def async_sleep(self, seconds: float) -> None:
        self.sleep(seconds)

    def advance(self, seconds: float) -> None:
        self.now += seconds


@dataclass
class Otel:
    spans: InMemorySpanExporter
    reader: InMemoryMetricReader
    telemetry: Telemetry
    tracer_provider: TracerProvider

    def finished(self) -> list[ReadableSpan]:
        return list(self.spans.get_finished_spans())

    def call_spans(self) -> list[ReadableSpan]:
        return [s for s in self.finished() if s.name.startswith("swerve ")]

    def attempt_spans(self) -> list[ReadableSpan]:
        return [s for s in self.finished() if "swerve.attempt.number" in (s.attributes or {})]

    def events(self, name: str | None = None) -> list[tuple[str, dict[str, object]]]:
        out = []
        for span in self.call_spans():
            for event in span.events:
                if name is None or event.name == name:
                    out.append((event.name, dict(event.attributes or {})))
        return out

    def metrics(self) -> dict[str, list[tuple[dict[str, object], object]]]:
        """Metric name -> [(attributes, value)], value a number or a histogram count."""
        out: dict[str, list[tuple[dict[str, object], object]]] = {}
        data = self.reader.get_metrics_data()
        if data is None:
            return out
        for rm in data.resource_metrics:
            for sm in rm.scope_metrics:
                for metric in sm.metrics:
                    for point in metric.data.data_points:
                        value = getattr(point, "value", None)
                        if value is None:
                            value = getattr(point, "count", None)
                        out.setdefault(metric.name, []).append(
                            (dict(point.attributes or {}), value)
                        )
        return out

    def counter(self, name: str, **attrs: object) -> float:
        total = 0.0
        for point_attrs, value in self.metrics().get(name, []):
            if all(point_attrs.get(k.replace("__", ".")) == v for k, v in attrs.items()):
                total += float(value)  # type: ignore[arg-type]
        return total


@pytest.fixture
def otel() -> Iterator[Otel]:
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    reader = InMemoryMetricReader()
    meter_provider = MeterProvider(metric_readers=[reader])
    yield Otel(exporter, reader, Telemetry(tracer_provider, meter_provider), tracer_provider)
    meter_provider.shutdown()
    tracer_provider.shutdown()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


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
            "clock": clock.time,
            "monotonic": clock.monotonic,
            "sleep": clock.sleep,
            "async_sleep": clock.async_sleep,
            "random": lambda: 1.0,
        }
        params.update(kwargs)
        return Failover(config, **params)  # type: ignore[arg-type]

    return make


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"
