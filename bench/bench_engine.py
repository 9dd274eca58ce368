"""Overhead of Failover.call per healthy call, tracing on (SDK + BatchSpanProcessor).

Run: uv run python bench/bench_engine.py [--n 3000]

Measures, interleaved so drift hits both sides alike:
  bare     one raw httpx POST to the fake provider
  wrapped  the same POST inside Failover.call (config set, so the engine is really on)
and, without the network, the engine's own cost around a function that returns at once.
"""

from __future__ import annotations

import argparse

import httpx
from _support import fake_provider_process, interleaved, traced

from swerve import Failover, FallbackConfig, MemoryHealth


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=3000)
    n = parser.parse_args().n
    telemetry, tracer_provider, meter_provider = traced()
    route = "primary/model-a"
    failover = Failover(
        FallbackConfig(fallbacks={route: "fallback/model-b"}), MemoryHealth(), telemetry=telemetry
    )
    body = {"model": "model-a", "messages": [{"role": "user", "content": "hi"}]}
    with fake_provider_process() as base, httpx.Client() as client:
        url = f"{base}/primary/v1/chat/completions"

        def post() -> object:
            r = client.post(url, json=body)
            r.raise_for_status()
            return r

        for _ in range(200):  # warm the pool and the interpreter
            post()
            failover.call(route, lambda _: post())
        b, w = interleaved(post, lambda: failover.call(route, lambda _: post()), n)

    # What the OTel SDK alone costs for the same telemetry: two spans and two histograms.
    tracer = tracer_provider.get_tracer("floor")
    histogram = meter_provider.get_meter("floor").create_histogram("floor", "s")
    span_attrs = {f"attr.{i}": "value" for i in range(6)}

    def floor() -> None:
        outer = tracer.start_span("call", attributes=span_attrs)
        tracer.start_span("attempt", attributes=span_attrs).end()
        outer.end()
        histogram.record(0.001, {"a": "x", "b": "y"})
        histogram.record(0.001, {"a": "x", "b": "y"})

    e, f = interleaved(lambda: failover.call(route, lambda _: None), floor, n)
    tracer_provider.shutdown()
    meter_provider.shutdown()
    print(f"calls per side: {n}")
    print(f"bare httpx POST, median:          {b:8.1f} us")
    print(f"Failover.call + POST, median:     {w:8.1f} us")
    print(f"overhead (difference of medians): {w - b:8.1f} us   (goal < 100 us)")
    print(f"engine alone around a no-op:      {e:8.1f} us")
    print(f"  of which the OTel SDK floor:    {f:8.1f} us   (2 spans + 2 histogram records)")
    print(f"  swerve's own code:              {e - f:8.1f} us")


if __name__ == "__main__":
    main()
