"""The shape of one streamed request through the async transport under the openai SDK: which of
swerve's files it runs in, how often it moves from one to another, and which files it comes back
to after leaving them (issue 21: it should stay inside the transport and the engine, and come back
to a file it left at most once). A count, not a time: deterministic, so a change shows.

Run: uv run python bench/hops.py [--events 20]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import httpx2
import openai

import swerve
from swerve.httpx import AsyncFailoverTransport, Upstream

ROOT = Path(swerve.__file__).parent


def _sse(events: int) -> bytes:
    chunks = []
    for i in range(events):
        delta = {"role": "assistant", "content": f"w{i} "} if i == 0 else {"content": f"w{i} "}
        chunk = {"id": "r1", "object": "chat.completion.chunk", "created": 1, "model": "m",
                 "choices": [{"index": 0, "delta": delta, "finish_reason": None}]}  # fmt: skip
        chunks.append(f"data: {json.dumps(chunk)}\n\n")
    last = {"id": "r1", "object": "chat.completion.chunk", "created": 1, "model": "m",
            "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}  # fmt: skip
    chunks.append(f"data: {json.dumps(last)}\n\ndata: [DONE]\n\n")
    return "".join(chunks).encode()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=20, help="SSE events in the answer")
    events = parser.parse_args().events
    body = _sse(events)

    def canned(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(200, headers={"content-type": "text/event-stream"}, content=body)

    ups = {
        f"{n}/m": Upstream(
            f"http://{n}.invalid/v1", api_key="k", transport=httpx2.MockTransport(canned)
        )
        for n in ("p", "f")
    }
    config = swerve.FallbackConfig(fallbacks={"p/m": "f/m"}, attempt_timeout_s=30)
    transport: Any = AsyncFailoverTransport(ups, config, health=swerve.MemoryHealth())
    client = openai.AsyncOpenAI(
        base_url="http://swerve.invalid/v1", api_key="unused", max_retries=0,
        http_client=httpx2.AsyncClient(transport=transport),
    )  # fmt: skip

    async def one() -> None:
        stream = await client.chat.completions.create(
            model="p/m", messages=[{"role": "user", "content": "hi"}], stream=True
        )
        async for _ in stream:
            pass

    async def run() -> list[str]:
        for _ in range(20):
            await one()
        files: list[str] = []

        def prof(frame: Any, event: str, arg: Any) -> None:
            if event == "call" and frame.f_code.co_filename.startswith(str(ROOT)):
                files.append(str(Path(frame.f_code.co_filename).relative_to(ROOT)))

        sys.setprofile(prof)
        await one()
        sys.setprofile(None)
        return files

    files = asyncio.run(run())
    visits = [f for i, f in enumerate(files) if i == 0 or files[i - 1] != f]
    hops = len(visits) - 1
    left: Counter[str] = Counter()
    seen: set[str] = set()
    for f in visits:
        if f in seen:
            left[f] += 1
        seen.add(f)
    packages = Counter(f.split("/")[0] for f in files)
    print(f"one streamed request, {events} SSE events, async transport under the openai SDK")
    print(
        f"  files: {len(set(files))}   hops between files: {hops}   per event: {hops / events:.1f}"
    )
    print(f"  calls by package: {dict(packages.most_common())}")
    outside = sorted(
        {f for f in files if f.split("/")[0] not in ("_transport", "_engine", "httpx.py")}
    )
    print(f"  files outside the transport and the engine: {outside}")
    print("  returns to a file after leaving it (goal: at most 1 each):")
    for f, n in left.most_common():
        print(f"    {n:5d}  {f}")


if __name__ == "__main__":
    main()
