"""What every benchmark here shares: traced telemetry, the fake provider in its own process,
and interleaved timing. Run the benchmarks from the project root (``uv run python bench/...``)."""

from __future__ import annotations

import multiprocessing
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

from swerve import Telemetry
from swerve.testing import FakeProvider


class _Discard(SpanExporter):
    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return SpanExportResult.SUCCESS


def traced() -> tuple[Telemetry, TracerProvider, MeterProvider]:
    """Tracing on as in production: the SDK, a BatchSpanProcessor (its export discarded)."""
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(BatchSpanProcessor(_Discard()))
    meter_provider = MeterProvider(metric_readers=[InMemoryMetricReader()])
    return Telemetry(tracer_provider, meter_provider), tracer_provider, meter_provider


def _serve(port: Any, stop: Any) -> None:
    with FakeProvider() as fake:
        port.value = fake.port
        stop.wait()


@contextmanager
def fake_provider_process() -> Iterator[str]:
    """The fake provider's base URL, served from its own process: sharing the GIL with it
    would bill its work to whichever side of a comparison happens to be running."""
    port, stop = multiprocessing.Value("i", 0), multiprocessing.Event()
    server = multiprocessing.Process(target=_serve, args=(port, stop), daemon=True)
    server.start()
    deadline = time.monotonic() + 10
    while not port.value and time.monotonic() < deadline:
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port.value}"
    finally:
        stop.set()
        server.join(timeout=5)


def median_us(samples: list[int]) -> float:
    return statistics.median(samples) / 1000


def interleaved(
    first: Callable[[], object], second: Callable[[], object], n: int
) -> tuple[float, float]:
    """Median microseconds of each, run alternately so drift hits both alike."""
    a: list[int] = []
    b: list[int] = []
    for _ in range(n):
        t0 = time.perf_counter_ns()
        first()
        t1 = time.perf_counter_ns()
        second()
        t2 = time.perf_counter_ns()
        a.append(t1 - t0)
        b.append(t2 - t1)
    return median_us(a), median_us(b)
