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


def test_a_route_this_call_cooled_keeps_its_retries_when_the_call_bounces_back(
    mode: str, fake: FakeProvider
) -> None:
    # The seed's bounce: both routes down, the call swaps back to the route it cooled itself.
    # That cooldown is news to nobody in this call: the retries there stand.
    clock, health, otel = FakeClock(), MemoryHealth(), TelemetryRecorder()
    base = f"http://127.0.0.1:{fake.port}"
    fake.set_fault("fallback", Fault.status(503))
    cfg = config(fallbacks={P: F, F: P}, max_swaps=2)
    failover = Failover(cfg, health, clock=clock, telemetry=otel.telemetry)
    with pytest.raises(httpx.HTTPStatusError):
        run(mode, failover, base, lambda: None)
    assert (fake.requests("primary"), fake.requests("fallback")) == (6, 3)
    assert clock.sleeps == [2.0, 4.0] * 3
    reasons = [swap["swerve.reason"] for _, swap in otel.events("swerve.swap")]
    assert reasons == ["unavailable", "unavailable"]  # no retry was refused
    otel.shutdown()


def test_a_route_the_call_knew_was_down_when_it_moved_there_keeps_its_retries(
    mode: str, fake: FakeProvider
) -> None:
    # Both routes drained before the call: it starts where the map says and swaps where the
    # map says, knowingly; their health tells it nothing new, so each keeps its retries.
    clock, health, otel = FakeClock(), MemoryHealth(), TelemetryRecorder()
    base = f"http://127.0.0.1:{fake.port}"
    fake.set_fault("fallback", Fault.status(503))
    health.drain(P, clock.now + 600, clock.now)
    health.drain(F, clock.now + 600, clock.now)
    failover = Failover(config(), health, clock=clock, telemetry=otel.telemetry)
    with pytest.raises(httpx.HTTPStatusError):
        run(mode, failover, base, lambda: None)
    assert (fake.requests("primary"), fake.requests("fallback")) == (3, 3)
    assert otel.counter("swerve.swaps", swerve__reason="degraded") == 0
    otel.shutdown()


def test_a_known_route_drained_by_another_still_refuses_a_fresh_call(
    mode: str, fake: FakeProvider
) -> None:
    # The exemption is per call: a new call that chose P while it was healthy, and sees it
    # drained mid-attempt, still swaps (a call that cooled P earlier changes nothing).
    clock, health, otel = FakeClock(), MemoryHealth(), TelemetryRecorder()
    base = f"http://127.0.0.1:{fake.port}"
    failover = Failover(config(), health, clock=clock, telemetry=otel.telemetry)
    assert run(mode, failover, base, lambda: None)[1] == [P, P, P, F]  # cools P
    clock.advance(31 + 30)  # past the cooldown and its recovery window
    health.clear()
    served, tried = run(mode, failover, base, lambda: health.drain(P, clock.now + 600, clock.now))
    assert (served, tried) == (F, [P, F])
    otel.shutdown()
