"""Overhead of Failover.call per healthy call, tracing on (SDK + BatchSpanProcessor).

Run: uv run python bench/bench_engine.py [--n 3000]

Measures, interleaved so drift hits both sides alike:
  bare     one raw httpx POST to the fake provider
  wrapped  the same POST inside Failover.call (config set, so the engine is really on)
and, without the network, the engine's own cost around a function that returns at once.
"""

from __future__ import annotations

import argparse
import multiprocessing
import statistics
import time
from collections.abc import Sequence
from typing import Any

import httpx
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

from swerve import Failover, FallbackConfig, MemoryHealth, Telemetry
from swerve.testing import FakeProvider


class _Discard(SpanExporter):
    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return SpanExportResult.SUCCESS


def _serve(port: Any, stop: Any) -> None:
    with FakeProvider() as fake:
        port.value = fake.port
        stop.wait()


def _median_us(samples: list[int]) -> float:
    return statistics.median(samples) / 1000


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=3000)
    n = parser.parse_args().n
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(BatchSpanProcessor(_Discard()))
    meter_provider = MeterProvider(metric_readers=[InMemoryMetricReader()])
    telemetry = Telemetry(tracer_provider, meter_provider)
    route = "primary/model-a"
    failover = Failover(
        FallbackConfig(fallbacks={route: "fallback/model-b"}), MemoryHealth(), telemetry=telemetry
    )
    body = {"model": "model-a", "messages": [{"role": "user", "content": "hi"}]}
    # The fake provider runs in its own process: sharing the GIL with it would bill its work
    # to whichever side of the comparison happens to be running.
    port, stop = multiprocessing.Value("i", 0), multiprocessing.Event()
    server = multiprocessing.Process(target=_serve, args=(port, stop), daemon=True)
    server.start()
    deadline = time.monotonic() + 10
    while not port.value and time.monotonic() < deadline:
        time.sleep(0.01)
    with httpx.Client() as client:
        url = f"http://127.0.0.1:{port.value}/primary/v1/chat/completions"

        def post() -> object:
            r = client.post(url, json=body)
            r.raise_for_status()
            return r

        for _ in range(200):  # warm the pool and the interpreter
            post()
            failover.call(route, lambda _: post())
        bare: list[int] = []
        wrapped: list[int] = []
        for _ in range(n):
            t0 = time.perf_counter_ns()
            post()
            t1 = time.perf_counter_ns()
            failover.call(route, lambda _: post())
            t2 = time.perf_counter_ns()
            bare.append(t1 - t0)
            wrapped.append(t2 - t1)
        noop: list[int] = []
        for _ in range(n):
            t0 = time.perf_counter_ns()
            failover.call(route, lambda _: None)
            noop.append(time.perf_counter_ns() - t0)
        # What the OTel SDK alone costs for the same telemetry: two spans and two histograms.
        tracer = tracer_provider.get_tracer("floor")
        histogram = meter_provider.get_meter("floor").create_histogram("floor", "s")
        span_attrs = {f"attr.{i}": "value" for i in range(6)}
        floor: list[int] = []
        for _ in range(n):
            t0 = time.perf_counter_ns()
            outer = tracer.start_span("call", attributes=span_attrs)
            tracer.start_span("attempt", attributes=span_attrs).end()
            outer.end()
            histogram.record(0.001, {"a": "x", "b": "y"})
            histogram.record(0.001, {"a": "x", "b": "y"})
            floor.append(time.perf_counter_ns() - t0)
    stop.set()
    server.join(timeout=5)
    tracer_provider.shutdown()
    meter_provider.shutdown()
    b, w, e = _median_us(bare), _median_us(wrapped), _median_us(noop)
    f = _median_us(floor)
    print(f"calls per side: {n}")
    print(f"bare httpx POST, median:          {b:8.1f} us")
    print(f"Failover.call + POST, median:     {w:8.1f} us")
    print(f"overhead (difference of medians): {w - b:8.1f} us   (goal < 100 us)")
    print(f"engine alone around a no-op:      {e:8.1f} us")
    print(f"  of which the OTel SDK floor:    {f:8.1f} us   (2 spans + 2 histogram records)")
    print(f"  swerve's own code:              {e - f:8.1f} us")


if __name__ == "__main__":
    main()
