"""An operator's clear (``swerve routes clear``, or ``health.clear(route)``) ends a cooldown
fleet-wide, in the process that cleared too, even when it cooled the route a moment before."""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import pytest

from swerve import BreakerConfig, Failover, FallbackConfig, RedisHealth
from swerve._health.store import CooldownRule, HealthStore
from swerve.testing import FakeProvider, Fault

from ._fleet import F, P
from ._servers import RedisServer, wait_for
from ._traffic import complete


@pytest.fixture
def fake() -> Iterator[FakeProvider]:
    with FakeProvider() as server:
        yield server


@pytest.fixture
def pair(redis_server: RedisServer) -> Iterator[tuple[RedisHealth, RedisHealth]]:
    one = RedisHealth.from_url(redis_server.url, prefix="operators")
    two = RedisHealth.from_url(redis_server.url, prefix="operators")
    yield one, two
    one.close()
    two.close()


def test_redis_health_is_a_health_store(pair: tuple[RedisHealth, RedisHealth]) -> None:
    assert all(isinstance(store, HealthStore) for store in pair)


def test_a_clear_sticks_in_the_process_that_cooled_the_route_a_moment_before(
    pair: tuple[RedisHealth, RedisHealth], fake: FakeProvider
) -> None:
    mine, theirs = pair
    assert mine.wait_until_shared() and theirs.wait_until_shared()
    config = FallbackConfig(
        fallbacks={P: F}, max_retries=0, cooldown_s=60, breaker=BreakerConfig(enabled=False)
    )
    fo = Failover(config, mine)
    client = httpx.Client()

    def served() -> str:
        return str(fo.call(P, lambda a: complete(client, fake, a)).route)

    # The echo of this process's own cooldown races its clear; it loses only now and then,
    # so the round is run many times.
    for round_ in range(60):
        fake.set_fault("primary", Fault.status(503))
        assert served() == F  # cooled here, and shared
        wait_for("the other to see it", lambda: P in theirs.unavailable(time.time()), 5, 0.001)
        mine.clear(P)  # the operator ends it at once
        wait_for("the clear", lambda: P not in theirs.unavailable(time.time()), 5, 0.001)
        # Every message published before this one has reached this process once it sees it.
        barrier = f"barrier/round-{round_}"
        theirs.cool_down(barrier, time.time(), CooldownRule(60, 60))
        wait_for("the barrier", lambda: barrier in mine.unavailable(time.time()), 5, 0.001)  # noqa: B023
        fake.set_fault("primary", Fault.ok())
        assert served() == P, f"round {round_}: the cleared primary was walked past"
    client.close()
