"""A fake clock and an in-memory telemetry recorder, for tests of failover behaviour."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from .._engine.clock import SYSTEM_CLOCK, Clock
from .._telemetry.telemetry import Telemetry

__all__ = ["FakeClock", "TelemetryRecorder"]


@dataclass
class FakeClock:
    """A :class:`swerve.Clock` whose time only moves when the engine waits: no real sleeping.

    ``Failover(config, clock=clock)`` makes every backoff instant and recorded in
    :attr:`sleeps`; :meth:`advance` moves time on (to end a cooldown, say). Wall and monotonic
    time are the same number, :attr:`now`.

    :meth:`random` (the backoff jitter) is reproducible: it returns :attr:`random_value`, 1.0
    by default (a jittered backoff then waits its whole ceiling, so the waits are exact), or,
    when that is set to None, the next draw of a ``random.Random(seed)``: real jitter, the same
    on every run.
    """

    now: float = 1_800_000_000.0
    sleeps: list[float] = field(default_factory=list)
    random_value: float | None = 1.0
    seed: int = 0
    _draws: random.Random = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self._draws = random.Random(self.seed)

    def time(self) -> float:
        return self.now

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds

    async def async_sleep(self, seconds: float) -> None:
        self.sleep(seconds)

    def random(self) -> float:
        return self._draws.random() if self.random_value is None else self.random_value

    def advance(self, seconds: float) -> None:
        self.now += seconds


class TelemetryRecorder:
    """The real OTel SDK with in-memory exporters, and a :class:`Telemetry` that writes to it.

    ``Failover(config, telemetry=recorder.telemetry)``; then read what was emitted with
    :meth:`call_spans`, :meth:`attempt_spans`, :meth:`events` and :meth:`metrics`. ``clock``
    is what the health gauges read the time from.
    """

    def __init__(self, *, record_messages: bool = False, clock: Clock = SYSTEM_CLOCK) -> None:
        self.spans = InMemorySpanExporter()
        self.tracer_provider = TracerProvider()
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(self.spans))
        self.reader = InMemoryMetricReader()
        self.meter_provider = MeterProvider(metric_readers=[self.reader])
        self.telemetry = Telemetry(
            self.tracer_provider, self.meter_provider, record_messages=record_messages, clock=clock
        )

    def shutdown(self) -> None:
        self.meter_provider.shutdown()
        self.tracer_provider.shutdown()

    def finished(self) -> list[ReadableSpan]:
        return list(self.spans.get_finished_spans())

    def call_spans(self) -> list[ReadableSpan]:
        """swerve's call spans (one per logical call, the GenAI inference span)."""
        return [s for s in self.finished() if "swerve.route.requested" in (s.attributes or {})]

    def attempt_spans(self) -> list[ReadableSpan]:
        return [s for s in self.finished() if "swerve.attempt.number" in (s.attributes or {})]

    def events(self, name: str | None = None) -> list[tuple[str, dict[str, object]]]:
        """Events on call spans, in order: ``(name, attributes)``."""
        return [
            (event.name, dict(event.attributes or {}))
            for span in self.call_spans()
            for event in span.events
            if name is None or event.name == name
        ]

    def all_events(self, name: str) -> list[dict[str, object]]:
        """Attributes of every event called ``name``, on any span."""
        return [
            dict(e.attributes or {}) for s in self.finished() for e in s.events if e.name == name
        ]

    def metrics(self) -> dict[str, list[tuple[dict[str, object], object]]]:
        """Metric name -> ``[(attributes, value)]``; a histogram's value is its count."""
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
        """The sum of a counter over the points whose attributes match (``swerve__route=``
        stands for ``swerve.route``)."""
        total = 0.0
        for point_attrs, value in self.metrics().get(name, []):
            if all(point_attrs.get(k.replace("__", ".")) == v for k, v in attrs.items()):
                total += float(value)  # type: ignore[arg-type]
        return total
