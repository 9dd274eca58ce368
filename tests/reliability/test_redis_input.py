"""The shared store is untrusted input: what RedisHealth reads from Redis (channel messages and
keys) is checked in one place, dropped and counted when it fails, and bounded in time by what a
legitimate writer could have written. Every test runs a real ``redis-server`` on 127.0.0.1 (a
free port, no persistence); time is the stores' injected clock wherever the code allows.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis

from swerve import BreakerConfig, Failover, FallbackConfig, RedisHealth
from swerve._health.redis_wire import MAX_DRAIN_S
from swerve._health.store import BreakerState, CooldownRule, Outcome
from swerve._telemetry import names as names
from swerve.cli import main
from swerve.testing import FakeClock, FakeProvider, Fault, Reply, TelemetryRecorder

from .. import _wire
from ..fleet._servers import RedisServer, wait_for
from .conftest import Report

P, F = "primary/model-a", "fallback/model-b"
PREFIX = "untrusted"
KEY = f"{{{PREFIX}:{P}}}"  # the hash tag of P's keys
CHANNEL = f"{PREFIX}:events"


@pytest.fixture
def server(tmp_path: Path) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path / "redis")
    yield server
    server.stop()


@pytest.fixture
def raw(server: RedisServer) -> Iterator[redis.Redis]:
    """A plain client: what another writer (a bad one, or an operator's hand) does to Redis."""
    client = server.client()
    yield client
    client.close()


@pytest.fixture
def fake() -> Iterator[FakeProvider]:
    with FakeProvider() as provider:
        for name in ("primary", "fallback"):
            provider.set_reply(name, Reply(text=f"from {name}"))
        yield provider


class Store:
    """One process of the fleet: a RedisHealth on the test's Redis, its telemetry recorded."""

    def __init__(self, server: RedisServer, clock: FakeClock, **kwargs: Any) -> None:
        self.recorder = TelemetryRecorder()
        self.clock = clock
        self.health = RedisHealth(
            server.client(), prefix=PREFIX, clock=clock, telemetry=self.recorder.telemetry,
            **kwargs,
        )  # fmt: skip
        assert self.health.wait_until_shared(5), "the store never shared"

    def rejected(self, reason: str | None = None) -> float:
        attrs = {} if reason is None else {"swerve__reason": reason}
        return self.recorder.counter(names.METRIC_STORE_REJECTED, **attrs)

    def downs(self) -> int:
        """How often the store stopped sharing (a reconnect)."""
        return sum(
            1
            for s in self.recorder.finished()
            if s.name == names.SPAN_STORE and (s.attributes or {}).get(names.STORE_UP) is False
        )

    def wait_rejected(self, at_least: float, reason: str | None = None) -> None:
        wait_for(
            f"{at_least:g} rejected values ({reason})",
            lambda: self.rejected(reason) >= at_least,
            10,
        )

    def close(self) -> None:
        self.health.close()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def stores(server: RedisServer, clock: FakeClock) -> Iterator[Callable[..., Store]]:
    started: list[Store] = []

    def start(clock_: FakeClock | None = None, **kwargs: Any) -> Store:
        store = Store(server, clock_ or clock, **kwargs)
        started.append(store)
        return store

    yield start
    for store in started:
        store.close()


def _call(fo: Failover, fake: FakeProvider, client: httpx.Client) -> str:
    return str(fo.call(P, lambda a: _wire.complete(client, fake, a)).value)


def _degraded_until(store: Store, route: str) -> float | None:
    for h in store.health.snapshot(store.clock.now):
        if h.route == route:
            return h.degraded_until
    return None


# --- 6: one message on the channel --------------------------------------------------------------
def test_a_bad_breaker_message_never_breaks_a_call(
    stores: Callable[..., Store], raw: redis.Redis, fake: FakeProvider, clock: FakeClock,
    figure: Report,
) -> None:  # fmt: skip
    store = stores()
    raw.publish(CHANNEL, json.dumps({"op": "breaker", "route": P, "open_until": "x"}))
    store.wait_rejected(1, "value")
    config = FallbackConfig(fallbacks={P: F}, max_retries=0)
    fo = Failover(config, store.health, clock=clock)
    with httpx.Client() as client:
        assert _call(fo, fake, client) == "from primary"  # no TypeError, the route still works
        fake.set_fault("primary", Fault.status(503))
        clock.advance(100)
        assert _call(fo, fake, client) == "from fallback"  # and its fallback is still tried
    assert store.health.sharing and store.downs() == 0
    figure(
        "a breaker message with a string time",
        "dropped, counted; calls unaffected",
        measured=f"{store.rejected():g} rejected, 0 reconnects, both calls served",
    )


@pytest.mark.parametrize(
    ("until", "outcome"),
    [
        ("1e308", "bounded"),
        ("Infinity", "rejected"),
        ("NaN", "rejected"),
        ("-Infinity", "rejected"),
        ("MILLIS", "bounded"),  # milliseconds instead of seconds
    ],
)
def test_a_drain_message_is_bounded_by_the_longest_drain(
    stores: Callable[..., Store], raw: redis.Redis, clock: FakeClock, until: str, outcome: str
) -> None:
    store = stores()
    text = repr(clock.now * 1000) if until == "MILLIS" else until
    if outcome == "bounded":  # a key behind it (the keys are the truth), as out of bounds
        raw.hset(f"{KEY}:cool", mapping={"until": text, "forget_at": text, "reason": "drained"})
    raw.publish(CHANNEL, f'{{"op": "drain", "route": "{P}", "until": {text}}}')
    store.wait_rejected(1, "out_of_bounds" if outcome == "bounded" else "value")
    degraded = _degraded_until(store, P)
    if outcome == "bounded":
        assert degraded is not None and degraded <= clock.now + MAX_DRAIN_S
    else:
        assert degraded is None
    assert store.health.sharing and store.downs() == 0


def test_huge_and_deeply_nested_messages_are_dropped_without_a_reconnect(
    stores: Callable[..., Store], raw: redis.Redis, figure: Report
) -> None:
    store = stores()
    raw.publish(CHANNEL, b"[" * 2000 + b"]" * 2000)  # under the size cap: depth
    raw.publish(CHANNEL, b"[" * 100_000)  # over it
    started = time.monotonic()
    raw.publish(CHANNEL, b'{"op": "cool", "route": "' + b"a" * (64 << 20) + b'"}')  # 64 MB
    # Redis itself may drop a subscriber whose output buffer outgrows its limit (32 MB for
    # pub/sub by default): the store then subscribes again, still sharing.
    store.wait_rejected(2)
    took = time.monotonic() - started
    # The reader is still alive and still applies valid messages.
    cool = {"op": "cool", "route": P, "until": store.clock.now + 5, "streak": 0,
            "forget_at": store.clock.now + 35, "reason": "unavailable"}  # fmt: skip

    def applied() -> float | None:
        # Published again until seen: a message sent while the channel was being reopened is
        # lost (pub/sub delivers at most once), which is what the resync is for.
        raw.hset(f"{KEY}:cool", mapping={k: v for k, v in cool.items() if k not in ("op", "route")})
        raw.publish(CHANNEL, json.dumps(cool))
        return _degraded_until(store, P)

    wait_for("a valid message after them", applied, 10, poll=0.2)
    assert store.rejected("too_large") >= 1 and store.rejected("not_json") == 1
    assert store.health.sharing and store.downs() == 0
    figure(
        "a 64 MB message and a 2,000-deep one on the channel",
        "dropped, 0 reconnects",
        measured=f"dropped in {took:.2f} s, 0 reconnects, the next message applied",
    )


# --- 7: bad keys --------------------------------------------------------------------------------
BAD_KEYS: list[tuple[str, Callable[[redis.Redis, str], Any]]] = [
    ("brk open_until x", lambda r, k: r.hset(f"{k}:brk", "open_until", "x")),
    ("brk open_until inf", lambda r, k: r.hset(f"{k}:brk", "open_until", "inf")),
    ("cool of the wrong type", lambda r, k: r.set(f"{k}:cool", "x")),
    ("cool until x", lambda r, k: r.hset(f"{k}:cool", mapping={"until": "x", "streak": 0})),
    ("cool until nan", lambda r, k: r.hset(f"{k}:cool", mapping={"until": "nan"})),
    ("cool streak -1", lambda r, k: r.hset(f"{k}:cool", mapping={"until": 1, "streak": -1})),
    ("brk of the wrong type", lambda r, k: r.rpush(f"{k}:brk", "x")),
    ("window fields", lambda r, k: r.hset(f"{k}:window", mapping={"zzz": 1, "1:ok": "x"})),
    ("probe without a TTL", lambda r, k: r.set(f"{k}:probe", "someone")),
    ("probe of the wrong type", lambda r, k: r.hset(f"{k}:probe", "a", "b")),
    ("half_open of the wrong type", lambda r, k: r.set(f"{k}:half_open", "x")),
    ("half_open slot for ever", lambda r, k: r.zadd(f"{k}:half_open", {"t": 1e300})),
]
BREAKER = BreakerConfig(window_s=30, min_calls=2, failure_rate=0.5, open_s=1, half_open_probes=1)


@pytest.mark.parametrize("name", [name for name, _ in BAD_KEYS])
def test_a_bad_key_never_stops_sharing_nor_fails_a_script(
    stores: Callable[..., Store], raw: redis.Redis, clock: FakeClock, name: str
) -> None:
    dict(BAD_KEYS)[name](raw, KEY)
    store = stores()  # resyncs over the bad key: it must still share
    health, now = store.health, clock.now
    # Every script, over the bad key: a cooldown, its probe, the breaker's window and slots.
    health.record(P, Outcome.FAILURE, now, BREAKER, probe=False)
    health.record(P, Outcome.FAILURE, now, BREAKER, probe=False)
    health.cool_down(P, now, CooldownRule(5, 30), "unavailable")
    clock.advance(6)
    health.claim_probe(P, clock.now, 10.0)
    health.admit(P, clock.now, BREAKER, lease_s=10.0)
    health.recovered(P, clock.now)
    health.release_probe(P)
    health.drain(P, clock.now + 60, clock.now)
    assert health.fleet_view()  # readable
    deadline = time.monotonic() + 1.0  # the writer's queue drains within its first pass
    while time.monotonic() < deadline and store.downs() == 0:
        time.sleep(0.05)
    assert health.sharing and store.downs() == 0, f"stopped sharing over {name}"
    # What the scripts left behind is swerve's own shape again.
    fields = raw.hgetall(f"{KEY}:cool")
    assert float(fields[b"until"]) == clock.now + 60


def test_a_bad_key_is_skipped_by_the_resync_the_rest_adopted(
    stores: Callable[..., Store], raw: redis.Redis, clock: FakeClock, figure: Report
) -> None:
    other = "other/model-c"
    raw.hset(f"{KEY}:brk", "open_until", "x")  # the probe's key
    raw.set(f"{{{PREFIX}:bad/route}}:cool", "x")  # wrong type
    raw.hset(f"{{{PREFIX}:{other}}}:cool", mapping={"until": clock.now + 20, "streak": 0,
             "forget_at": clock.now + 50, "reason": "unavailable"})  # fmt: skip
    store = stores()
    assert _degraded_until(store, other) == clock.now + 20  # the good key adopted
    assert store.rejected("value") >= 1 and store.rejected("wrong_type") >= 1
    figure(
        "a resync over bad keys",
        "the store shares; bad keys skipped and counted",
        measured=f"sharing, {store.rejected():g} values rejected, the good key adopted",
    )


@pytest.mark.parametrize("value", ["x", "inf", "1e308", "nan", "-1e308"])
def test_swerve_routes_never_tracebacks_on_bad_values(
    server: RedisServer, raw: redis.Redis, value: str, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    monkeypatch.setenv("COLUMNS", "200")
    raw.hset(f"{KEY}:cool", mapping={"until": value, "forget_at": value, "reason": "x"})
    raw.hset(f"{KEY}:brk", "open_until", value)
    code = main(["routes", "--url", server.url, "--prefix", PREFIX])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "Traceback" not in out + err


def test_swerve_routes_escapes_control_characters(
    server: RedisServer, raw: redis.Redis, clock: FakeClock, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    monkeypatch.setenv("COLUMNS", "200")
    now = time.time()
    good = {"until": now + 20, "forget_at": now + 50, "streak": 0}
    raw.hset(f"{{{PREFIX}:evil/\x1b[31mred}}:cool", mapping={**good, "reason": "x"})
    raw.hset(f"{KEY}:cool", mapping={**good, "reason": "\x1b]0;owned\x07"})
    raw.hset(f"{{{PREFIX}:ok/model}}:cool", mapping={**good, "reason": "unavailable"})
    assert main(["routes", "--url", server.url, "--prefix", PREFIX]) == 0
    out, err = capsys.readouterr()
    assert "\x1b" not in out + err and "\x07" not in out + err
    assert "ok/model" in out


# --- 8: a process that joins while the fleet's breaker is half-open --------------------------
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_late_joiner_adopts_the_fleets_half_open_breaker(
    stores: Callable[..., Store], fake: FakeProvider, clock: FakeClock, figure: Report, mode: str
) -> None:
    first = stores()
    for _ in range(2):
        first.health.record(P, Outcome.FAILURE, clock.now, BREAKER, probe=False)
    # Open in Redis (the first failure's write alone already makes a breaker key, not open).
    wait_for(
        "the open breaker in Redis",
        lambda: any(h.breaker is BreakerState.OPEN for h in first.health.fleet_view()),
        10,
    )
    clock.advance(2)  # past open_s: the fleet's breaker is half-open
    fake.set_fault("primary", Fault.hang())  # the route is still dead
    late = stores()  # starts now
    # Its first read adopts the fleet's breaker; under load that read may end just after the
    # store says it shares, so it is waited for (bounded), not assumed.
    wait_for(
        "the late joiner's half-open breaker",
        lambda: any(h.breaker is BreakerState.HALF_OPEN for h in late.health.snapshot(clock.now)),
        10,
    )
    # The limit ends the one probe of the hanging route; it leaves the fallback room to answer
    # 20 calls at once on a loaded two-core machine (at 1 s, one of them once ran out).
    config = FallbackConfig(fallbacks={P: F}, max_retries=0, attempt_timeout_s=3, breaker=BREAKER)
    fo = Failover(config, late.health, clock=clock)
    try:
        if mode == "sync":
            start = threading.Barrier(20)

            def one(_: int) -> str:
                with httpx.Client() as client:
                    start.wait(timeout=10)
                    return _call(fo, fake, client)

            with ThreadPoolExecutor(20) as pool:
                served = list(pool.map(one, range(20)))
        else:

            async def all_at_once() -> list[str]:
                async with httpx.AsyncClient() as client:
                    results = await asyncio.gather(
                        *(
                            fo.acall(P, lambda a: _wire.acomplete(client, fake, a))
                            for _ in range(20)
                        )
                    )
                return [str(r.value) for r in results]

            served = asyncio.run(all_at_once())
    finally:
        fake.set_fault("primary", Fault.ok())
    sent = fake.requests("primary")
    assert sent <= 1, f"{sent} of 20 concurrent calls went to the half-open route"
    assert served == ["from fallback"] * 20
    figure(
        f"a process joining while the fleet's breaker is half-open ({mode}, half_open_probes=1)",
        "at most 1 of 20 concurrent calls to the route",
        measured=f"{sent} of 20",
    )


# --- 9: passwords -------------------------------------------------------------------------------
SECRET_FORMS = [
    ("redis://:Zm9vYmFy/c2VjcmV0+dGV4dA==@127.0.0.1:6379/0", ["Zm9vYmFy", "c2VjcmV0"]),
    ("redis://:pa#ss-word-1@127.0.0.1:6379/0", ["pa#ss", "ss-word-1"]),
    ("redis://:pa?ss-word-1@127.0.0.1:6379/0", ["pa?ss", "ss-word-1"]),
    ("redis://:pa@ss-word-1@127.0.0.1:6379/0", ["pa@ss", "ss-word-1"]),
    ("redis://alice:s3cret-pw-1@127.0.0.1:6379/0", ["s3cret-pw-1"]),
    ("unix://:s3cret-pw-1@/run/redis.sock?db=0", ["s3cret-pw-1"]),
    ("rediss://:s3cret-pw-1@127.0.0.1:6380/0", ["s3cret-pw-1"]),
    ("redis://:s3cret-pw-1@127.0.0.1:7000/0?cluster=1", ["s3cret-pw-1"]),
    ("redis://127.0.0.1:6379/0?password=s3cret-pw-1", ["s3cret-pw-1"]),
    ("redis+sentinel://:s3cret-pw-1@127.0.0.1:26379/mymaster", ["s3cret-pw-1"]),
]


@pytest.mark.parametrize(("url", "pieces"), SECRET_FORMS)
def test_safe_url_masks_every_password_form(url: str, pieces: list[str]) -> None:
    from swerve._health.redis_client import safe_url

    shown = safe_url(url)
    assert "***" in shown
    for piece in pieces:
        assert piece not in shown, shown
    if url.startswith("redis://alice:"):
        assert shown.startswith("redis://alice:***@127.0.0.1")


@pytest.mark.parametrize(("url", "pieces"), SECRET_FORMS[:3])
def test_from_url_errors_never_echo_the_password(url: str, pieces: list[str]) -> None:
    with pytest.raises(ValueError, match="cannot read the Redis URL") as caught:
        RedisHealth.from_url(url)
    text = str(caught.value)
    assert "percent-encode" in text
    for piece in pieces:
        assert piece not in text, text


@pytest.mark.parametrize(("url", "pieces"), SECRET_FORMS[:4])
def test_swerve_routes_never_prints_the_password(
    url: str, pieces: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["routes", "--url", url, "--timeout", "0.2"])
    out, err = capsys.readouterr()
    assert code in (1, 2)
    for piece in pieces:
        assert piece not in out + err, out + err


def test_an_encoded_password_with_every_special_character_connects(tmp_path: Path) -> None:
    from urllib.parse import quote

    password = "p/a#s?s@w:o rd"
    server = RedisServer(tmp_path / "auth", requirepass=password)
    try:
        url = f"redis://:{quote(password, safe='')}@127.0.0.1:{server.port}/0"
        health = RedisHealth.from_url(url)
        try:
            assert health.wait_until_shared(5)
            assert password not in health.description and "***" in health.description
        finally:
            health.close()
    finally:
        server.stop()


# --- 10: a drain applies whole or not at all ----------------------------------------------------
def test_a_drain_beyond_the_bound_is_refused_before_anything_is_written(
    server: RedisServer, raw: redis.Redis, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["routes", "drain", P, "--for", "99999999999999", "--url", server.url])
    _, err = capsys.readouterr()
    assert code == 2
    assert "the longest drain is" in err
    assert raw.keys("*") == []


def test_the_drain_script_checks_its_arguments_before_writing(
    stores: Callable[..., Store], raw: redis.Redis, clock: FakeClock
) -> None:
    store = stores()
    wire = store.health._wire
    keys = wire.keys(P, "cool", "probe")
    for until in ("1e14", "inf", "nan", "x", repr(clock.now - 1)):
        with pytest.raises(redis.ResponseError, match="swerve DRAIN"):
            wire.run("DRAIN", keys, [until, "drained", repr(clock.now), repr(MAX_DRAIN_S)])
    assert raw.exists(keys[0]) == 0
    with pytest.raises(ValueError, match="at most"):
        store.health.drain(P, clock.now + 1e14, clock.now)
    assert raw.exists(keys[0]) == 0 and _degraded_until(store, P) is None  # not even locally
    store.health.drain(P, clock.now + 60, clock.now)
    assert raw.pttl(keys[0]) > 0 and float(raw.hget(keys[0], "until") or 0) == clock.now + 60


# --- 11: clock skew -----------------------------------------------------------------------------
def test_a_skewed_clock_takes_a_route_out_for_the_longest_cooldown_at_most(
    stores: Callable[..., Store], clock: FakeClock, figure: Report
) -> None:
    ahead = FakeClock(clock.now + 3600)  # a host an hour ahead
    skewed, fine = stores(ahead), stores()
    skewed.health.cool_down(P, ahead.now, CooldownRule(2, 30), "unavailable")
    wait_for("the cooldown to reach the fleet", lambda: _degraded_until(fine, P), 10)
    until = _degraded_until(fine, P)
    assert until is not None and until <= clock.now + 30  # not now + 3602
    late = stores()  # a process joining now reads the key: bounded too
    late_until = _degraded_until(late, P)
    assert late_until is not None and late_until <= clock.now + 30
    clock.advance(31)
    # The cooldown is over here; the fleet's probe is claimable, and Redis holds the bound now.
    assert fine.health.claim_probe(P, clock.now, 10.0)
    figure(
        "a host 1 h ahead cools a route for 2 s",
        "the fleet walks past it for at most the longest cooldown (30 s)",
        measured=f"{until - (clock.now - 31):.0f} s, then probed",
    )


def test_a_skewed_drain_message_is_bounded(
    stores: Callable[..., Store], raw: redis.Redis, clock: FakeClock
) -> None:
    store = stores(max_cooldown_s=60)
    cool = {"op": "cool", "route": P, "until": clock.now + 3602, "streak": 0,
            "forget_at": clock.now + 3632, "reason": "unavailable"}  # fmt: skip
    raw.hset(f"{KEY}:cool", mapping={k: v for k, v in cool.items() if k not in ("op", "route")})
    raw.publish(CHANNEL, json.dumps(cool))
    store.wait_rejected(1, "out_of_bounds")
    assert _degraded_until(store, P) == clock.now + 60  # the bound set for this fleet
