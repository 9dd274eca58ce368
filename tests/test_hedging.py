"""Tail latency (issue 24): hedged first chunks, limits learned from each route, the budget.

The budget runs on the fake clock (it is arithmetic on the times it is given). A hedge is a race
between two real waits, so those tests wait for real, briefly (a tenth of a second); they run
sync and async (the ``mode`` fixture), in the engine with plain generators and through the
transport under the openai SDK against the served fake provider.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from swerve import Failover, FallbackConfig, MemoryHealth, StreamSpec
from swerve._engine.hedging import HedgeBudget
from swerve.httpx import Upstream
from swerve.testing import FakeClock, FakeProvider, Fault, Reply, TelemetryRecorder, ToolCall

from ._drive import Mode

P, F = "primary/model-a", "fallback/model-b"
SPEC: StreamSpec[str] = StreamSpec(part=lambda c: None if c == "head" else "text")
SLOW_S = 2.0  # the slow side's first chunk: far past every hedge and limit below


def hedging(**kw: Any) -> FallbackConfig:
    learned = {"hedge_budget": 1.0, **kw.pop("learned", {})}
    params: dict[str, Any] = {
        "fallbacks": {P: F},
        "max_retries": 0,
        "hedge_after": 0.1,
        "learned": learned,
    }
    return FallbackConfig(**{**params, **kw})


def chunks(slow: str, record: list[str] | None = None) -> Any:
    """A sync adapter: every route sends a head, then its text; ``slow``'s text comes late."""

    def fn(attempt: Any) -> Iterator[str]:
        if record is not None:
            record.append(attempt.route.name)
        yield "head"
        if attempt.route.name == slow:
            time.sleep(SLOW_S)
        yield f"from {attempt.route.name}"

    return fn


def achunks(slow: str, record: list[str] | None = None) -> Any:
    async def fn(attempt: Any) -> AsyncIterator[str]:
        if record is not None:
            record.append(attempt.route.name)
        yield "head"
        if attempt.route.name == slow:
            await asyncio.sleep(SLOW_S)
        yield f"from {attempt.route.name}"

    return fn


def run(mode: Mode, fo: Failover, slow: str, record: list[str] | None = None, **kw: Any) -> Any:
    """The stream's chunks, its attempts, and how long it took."""
    t0 = time.monotonic()
    if mode.sync:
        stream = fo.stream(P, chunks(slow, record), SPEC, **kw)
        got = list(stream)
    else:

        async def go() -> tuple[list[str], Any]:
            astream = fo.astream(P, achunks(slow, record), SPEC, **kw)
            return [c async for c in astream], astream

        got, stream = mode.run(go())
    return got, stream, time.monotonic() - t0


# -- the budget ---------------------------------------------------------------------------------
def test_the_budget_allows_its_share_of_a_routes_calls_in_any_minute() -> None:
    clock = FakeClock()
    budget = HedgeBudget()
    for _ in range(100):
        budget.called(P, clock.now)
    allowed = sum(budget.take(P, clock.now, 0.05) for _ in range(20))
    assert allowed == 5  # 5 % of 100
    assert not budget.take(F, clock.now, 0.05)  # another route's calls are its own
    clock.advance(30)
    for _ in range(20):
        budget.called(P, clock.now)
    assert budget.take(P, clock.now, 0.05)  # 6 of 120 in the last minute
    assert not budget.take(P, clock.now, 0.05)
    clock.advance(31)  # the first 100 calls and their 5 hedges are more than a minute old
    assert sum(budget.take(P, clock.now, 0.05) for _ in range(5)) == 0  # 1 hedge of 20 calls
    clock.advance(60)
    assert not budget.take(P, clock.now, 1.0)  # no call in the last minute: nothing to hedge


def test_the_budget_holds_over_many_slow_calls(mode: Mode) -> None:
    # 40 stream calls, each slow on the primary: at 5 % at most 2 hedge; the others wait.
    fo = Failover(hedging(learned={"hedge_budget": 0.05}), MemoryHealth())
    for _ in range(38):  # calls that never get slow count towards the budget too
        run(mode, fo, slow="nowhere")
    hedged = 0
    for _ in range(2):
        _, stream, _ = run(mode, fo, slow=P)
        hedged += len(stream.attempts) > 1
    assert hedged == 2  # 2 of 40 calls
    _, stream, took = run(mode, fo, slow=P)
    assert [a.route.name for a in stream.attempts] == [P]  # over budget: no hedge, served late
    assert took >= SLOW_S


# -- the race ------------------------------------------------------------------------------------
def test_a_late_first_chunk_hedges_and_the_fallback_serves(mode: Mode) -> None:
    otel = TelemetryRecorder()
    fo = Failover(hedging(), MemoryHealth(), telemetry=otel.telemetry)
    got, stream, took = run(mode, fo, slow=P)
    assert got == ["head", f"from {F}"]  # one head: the loser's never reached the consumer
    assert took < SLOW_S
    assert [(a.route.name, a.outcome) for a in stream.attempts] == [
        (P, "aborted"),
        (F, "success"),
    ]
    (hedge,) = otel.events("swerve.hedge")
    assert hedge[1]["swerve.route.from"] == P and hedge[1]["swerve.route.to"] == F
    (won,) = otel.events("swerve.hedge_won")
    assert won[1]["swerve.route"] == F and won[1]["swerve.hedge.winner"] == "hedge"
    # A loss is not the route's fault: the primary stays healthy.
    assert P not in fo.health.unavailable(time.time())
    otel.shutdown()


def test_the_primary_wins_when_the_hedge_is_slower(mode: Mode) -> None:
    otel = TelemetryRecorder()
    fo = Failover(hedging(hedge_after=0.05), MemoryHealth(), telemetry=otel.telemetry)

    def primary_a_little_late(attempt: Any) -> Iterator[str]:
        yield "head"
        time.sleep(0.3 if attempt.route.name == P else SLOW_S)
        yield f"from {attempt.route.name}"

    async def aprimary_a_little_late(attempt: Any) -> AsyncIterator[str]:
        yield "head"
        await asyncio.sleep(0.3 if attempt.route.name == P else SLOW_S)
        yield f"from {attempt.route.name}"

    if mode.sync:
        stream: Any = fo.stream(P, primary_a_little_late, SPEC)
        got = list(stream)
    else:

        async def go() -> tuple[list[str], Any]:
            astream = fo.astream(P, aprimary_a_little_late, SPEC)
            return [c async for c in astream], astream

        got, stream = mode.run(go())
    assert got == ["head", f"from {P}"]
    assert [(a.route.name, a.outcome) for a in stream.attempts] == [
        (F, "aborted"),
        (P, "success"),
    ]
    (won,) = otel.events("swerve.hedge_won")
    assert won[1]["swerve.route"] == P and won[1]["swerve.hedge.winner"] == "primary"
    otel.shutdown()


@pytest.mark.parametrize(
    "why", ["off", "pinned", "effects", "budget", "no_route"], ids=lambda w: f"not_when_{w}"
)
def test_no_hedge(mode: Mode, why: str) -> None:
    config = {
        "off": hedging(hedge_after=None),
        "budget": hedging(learned={"hedge_budget": 0.01}),  # 1 % of one call: none
        "no_route": hedging(fallbacks={}),
    }.get(why, hedging())
    fo = Failover(config, MemoryHealth())
    record: list[str] = []
    kw: dict[str, Any] = {"pin": True} if why == "pinned" else {}
    if why == "effects":
        # Something happened that must not happen twice (a tool ran): never a second request.
        def effects(attempt: Any) -> Iterator[str]:
            attempt.record_effect("tool")
            yield from chunks(P, record)(attempt)

        async def aeffects(attempt: Any) -> AsyncIterator[str]:
            attempt.record_effect("tool")
            async for chunk in achunks(P, record)(attempt):
                yield chunk

        t0 = time.monotonic()
        if mode.sync:
            got = list(fo.stream(P, effects, SPEC))
        else:

            async def go() -> list[str]:
                return [c async for c in fo.astream(P, aeffects, SPEC)]

            got = mode.run(go())
        assert time.monotonic() - t0 >= SLOW_S
    else:
        got, _, took = run(mode, fo, slow=P, record=record, **kw)
        assert took >= SLOW_S  # waited for the primary
    assert got == ["head", f"from {P}"]
    assert record == [P]  # one request


def test_a_hedge_that_fails_leaves_the_primary_serving(mode: Mode) -> None:
    fo = Failover(hedging(hedge_after=0.05), MemoryHealth())

    def failing_fallback(attempt: Any) -> Iterator[str]:
        yield "head"
        if attempt.route.name == F:
            raise ConnectionResetError("the fallback reset")
        time.sleep(0.3)
        yield f"from {P}"

    async def afailing_fallback(attempt: Any) -> AsyncIterator[str]:
        yield "head"
        if attempt.route.name == F:
            raise ConnectionResetError("the fallback reset")
        await asyncio.sleep(0.3)
        yield f"from {P}"

    if mode.sync:
        stream: Any = fo.stream(P, failing_fallback, SPEC)
        got = list(stream)
    else:

        async def go() -> tuple[list[str], Any]:
            astream = fo.astream(P, afailing_fallback, SPEC)
            return [c async for c in astream], astream

        got, stream = mode.run(go())
    assert got == ["head", f"from {P}"]
    assert [(a.route.name, a.outcome) for a in stream.attempts] == [
        (F, "failure"),
        (P, "success"),
    ]
    assert F in fo.health.unavailable(time.time())  # its reset cooled it down


# -- learned limits -------------------------------------------------------------------------------
def test_an_adaptive_first_token_limit_is_learned_from_the_route(mode: Mode) -> None:
    otel = TelemetryRecorder()
    config = FallbackConfig(
        fallbacks={P: F},
        max_retries=0,
        first_token_timeout_s="adaptive",
        learned={"min_samples": 5, "multiplier": 2.0, "floor_s": 0.1, "ceiling_s": 30.0},
    )
    fo = Failover(config, MemoryHealth(), telemetry=otel.telemetry)
    seen: list[float | None] = []

    def noted(attempt: Any) -> Iterator[str]:
        seen.append(attempt.first_token_timeout)
        yield "head"
        time.sleep(0.05)  # a first chunk 50 ms in: the route's normal
        yield "text"

    async def anoted(attempt: Any) -> AsyncIterator[str]:
        seen.append(attempt.first_token_timeout)
        yield "head"
        await asyncio.sleep(0.05)
        yield "text"

    for _ in range(5):
        if mode.sync:
            list(fo.stream(P, noted, SPEC))
        else:

            async def go() -> None:
                assert [c async for c in fo.astream(P, anoted, SPEC)] == ["head", "text"]

            mode.run(go())
    assert seen == [30.0] * 5  # the ceiling, until 5 first chunks were seen
    learned = fo.health.first_chunk_quantile(P, 0.99, time.time(), 5)  # type: ignore[attr-defined]
    assert learned is not None and 0.04 <= learned <= 0.5
    # Learned: p99 x 2, within the floor (0.1 s) and the ceiling.
    _, stream, took = run(mode, fo, slow=P)
    limit = max(learned * 2, 0.1)
    assert [(a.route.name, a.outcome) for a in stream.attempts] == [
        (P, "failure"),
        (F, "success"),
    ]
    # One slow first token is not an outage: the route is not cooled down for it.
    assert P not in fo.health.unavailable(time.time())
    assert not otel.events("swerve.cooldown")
    (hit,) = otel.events("swerve.learned_limit")
    assert hit[1]["swerve.learned_limit.seconds"] == pytest.approx(limit)
    # Async cuts the wait at the limit; a sync stream cannot be pre-empted (the transport
    # holds its socket reads to the limit), so a plain generator's late chunk is read first.
    assert took < SLOW_S or mode.sync
    otel.shutdown()


def test_with_neither_option_streams_are_unchanged(mode: Mode) -> None:
    fo = Failover(FallbackConfig(fallbacks={P: F}, max_retries=0), MemoryHealth())
    seen: list[float | None] = []

    def noted(attempt: Any) -> Iterator[str]:
        seen.append(attempt.first_token_timeout)
        yield from ("head", "text")

    if mode.sync:
        got = list(fo.stream(P, noted, SPEC))
    else:

        async def go() -> list[str]:
            async def anoted(attempt: Any) -> AsyncIterator[str]:
                for chunk in noted(attempt):
                    yield chunk

            return [c async for c in fo.astream(P, anoted, SPEC)]

        got = mode.run(go())
    assert got == ["head", "text"] and seen == [None]


# -- through the transport: the case, and tools --------------------------------------------
OR, BK = "slowprovider/model-a", "fastprovider/model-b"


def upstreams(fake: FakeProvider) -> dict[str, Upstream]:
    return {
        OR: Upstream(f"{fake.url('slowprovider')}/v1", api_key="sk-slow-0123456789"),
        BK: Upstream(f"{fake.url('fastprovider')}/v1", api_key="sk-fast-0123456789"),
    }


def test_a_slow_primary_is_hedged_after_its_learned_p95(mode: Mode, fake: FakeProvider) -> None:
    """The primary's first token normally comes after 0.2 s; now after 20 s. With
    ``hedge_after="p95"`` the answer comes within the fallback's own latency plus the
    primary's learned p95, not 20 s."""
    config = FallbackConfig(
        fallbacks={OR: BK},
        max_retries=0,
        hedge_after="p95",
        learned={"min_samples": 10, "hedge_budget": 0.5},
    )
    client = mode.openai(mode.client(upstreams(fake), config=config, health=MemoryHealth()))
    fake.set_fault("slowprovider", Fault.slow(first_token_s=0.2))
    messages = [{"role": "user", "content": "hi"}]
    for _ in range(10):  # learning the route's normal: its first token after 0.2 s
        client.create(model=OR, messages=messages, stream=True)
    fake.set_fault("slowprovider", Fault.slow(first_token_s=20))
    fake.set_reply("fastprovider", Reply(text="from the fallback"))
    t0 = time.monotonic()
    chunks = client.create(model=OR, messages=messages, stream=True)
    took = time.monotonic() - t0
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "from the fallback"
    # p95 of 0.2 s (to within the sketch's 5 %), then the fallback's own answer (immediate here).
    assert took < 0.2 * 1.1 + 1.5, took


def test_a_tool_call_reaches_the_caller_once_however_many_requests_raced(
    mode: Mode, fake: FakeProvider
) -> None:
    config = FallbackConfig(
        fallbacks={OR: BK}, max_retries=0, hedge_after=0.1, learned={"hedge_budget": 1.0}
    )
    http = mode.client(upstreams(fake), config=config, health=MemoryHealth())
    client = mode.openai(http)
    call = ToolCall("get_weather", {"city": "Oslo"})
    fake.set_reply("slowprovider", Reply(text="", tool_calls=[call]))
    fake.set_reply("fastprovider", Reply(text="", tool_calls=[call]))
    fake.set_fault("slowprovider", Fault.slow(first_token_s=SLOW_S))
    ran: list[str] = []
    chunks = client.create(
        model=OR, messages=[{"role": "user", "content": "weather?"}], stream=True
    )
    for chunk in chunks:  # what an agent loop does: run each tool call it is given
        for choice in chunk.choices:
            for tool in choice.delta.tool_calls or []:
                if tool.function and tool.function.name:
                    ran.append(tool.function.name)
    assert ran == ["get_weather"]  # both providers were asked; one answer reached the caller
    assert fake.requests("slowprovider") == 1 and fake.requests("fastprovider") == 1
