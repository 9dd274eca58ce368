"""Issue 24's tail: time to first token over a primary with a slow tail, four ways.

Run: uv run python bench/bench_tail.py [--calls 1000] [--concurrency 25] [--seed 24]
         [--only {off,fixed,adaptive,hedging,hedging-p99}]

Streamed chat completions with ``openai.AsyncOpenAI`` (``max_retries=0``) over
``httpx2.AsyncClient(transport=AsyncFailoverTransport(...))``, against the fake provider
(``swerve.testing.FakeProvider`` on 127.0.0.1, served from its own process so that its work
is not billed to the client's event loop). Two routes: the primary, primary/model-a, and its
fallback, fallback/model-b; the config is swerve's defaults plus the mode's one option.

  primary   first token after 0.15-0.3 s (uniform); 2 % of its requests (seeded, exactly
            round(calls / 50) of them, placed at random) after 10-30 s instead. The fake serves
            these as a script, one step per request in the order the requests arrive: the same
            sequence for every mode.
  fallback  first token after 0.3 s, always.

Each mode gets a fresh transport, ``MemoryHealth`` and fake provider. A warm-up of 200 calls
(the primary's normal latency only, the same for every mode) fills the learned figures
(``learned.min_samples`` is 20); then --calls calls run, --concurrency at a time. Modes:

  off       neither option: no first-token limit, no hedging
  fixed     first_token_timeout_s=2.0
  adaptive  first_token_timeout_s="adaptive" (the learned p99 x 2, within 1 s and 60 s)
  hedging   hedge_after="p95" (within learned.hedge_budget, 10 % of the route's calls a minute:
            by definition about 5 % of healthy calls pass their route's p95 and hedge too)
  hedging-p99  hedge_after="p99": fewer hedges of healthy calls, each one a little later

Each row, over the measured calls (warm-up excluded):

  p50 p99 p99.9 max  time to first token: from the call's start (before ``create``) to the
                     first chunk with content the consumer gets, in seconds (nearest rank)
  extra              requests the fake received (both routes) minus calls: hedges, and
                     attempts a limit cut short before another route served
  fallback           calls the fallback served (the ``x-swerve-route`` response header)
  took, cpu          the measured calls' wall time, and the CPU time the client process
                     (SDK, httpx2, swerve) spent in it

A limit that cuts an attempt is a timeout, which swaps and cools the primary down
(``cooldown_s``, 10 s by default): the calls after it go to the fallback until the primary's
recovery probe succeeds, which the fallback column shows. Hedging after the learned p95
also hedges the normal calls past it, about 5 % of them by definition: the whole default
budget. When the client's load makes more of them late, the budget runs out (extra at 5 % of
warm-up plus calls, 60 by default) and the slow calls that come after go unhedged.

The defaults (1000 calls, 25 at a time) run in under 2 minutes on a 2-core machine; "off"
takes longest, as its last calls wait out their slow first tokens. The concurrency is 25, not
50: a streamed call costs the client about 5 ms of CPU, so 50 at a time (some 200 calls a
second) keeps one core busy and the figures would measure the event loop's queue (p50 0.29 s
instead of 0.24 s); 25 keeps it near half a core, as the cpu column shows. Only public names
of swerve are used (``swerve.*``, ``swerve.httpx.*``, ``swerve.testing.*``).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import math
import multiprocessing
import random
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any, cast

import httpx2
import openai

from swerve import FallbackConfig, MemoryHealth
from swerve.httpx import ROUTE_HEADER, AsyncFailoverTransport, Upstream
from swerve.testing import FakeProvider, Fault

PRIMARY, FALLBACK = "primary/model-a", "fallback/model-b"
MESSAGES: list[Any] = [{"role": "user", "content": "hi"}]
WARMUP = 200
NORMAL_S = (0.15, 0.3)
TAIL_S = (10.0, 30.0)
TAIL_SHARE = 0.02
FALLBACK_S = 0.3

MODES: dict[str, dict[str, Any]] = {
    "off": {},
    "fixed": {"first_token_timeout_s": 2.0},
    "adaptive": {"first_token_timeout_s": "adaptive"},
    "hedging": {"hedge_after": "p95"},
    "hedging-p99": {"hedge_after": "p99"},
}


def first_tokens(calls: int, seed: int) -> list[float]:
    """The primary's first-token delays, one per request in arrival order: the warm-up's
    normal ones, then the measured calls' with exactly TAIL_SHARE of them slow."""
    rng = random.Random(seed)
    delays = [rng.uniform(*NORMAL_S) for _ in range(WARMUP + calls)]
    for i in rng.sample(range(calls), round(calls * TAIL_SHARE)):
        delays[WARMUP + i] = rng.uniform(*TAIL_S)
    return delays


# -- the fake provider, in its own process ------------------------------------------------------
def _serve(conn: Connection, delays: list[float]) -> None:
    with FakeProvider() as fake:
        fake.set_fault("fallback", Fault.slow(first_token_s=FALLBACK_S))
        fake.script("primary", [Fault.slow(first_token_s=d) for d in delays])
        conn.send(fake.port)
        while (ask := conn.recv()) != "stop":
            if ask == "reset":
                fake.reset_counts()
            conn.send((fake.requests("primary"), fake.requests("fallback")))
    # Leaving the with-block stopped the server: slow requests still sleeping were released.


class Served:
    """The fake provider's process: its URL, and the requests each route received."""

    def __init__(self, conn: Connection, port: int) -> None:
        self.conn = conn
        self.url = f"http://127.0.0.1:{port}"

    def requests(self, reset: bool = False) -> tuple[int, int]:
        self.conn.send("reset" if reset else "count")
        return cast("tuple[int, int]", self.conn.recv())


@contextmanager
def fake_provider(delays: list[float]) -> Iterator[Served]:
    ours, theirs = multiprocessing.Pipe()
    server = multiprocessing.Process(target=_serve, args=(theirs, delays), daemon=True)
    server.start()
    try:
        if not ours.poll(30):
            raise SystemExit("the fake provider did not start")
        yield Served(ours, ours.recv())
    finally:
        ours.send("stop")
        server.join(timeout=10)
        ours.close()
        if server.is_alive():  # stop() releases slow requests and joins its threads
            server.kill()
            server.join()
            raise SystemExit("the fake provider did not stop: a request outlived it")


# -- one mode -----------------------------------------------------------------------------------
@dataclass
class Result:
    mode: str
    ttft: list[float]
    extra: int
    fallback: int
    took: float
    cpu: float


async def one_call(sdk: openai.AsyncOpenAI) -> tuple[float, str]:
    """Time to the first content chunk, and the route that served the call."""
    t0 = time.perf_counter()
    first: float | None = None
    stream = await sdk.chat.completions.create(model=PRIMARY, messages=MESSAGES, stream=True)
    async with stream:
        async for chunk in stream:  # read to the end, as a consumer would
            if first is None and any(c.delta.content for c in chunk.choices):
                first = time.perf_counter() - t0
    if first is None:
        raise RuntimeError("a stream without content")
    return first, stream.response.headers.get(ROUTE_HEADER, "")


async def run_at(sdk: openai.AsyncOpenAI, calls: int, concurrency: int) -> list[tuple[float, str]]:
    """``calls`` calls, never more than ``concurrency`` in flight."""
    results: list[tuple[float, str]] = []
    left = iter(range(calls))

    async def worker() -> None:
        for _ in left:  # the shared iterator hands each call to one worker
            results.append(await one_call(sdk))

    async with asyncio.TaskGroup() as group:
        for _ in range(min(concurrency, calls)):
            group.create_task(worker())
    return results


async def bench_mode(mode: str, served: Served, calls: int, concurrency: int) -> Result:
    config = FallbackConfig(fallbacks={PRIMARY: FALLBACK}, **MODES[mode])
    upstreams = {
        PRIMARY: Upstream(f"{served.url}/primary/v1", api_key="sk-primary-0123456789"),
        FALLBACK: Upstream(f"{served.url}/fallback/v1", api_key="sk-fallback-0123456789"),
    }
    transport = AsyncFailoverTransport(upstreams, config, health=MemoryHealth())
    # The transport's type is httpx's AsyncBaseTransport (it serves httpx2 too): hence the cast.
    async with httpx2.AsyncClient(transport=cast("httpx2.AsyncBaseTransport", transport)) as http:
        sdk = openai.AsyncOpenAI(
            base_url="http://swerve.invalid/v1", api_key="unused", max_retries=0, http_client=http
        )
        await run_at(sdk, WARMUP, concurrency)
        await asyncio.to_thread(served.requests, True)
        t0, cpu0 = time.perf_counter(), time.process_time()
        results = await run_at(sdk, calls, concurrency)
        took, cpu = time.perf_counter() - t0, time.process_time() - cpu0
        primary, fallback = await asyncio.to_thread(served.requests)
        await sdk.close()
    # Closing the client closed the transport, hedge losers and cut attempts included. The
    # SDK leaves its streams' generators to the garbage collector, whose closing tasks need a
    # turn of the loop or two; anything still running after that is a leak.
    for _ in range(3):
        await asyncio.sleep(0)
    left = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    if left:
        raise SystemExit(f"{mode}: {len(left)} tasks still running after the client closed")
    return Result(
        mode,
        sorted(t for t, _ in results),
        primary + fallback - calls,
        sum(route == FALLBACK for _, route in results),
        took,
        cpu,
    )


def rank(sorted_values: list[float], q: float) -> float:
    """The nearest-rank quantile: the smallest value with at least ``q`` of them at or below."""
    return sorted_values[max(math.ceil(q * len(sorted_values)) - 1, 0)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=25)
    parser.add_argument("--seed", type=int, default=24)
    parser.add_argument("--only", choices=list(MODES))
    args = parser.parse_args()
    if args.calls < 1 or args.concurrency < 1:
        parser.error("--calls and --concurrency must be at least 1")
    # Every swap is a warning on the "swerve" logger; unhandled, it would print between rows.
    logging.getLogger("swerve").addHandler(logging.NullHandler())
    delays = first_tokens(args.calls, args.seed)
    modes = [args.only] if args.only else list(MODES)
    print(
        f"{args.calls} streamed calls, {args.concurrency} at a time, after {WARMUP} warm-up "
        f"calls; seed {args.seed}; {round(args.calls * TAIL_SHARE)} primary first tokens "
        f"after {TAIL_S[0]:g}-{TAIL_S[1]:g} s"
    )
    header = f"{'mode':<12}{'p50':>8}{'p99':>8}{'p99.9':>8}{'max':>8}{'extra':>7}{'fallback':>9}"
    print(f"{header}{'took':>8}{'cpu':>6}")
    for mode in modes:
        with fake_provider(delays) as served:
            r = asyncio.run(bench_mode(mode, served, args.calls, args.concurrency))
        figures = "".join(f"{rank(r.ttft, q):8.2f}" for q in (0.5, 0.99, 0.999))
        print(
            f"{r.mode:<12}{figures}{r.ttft[-1]:8.2f}{r.extra:7d}{r.fallback:9d}{r.took:7.1f}s"
            f"{r.cpu:6.1f}s",
            flush=True,
        )
    print("seconds to the first content chunk; extra: requests sent minus calls")


if __name__ == "__main__":
    main()
