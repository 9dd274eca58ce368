"""CPU instructions per healthy request, bare SDK or through swerve: issue 21's figure that
timing noise cannot move. Run under callgrind, which counts only between the two toggles:

    valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file=out.sw \\
        .venv/bin/python bench/bench_instructions.py swerve 200
    grep ^totals out.sw     # then the same with ``bare``; (swerve - bare) / 200 per request

The request is bench_hotpath.py's "sync" one: ``client.chat.completions.create`` with the openai
SDK over httpx2, answered by a canned ``MockTransport``, tracing off (no-op providers).
Against another checkout (before/after): ``PYTHONPATH=<tree>/src`` in front.
"""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys

import httpx2
import openai
from opentelemetry import metrics, trace

from swerve import Failover, FallbackConfig, MemoryHealth, Telemetry
from swerve.httpx import FailoverTransport, Upstream

BODY = json.dumps(
    {
        "id": "r1",
        "object": "chat.completion",
        "created": 1,
        "model": "m",
        "choices": [
            {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "hi"}}
        ],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }
).encode()


def canned(request: httpx2.Request) -> httpx2.Response:
    return httpx2.Response(200, headers={"content-type": "application/json"}, content=BODY)


def client(side: str) -> openai.OpenAI:
    if side == "bare":
        http = httpx2.Client(transport=httpx2.MockTransport(canned))
        return openai.OpenAI(
            base_url="http://p.invalid/v1", api_key="k", max_retries=0, http_client=http
        )
    upstreams = {
        f"{name}/m": Upstream(
            f"http://{name}.invalid/v1", api_key="k", transport=httpx2.MockTransport(canned)
        )
        for name in ("p", "f")
    }
    telemetry = Telemetry(trace.NoOpTracerProvider(), metrics.NoOpMeterProvider())
    config = FallbackConfig(fallbacks={"p/m": "f/m"}, attempt_timeout_s=30)
    transport: object = FailoverTransport(
        upstreams, failover=Failover(config, MemoryHealth(), telemetry=telemetry)
    )
    http = httpx2.Client(transport=transport)  # type: ignore[arg-type]
    return openai.OpenAI(
        base_url="http://x.invalid/v1", api_key="k", max_retries=0, http_client=http
    )


def main() -> None:
    side, n = sys.argv[1], int(sys.argv[2])
    assert side in ("bare", "swerve"), "side: bare or swerve"
    sdk = client(side)
    messages: list[dict[str, str]] = [{"role": "user", "content": "hi"}]
    for _ in range(300):  # warm: caches, the pools, the first request's one-time work
        sdk.chat.completions.create(model="p/m", messages=messages)  # type: ignore[arg-type]
    gc.collect()
    gc.disable()
    toggle = ["callgrind_control", "-i"]
    subprocess.run([*toggle, "on", str(os.getpid())], capture_output=True, check=False)
    for _ in range(n):
        sdk.chat.completions.create(model="p/m", messages=messages)  # type: ignore[arg-type]
    subprocess.run([*toggle, "off", str(os.getpid())], capture_output=True, check=False)


if __name__ == "__main__":
    main()
