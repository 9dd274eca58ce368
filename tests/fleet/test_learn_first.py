"""Issue 20 across real processes and a real redis-server: a process that starts after the
fleet learned an outage sends nothing to the dead route (its Failover waits briefly for the
store's first sync); calls one after another on two stores spend the failing route's budget
once (the cooldown is shared before the deciding call returns, and the next call lets its
reader apply what the channel holds); and after Redis restarts empty an open breaker is
merged back as a cooldown is."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from swerve import Attempt, BreakerConfig, Failover, FallbackConfig, RedisHealth, UpstreamError
from swerve._health.store import Outcome
from swerve.testing import FakeProvider, Fault

from ._fleet import F, P, Worker, stop_all
from ._servers import RedisServer, wait_for

Fleet = Callable[..., list[Worker]]
BASE: dict[str, Any] = {
    "fallbacks": {P: F},
    "jitter": False,
    "backoff_initial_s": 0.01,
    "attempt_timeout_s": 5,
    "max_retries": 2,
    "cooldown_s": 30,
    "breaker": {"enabled": False},
}


@pytest.mark.parametrize("mode", ["sync", "async", "stream", "astream"])
def test_a_late_process_sends_nothing_to_a_route_the_fleet_knows_is_dead(
    fleet: Fleet, fake: FakeProvider, redis_server: RedisServer, tmp_path: Path, mode: str
) -> None:
    (a,) = fleet(BASE, 1)
    fake.set_fault("primary", Fault.status(503))
    assert a.call()["route"] == F
    assert fake.requests("primary") == 3  # the fleet's one budget

    late = []
    for i in range(3):  # three new processes, each calling before anything waited on Redis
        spec = {
            "redis": redis_server.url,
            "prefix": f"fleet-{tmp_path.name}",
            "fake": f"http://127.0.0.1:{fake.port}",
            "config": BASE,
            "mode": mode,
            "first_call": P,
            # What a process does once its first sync is in: the default bound (50 ms) is for
            # a production machine; four test workers on two cores can take longer to connect.
            "first_sync_s": 2.0,
        }
        late.append(Worker(f"late{i}-{mode}", spec, tmp_path))
    try:
        firsts = [worker.answer() for worker in late]
        for worker in late:
            worker.ready()
    finally:
        stop_all(late)
    assert [answer["first"] for answer in firsts] == [[F]] * 3
    assert fake.requests("primary") == 3  # zero from the late processes


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_calls_one_after_another_on_two_stores_spend_the_budget_once(
    redis_server: RedisServer, mode: str
) -> None:
    # Two stores in one process, as two processes of a fleet: the second one's call starts the
    # moment the first one's returns, on the same thread. Its reader thread has the peer's
    # cooldown in its socket but not the GIL: without a catch-up the call would decide first.
    config = FallbackConfig(**{**BASE, "max_retries": 2})
    sent: list[str] = []

    def answer(attempt: Attempt) -> str:
        sent.append(str(attempt.route))
        if str(attempt.route) == P:
            raise UpstreamError(503)
        return "ok"

    async def aanswer(attempt: Attempt) -> str:
        return answer(attempt)

    for round_ in range(10):
        stores = [RedisHealth.from_url(redis_server.url, prefix=f"seq-{mode}-{round_}")]
        stores.append(RedisHealth.from_url(redis_server.url, prefix=f"seq-{mode}-{round_}"))
        try:
            assert all(store.wait_until_shared() for store in stores)
            one, two = (Failover(config, store) for store in stores)
            del sent[:]
            if mode == "sync":
                answers = [one.call(P, answer), two.call(P, answer)]
            else:

                async def both(one: Failover, two: Failover) -> list[Any]:
                    return [await one.acall(P, aanswer), await two.acall(P, aanswer)]

                answers = asyncio.run(both(one, two))
            assert [str(a.route) for a in answers] == [F, F]
            assert sent.count(P) == 3, (round_, sent)  # the first call's budget, and no more
        finally:
            for store in stores:
                store.close()


def test_an_open_breaker_is_merged_back_after_redis_restarts_empty(
    redis_server: RedisServer,
) -> None:
    breaker = BreakerConfig(min_calls=2, failure_rate=0.5, window_s=60, open_s=60)
    store = RedisHealth.from_url(redis_server.url, prefix="merge-breaker")
    try:
        assert store.wait_until_shared()
        now = time.time()
        for _ in range(2):
            store.record(P, Outcome.FAILURE, now, breaker, probe=False)
        assert P in store.unavailable(now)
        opened = store.snapshot(now)[0].breaker_until
        assert opened is not None
        redis_server.restart()  # empty: no persistence
        wait_for("the store to reconnect", lambda: store.sharing, 15)

        def merged() -> bool:
            view = {h.route: h for h in store.fleet_view()}
            return P in view and view[P].breaker_until == opened

        # The breaker this process holds open is in Redis again, with its own end.
        wait_for("the open breaker to be merged back", merged, 10)
    finally:
        store.close()
