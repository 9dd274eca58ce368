"""Resources: repeated rounds of calls through the sync and async failover transports and the
engine leave threads, asyncio tasks, file descriptors and RSS where they were.

Each round sends calls through all four paths with the primary failing part of the time (503s
and resets, so retries, swaps and cooldowns run), on long-lived clients as an application
keeps them. The pools are capped below the round's concurrency, so every round fills them to
the same size and a count taken after the round sees growth, not pool warm-up. Round 1 warms
up (imports, pools, caches); round 2 is the reference and the last round must match it within
the stated tolerance.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from swerve import Failover, FallbackConfig, MemoryHealth
from swerve.httpx import AsyncFailoverTransport, FailoverTransport, Upstream
from swerve.testing import FakeProvider, Fault, Reply, TelemetryRecorder

from ._measure import open_fds, rss_mb

P, F = "primary/fake-model", "fallback/fake-model"
CONFIG = FallbackConfig(
    fallbacks={P: F},
    max_retries=1,
    max_swaps=1,
    jitter=False,
    backoff_initial_s=0.001,
    backoff_max_s=0.001,
    cooldown_s=0.05,  # short, so that later rounds go back to the primary and fail again
    cooldown_max_s=0.05,
    attempt_timeout_s=5.0,
)
ROUNDS = 6
PER_PATH = 48  # calls per path per round
POOL = 16
THREADS = 8
FD_TOLERANCE = 8
RSS_TOLERANCE_MB = 16.0
MESSAGES = [{"role": "user", "content": "hi"}]


def fake_handlers() -> int:
    """The fake provider's request threads: one per open connection, each holding its socket.
    They come and go with the connections resets close, so they are left out of the counts."""
    return sum(t.name == "swerve-fake-request" for t in threading.enumerate())


def threads_and_fds() -> tuple[int, int]:
    """Threads and open fds of the code under test (the fake provider's handlers excluded)."""
    handlers = fake_handlers()
    return threading.active_count() - handlers, open_fds() - handlers


def text_of(response: httpx.Response) -> str:
    response.raise_for_status()
    return str(response.json()["choices"][0]["message"]["content"])


def test_rounds_through_transports_and_engine_leave_nothing_behind(
    figure: Any, soak_s: float, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR, logger="swerve")  # pytest keeps every captured record
    with FakeProvider() as fake:
        fake.set_reply("primary", Reply(text="from primary"))
        fake.set_reply("fallback", Reply(text="from fallback"))
        recorder = TelemetryRecorder()

        def failover() -> Failover:
            return Failover(CONFIG, health=MemoryHealth(), telemetry=recorder.telemetry)

        upstreams = {
            P: Upstream(f"{fake.url('primary')}/v1", api_key="primary-key-0123456789"),
            F: Upstream(f"{fake.url('fallback')}/v1", api_key="fallback-key-0123456789"),
        }
        limits = httpx.Limits(max_connections=POOL, max_keepalive_connections=POOL)
        sync_transport = httpx.Client(
            transport=FailoverTransport(upstreams, failover=failover()), limits=limits
        )
        engine = failover()
        sync_client = httpx.Client(limits=limits)

        def url(attempt: Any) -> str:
            return f"{fake.url(attempt.route.provider)}/v1/chat/completions"

        def sync_calls(n: int) -> list[str]:
            out = []
            for _ in range(n):
                r = sync_transport.post(
                    "http://swerve.invalid/v1/chat/completions",
                    json={"model": P, "messages": MESSAGES},
                )
                out.append(text_of(r))

                def fn(attempt: Any) -> str:
                    body = {"model": attempt.route.model, "messages": MESSAGES}
                    return text_of(
                        sync_client.post(url(attempt), json=body, timeout=attempt.timeout)
                    )

                out.append(engine.call(P, fn).value)
            return out

        async def main() -> list[tuple[int, int, int, float, int]]:
            rows: list[tuple[int, int, int, float, int]] = []
            async_transport = httpx.AsyncClient(
                transport=AsyncFailoverTransport(upstreams, failover=failover()), limits=limits
            )
            async_client = httpx.AsyncClient(limits=limits)
            answers = 0

            async def via_transport() -> str:
                r = await async_transport.post(
                    "http://swerve.invalid/v1/chat/completions",
                    json={"model": P, "messages": MESSAGES},
                )
                return text_of(r)

            async def via_engine() -> str:
                async def fn(attempt: Any) -> str:
                    body = {"model": attempt.route.model, "messages": MESSAGES}
                    r = await async_client.post(url(attempt), json=body, timeout=attempt.timeout)
                    return text_of(r)

                return (await engine.acall(P, fn)).value

            loop = asyncio.get_running_loop()
            t0 = time.monotonic()
            try:
                with ThreadPoolExecutor(THREADS) as pool:
                    r = 0
                    while r < ROUNDS or time.monotonic() - t0 < soak_s:
                        # The primary fails the first requests of each round, then answers.
                        fake.script(
                            "primary", [Fault.status(503), Fault.reset(), Fault.status(503)] * 10
                        )
                        sync = [
                            loop.run_in_executor(pool, sync_calls, PER_PATH // THREADS)
                            for _ in range(THREADS)
                        ]
                        got = await asyncio.gather(
                            *[via_transport() for _ in range(PER_PATH)],
                            *[via_engine() for _ in range(PER_PATH)],
                        )
                        got += [t for chunk in await asyncio.gather(*sync) for t in chunk]
                        assert set(got) <= {"from primary", "from fallback"}, set(got)
                        assert len(got) == 4 * PER_PATH
                        answers += len(got)
                        recorder.spans.clear()
                        gc.collect()
                        threads, fds = threads_and_fds()
                        rows.append((threads, len(asyncio.all_tasks()), fds, rss_mb(), answers))
                        r += 1
            finally:
                await async_transport.aclose()
                await async_client.aclose()
            return rows

        try:
            rows = asyncio.run(main())
        finally:
            sync_transport.close()
            sync_client.close()
            recorder.shutdown()
    (th2, tk2, fd2, rss2, _), (thn, tkn, fdn, rssn, total) = rows[1], rows[-1]
    figure(
        "threads, tasks, fds and RSS after rounds through both transports and the engine "
        "(the fake provider's connection handlers excluded)",
        f"round 2 -> last: threads and tasks equal, fds +{FD_TOLERANCE}, "
        f"RSS +{RSS_TOLERANCE_MB:g} MB",
        measured=(
            f"{len(rows)} rounds, {total} calls answered: threads {th2} -> {thn}, tasks {tk2} -> "
            f"{tkn}, fds {fd2} -> {fdn}, RSS {rss2:.1f} -> {rssn:.1f} MB"
        ),
    )
    assert thn <= th2, [row[0] for row in rows]
    assert tkn <= tk2, [row[1] for row in rows]
    assert fdn <= fd2 + FD_TOLERANCE, [row[2] for row in rows]
    assert rssn <= rss2 + RSS_TOLERANCE_MB, [round(row[3], 1) for row in rows]
