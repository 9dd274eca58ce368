"""Learned per-route latency shared through a real Redis: what one process observes, another's
quantiles reflect after a sync; what a bad writer left in the latency hashes is rejected and
counted, never a crash or a reconnect. Real ``redis-server`` (tests/fleet/conftest.py); time
is the stores' injected FakeClock; the background sync is polled with a bound."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
import redis

from swerve import RedisHealth
from swerve._health.latency import BUCKETS, RELATIVE_ERROR, bucket_of
from swerve._telemetry import names
from swerve.testing import FakeClock, TelemetryRecorder

from ._servers import RedisServer, wait_for

R = "primary/model-a"
PREFIX = "latency"
W = 6_000_000  # FakeClock's window: 1.8e9 / 300 s


class Store:
    """One process of the fleet: a RedisHealth on the test's Redis, its telemetry recorded."""

    def __init__(self, server: RedisServer, clock: FakeClock) -> None:
        self.recorder = TelemetryRecorder()
        self.clock = clock
        self.health = RedisHealth(
            server.client(), prefix=PREFIX, clock=clock, telemetry=self.recorder.telemetry
        )
        assert self.health.wait_until_shared(5), "the store never shared"

    def holds(self, n: int, route: str = R) -> bool:
        """Whether the store's view of ``route`` holds exactly ``n`` times."""
        now = self.clock.now
        return (
            self.health.first_chunk_quantile(route, 0.5, now, min_samples=n) is not None
            and self.health.first_chunk_quantile(route, 0.5, now, min_samples=n + 1) is None
        )

    def rejected(self, reason: str | None = None) -> float:
        attrs = {} if reason is None else {"swerve__reason": reason}
        return self.recorder.counter(names.METRIC_STORE_REJECTED, **attrs)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def raw(redis_server: RedisServer) -> Iterator[redis.Redis]:
    client = redis_server.client()
    yield client
    client.close()


@pytest.fixture
def stores(redis_server: RedisServer, clock: FakeClock) -> Iterator[Callable[[], Store]]:
    started: list[Store] = []

    def start() -> Store:
        store = Store(redis_server, clock)
        started.append(store)
        return store

    yield start
    for store in started:
        store.health.close()


def key(window: int = W, route: str = R) -> str:
    return f"{{{PREFIX}:{route}}}:lat:{window}"


def in_redis(raw: redis.Redis, window: int = W) -> dict[int, int]:
    return {int(f): int(v) for f, v in raw.hgetall(key(window)).items()}  # type: ignore[union-attr]


def test_what_one_process_observes_the_others_quantiles_reflect(
    stores: Callable[[], Store], raw: redis.Redis, clock: FakeClock
) -> None:
    a, b = stores(), stores()
    for _ in range(30):
        a.health.observe_first_chunk(R, 0.2, clock.now)
    assert a.holds(30)  # at once, from the local view: no round trip on the call path
    wait_for("a's counts in Redis", lambda: in_redis(raw) == {bucket_of(0.2): 30}, 10)
    assert raw.pttl(key()) > 0  # expires by itself (two windows)

    b.health.observe_first_chunk(R, 20.0, clock.now)  # b's push brings the fleet's counts back
    wait_for("the fleet's 31 times in b", lambda: b.holds(31), 10)
    p50 = b.health.first_chunk_quantile(R, 0.5, clock.now)
    assert p50 is not None and abs(p50 - 0.2) <= 0.2 * RELATIVE_ERROR
    a.health.observe_first_chunk(R, 20.0, clock.now)
    wait_for("the fleet's 32 times in a", lambda: a.holds(32), 10)
    assert in_redis(raw) == {bucket_of(0.2): 30, bucket_of(20.0): 2}  # each time counted once
    p99 = a.health.first_chunk_quantile(R, 0.99, clock.now)
    assert p99 is not None and abs(p99 - 20.0) <= 20.0 * RELATIVE_ERROR

    c = stores()  # a process that starts now knows what the fleet learned before its first call
    assert c.holds(32)
    assert a.rejected() == b.rejected() == c.rejected() == 0

    clock.advance(600)  # two windows on: the fleet's old times are forgotten everywhere
    assert c.health.first_chunk_quantile(R, 0.5, clock.now, min_samples=1) is None


def test_times_observed_while_redis_is_away_reach_the_fleet_when_it_returns(
    stores: Callable[[], Store], redis_server: RedisServer, raw: redis.Redis, clock: FakeClock
) -> None:
    a = stores()
    redis_server.pause()
    try:
        wait_for("the store to notice", lambda: not a.health.sharing, 10)
        for _ in range(25):
            a.health.observe_first_chunk(R, 1.0, clock.now)
        assert a.holds(25)  # the local view answers while Redis is away
    finally:
        redis_server.resume()
    wait_for("a to share again", lambda: a.health.sharing, 15)
    wait_for("the counts in Redis", lambda: in_redis(raw) == {bucket_of(1.0): 25}, 10)
    assert a.holds(25)


@pytest.mark.parametrize(
    ("fields", "reason"),
    [
        ({"abc": "1"}, "value"),  # a field that is no bucket index
        ({str(BUCKETS): "1"}, "value"),  # an index past the last bucket
        ({"3": "-5"}, "value"),  # a negative count
        ({"3": "1e3"}, "value"),  # not an integer as Redis writes one
        ({"3": str(2**50)}, "value"),  # more than any fleet counts in two windows
        (  # more fields than buckets (none of them the one this process writes)
            {str(i): "1" for i in range(BUCKETS) if i != bucket_of(0.5)} | {"x": "1", "y": "1"},
            "too_large",
        ),
    ],
)
def test_hostile_counts_are_rejected_and_counted(
    stores: Callable[[], Store], raw: redis.Redis, clock: FakeClock, fields: dict[str, str],
    reason: str,
) -> None:  # fmt: skip
    a = stores()
    raw.hset(key(), mapping=fields)
    for _ in range(20):
        a.health.observe_first_chunk(R, 0.5, clock.now)
    wait_for(f"a {reason} rejection", lambda: a.rejected(reason) >= 1, 10)
    # The window stays as this process knows it: its own times, nothing of the bad writer's.
    assert a.holds(20)
    p50 = a.health.first_chunk_quantile(R, 0.5, clock.now)
    assert p50 is not None and abs(p50 - 0.5) <= 0.5 * RELATIVE_ERROR
    assert a.health.sharing
    assert in_redis_field(raw, bucket_of(0.5)) == 20  # its own counts still went in


def in_redis_field(raw: redis.Redis, index: int) -> int:
    return int(raw.hget(key(), str(index)) or 0)  # type: ignore[arg-type]


def test_a_bad_value_in_a_bucket_this_process_writes_is_replaced_not_a_script_error(
    stores: Callable[[], Store], raw: redis.Redis, clock: FakeClock
) -> None:
    a = stores()
    index = bucket_of(0.5)
    raw.hset(key(), mapping={str(index): "9" * 19})  # HINCRBY on it would overflow
    raw.hset(key(W - 1), mapping={str(index): "not a number"})
    for _ in range(20):
        a.health.observe_first_chunk(R, 0.5, clock.now)
    wait_for("the count replaced", lambda: in_redis_field(raw, index) == 20, 10)
    wait_for("a's view", lambda: a.holds(20), 10)
    assert a.rejected("script") == 0 and a.health.sharing
    assert a.rejected("value") >= 1  # the previous window's bad value: read, rejected


def test_a_latency_key_of_the_wrong_type_is_rejected_on_read_and_replaced_on_write(
    stores: Callable[[], Store], raw: redis.Redis, clock: FakeClock
) -> None:
    a, b = stores(), stores()
    raw.set(key(W - 1), "not a hash")
    a.health.observe_first_chunk(R, 0.5, clock.now)  # a writes W only: reads W - 1 as it is
    wait_for("a wrong_type rejection", lambda: a.rejected("wrong_type") >= 1, 10)
    raw.set(key(), "not a hash")
    b.health.observe_first_chunk(R, 0.5, clock.now)  # b writes W: the string goes
    wait_for("b's count in Redis", lambda: raw.type(key()) == b"hash", 10)
    assert a.health.sharing and b.health.sharing


def test_hostile_latency_keys_found_on_resync_are_rejected(
    stores: Callable[[], Store], raw: redis.Redis, clock: FakeClock
) -> None:
    raw.hset(f"{{{PREFIX}:{R}}}:lat:abc", mapping={"3": "1"})  # no window number
    raw.hset(key(W + 1000), mapping={"3": "1"})  # a window no fleet clock could be in
    raw.hset(key(route="no-slash"), mapping={"3": "1"})  # no route swerve writes
    raw.hset(key(route="fallback/model-b"), mapping={"3": "x"})
    raw.hset(key(W - 10, route="old/route"), mapping={"3": "1"})  # stale: ignored, no alarm
    raw.hset(key(route="good/route"), mapping={"3": "25"})
    a = stores()  # the resync runs before the store says it shares
    assert a.rejected("shape") >= 1
    assert a.rejected("out_of_bounds") >= 1
    assert a.rejected("route") >= 1
    assert a.rejected("value") >= 1
    assert a.holds(25, "good/route")
    assert a.health.first_chunk_quantile("old/route", 0.5, clock.now, min_samples=1) is None
    assert a.health.first_chunk_quantile(R, 0.5, clock.now, min_samples=1) is None
    assert a.health.sharing
