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
import time
from collections.abc import Callable
from typing import Any

import httpx
from _support import fake_provider_process, interleaved, traced
from httpx_aiohttp import AiohttpTransport
from opentelemetry.sdk.trace import TracerProvider

from swerve import Failover, FallbackConfig, MemoryHealth
from swerve.httpx import AsyncFailoverTransport, FailoverTransport, Upstream

ROUTE = "primary/model-a"
BODY = {"model": ROUTE, "messages": [{"role": "user", "content": "hi"}]}


def _failover() -> tuple[Failover, TracerProvider]:
    telemetry, tracer_provider, _ = traced()
    config = FallbackConfig(fallbacks={ROUTE: "fallback/model-b"})
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


def sync_bench(label: str, base: str, inner: Callable[[], Any], n: int, goal: str = "") -> None:
    """One POST through the bare inner transport against the same through swerve."""
    failover, provider = _failover()
    ups = {
        ROUTE: Upstream(f"{base}/primary/v1", model="model-a", transport=inner()),
        "fallback/model-b": Upstream(f"{base}/fallback/v1", transport=inner()),
    }
    url = f"{base}/primary/v1/chat/completions"
    bare_body = {**BODY, "model": "model-a"}
    with (
        httpx.Client(transport=inner()) as bare,
        httpx.Client(transport=FailoverTransport(ups, failover=failover)) as wrapped,
    ):
        for _ in range(200):  # warm the pools and the interpreter
            bare.post(url, json=bare_body)
            wrapped.post(url, json=BODY)
        mb, mw = interleaved(
            lambda: bare.post(url, json=bare_body).raise_for_status(),
            lambda: wrapped.post(url, json=BODY).raise_for_status(),
            n,
        )
    provider.shutdown()
    print(
        f"sync  {label:16s} bare {mb:8.1f} us | through swerve {mw:8.1f} us"
        f" | overhead {mw - mb:7.1f} us{goal}"
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
    sync_bench("in-memory inner:", "http://up.invalid", _Canned, args.n, " (goal < 100)")
    with fake_provider_process() as base:
        sync_bench("over loopback:", base, httpx.HTTPTransport, args.n)
        asyncio.run(async_bench(base, args.concurrency, args.seconds))


if __name__ == "__main__":
    main()
