"""The keys are the truth, a channel message only a nudge: a message on swerve's Redis channel
that the route's keys do not back (forged, or superseded) takes no route out and brings none
back, while ``swerve routes`` (which reads the keys) would say otherwise; a real drain still
arrives at once, with the time its key holds. And every store refuses the same drain ends.

A real ``redis-server`` on 127.0.0.1 (the fixtures of test_redis_input.py); time is the stores'
injected clock, except where the CLI (which reads the system clock) drains.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest
import redis

from swerve import BreakerConfig, Failover, FallbackConfig, MemoryHealth
from swerve._health.redis_wire import MAX_DRAIN_S
from swerve._health.store import BreakerState, Outcome
from swerve.cli import main
from swerve.testing import FakeClock, FakeProvider

from .. import _wire
from ..fleet._servers import RedisServer, wait_for
from .conftest import Report
from .test_redis_input import CHANNEL, PREFIX, Store, fake, raw, server, stores

__all__ = ["fake", "raw", "server", "stores"]  # the fixtures, shared with test_redis_input.py

P, F = "primary/model-a", "fallback/model-b"
OTHER = "other/model-c"  # a route a peer drains for real: every message before it was read
WEEK = 7 * 86400.0
BREAKER = BreakerConfig(window_s=30, min_calls=2, failure_rate=0.5, open_s=60)


def _degraded_until(store: Store, route: str) -> float | None:
    for h in store.health.snapshot(store.clock.now):
        if h.route == route:
            return h.degraded_until
    return None


def _barrier(peer: Store, store: Store) -> None:
    """A real drain of OTHER from ``peer``, seen by ``store``: the channel is ordered, so every
    message published before it has been read (and applied, or dropped) by then."""
    now = peer.clock.now
    peer.health.drain(OTHER, now + 60, now)
    wait_for("the barrier drain", lambda: _degraded_until(store, OTHER), 10, poll=0.01)


def _publish(raw: redis.Redis, message: dict[str, Any]) -> None:
    assert raw.publish(CHANNEL, json.dumps(message)) >= 1  # someone listens


# --- a forged message takes no route out ---------------------------------------------------
def _forged(op: str, now: float) -> dict[str, Any]:
    return {
        "drain": {"op": "drain", "route": P, "until": now + WEEK},
        "cool": {"op": "cool", "route": P, "until": now + 30, "streak": 0,
                 "forget_at": now + 60, "reason": "unavailable"},
        "breaker": {"op": "breaker", "route": P, "open_until": now + 300},
        "probe": {"op": "probe", "route": P, "lease_until": now + 600},
    }[op]  # fmt: skip


@pytest.mark.parametrize("op", ["drain", "cool", "breaker"])
def test_a_forged_message_takes_no_route_out(
    stores: Callable[..., Store], raw: redis.Redis, fake: FakeProvider, clock: FakeClock,
    server: RedisServer, op: str, caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, figure: Report,
) -> None:  # fmt: skip
    store, peer = stores(), stores()
    caplog.set_level(logging.WARNING, logger="swerve")
    _publish(raw, _forged(op, clock.now))  # no {prefix:route}:cool or :brk key written
    _barrier(peer, store)
    assert _degraded_until(store, P) is None
    assert P not in store.health.unavailable(clock.now)
    assert store.health._local.breaker_open_until(P) is None
    # Counted, and said once, escaped, as every rejected value.
    assert store.rejected("unbacked") == 1 and store.rejected() == 1
    lines = [r.getMessage() for r in caplog.records if "unbacked" in r.getMessage()]
    assert len(lines) >= 1 and all(line.isascii() and line.isprintable() for line in lines)
    # Calls, sync and async, still go to the route; the fleet agrees with itself.
    config = FallbackConfig(fallbacks={P: F}, max_retries=0)
    fo = Failover(config, store.health, clock=clock)
    with httpx.Client() as client:
        assert fo.call(P, lambda a: _wire.complete(client, fake, a)).value == "from primary"

    async def acall() -> Any:
        async with httpx.AsyncClient() as aclient:
            return (await fo.acall(P, lambda a: _wire.acomplete(aclient, fake, a))).value

    assert asyncio.run(acall()) == "from primary"
    monkeypatch.setenv("COLUMNS", "200")
    assert main(["routes", "--url", server.url, "--prefix", PREFIX]) == 0
    assert P not in capsys.readouterr().out
    assert _degraded_until(stores(), P) is None  # a process started later agrees
    assert store.health.sharing and store.downs() == 0
    figure(
        f"a forged {op} message, no key behind it",
        "not applied; counted (unbacked), one escaped log line",
        measured=f"route served sync and async, {store.rejected('unbacked'):g} rejected",
    )


def test_a_forged_message_is_logged_escaped(
    stores: Callable[..., Store], raw: redis.Redis, clock: FakeClock,
    caplog: pytest.LogCaptureFixture,
) -> None:  # fmt: skip
    store, peer = stores(), stores()
    caplog.set_level(logging.WARNING, logger="swerve")
    route = "prov/m\u00f6del"  # printable, not ASCII: a valid route name
    _publish(raw, {"op": "drain", "route": route, "until": clock.now + WEEK})
    _barrier(peer, store)
    assert _degraded_until(store, route) is None

    def logged() -> list[str]:
        return [r.getMessage() for r in caplog.records if "unbacked" in r.getMessage()]

    # One line in each store that read it: this one and the peer. The barrier says this store
    # read it; the peer's reader, which published the barrier itself, may still be on its way.
    wait_for("the peer's line", lambda: len(logged()) == 2, 10, poll=0.01)
    lines = logged()
    assert len(lines) == 2
    assert all(line.isascii() and "\\xf6" in line and "drain" in line for line in lines)


# --- a forged message brings no route back -------------------------------------------------
@pytest.mark.parametrize("op", ["clear", "recover"])
def test_a_forged_message_ends_no_drain(
    stores: Callable[..., Store], raw: redis.Redis, clock: FakeClock, op: str
) -> None:
    store, peer = stores(), stores()
    peer.health.drain(P, clock.now + 600, clock.now)
    wait_for("the drain", lambda: _degraded_until(store, P), 10, poll=0.01)
    _publish(raw, {"op": op, "route": P})
    _barrier(peer, store)
    assert _degraded_until(store, P) == clock.now + 600  # what the key holds
    assert P in store.health.unavailable(clock.now)
    assert store.rejected("unbacked") == 1


def test_a_forged_close_leaves_the_fleets_breaker_open(
    stores: Callable[..., Store], raw: redis.Redis, clock: FakeClock
) -> None:
    store, peer = stores(), stores()
    for _ in range(2):  # the peer's failures open the fleet's breaker
        opened = peer.health.record(P, Outcome.FAILURE, clock.now, BREAKER, probe=False)
    assert opened is not None and opened.open_until is not None
    open_until = opened.open_until
    wait_for("the open breaker", lambda: store.health._local.breaker_open_until(P), 10, 0.01)
    _publish(raw, {"op": "breaker", "route": P, "open_until": None})
    _barrier(peer, store)
    assert store.health._local.breaker_open_until(P) == open_until
    assert store.rejected("unbacked") == 1


# --- a real drain still arrives, with its key's time ---------------------------------------
def test_a_real_drain_arrives_at_once_with_the_time_its_key_holds(
    stores: Callable[..., Store], raw: redis.Redis, clock: FakeClock
) -> None:
    store, peer = stores(), stores()
    peer.health.drain(P, clock.now + 600, clock.now)
    wait_for("the drain", lambda: _degraded_until(store, P), 10, poll=0.01)
    assert _degraded_until(store, P) == clock.now + 600
    assert (P, "drained") in store.health.take_notices()
    # A message claiming a longer drain than the key holds: the key's time is applied.
    until = clock.now + 120
    drained = {"until": until, "streak": 0, "forget_at": until, "reason": "drained"}
    raw.hset(f"{{{PREFIX}:{OTHER}}}:cool", mapping=drained)  # as the DRAIN script writes it
    _publish(raw, {"op": "drain", "route": OTHER, "until": clock.now + WEEK})
    wait_for("the keyed drain", lambda: _degraded_until(store, OTHER), 10, poll=0.01)
    assert _degraded_until(store, OTHER) == until
    assert store.rejected() == 0
    assert _degraded_until(store, P) == clock.now + 600


def test_a_drain_from_swerve_routes_arrives_at_once(
    stores: Callable[..., Store], server: RedisServer, capsys: pytest.CaptureFixture[str]
) -> None:
    store = stores(FakeClock(time.time()))  # the CLI drains on the system clock
    args = ["routes", "drain", P, "--for", "600", "--url", server.url, "--prefix", PREFIX]
    assert main(args) == 0, capsys.readouterr().err
    until = wait_for("the CLI's drain", lambda: _degraded_until(store, P), 10, poll=0.01)
    assert store.clock.now + 600 <= until <= time.time() + 600
    assert store.rejected() == 0


# --- MemoryHealth refuses what RedisHealth refuses -------------------------------------------
BAD_ENDS: list[tuple[str, Callable[[float], float]]] = [
    ("1e14 s ahead", lambda now: now + 1e14),
    ("a week and a second", lambda now: now + MAX_DRAIN_S + 1),
    ("inf", lambda now: math.inf),
    ("nan", lambda now: math.nan),
    ("now", lambda now: now),
    ("the past", lambda now: now - 1),
]


@pytest.mark.parametrize("name", [name for name, _ in BAD_ENDS])
def test_memory_health_refuses_the_drains_redis_health_refuses(
    stores: Callable[..., Store], clock: FakeClock, name: str
) -> None:
    until, now = dict(BAD_ENDS)[name](clock.now), clock.now
    memory = MemoryHealth()
    with pytest.raises(ValueError, match="at most") as in_memory:
        memory.drain(P, until, now)
    with pytest.raises(ValueError, match="at most") as in_redis:
        stores().health.drain(P, until, now)
    assert str(in_memory.value) == str(in_redis.value)  # one check, one message
    assert memory.snapshot(now) == [] and memory.take_notices() == []
    memory.drain(P, now + MAX_DRAIN_S, now)  # the bound itself is a drain
    (health,) = memory.snapshot(now)
    assert health.degraded_until == now + MAX_DRAIN_S and health.breaker is BreakerState.CLOSED
