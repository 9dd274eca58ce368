"""Overhead of the failover transport over the bare inner transport, tracing on.

Run: uv run python bench/bench_transport.py [--n 2000] [--concurrency 32] [--seconds 5]

sync:  median per-call latency of an httpx.Client POST through FailoverTransport vs the
       bare httpx transport, interleaved (goal: overhead < 100 us median)
async: throughput at concurrency 32 through AsyncFailoverTransport vs the bare inner
       transport, for httpx's own async pool and for aiohttp (httpx-aiohttp), each as the
       inner transport (goal: >= 90 % of the inner transport's throughput)
The fake provider runs in a separate process so it does not share the GIL with the client.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

import httpx
from httpx_aiohttp import AiohttpTransport
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

from swerve import Failover, FallbackConfig, MemoryHealth, Telemetry
from swerve.httpx import AsyncFailoverTransport, FailoverTransport, Upstream
from swerve.testing import FakeProvider

ROUTE = "primary/model-a"
BODY = {"model": ROUTE, "messages": [{"role": "user", "content": "hi"}]}


class _Discard(SpanExporter):
    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return SpanExportResult.SUCCESS


def _serve(port: Any, stop: Any) -> None:
    with FakeProvider() as fake:
        port.value = fake.port
        stop.wait()


def _failover() -> tuple[Failover, TracerProvider]:
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(BatchSpanProcessor(_Discard()))
    meter_provider = MeterProvider(metric_readers=[InMemoryMetricReader()])
    config = FallbackConfig(fallbacks={ROUTE: "fallback/model-b"})
    telemetry = Telemetry(tracer_provider, meter_provider)
    return Failover(config, MemoryHealth(), telemetry=telemetry), tracer_provider


_CANNED = json.dumps(
    {
        "id": "x",
        "object": "chat.completion",
        "model": "model-a",
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}
        ],
    }
).encode()


class _Canned(httpx.BaseTransport):
    """An inner transport that answers at once: isolates what the wrapping itself costs."""

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        request.read()
        return httpx.Response(200, headers={"content-type": "application/json"}, content=_CANNED)


def sync_cpu_bench(n: int) -> None:
    failover, provider = _failover()
    ups = {
        ROUTE: Upstream("http://up.invalid/v1", model="model-a", transport=_Canned()),
        "fallback/model-b": Upstream("http://up2.invalid/v1", transport=_Canned()),
    }
    url = "http://up.invalid/v1/chat/completions"
    with (
        httpx.Client(transport=_Canned()) as bare,
        httpx.Client(transport=FailoverTransport(ups, failover=failover)) as wrapped,
    ):
        for _ in range(300):
            bare.post(url, json=BODY)
            wrapped.post(url, json=BODY)
        b: list[int] = []
        w: list[int] = []
        for _ in range(n):
            t0 = time.perf_counter_ns()
            bare.post(url, json=BODY)
            t1 = time.perf_counter_ns()
            wrapped.post(url, json=BODY)
            t2 = time.perf_counter_ns()
            b.append(t1 - t0)
            w.append(t2 - t1)
    provider.shutdown()
    mb, mw = statistics.median(b) / 1000, statistics.median(w) / 1000
    print(
        f"sync  in-memory inner: bare {mb:8.1f} us | through swerve {mw:8.1f} us"
        f" | overhead {mw - mb:7.1f} us (goal < 100)"
    )


def sync_bench(base: str, n: int) -> None:
    failover, provider = _failover()
    ups = {
        ROUTE: Upstream(f"{base}/primary/v1", model="model-a"),
        "fallback/model-b": Upstream(f"{base}/fallback/v1"),
    }
    url = f"{base}/primary/v1/chat/completions"
    bare_body = {**BODY, "model": "model-a"}
    with (
        httpx.Client() as bare,
        httpx.Client(transport=FailoverTransport(ups, failover=failover)) as wrapped,
    ):
        for _ in range(200):
            bare.post(url, json=bare_body)
            wrapped.post(url, json=BODY)
        b: list[int] = []
        w: list[int] = []
        for _ in range(n):
            t0 = time.perf_counter_ns()
            bare.post(url, json=bare_body).raise_for_status()
            t1 = time.perf_counter_ns()
            wrapped.post(url, json=BODY).raise_for_status()
            t2 = time.perf_counter_ns()
            b.append(t1 - t0)
            w.append(t2 - t1)
    provider.shutdown()
    mb, mw = statistics.median(b) / 1000, statistics.median(w) / 1000
    print(
        f"sync  over loopback:   bare {mb:8.1f} us | through swerve {mw:8.1f} us"
        f" | overhead {mw - mb:7.1f} us"
    )


async def _throughput(
    client: httpx.AsyncClient, url: str, body: dict[str, Any], concurrency: int, seconds: float
) -> float:
    done = 0
    end = time.perf_counter() + seconds

    async def worker() -> None:
        nonlocal done
        while time.perf_counter() < end:
            (await client.post(url, json=body)).raise_for_status()
            done += 1

    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return done / (time.perf_counter() - start)


async def async_bench(base: str, concurrency: int, seconds: float) -> None:
    url = f"{base}/primary/v1/chat/completions"
    bare_body = {**BODY, "model": "model-a"}
    inners: dict[str, Callable[[], Any]] = {
        "httpx AsyncHTTPTransport": lambda: httpx.AsyncHTTPTransport(
            limits=httpx.Limits(max_connections=concurrency)
        ),
        "aiohttp (httpx-aiohttp)": AiohttpTransport,
    }
    for name, make in inners.items():
        failover, provider = _failover()
        ups = {
            ROUTE: Upstream(f"{base}/primary/v1", model="model-a", transport=make()),
            "fallback/model-b": Upstream(f"{base}/fallback/v1", transport=make()),
        }
        async with (
            httpx.AsyncClient(transport=make()) as bare,
            httpx.AsyncClient(transport=AsyncFailoverTransport(ups, failover=failover)) as wrapped,
        ):
            await _throughput(bare, url, bare_body, concurrency, 1.0)  # warm up
            await _throughput(wrapped, url, BODY, concurrency, 1.0)
            b = await _throughput(bare, url, bare_body, concurrency, seconds)
            w = await _throughput(wrapped, url, BODY, concurrency, seconds)
        provider.shutdown()
        print(
            f"async {name:26s} bare {b:7.0f} req/s | through swerve {w:7.0f} req/s"
            f" | {100 * w / b:5.1f} % (goal >= 90 %)"
        )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=5.0)
    args = parser.parse_args()
    port, stop = multiprocessing.Value("i", 0), multiprocessing.Event()
    server = multiprocessing.Process(target=_serve, args=(port, stop), daemon=True)
    server.start()
    deadline = time.monotonic() + 10
    while not port.value and time.monotonic() < deadline:
        time.sleep(0.01)
    base = f"http://127.0.0.1:{port.value}"
    try:
        sync_cpu_bench(args.n)
        sync_bench(base, args.n)
        asyncio.run(async_bench(base, args.concurrency, args.seconds))
    finally:
        stop.set()
        server.join(timeout=5)


if __name__ == "__main__":
    main()
