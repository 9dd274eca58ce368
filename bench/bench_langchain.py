"""The hidden cost of wrapping a LangChain chat model, and what wrapping saves on an outage.

Run: uv run python bench/bench_langchain.py [--n 1500] [--calls 20]

1. Overhead per healthy call: ``FailoverChatModel`` (config set, so the engine is really on,
   tracing through the OTel SDK with a BatchSpanProcessor) against the bare ``ChatOpenAI`` it
   wraps, interleaved so drift hits both sides alike. The fake provider runs in its own
   process, so its work is not billed to either side. Goal: under 5 %.
2. Requests wasted on a dead primary (a standing 503) over ``--calls`` sequential calls, with
   the same retry budget (2 retries) on both sides:
     with_fallbacks  ``ChatOpenAI(max_retries=2).with_fallbacks([fallback])``: every call pays
                     the primary's full retry chain before it falls back;
     swerve          ``FailoverChatModel`` (route models with ``max_retries=0``, swerve's
                     ``max_retries=2``): call 1 pays the retry budget and cools the primary
                     down, every later call starts on the fallback.
   Goal: the retry budget on call 1, then 0. The fake asks for 1 ms retry waits
   (``retry-after-ms``), which both the openai SDK and swerve honour, so the run is quick.
"""

from __future__ import annotations

import argparse
import statistics
import time
import warnings

from _support import fake_provider_process, traced
from langchain_openai import ChatOpenAI
from opentelemetry.metrics import NoOpMeterProvider
from opentelemetry.trace import NoOpTracerProvider
from swerve_langchain import FailoverChatModel

from swerve import Failover, FallbackConfig, MemoryHealth, Telemetry
from swerve.testing import FakeProvider, Fault

PRIMARY, FALLBACK = "primary/fake-model", "fallback/fake-model-large"


def _chat(base: str, provider: str, model: str, retries: int) -> ChatOpenAI:
    return ChatOpenAI(
        base_url=f"{base}/{provider}/v1", api_key="bench", model=model, max_retries=retries
    )


def overhead(n: int) -> None:
    telemetry, _, _ = traced()
    with fake_provider_process() as base:
        bare = _chat(base, "primary", "fake-model", 0)
        wrapped = FailoverChatModel(
            routes={PRIMARY: bare, FALLBACK: _chat(base, "fallback", "fake-model-large", 0)},
            primary=PRIMARY,
            failover=Failover(
                FallbackConfig(fallbacks={PRIMARY: FALLBACK}), MemoryHealth(), telemetry=telemetry
            ),
        )
        quiet = FailoverChatModel(  # the same, reporting to no-op providers
            routes=wrapped.routes,
            primary=PRIMARY,
            failover=Failover(
                FallbackConfig(fallbacks={PRIMARY: FALLBACK}),
                MemoryHealth(),
                telemetry=Telemetry(NoOpTracerProvider(), NoOpMeterProvider()),
            ),
        )
        models = {"bare": bare, "wrapped": wrapped, "quiet": quiet}
        for _ in range(200):  # warm up connections, caches, the interpreter's paths
            for model in models.values():
                model.invoke("hi")
        samples: dict[str, list[int]] = {name: [] for name in models}
        for i in range(n):  # three sides, alternating order so drift hits all alike
            order = list(models.items())
            for name, model in order if i % 2 else order[::-1]:
                t0 = time.perf_counter_ns()
                model.invoke("hi")
                samples[name].append(time.perf_counter_ns() - t0)
    bare_us = statistics.median(samples["bare"]) / 1000
    print(f"1. healthy call, median of {n} each (interleaved)")
    print(f"   bare ChatOpenAI.invoke                        {bare_us:9.1f} us")
    for name, label in (
        ("wrapped", "FailoverChatModel.invoke, OTel SDK on"),
        ("quiet", "FailoverChatModel.invoke, no-op telemetry"),
    ):
        us = statistics.median(samples[name]) / 1000
        print(
            f"   {label:45} {us:9.1f} us   overhead {us - bare_us:7.1f} us "
            f"({(us - bare_us) / bare_us * 100:+.1f} %, goal < 5 %)"
        )


def waste(calls: int) -> None:
    dead = Fault.status(503, retry_after_ms=1)
    with FakeProvider() as fake:
        base = f"http://127.0.0.1:{fake.port}"
        fake.set_fault("primary", dead)
        chain = _chat(base, "primary", "fake-model", 2).with_fallbacks(
            [_chat(base, "fallback", "fake-model-large", 0)]
        )
        lc_waste, lc_t0 = [], time.perf_counter()
        for _ in range(calls):
            before = fake.requests("primary")
            chain.invoke("hi")
            lc_waste.append(fake.requests("primary") - before)
        lc_s = time.perf_counter() - lc_t0

        fake.reset_counts()
        model = FailoverChatModel(
            routes={
                PRIMARY: _chat(base, "primary", "fake-model", 0),
                FALLBACK: _chat(base, "fallback", "fake-model-large", 0),
            },
            primary=PRIMARY,
            failover=Failover(
                FallbackConfig(fallbacks={PRIMARY: FALLBACK}, max_retries=2, cooldown_s=60),
                MemoryHealth(),
            ),
        )
        sw_waste, sw_t0 = [], time.perf_counter()
        for _ in range(calls):
            before = fake.requests("primary")
            message = model.invoke("hi")
            assert message.response_metadata["swerve"]["served"] == FALLBACK
            sw_waste.append(fake.requests("primary") - before)
        sw_s = time.perf_counter() - sw_t0
    print(f"\n2. dead primary (503), {calls} sequential calls, retry budget 2 on both sides")
    print(f"   {'':16}{'wasted requests per call':>40}{'total':>8}{'wall':>9}")
    print(f"   {'with_fallbacks':16}{_row(lc_waste):>40}{sum(lc_waste):>8}{lc_s:>8.2f}s")
    print(f"   {'swerve':16}{_row(sw_waste):>40}{sum(sw_waste):>8}{sw_s:>8.2f}s")


def _row(values: list[int]) -> str:
    first, rest = values[0], values[1:]
    same = all(v == rest[0] for v in rest) if rest else True
    return f"call 1: {first}, calls 2-{len(values)}: {rest[0] if same else rest}"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=1500)
    parser.add_argument("--calls", type=int, default=20)
    args = parser.parse_args()
    warnings.simplefilter("ignore")  # the with_fallbacks side retries in its SDK on purpose
    overhead(args.n)
    waste(args.calls)


if __name__ == "__main__":
    main()
