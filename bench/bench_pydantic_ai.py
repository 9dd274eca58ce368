"""Issue 23's side by side: a pydantic-ai agent over swerve's transport, and over pydantic-ai's
own ``FallbackModel``, through the same outage of its primary.

Run: uv run python bench/bench_pydantic_ai.py [--calls 20] [--timeout 0.5]
         [--only {503,hang}]

Each side runs ``--calls`` calls of ``await agent.run(...)`` in a row (a pydantic-ai ``Agent``
on ``OpenAIChatModel``, no tools: one model request per call) against the fake provider on
127.0.0.1, whose ``primary`` fails every request and whose ``fallback`` answers at once. The
primary's outage is either a standing 503 (no ``Retry-After``) or a hang (the request is read
and never answered); every side's time limit per request is ``--timeout`` seconds.

  swerve               the model's provider on ``httpx2.AsyncClient(transport=
                       AsyncFailoverTransport(...))`` with swerve's default policy (2 retries,
                       2 s backoff with full jitter, 10 s cooldown) and ``attempt_timeout_s=
                       --timeout``; the SDK's retries off (``max_retries: 0``). The first call
                       pays the primary's failure (a timeout is swapped at once, a 503 retried
                       twice) and cools it down: the later calls go straight to the fallback
                       until the cooldown ends (the run is shorter than it).
  swerve               the same with swerve's ``max_retries=0``: one request to the primary in
  (max_retries=0)      the whole run.
  FallbackModel        ``FallbackModel(primary, fallback)``, each an ``OpenAIChatModel`` on the
  (SDK retries)        client pydantic-ai builds, with the openai SDK's default retries (2, with
                       its own backoff) as a user would have them, and ``timeout: --timeout``
                       (pydantic-ai's default is 600 s). Every call tries the primary first.
  FallbackModel        the same with ``max_retries: 0``, as pydantic-ai's docs advise under a
  (max_retries=0)      FallbackModel: one request to the dead primary per call.

Columns, per side: requests the primary received over the run (wasted: it never answers) and
the fallback received (one per call when every call is answered), and the median, p95
(nearest rank: with 20 calls, the second slowest), slowest (swerve's: the first call) and
total of the seconds each call took to answer. Only public names of swerve and pydantic-ai are
used.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import statistics
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass

import httpx2
from pydantic_ai import Agent
from pydantic_ai.models import Model
from pydantic_ai.models.fallback import FallbackModel
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider
from pydantic_ai.settings import ModelSettings

from swerve import Failover, FallbackConfig, MemoryHealth
from swerve.httpx import AsyncFailoverTransport, Upstream
from swerve.testing import FakeProvider, Fault, Reply

MODEL = "gpt-fake"
PRIMARY, FALLBACK = f"primary/{MODEL}", f"fallback/{MODEL}"
ANSWER = "from the fallback"
OUTAGES: dict[str, Callable[[], Fault]] = {
    "503": lambda: Fault.status(503),
    "hang": Fault.hang,
}


COLUMNS = ("primary", "fallback", "median s", "p95 s", "max s", "total s")
HEADER = f"   {'':30}{COLUMNS[0]:>9}" + "".join(f"{c:>10}" for c in COLUMNS[1:])


@dataclass
class Row:
    side: str
    primary: int
    fallback: int
    seconds: list[float]

    def line(self) -> str:
        s = sorted(self.seconds)
        p95 = s[min(len(s) - 1, round(0.95 * (len(s) - 1)))]
        return (
            f"   {self.side:30}{self.primary:>9}{self.fallback:>10}"
            f"{statistics.median(s):>10.3f}{p95:>10.3f}{s[-1]:>10.3f}{sum(s):>10.2f}"
        )


def _direct(fake: FakeProvider, provider: str) -> OpenAIChatModel:
    # The client pydantic-ai builds itself: the openai SDK's default retries.
    return OpenAIChatModel(
        MODEL, provider=OpenAIProvider(base_url=f"{fake.url(provider)}/v1", api_key="bench")
    )


def _over_swerve(
    fake: FakeProvider, timeout: float, retries: int
) -> tuple[Model, AsyncFailoverTransport]:
    transport = AsyncFailoverTransport(
        {
            route: Upstream(f"{fake.url(route.split('/')[0])}/v1", api_key="bench-key-0123")
            for route in (PRIMARY, FALLBACK)
        },
        failover=Failover(
            FallbackConfig(
                fallbacks={PRIMARY: FALLBACK}, max_retries=retries, attempt_timeout_s=timeout
            ),
            health=MemoryHealth(),
        ),
    )
    provider = OpenAIProvider(
        base_url="http://swerve.invalid/v1",
        api_key="unused",
        http_client=httpx2.AsyncClient(transport=transport),
    )
    return OpenAIChatModel(PRIMARY, provider=provider), transport


async def _calls(agent: Agent[None, str], n: int) -> list[float]:
    seconds = []
    async with agent:  # the HTTP clients pydantic-ai built, closed on this loop at the end
        for _ in range(n):
            t0 = time.perf_counter()
            result = await agent.run("What is the weather in Oslo?")
            seconds.append(time.perf_counter() - t0)
            assert result.output == ANSWER, result.output
    return seconds


Build = Callable[[], tuple[Model, AsyncFailoverTransport | None]]


def outage(name: str, calls: int, timeout: float) -> list[Row]:
    rows = []
    with FakeProvider() as fake:
        fake.set_reply("fallback", Reply(text=ANSWER))

        def side(label: str, build: Build, settings: ModelSettings) -> None:
            fake.set_fault("primary", OUTAGES[name]())  # also releases the last side's hangs
            fake.reset_counts()

            async def run() -> list[float]:
                # Built on the loop it runs on: an async client's connections belong to one.
                model, transport = build()
                try:
                    return await _calls(Agent(model, model_settings=settings), calls)
                finally:
                    if transport is not None:
                        await transport.aclose()  # a client of yours stays yours to close

            seconds = asyncio.run(run())
            rows.append(Row(label, fake.requests("primary"), fake.requests("fallback"), seconds))

        def fallback_model() -> tuple[Model, None]:
            return FallbackModel(_direct(fake, "primary"), _direct(fake, "fallback")), None

        off: ModelSettings = {"max_retries": 0}
        side("swerve", lambda: _over_swerve(fake, timeout, 2), off)
        side("swerve (max_retries=0)", lambda: _over_swerve(fake, timeout, 0), off)
        side("FallbackModel (SDK retries)", fallback_model, {"timeout": timeout})
        side(
            "FallbackModel (max_retries=0)", fallback_model, {"timeout": timeout, "max_retries": 0}
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--timeout", type=float, default=0.5)
    parser.add_argument("--only", choices=sorted(OUTAGES))
    args = parser.parse_args()
    warnings.simplefilter("ignore")  # the SDK's retries are on purpose
    logging.getLogger("swerve").setLevel(logging.ERROR)  # its "[model-fallback]" line, once
    for name in [args.only] if args.only else list(OUTAGES):
        what = "a standing 503" if name == "503" else "a hang"
        print(f"\nprimary down ({what}), {args.calls} calls in a row, limit {args.timeout} s")
        print(HEADER)
        for row in outage(name, args.calls, args.timeout):
            print(row.line())


if __name__ == "__main__":
    main()
