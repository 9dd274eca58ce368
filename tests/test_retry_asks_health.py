"""Every retry asks the route's health first (issue 20): a route that is cooling, drained or
behind an open breaker, learned by this call, by another Failover on the store or (through
the store) by the fleet, gets no more of a call's retry budget: the retry becomes a swap
(``swerve.reason`` ``degraded``), or the error surfaces when there is nowhere to go.

Sync and async alike, on the fake clock, against the fake provider over real httpx.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from swerve import Attempt, BreakerConfig, Failover, FallbackConfig, MemoryHealth
from swerve.testing import FakeClock, FakeProvider, Fault, Reply, TelemetryRecorder

P, F = "primary/model-a", "fallback/model-b"
BODY = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


@pytest.fixture
def fake() -> Iterator[FakeProvider]:
    with FakeProvider() as server:
        server.set_reply("primary", Reply(text="from primary"))
        server.set_reply("fallback", Reply(text="from fallback"))
        server.set_fault("primary", Fault.status(503))
        yield server


@pytest.fixture(params=["sync", "async"])
def mode(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def config(**kw: Any) -> FallbackConfig:
    params: dict[str, Any] = {
        "fallbacks": {P: F},
        "max_retries": 2,
        "cooldown_s": 30,
        "jitter": False,
        "breaker": BreakerConfig(enabled=False),
    }
    params.update(kw)
    return FallbackConfig(**params)


def run(
    mode: str,
    failover: Failover,
    base: str,
    during_first: Callable[[], None],
    *,
    pin: bool = False,
) -> tuple[str, list[str]]:
    """One call on P; ``during_first`` runs while its first attempt is in flight (what another
    Failover, the fleet or an operator learns meanwhile). Returns the route that served it and
    the routes its attempts went to."""
    tried: list[str] = []

    def before(attempt: Attempt) -> str:
        tried.append(str(attempt.route))
        if len(tried) == 1:
            during_first()
        return f"{base}/{attempt.route.provider}/v1/chat/completions"

    body = BODY
    if mode == "sync":
        with httpx.Client() as client:

            def sync_fn(attempt: Attempt) -> str:
                response = client.post(before(attempt), json=body)
                response.raise_for_status()
                return response.text

            result = failover.call(P, sync_fn, pin=pin)
    else:

        async def main() -> Any:
            async with httpx.AsyncClient() as client:

                async def async_fn(attempt: Attempt) -> str:
                    response = await client.post(before(attempt), json=body)
                    response.raise_for_status()
                    return response.text

                return await failover.acall(P, async_fn, pin=pin)

        result = asyncio.run(main())
    return str(result.route), tried


def other_failover_fails(health: MemoryHealth, clock: FakeClock, base: str, cfg: Any) -> None:
    """Another Failover on the same store fails on P once (no retries): it cools P."""
    other = Failover(cfg, health, clock=clock, telemetry=TelemetryRecorder().telemetry)
    with httpx.Client() as client:
        other.call(
            P,
            lambda a: client.post(
                f"{base}/{a.route.provider}/v1/chat/completions", json=BODY
            ).raise_for_status(),
        )


def test_a_route_another_failover_cooled_mid_call_gets_no_more_retries(
    mode: str, fake: FakeProvider
) -> None:
    clock, health, otel = FakeClock(), MemoryHealth(), TelemetryRecorder()
    base = f"http://127.0.0.1:{fake.port}"
    failover = Failover(config(), health, clock=clock, telemetry=otel.telemetry)
    served, tried = run(
        mode,
        failover,
        base,
        lambda: other_failover_fails(health, clock, base, config(max_retries=0)),
    )
    assert served == F
    # This call's first attempt, then the swap: not its two retries. The other Failover's
    # one request makes the second.
    assert tried == [P, F]
    assert fake.requests("primary") == 2
    assert clock.sleeps == []  # no backoff was waited for a retry that never came
    ((_, swap),) = otel.events("swerve.swap")
    assert swap["swerve.reason"] == "degraded" and swap["swerve.route.to"] == F
    assert otel.counter("swerve.swaps", swerve__reason="degraded") == 1
    otel.shutdown()


def test_a_route_drained_mid_call_gets_no_more_retries(mode: str, fake: FakeProvider) -> None:
    clock, health, otel = FakeClock(), MemoryHealth(), TelemetryRecorder()
    base = f"http://127.0.0.1:{fake.port}"
    failover = Failover(config(), health, clock=clock, telemetry=otel.telemetry)
    served, tried = run(mode, failover, base, lambda: health.drain(P, clock.now + 600, clock.now))
    assert (served, tried) == (F, [P, F])
    assert fake.requests("primary") == 1
    assert otel.counter("swerve.swaps", swerve__reason="degraded") == 1
    otel.shutdown()


def test_a_breaker_another_failover_opened_mid_call_gets_no_more_retries(
    mode: str, fake: FakeProvider
) -> None:
    clock, health, otel = FakeClock(), MemoryHealth(), TelemetryRecorder()
    base = f"http://127.0.0.1:{fake.port}"
    breaker = BreakerConfig(min_calls=1, failure_rate=0.5, window_s=60, open_s=30)
    # No cooldowns at all: only the breaker can take the route out.
    cfg = config(cooldown_s=0, breaker=breaker)
    failover = Failover(cfg, health, clock=clock, telemetry=otel.telemetry)
    served, tried = run(
        mode,
        failover,
        base,
        lambda: other_failover_fails(health, clock, base, config(max_retries=0, cooldown_s=0,
                                                                 breaker=breaker)),
    )  # fmt: skip
    assert (served, tried) == (F, [P, F])
    assert fake.requests("primary") == 2
    assert otel.counter("swerve.swaps", swerve__reason="degraded") == 1
    otel.shutdown()


def test_with_nowhere_to_go_the_error_surfaces_without_retries(
    mode: str, fake: FakeProvider
) -> None:
    clock, health, otel = FakeClock(), MemoryHealth(), TelemetryRecorder()
    base = f"http://127.0.0.1:{fake.port}"
    failover = Failover(config(fallbacks={}), health, clock=clock, telemetry=otel.telemetry)
    with pytest.raises(httpx.HTTPStatusError):
        run(mode, failover, base, lambda: health.drain(P, clock.now + 600, clock.now))
    assert fake.requests("primary") == 1
    ((_, declined),) = otel.events("swerve.swap_declined")
    assert declined["swerve.reason"] == "no_fallback"
    otel.shutdown()


def test_a_pinned_call_keeps_its_retries_whatever_the_route_s_health(
    mode: str, fake: FakeProvider
) -> None:
    clock, health, otel = FakeClock(), MemoryHealth(), TelemetryRecorder()
    base = f"http://127.0.0.1:{fake.port}"
    failover = Failover(config(), health, clock=clock, telemetry=otel.telemetry)
    with pytest.raises(httpx.HTTPStatusError):
        run(mode, failover, base, lambda: health.drain(P, clock.now + 600, clock.now), pin=True)
    assert fake.requests("primary") == 3  # pin: the call stays, retries and all
    otel.shutdown()


def test_a_healthy_route_still_gets_its_whole_budget(mode: str, fake: FakeProvider) -> None:
    clock, health, otel = FakeClock(), MemoryHealth(), TelemetryRecorder()
    base = f"http://127.0.0.1:{fake.port}"
    failover = Failover(config(), health, clock=clock, telemetry=otel.telemetry)
    served, tried = run(mode, failover, base, lambda: None)
    assert (served, tried) == (F, [P, P, P, F])
    ((_, swap),) = otel.events("swerve.swap")
    assert swap["swerve.reason"] == "unavailable"
    otel.shutdown()
