"""Fuzzing what RedisHealth reads from Redis: arbitrary channel messages and key contents,
through the checks alone (pure functions) and through a live store on a real redis-server.
Nothing may raise into a call, and sharing must stay up."""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from hypothesis import given
from hypothesis import strategies as st

from swerve import BreakerConfig, RedisHealth
from swerve._health.redis_wire import (
    MAX_MESSAGE_BYTES,
    REJECT_REASONS,
    Bounds,
    Message,
    Rejected,
    breaker_from_hash,
    cooling_from_hash,
    message_from_json,
)
from swerve._health.store import CooldownRule, Outcome
from swerve._telemetry import names as names
from swerve.testing import FakeClock, TelemetryRecorder

from ..fleet._servers import RedisServer, wait_for
from ._measure import fuzz
from .conftest import Report

NOW = 1_800_000_000.0
BOUNDS = Bounds()
PREFIX = "fuzz"
ROUTES = ["a/m", "b/n"]

numbers = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(NOW - 1e6, NOW + 1e7),
)
scalars = st.one_of(numbers, st.text(max_size=20), st.none(), st.booleans())
values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=8,
)
ops = st.sampled_from(["cool", "probe", "release", "recover", "breaker", "clear", "drain", "bye"])
routes = st.one_of(st.sampled_from(ROUTES), st.text(max_size=12), values)
messages = st.fixed_dictionaries(
    {"op": st.one_of(ops, values), "route": routes},
    optional={
        "until": values, "streak": values, "forget_at": values, "reason": st.one_of(
            st.sampled_from(["unavailable", "drained"]), values),
        "lease_until": values, "open_until": values, "from": values,
    },
)  # fmt: skip
# Well-formed but for the values: what a buggy or hostile swerve would send.
shaped = st.fixed_dictionaries(
    {"op": ops, "route": st.sampled_from(ROUTES), "from": st.text(max_size=4)},
    optional={
        "until": numbers, "streak": st.one_of(st.integers(-5, 100), numbers),
        "forget_at": numbers, "reason": st.sampled_from(["unavailable", "drained", "x\x1b"]),
        "lease_until": numbers, "open_until": st.one_of(numbers, st.none()),
    },
)  # fmt: skip
wire_bytes = st.one_of(
    shaped.map(lambda m: json.dumps(m).encode()),
    messages.map(lambda m: json.dumps(m).encode()),
    st.binary(max_size=MAX_MESSAGE_BYTES + 100),
    st.text(max_size=200).map(str.encode),
)
field_values = st.one_of(
    numbers.map(repr),
    st.sampled_from(["inf", "-inf", "nan", "1e308", "x", "", " 1", "0x10"]),
    st.binary(max_size=8),
)
hashes = st.dictionaries(
    st.sampled_from(["until", "streak", "forget_at", "reason", "open_until", "opens", "zz"]),
    field_values,
    max_size=5,
)


def _bounded_time(at: float | None, limit: float) -> None:
    assert at is None or (math.isfinite(at) and at <= NOW + limit + 1e-6)


def test_every_message_is_checked_without_raising(soak_s: float, figure: Report) -> None:
    seen: dict[str, int] = {}

    @fuzz(soak_s, 2000)
    @given(data=wire_bytes)
    def check(data: bytes) -> None:
        got = message_from_json(data, NOW, BOUNDS)
        if isinstance(got, Rejected):
            assert got.reason in REJECT_REASONS and got.detail.isprintable()
            seen[got.reason] = seen.get(got.reason, 0) + 1
            return
        seen["applied"] = seen.get("applied", 0) + 1
        assert isinstance(got, Message) and (got.op == "bye" or got.route.isprintable())
        longest = max(BOUNDS.cooldown_s, BOUNDS.open_s, BOUNDS.lease_s, BOUNDS.drain_s)
        _bounded_time(got.at, longest)
        if got.cooling is not None:
            _bounded_time(got.cooling.until, longest)
            assert math.isfinite(got.cooling.forget_at)

    check()
    figure(
        "fuzzed channel messages through the checks",
        "never raises; every time finite and bounded",
        measured=f"{sum(seen.values())} messages: {dict(sorted(seen.items()))}",
    )


def test_every_hash_is_checked_without_raising(soak_s: float) -> None:
    @fuzz(soak_s, 2000)
    @given(fields=hashes)
    def check(fields: dict[str, Any]) -> None:
        cooling = cooling_from_hash(fields, NOW, BOUNDS)
        if isinstance(cooling, Rejected):
            assert cooling.reason in REJECT_REASONS
        elif cooling is not None:
            limit = BOUNDS.drain_s if cooling.reason == "drained" else BOUNDS.cooldown_s
            _bounded_time(cooling.until, limit)
        open_until = breaker_from_hash(fields, NOW, BOUNDS)
        if not isinstance(open_until, Rejected):
            _bounded_time(open_until, BOUNDS.open_s)

    check()


# --- a live store -------------------------------------------------------------------------------
class Live:
    def __init__(self, home: Path) -> None:
        self.server = RedisServer(home)
        self.raw = self.server.client()
        self.clock = FakeClock(NOW)
        self.recorder = TelemetryRecorder()
        self.health = RedisHealth(
            self.server.client(), prefix=PREFIX, clock=self.clock,
            telemetry=self.recorder.telemetry,
        )  # fmt: skip
        assert self.health.wait_until_shared(5)
        self.examples = 0

    def downs(self) -> int:
        return sum(
            1
            for s in self.recorder.finished()
            if s.name == names.SPAN_STORE and (s.attributes or {}).get(names.STORE_UP) is False
        )

    def close(self) -> None:
        self.health.close()
        self.raw.close()
        self.server.stop()


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    live = Live(tmp_path_factory.mktemp("fuzz-redis"))
    yield live
    live.close()


KINDS = st.sampled_from(["cool", "brk", "window", "probe", "half_open"])
key_writes = st.tuples(
    st.sampled_from(ROUTES), KINDS, st.sampled_from(["hash", "string", "zset", "list"]), hashes
)
BREAKER = BreakerConfig(window_s=10, min_calls=1, failure_rate=0.5, open_s=1, half_open_probes=1)


def _write(raw: redis.Redis, route: str, kind: str, type_: str, fields: dict[str, Any]) -> None:
    key = f"{{{PREFIX}:{route}}}:{kind}"
    raw.delete(key)
    if type_ == "hash" and fields:
        raw.hset(key, mapping=fields)
    elif type_ == "string":
        raw.set(key, next(iter(fields.values()), b"x"))
    elif type_ == "zset":
        raw.zadd(key, {"t": 1e300, "u": NOW})
    elif type_ == "list":
        raw.rpush(key, "x")


def test_a_live_store_survives_whatever_redis_holds(
    live: Live, soak_s: float, figure: Report
) -> None:
    health, clock = live.health, live.clock

    @fuzz(soak_s, 60)
    @given(
        sent=st.lists(wire_bytes, max_size=4),
        writes=st.lists(key_writes, max_size=4),
        steps=st.floats(0, 40),
    )
    def check(
        sent: list[bytes], writes: list[tuple[str, str, str, dict[str, Any]]], steps: float
    ) -> None:
        live.examples += 1
        for data in sent:
            live.raw.publish(f"{PREFIX}:events", data)
        for write in writes:
            _write(live.raw, *write)
        clock.advance(steps)
        for route in ROUTES:  # every call-path operation, and so every script
            now = clock.now
            _ = route in health.unavailable(now)
            health.probe_due(route, now)
            health.admit(route, now, BREAKER, lease_s=5.0)
            health.record(route, Outcome.FAILURE, now, BREAKER, probe=False)
            health.cool_down(route, now, CooldownRule(1, 30), "unavailable")
            clock.advance(31)
            health.claim_probe(route, clock.now, 5.0)
            health.recovered(route, clock.now)
            health.release_probe(route)
            health.fleet_view()
        assert health.sharing

    check()
    deadline = time.monotonic() + 1.0  # the writer's last batch
    while time.monotonic() < deadline and live.downs() == 0:
        time.sleep(0.05)
    assert health.sharing and live.downs() == 0
    # The reader still applies news after all that.
    now = clock.now
    live.raw.hset(f"{{{PREFIX}:c/o}}:cool", mapping={  # the key is the truth; the message a nudge
        "until": now + 5, "streak": 0, "forget_at": now + 35, "reason": "unavailable"})  # fmt: skip
    live.raw.publish(f"{PREFIX}:events", json.dumps({
        "op": "cool", "route": "c/o", "until": now + 5, "streak": 0, "forget_at": now + 35,
        "reason": "unavailable"}))  # fmt: skip
    wait_for(
        "a valid message after the fuzz",
        lambda: any(h.route == "c/o" for h in health.snapshot(now)),
        10,
    )
    rejected = live.recorder.counter(names.METRIC_STORE_REJECTED)
    figure(
        "fuzzed channel messages and key contents on a live store",
        "nothing raises into a call; sharing never stops",
        measured=f"{live.examples} examples, {rejected:g} values rejected, 0 reconnects",
    )
