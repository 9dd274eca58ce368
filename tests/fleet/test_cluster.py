"""RedisHealth on a real three-master Redis Cluster (``redis://host:port/0?cluster=1``).

Each route's keys share one hash slot, so the routes of a fleet spread over the masters; the
cooldowns and the probe leases must hold on every one of them.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
import redis
from redis.crc import key_slot

from swerve import BreakerConfig, Failover, FallbackConfig, RedisHealth, Result
from swerve.testing import FakeProvider, Fault, TelemetryRecorder

from ._fleet import F
from ._servers import RedisCluster, wait_for
from ._traffic import complete

PREFIX = "cluster"
# Six routes whose slots ({PREFIX:route}) fall on all three masters (checked below).
ROUTES = [f"primary/model-{i}" for i in range(6)]
CONFIG = FallbackConfig(
    fallbacks={route: F for route in ROUTES},
    jitter=False,
    max_retries=0,
    cooldown_s=0.5,
    attempt_timeout_s=5,  # a probe's lease
    breaker=BreakerConfig(enabled=False),
)


@pytest.fixture
def fake() -> Iterator[FakeProvider]:
    with FakeProvider() as server:
        yield server


@pytest.fixture
def pair(redis_cluster: RedisCluster) -> Iterator[tuple[RedisHealth, RedisHealth]]:
    """Two stores on the cluster: two processes of one fleet."""
    one = RedisHealth.from_url(redis_cluster.url, prefix=PREFIX)
    two = RedisHealth.from_url(redis_cluster.url, prefix=PREFIX)
    yield one, two
    one.close()
    two.close()


def test_on_a_three_master_cluster_cooling_is_shared_and_a_probe_claim_is_exclusive(
    redis_cluster: RedisCluster, pair: tuple[RedisHealth, RedisHealth], fake: FakeProvider,
    otel: TelemetryRecorder,
) -> None:  # fmt: skip
    one, two = pair
    assert one.wait_until_shared() and two.wait_until_shared()
    node = redis_cluster.nodes[0]
    cluster = redis.RedisCluster(host="127.0.0.1", port=node.port)
    slots = {key_slot(f"{{{PREFIX}:{route}}}".encode()) for route in ROUTES}
    masters = {cluster.nodes_manager.get_node_from_slot(slot).port for slot in slots}
    cluster.close()
    assert masters == {n.port for n in redis_cluster.nodes}  # every master holds some routes
    fo_one = Failover(CONFIG, one, telemetry=otel.telemetry)
    fo_two = Failover(CONFIG, two, telemetry=otel.telemetry)
    client = httpx.Client()

    def call(fo: Failover, route: str) -> Result[str]:
        return fo.call(route, lambda a: complete(client, fake, a))

    # Cooling in one store is seen by the other: its calls never reach the primary.
    fake.set_fault("primary", Fault.status(503))
    assert [str(call(fo_one, r).route) for r in ROUTES] == [F] * 6
    assert fake.requests("primary") == 6
    wait_for(
        "the other store to see every cooldown",
        lambda: all(r in two.unavailable(time.time()) for r in ROUTES),
        5,
    )
    assert [str(call(fo_two, r).route) for r in ROUTES] == [F] * 6
    assert fake.requests("primary") == 6

    # The cooldowns end with the primary still dead (and hanging, so each probe stays in
    # flight): both stores race for each route's probe, and exactly one wins it.
    wait_for(
        "every cooldown to end",
        lambda: all(s.probe_due(r, time.time()) for s in pair for r in ROUTES),
        5,
    )
    fake.set_fault("primary", Fault.hang())
    fake.reset_counts()
    start = threading.Barrier(12)

    def race(fo: Failover, route: str) -> str:
        start.wait(timeout=10)
        return str(call(fo, route).route)

    with ThreadPoolExecutor(12) as pool:
        futures = [pool.submit(race, fo, r) for r in ROUTES for fo in (fo_one, fo_two)]
        assert fake.wait_for_requests("primary", 6, timeout=10)
        wait_for("the six losers to answer", lambda: sum(f.done() for f in futures) >= 6, 10)
        assert fake.requests("primary") == 6
        fake.set_fault("primary", Fault.status(503))  # the six hung probes fail
        served = [f.result(timeout=10) for f in futures]
    client.close()
    assert served == [F] * 12
    models = Counter(body["model"] for body in fake.received("primary"))
    assert models == {route.split("/", 1)[1]: 1 for route in ROUTES}  # one probe per route
    outcomes = [e["swerve.probe.outcome"] for _, e in otel.events("swerve.probe")]
    assert outcomes == ["failure"] * 6
