"""A half-open breaker's probe slots, shared by two stores (two processes) on a real Redis.

A slot lasts as long as its probe may (the lease the engine passes: the attempt timeout), not
the breaker's open time, so a slow probe is never doubled; a probe that ends without a verdict
gives its slot back at once. Time is the stores' injected clock; Redis keeps the slots by it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator

import pytest

from swerve import BreakerConfig, RedisHealth
from swerve._health.store import Admission, BreakerState, Outcome
from swerve.testing import FakeClock

from ._servers import RedisServer, wait_for

ROUTE = "openrouter/anthropic/claude-sonnet-5"
BREAKER = BreakerConfig(window_s=30, min_calls=2, failure_rate=0.5, open_s=1, half_open_probes=1)
Ask = Callable[[RedisHealth, float, float], Admission]


@pytest.fixture(params=["sync", "async"])
def ask(request: pytest.FixtureRequest) -> Ask:
    """``admit(store, now, lease_s)``: the store's admission, asked the sync or the async way."""

    def sync(store: RedisHealth, now: float, lease_s: float) -> Admission:
        return store.admit(ROUTE, now, BREAKER, lease_s=lease_s)[0]

    def from_async(store: RedisHealth, now: float, lease_s: float) -> Admission:
        async def ask() -> Admission:
            return (await store.aadmit(ROUTE, now, BREAKER, lease_s=lease_s))[0]

        return asyncio.run(ask())

    return sync if request.param == "sync" else from_async


@pytest.fixture
def pair(redis_server: RedisServer) -> Iterator[tuple[RedisHealth, RedisHealth, FakeClock]]:
    """Two processes of one fleet whose breaker for ROUTE is open (until now + 1 s)."""
    clock = FakeClock()
    one = RedisHealth(redis_server.client(), prefix="half-open", clock=clock)
    two = RedisHealth(redis_server.client(), prefix="half-open", clock=clock)
    try:
        assert one.wait_until_shared(5) and two.wait_until_shared(5)
        for _ in range(2):
            one.record(ROUTE, Outcome.FAILURE, clock.now, BREAKER, probe=False)
        wait_for(
            "the other process to see the breaker open",
            lambda: [h for h in two.snapshot(clock.now) if h.breaker is BreakerState.OPEN],
            timeout=5,
        )
        yield one, two, clock
    finally:
        one.close()
        two.close()


def test_a_slow_probe_keeps_its_slot_past_the_open_time(
    pair: tuple[RedisHealth, RedisHealth, FakeClock], ask: Ask
) -> None:
    one, two, clock = pair
    clock.advance(2)  # past open_s: half-open in both processes
    assert ask(one, clock.now, 30.0) is Admission.PROBE  # a probe that may take 30 s
    clock.advance(10)  # well past open_s, still within the probe's lease
    assert ask(two, clock.now, 30.0) is Admission.REJECTED
    clock.advance(25)  # the lease is over: the prober died, or never reported
    assert ask(two, clock.now, 30.0) is Admission.PROBE


def test_a_probe_without_a_verdict_gives_its_slot_back_at_once(
    pair: tuple[RedisHealth, RedisHealth, FakeClock], ask: Ask
) -> None:
    one, two, clock = pair
    clock.advance(2)
    assert ask(one, clock.now, 30.0) is Admission.PROBE
    assert ask(two, clock.now, 30.0) is Admission.REJECTED
    one.record(ROUTE, Outcome.NEUTRAL, clock.now, BREAKER, probe=True)  # e.g. cancelled
    wait_for(
        "the slot to come back to the fleet",
        lambda: ask(two, clock.now, 30.0) is Admission.PROBE,
        timeout=5,
    )


def test_outcomes_shared_after_the_open_time_never_open_the_breaker_again(
    redis_server: RedisServer,
) -> None:
    # The outcomes that opened a breaker are spent. A writer that shares them late (a loaded
    # host, a slow Redis) must not count them into the window after the open time, where they
    # would open the breaker again, fleet-wide, for twice as long.
    clock, admin = FakeClock(), redis_server.client()
    one = RedisHealth(redis_server.client(), prefix="late", clock=clock)
    try:
        assert one.wait_until_shared(5)
        admin.execute_command("CLIENT", "PAUSE", 60_000, "WRITE")
        try:  # the writer waits on Redis with one batch; the opening goes in the next
            one.record("other/model", Outcome.FAILURE, clock.now, BREAKER, probe=False)
            wait_for("the writer to wait", lambda: admin.info("clients")["blocked_clients"], 5)

            async def open_the_breaker() -> None:  # in a loop, so the writer shares it all
                for _ in range(2):
                    one.record(ROUTE, Outcome.FAILURE, clock.now, BREAKER, probe=False)

            asyncio.run(open_the_breaker())
            clock.advance(2)  # past open_s before the writer gets through
        finally:
            admin.execute_command("CLIENT", "UNPAUSE")

        async def settle() -> None:
            await one.asettle()

        asyncio.run(settle())
        (route,) = [h for h in one.fleet_view() if h.route == ROUTE]
        assert route.breaker is not BreakerState.OPEN, route
        assert one.admit(ROUTE, clock.now, BREAKER, lease_s=30.0)[0] is Admission.PROBE
    finally:
        one.close()
        admin.close()
