"""CPU instructions per healthy request, bare SDK or through swerve: issue 21's figure that
timing noise cannot move. Run under callgrind, which counts only between the two toggles:

    valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file=out.sw \\
        .venv/bin/python bench/bench_instructions.py swerve 200
    grep ^totals out.sw     # then the same with ``bare``; (swerve - bare) / 200 per request

The request and both sides are bench_hotpath.py's "sync" ones (tracing off). A third argument
picks another: ``stream``, its "stream" ones (20 SSE chunks in one read, read to the end);
``async``, the sync request made through ``openai.AsyncOpenAI`` over ``httpx2.AsyncClient``
(and ``AsyncFailoverTransport``), one at a time. The side ``floor`` is bench_hotpath.py's
rewrite floor (a transport that sends the call to its upstream with no failover), for unary
requests: (swerve - floor) is what failover itself executes. The side ``off`` is swerve with
failover switched off (``max_swaps=0``): the transport routing and rewriting each call, with
no engine, health or time limits behind it, so (off - floor) is the transport's own part.
Against another checkout (before/after): ``PYTHONPATH=<tree>/src:<tree>/bench`` in front.
"""

from __future__ import annotations

import asyncio
import gc
import os
import subprocess
import sys
from collections.abc import Awaitable, Callable
from typing import Any, cast

import httpx2
import openai
from bench_hotpath import (
    BARE_URL,
    KEY,
    MESSAGES,
    ROUTE,
    SWERVE_URL,
    WARMUP,
    AsyncRewrite,
    bare_client,
    caller,
    canned,
    failover,
    floor_client,
    stream_caller,
    swerve_client,
    upstreams,
)

from swerve.httpx import AsyncFailoverTransport

_TOGGLE = ["callgrind_control", "-i"]


def _counted(on: bool) -> None:
    subprocess.run([*_TOGGLE, "on" if on else "off", str(os.getpid())], capture_output=True)


def _async_caller(side: str) -> Callable[[], Awaitable[object]]:
    if side == "bare":
        http = httpx2.AsyncClient(transport=httpx2.MockTransport(canned))
        url = BARE_URL
    elif side == "floor":
        http = httpx2.AsyncClient(transport=AsyncRewrite(canned))
        url = SWERVE_URL
    else:
        fo = failover(off=side == "off")
        transport = AsyncFailoverTransport(upstreams(), failover=fo)
        http = httpx2.AsyncClient(transport=cast("httpx2.AsyncBaseTransport", transport))
        url = SWERVE_URL
    client = openai.AsyncOpenAI(base_url=url, api_key=KEY, max_retries=0, http_client=http)

    async def one() -> object:
        return await client.chat.completions.create(model=ROUTE, messages=MESSAGES)

    return one


async def _run_async(side: str, n: int) -> None:
    one = _async_caller(side)
    for _ in range(WARMUP):
        await one()
    gc.collect()
    gc.disable()
    _counted(True)
    for _ in range(n):
        await one()
    _counted(False)


def main() -> None:
    side, n, kind = sys.argv[1], int(sys.argv[2]), (sys.argv[3:] or ["unary"])[0]
    assert side in ("bare", "swerve", "floor", "off"), "side: bare, swerve, floor or off"
    assert kind in ("unary", "stream", "async"), "kind: stream or async (or none)"
    assert side != "floor" or kind != "stream", "the floor reads no streams"
    if kind == "async":
        asyncio.run(_run_async(side, n))
        return
    make: Any = stream_caller if kind == "stream" else caller
    clients = {"bare": bare_client, "floor": floor_client}
    one = make(clients.get(side, lambda: swerve_client(off=side == "off"))())
    for _ in range(WARMUP):  # warm: caches, the pools, the first request's one-time work
        one()
    gc.collect()
    gc.disable()
    _counted(True)
    for _ in range(n):
        one()
    _counted(False)


if __name__ == "__main__":
    main()
