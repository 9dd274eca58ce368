"""``$SWERVE_FALLBACK_CONFIG`` changed mid-run under load (docs/config.md, "From the
environment"): ``Failover()`` without a config re-reads the variable when its string changes.

Under 200 concurrent async calls and 8 threads of sync calls, with the primary down:

1. config 1 maps the primary to ``b``; halfway through the calls the variable changes to
   config 2, which maps it to ``c``: every call ends answered, every call that started after
   the change is served by ``c``, and the change cleared the primary's cooldown (the primary is
   tried again once);
2. mid-run the variable becomes a value that does not parse: it is logged once, as an error
   naming the variable, and config 2 stays in force (calls go on to ``c``, and the primary,
   cooled under config 2, stays skipped: a bad value clears nothing);
3. a good value after the bad one takes effect.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from swerve import Failover, MemoryHealth
from swerve.testing import FakeProvider, Fault, Reply, TelemetryRecorder

VAR = "SWERVE_FALLBACK_CONFIG"
A, B, C = "a/m", "b/m", "c/m"
ASYNC_CALLS = 200
THREADS = 8
PER_THREAD = 10


def config(fallback: str) -> str:
    return json.dumps(
        {"fallbacks": {A: fallback}, "max_retries": 0, "cooldown_s": 600, "jitter": False}
    )


def test_config_env_var_changed_mid_run(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, figure: Any
) -> None:
    monkeypatch.setenv(VAR, config(B))
    caplog.set_level(logging.WARNING, logger="swerve")
    with FakeProvider() as fake:
        for p in "abc":
            fake.set_reply(p, Reply(text=f"served by {p}"))
        fake.set_fault("a", Fault.status(503))
        recorder = TelemetryRecorder()
        fo = Failover(health=MemoryHealth(), telemetry=recorder.telemetry)
        state = {"phase": "config 1"}
        lock = threading.Lock()
        sent = [0]

        def step(at: int, value: str, phase: str) -> None:
            """Change the variable once the calls have made ``at`` attempts (event-driven)."""
            with lock:
                sent[0] += 1
                if sent[0] == at:
                    monkeypatch.setenv(VAR, value)
                    state["phase"] = phase

        def run(at: int, value: str, phase: str) -> list[tuple[str, str, str]]:
            """One batch of calls; returns (phase at the call's start, served route, text)."""
            sent[0] = 0
            sync_client = httpx.Client()

            def sync_one() -> tuple[str, str, str]:
                started = state["phase"]

                def fn(attempt: Any) -> str:
                    step(at, value, phase)
                    r = sync_client.post(
                        f"{fake.url(attempt.route.provider)}/v1/chat/completions",
                        json={"model": "m", "messages": [{"role": "user", "content": "hi"}]},
                        timeout=attempt.timeout,
                    )
                    r.raise_for_status()
                    return str(r.json()["choices"][0]["message"]["content"])

                result = fo.call(A, fn)
                return started, str(result.route), result.value

            async def main() -> list[tuple[str, str, str]]:
                async with httpx.AsyncClient() as client:

                    async def one() -> tuple[str, str, str]:
                        started = state["phase"]

                        async def fn(attempt: Any) -> str:
                            step(at, value, phase)
                            r = await client.post(
                                f"{fake.url(attempt.route.provider)}/v1/chat/completions",
                                json={
                                    "model": "m",
                                    "messages": [{"role": "user", "content": "hi"}],
                                },
                                timeout=attempt.timeout,
                            )
                            r.raise_for_status()
                            return str(r.json()["choices"][0]["message"]["content"])

                        result = await fo.acall(A, fn)
                        return started, str(result.route), result.value

                    loop = asyncio.get_running_loop()
                    with ThreadPoolExecutor(THREADS) as pool:

                        def worker() -> list[tuple[str, str, str]]:
                            return [sync_one() for _ in range(PER_THREAD)]

                        sync = [loop.run_in_executor(pool, worker) for _ in range(THREADS)]
                        # Staggered: a call starts when the previous one has made its attempt,
                        # so calls start before and after the change.
                        out = []
                        for _ in range(ASYNC_CALLS // 20):
                            out += await asyncio.gather(*[one() for _ in range(20)])
                        out += [t for chunk in await asyncio.gather(*sync) for t in chunk]
                return out

            try:
                return asyncio.run(main())
            finally:
                sync_client.close()

        total = ASYNC_CALLS + THREADS * PER_THREAD
        # 1: config 1 -> config 2 halfway.
        first = run(total // 2, config(C), "config 2")
        a_before = fake.requests("a")
        assert len(first) == total  # every call ended answered (an error would have raised)
        for started, served, text in first:
            assert text == f"served by {served[0]}"
            assert served in (B, C), served
            if started == "config 2":
                assert served == C, (started, served)
        after_change = [s for s in first if s[0] == "config 2"]
        assert after_change, "no call started after the change: the schedule did not bite"
        # The change cleared cooldowns: the primary, cooled under config 1, was tried again.
        primary_after_change = fake.requests("a") - 1  # config 1 cooled it after one request
        assert primary_after_change >= 1

        # 2: a value that does not parse, mid-run.
        caplog.clear()
        second = run(total // 2, "{not json", "bad value")
        assert len(second) == total
        assert state["phase"] == "bad value"
        assert {served for _, served, _ in second} == {C}, "the last good config left"
        assert fake.requests("a") == a_before, "a bad value cleared the cooldowns"
        errors = [
            r
            for r in caplog.records
            if r.levelno >= logging.ERROR and r.name.split(".")[0] == "swerve"
        ]
        assert len(errors) == 1, [r.getMessage() for r in errors]
        assert f"${VAR}" in errors[0].getMessage()
        assert "keeping the last good config" in errors[0].getMessage()

        # 3: a good value after the bad one takes effect.
        monkeypatch.setenv(VAR, config(B))
        third = run(0, "", "")
        assert {served for _, served, _ in third} == {B}
        recorder.shutdown()
    figure(
        "calls while $SWERVE_FALLBACK_CONFIG changes (200 async + 8 threads per batch)",
        "every call answered; calls started after a change follow the new config",
        measured=(
            f"{3 * total} calls answered, {len(after_change)} started after the change, all "
            f"served by the new fallback; primary retried {primary_after_change}x after the "
            "change cleared its cooldown"
        ),
    )
    figure(
        "an unparseable value mid-run",
        "logged once as an error naming the variable; the last good config stays in force",
        measured=f"{len(errors)} error logged; {total} calls served by the last good config, "
        "0 requests to the cooled primary",
    )
