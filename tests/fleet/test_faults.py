"""Redis faults with calls running throughout: every call is answered, whatever Redis does.

Two RedisHealth stores in this process stand for two processes of a fleet (separate processes
would add nothing here: each store has its own local view, threads and connections). Redis is
really killed, restarted empty, paused with SIGSTOP, given the wrong password, or not started
yet. The ``swerve.store`` events and the ``swerve.store.up`` gauge must say what happened, and
the password in the store's URL must never show: not in a span, an event, a log record or an
exception.
"""

from __future__ import annotations

import logging
import time
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis

from swerve import BreakerConfig, Failover, FallbackConfig, RedisHealth, Telemetry
from swerve._health.store import CooldownRule
from swerve.testing import FakeProvider, Fault, TelemetryRecorder

from ._fleet import F, P
from ._servers import RedisServer, wait_for
from ._traffic import Traffic, complete

SECRET = "s3cret-Qv7-fleet"
WRONG = "wr0ng-Zx9-fleet"
Stores = Callable[..., RedisHealth]


def config(**kw: Any) -> FallbackConfig:
    params: dict[str, Any] = {
        "fallbacks": {P: F},
        "jitter": False,
        "max_retries": 0,
        "attempt_timeout_s": 5,
    }
    params.update(kw)
    return FallbackConfig(**params)


@pytest.fixture
def stores(tmp_path: Path) -> Iterator[Stores]:
    """``stores(url, telemetry=None, **from_url_options)``: a RedisHealth as from_url builds
    it, closed at teardown."""
    made: list[RedisHealth] = []

    def make(url: str, telemetry: Telemetry | None = None, **options: Any) -> RedisHealth:
        prefix = f"faults-{tmp_path.name}"
        store = RedisHealth.from_url(url, prefix=prefix, telemetry=telemetry, **options)
        made.append(store)
        return store

    yield make
    for store in made:
        store.close()


@pytest.fixture
def fake() -> Iterator[FakeProvider]:
    with FakeProvider() as server:
        yield server


@pytest.fixture
def logs(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.DEBUG)  # every logger, every level: nothing may carry the password
    return caplog


def until(store: RedisHealth, route: str) -> float | None:
    """Until when ``store``'s view has ``route`` cooling down (None: not cooling)."""
    for health in store.snapshot(time.time()):
        if health.route == route:
            return health.degraded_until
    return None


def store_events(otel: TelemetryRecorder) -> list[tuple[object, object]]:
    """``(up, reason)`` of every ``swerve.store`` event, in order."""
    return [
        (e["swerve.store.up"], e.get("swerve.store.reason", ""))
        for e in otel.all_events("swerve.store")
    ]


def store_up(otel: TelemetryRecorder, store: RedisHealth) -> object:
    """The ``swerve.store.up`` gauge for ``store``, collected now."""
    (value,) = [
        v
        for attrs, v in otel.metrics().get("swerve.store.up", [])
        if attrs.get("swerve.store.name") == store.description
    ]
    return value


def assert_never_shown(
    secrets: tuple[str, ...],
    otel: TelemetryRecorder,
    logs: pytest.LogCaptureFixture,
    errors: tuple[BaseException, ...] = (),
) -> None:
    texts = []
    for span in otel.finished():
        texts += [span.name, repr(dict(span.attributes or {})), str(span.status.description)]
        texts += [f"{e.name} {dict(e.attributes or {})!r}" for e in span.events]
    assert logs.records, "nothing was logged: the check below would prove nothing"
    for record in logs.records:
        texts += [record.getMessage(), repr(record.args), repr(record.__dict__)]
        if record.exc_info and record.exc_info[1] is not None:
            texts.append("".join(traceback.format_exception(record.exc_info[1])))
    for error in errors:
        texts += [str(error), repr(error), "".join(traceback.format_exception(error))]
    for secret in secrets:
        shown = [text for text in texts if secret in text]
        assert not shown, f"the password shows in: {shown[:3]}"


def test_redis_killed_and_restarted_empty_gets_back_what_the_fleet_learned(
    start_redis: Callable[..., RedisServer], stores: Stores, fake: FakeProvider,
    otel: TelemetryRecorder, logs: pytest.LogCaptureFixture,
) -> None:  # fmt: skip
    server = start_redis(requirepass=SECRET)
    mine, theirs = stores(server.url, otel.telemetry), stores(server.url)
    assert mine.wait_until_shared() and theirs.wait_until_shared()
    fo = Failover(config(cooldown_s=10, cooldown_max_s=10), mine, telemetry=otel.telemetry)
    fo_theirs = Failover(config(cooldown_s=30, cooldown_max_s=30), theirs)

    with Traffic(fo, fake) as traffic, httpx.Client() as client:
        traffic.wait_for_calls(2, since=time.monotonic())
        fake.set_fault("primary", Fault.status(503))
        traffic.wait_for_calls(2, since=time.monotonic())  # each caller met the cooldown
        learned = until(mine, P)
        assert learned is not None
        wait_for("the other store to learn it", lambda: until(theirs, P) == learned, 5)
        assert store_up(otel, mine) == 1

        server.kill()
        killed = time.monotonic()
        wait_for("both stores to notice", lambda: not (mine.sharing or theirs.sharing), 5)
        assert store_up(otel, mine) == 0
        # The other process learns more while Redis is away: a call pinned to the primary
        # fails there, and its longer cooldown extends the one it had.
        with pytest.raises(httpx.HTTPStatusError):
            fo_theirs.call(P, lambda a: complete(client, fake, a), pin=True)
        longer = until(theirs, P)
        assert longer is not None and longer > learned + 10
        assert until(mine, P) == learned  # nothing is shared while Redis is away
        traffic.wait_for_calls(5, since=time.monotonic())

        server.restart()  # empty: everything it held is gone
        wait_for("both stores to share again", lambda: mine.sharing and theirs.sharing, 10)
        wait_for("the longer cooldown to reach this store", lambda: until(mine, P) == longer, 5)
        assert until(theirs, P) == longer  # merged both ways, never shortened
        assert store_up(otel, mine) == 1
        traffic.wait_for_calls(3, since=time.monotonic())

    newcomer = stores(server.url)  # a process started after the restart
    assert newcomer.wait_until_shared()
    assert until(newcomer, P) == longer
    assert traffic.errors() == []
    after = [c for c in traffic.calls if c.start >= killed]
    assert after and {c.route for c in after} == {F}
    assert sum(c.primary_attempts for c in after) == 0
    assert store_events(otel) == [(True, ""), (False, "ConnectionError"), (True, "")]
    assert_never_shown((SECRET,), otel, logs)


def test_a_paused_redis_never_holds_a_call_up_for_longer_than_its_op_timeout(
    start_redis: Callable[..., RedisServer], stores: Stores, fake: FakeProvider,
    otel: TelemetryRecorder, logs: pytest.LogCaptureFixture,
) -> None:  # fmt: skip
    # Every Redis operation is bounded by the store's timeout (from_url's timeout_s, set here
    # well apart from the noise of two busy cores: at 0.5 s, a loop starved by the rest of the
    # suite once lagged 0.49 s), and a call makes at most one.
    op_timeout_s = 1.0
    # One operation's timeout, and room for the call itself on two cores that the rest of the
    # suite keeps busy (0.5 s of room was once 0.16 s short); a held call would take far longer.
    bound_s = op_timeout_s + 1.0
    server = start_redis(requirepass=SECRET)
    store = stores(server.url, otel.telemetry, timeout_s=op_timeout_s)
    assert store.wait_until_shared()
    # A dead primary with a short fixed cooldown: calls claim its probe again and again, and a
    # probe claim is the one Redis round trip a call makes.
    fixed = config(cooldown_s=0.2, cooldown_max_s=0.2, breaker=BreakerConfig(enabled=False))
    fo = Failover(fixed, store, telemetry=otel.telemetry)
    fake.set_fault("primary", Fault.status(503))

    with Traffic(fo, fake) as traffic:
        assert fake.wait_for_requests("primary", 3, timeout=5)  # probes claimed through Redis
        server.pause()
        paused = time.monotonic()
        wait_for("the store to notice", lambda: not store.sharing, 5)
        assert store_up(otel, store) == 0
        probes = fake.requests("primary")
        assert fake.wait_for_requests("primary", probes + 3, timeout=5)  # decided locally
        traffic.wait_for_calls(10, since=paused)

        server.resume()
        wait_for("the store to share again", lambda: store.sharing, 10)
        assert store_up(otel, store) == 1
        traffic.wait_for_calls(3, since=time.monotonic())

    assert traffic.errors() == []
    slowest = max(traffic.calls, key=lambda c: c.seconds)
    assert slowest.seconds < bound_s, slowest
    # The async caller's event loop never waited on Redis (a claim there would be a whole
    # operation timeout; a loop sharing two cores with everything else may lag a little).
    assert traffic.loop_lag_s < op_timeout_s / 2
    ((up, _), (down, reason), (again, _)) = store_events(otel)
    assert (up, down, again) == (True, False, True)
    assert reason in ("TimeoutError", "ConnectionError")
    assert_never_shown((SECRET,), otel, logs)


def test_a_wrong_password_leaves_the_store_down_and_calls_working(
    start_redis: Callable[..., RedisServer], stores: Stores, fake: FakeProvider,
    otel: TelemetryRecorder, logs: pytest.LogCaptureFixture,
) -> None:  # fmt: skip
    server = start_redis(requirepass=SECRET)
    store = stores(f"redis://:{WRONG}@127.0.0.1:{server.port}/0", otel.telemetry)
    fo = Failover(config(cooldown_s=30), store, telemetry=otel.telemetry)
    wait_for("the store to report itself down", lambda: store_events(otel), 5)
    assert not store.sharing
    assert store_up(otel, store) == 0

    fake.set_fault("primary", Fault.status(503))
    with Traffic(fo, fake) as traffic:
        traffic.wait_for_calls(5, since=time.monotonic())
    assert traffic.errors() == []
    assert {c.route for c in traffic.calls} == {F}
    assert sum(c.primary_attempts for c in traffic.calls) <= 2  # once per caller at most
    assert until(store, P) is not None  # this process still cooled the primary for itself
    with pytest.raises(redis.AuthenticationError) as refused:  # an operator's drain says why
        store.drain(P, time.time() + 60, time.time())
    assert store_events(otel) == [(False, "AuthenticationError")]  # and it stayed down
    assert server.client().keys("*") == []  # nothing reached Redis
    assert_never_shown((WRONG, SECRET), otel, logs, (refused.value,))


def test_redis_down_when_the_process_starts_gets_what_it_learned_once_up(
    start_redis: Callable[..., RedisServer], stores: Stores, fake: FakeProvider,
    otel: TelemetryRecorder, logs: pytest.LogCaptureFixture,
) -> None:  # fmt: skip
    server = start_redis(requirepass=SECRET, start=False)  # its port, nothing listening yet
    store = stores(server.url, otel.telemetry)
    fo = Failover(config(cooldown_s=30), store, telemetry=otel.telemetry)
    wait_for("the store to report itself down", lambda: store_events(otel), 5)
    assert store_up(otel, store) == 0

    fake.set_fault("primary", Fault.status(503))
    with Traffic(fo, fake) as traffic:
        traffic.wait_for_calls(3, since=time.monotonic())
        learned = until(store, P)
        assert learned is not None  # cooled here, with no Redis to share it through
        server.start()
        wait_for("the store to connect", lambda: store.sharing, 10)
        assert store_up(otel, store) == 1
        traffic.wait_for_calls(3, since=time.monotonic())

    newcomer = stores(server.url)
    assert newcomer.wait_until_shared()
    assert until(newcomer, P) == learned  # what it learned alone went into Redis
    assert traffic.errors() == []
    assert {c.route for c in traffic.calls} == {F}
    assert sum(c.primary_attempts for c in traffic.calls) <= 2
    assert store_events(otel) == [(False, "ConnectionError"), (True, "")]
    assert_never_shown((SECRET,), otel, logs)


@pytest.mark.parametrize(
    "form",
    [
        "redis://:{secret}@127.0.0.1:{port}/0",
        "redis://default:{secret}@127.0.0.1:{port}/0",
        "redis://127.0.0.1:{port}/0?password={secret}",
    ],
    ids=["password", "user-and-password", "query-parameter"],
)
def test_the_password_never_shows_whatever_form_the_url_takes(
    form: str, start_redis: Callable[..., RedisServer], stores: Stores,
    otel: TelemetryRecorder, logs: pytest.LogCaptureFixture,
) -> None:  # fmt: skip
    server = start_redis(requirepass=SECRET)
    store = stores(form.format(secret=SECRET, port=server.port), otel.telemetry)
    Failover(config(), store, telemetry=otel.telemetry)
    assert store.wait_until_shared()  # the password works: it was read from the URL
    server.kill()
    wait_for("the store to notice", lambda: not store.sharing, 5)
    with pytest.raises(redis.ConnectionError) as unreachable:
        store.drain(P, time.time() + 60, time.time())
    assert store_up(otel, store) == 0
    assert [up for up, _ in store_events(otel)] == [True, False]
    assert SECRET not in store.description
    assert_never_shown((SECRET,), otel, logs, (unreachable.value,))


def test_messages_it_cannot_read_on_the_channel_never_break_sharing(
    redis_server: RedisServer, stores: Stores, otel: TelemetryRecorder, tmp_path: Path
) -> None:
    one = stores(redis_server.url, telemetry=otel.telemetry)
    two = stores(redis_server.url)
    assert one.wait_until_shared(5) and two.wait_until_shared(5)
    channel = f"faults-{tmp_path.name}:events"  # the stores fixture's prefix
    client = redis_server.client()
    try:  # another writer on the channel, or an older or newer swerve
        for junk in (
            b"not json", b"[1, 2]", b'{"op": "cool"}', b'{"op": "cool", "route": "a/b"}',
            b'{"op": "probe", "route": "a/b", "lease_until": "soon"}',
            b'{"op": "drain", "route": ["a/b"], "until": 1}', b'{"op": "teleport", "route": "a/b"}',
        ):  # fmt: skip
            assert client.publish(channel, junk) == 2  # both stores are listening
    finally:
        client.close()
    two.cool_down(P, time.time(), CooldownRule(60, 60), "unavailable")
    wait_for("the cooldown to reach the other store", lambda: until(one, P), timeout=5)
    assert store_events(otel) == [(True, "")]  # up once, never down
