"""Failover by what a failure means, through the LangChain adapter: a hang or a stall swaps at
once (no same-route retry), a context overflow follows its own map without cooling the route,
a content filter surfaces, a recovered route is probed by one call only, a stream without its
terminator is complete, and undecodable stream data is a transport failure. Real route models
(ChatOpenAI, ChatAnthropic, ChatOpenRouter) against the fake provider, sync and async,
streaming and not."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import anthropic
import openai
import openrouter
import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, AIMessageChunk, HumanMessage
from langchain_core.prompts import ChatPromptTemplate
from lc_support import (
    ANSWERING_LIMIT_S,
    F,
    FakeClock,
    Otel,
    P,
    chat_anthropic,
    chat_openai,
    chat_openrouter,
    seed_config,
)
from pydantic import ValidationError
from swerve_langchain import RESET_KEY, FailoverChatModel, FailoverMiddleware, with_failover
from test_chat_model import MODES, run

from swerve import Failover, FallbackConfig, MemoryHealth, MidStreamError
from swerve._failures import MalformedStreamError
from swerve.testing import FakeProvider, Fault, Reply

# A route whose requests a time limit cuts: its own provider, so a request that lingers on the
# server after the test can take no other test's scripted fault or count (as in test_faults).
STALL = "stall/fake-model"
# A larger-window sibling of the primary, on a provider of its own.
LARGE = "large/fake-model-large"
STREAMS = ["stream", "astream"]
# The primary's route model by the SDK behind it: (route, factory, the SDK's 400 error class).
PRIMARIES: dict[str, tuple[str, Callable[[FakeProvider], Any], type[Exception]]] = {
    "openai": (P, lambda f: chat_openai(f, "primary"), openai.BadRequestError),
    "anthropic": (
        "primary/claude-fake",
        lambda f: chat_anthropic(f, "primary"),
        anthropic.BadRequestError,
    ),
    "openrouter": (
        "primary/anthropic/claude-fake",
        lambda f: chat_openrouter(f, "primary"),
        openrouter.errors.OpenRouterError,
    ),
}
CONTENT_FILTER = Fault.status(
    400,
    body={
        "error": {
            "message": "The response was filtered due to the prompt triggering the content "
            "management policy.",
            "type": "invalid_request_error",
            "param": "prompt",
            "code": "content_filter",
        }
    },
)


@pytest.fixture
def large(fake: FakeProvider) -> Iterator[FakeProvider]:
    """The fake provider with the ``large`` provider ready (and cleared after the test)."""
    fake.script("large", [])
    fake.set_fault("large", Fault.ok())
    fake.set_reply("large", Reply(text="from large"))
    fake.reset_counts()
    yield fake
    fake.script("large", [])
    fake.set_fault("large", Fault.ok())


def is_sync(mode: str) -> bool:
    return not mode.startswith("a")


def run_blocking(model: Any, mode: str) -> AIMessage:
    """A sync call in ``mode`` (for threads); a stream is aggregated into one message."""
    if mode == "invoke":
        return model.invoke("hi")  # type: ignore[no-any-return]
    chunks = list(model.stream("hi"))
    total = chunks[0]
    for chunk in chunks[1:]:
        total = total + chunk
    return total  # type: ignore[no-any-return]


async def stream_chunks(model: Any, mode: str) -> list[AIMessageChunk]:
    if mode == "stream":
        return list(model.stream("hi"))
    return [c async for c in model.astream("hi")]


def after_reset(chunks: list[AIMessageChunk]) -> list[AIMessageChunk]:
    """The chunks from the one marking a restart on (it and those after it)."""
    (at,) = [i for i, c in enumerate(chunks) if RESET_KEY in c.response_metadata]
    return chunks[at:]


def two_way(route: str, **kw: Any) -> FallbackConfig:
    """The route and the fallback, each the other's fallback (one retry unless told)."""
    fallback = "fallback/fake-model-large"
    return seed_config(fallbacks={route: fallback, fallback: route}, **{"max_retries": 1, **kw})


def primary_and_fallback(
    fake: FakeProvider, name: str, failover: Failover, **kw: Any
) -> tuple[str, FailoverChatModel]:
    """The primary ``name`` (openai or anthropic) and an OpenAI-wire fallback."""
    route, factory, _ = PRIMARIES[name]
    fallback = "fallback/fake-model-large"
    model = FailoverChatModel(
        routes={route: factory(fake), fallback: chat_openai(fake, "fallback", "fake-model-large")},
        primary=route,
        failover=failover,
        **kw,
    )
    return route, model


def counts(fake: FakeProvider, *providers: str) -> tuple[int, ...]:
    """How many requests each provider received."""
    return tuple(fake.requests(p) for p in providers)


def swaps(otel: Otel) -> list[tuple[object, object, object]]:
    return [
        (a["swerve.route.from"], a["swerve.route.to"], a["swerve.reason"])
        for _, a in otel.events("swerve.swap")
    ]


# --- timeouts: swap at once, no same-route retry -----------------------------------------------
@pytest.mark.anyio
@pytest.mark.parametrize("mode", MODES)
async def test_a_hanging_route_is_left_after_one_timeout(
    mode: str, fake: FakeProvider, make_failover: Callable[..., Failover], otel: Otel,
    clock: FakeClock,
) -> None:  # fmt: skip
    # Sync calls cannot be pre-empted; as docs/langchain.md says, the route model's own
    # timeout bounds them there. Async, swerve cancels the attempt at attempt_timeout_s.
    timeout = {"timeout": 1.0} if is_sync(mode) else {}
    model = FailoverChatModel(
        routes={STALL: chat_openai(fake, "stall", **timeout), F: chat_anthropic(fake, "fallback")},
        primary=STALL,
        failover=make_failover(
            seed_config(fallbacks={STALL: F}, attempt_timeout_s=1, max_retries=2)
        ),
    )
    fake.set_fault("stall", Fault.hang())
    message = await run(model, mode)
    assert message.text == "from fallback"
    assert message.response_metadata["swerve"] == {
        "requested": STALL, "served": F, "retries": 0, "swaps": 1,
    }  # fmt: skip
    # The fake counts a request once its thread has read it: on a loaded box that can come
    # after the attempt was cut. Wait for it, bounded, then count exactly.
    fake.wait_for_requests("stall", 1)
    assert (fake.requests("stall"), fake.requests("fallback")) == (1, 1)
    assert otel.events("swerve.retry") == [] and clock.sleeps == []
    assert swaps(otel) == [(STALL, F, "timeout")]


@pytest.mark.anyio
@pytest.mark.parametrize("mode", STREAMS)
async def test_a_stream_that_stalls_before_its_first_token_swaps_after_one_stall(
    mode: str, fake: FakeProvider, make_failover: Callable[..., Failover], otel: Otel
) -> None:
    # The limit bounds the fallback's first token too. Sync: the route model's own limit.
    timeout = {"timeout": ANSWERING_LIMIT_S} if is_sync(mode) else {}
    model = FailoverChatModel(
        routes={STALL: chat_openai(fake, "stall", **timeout), F: chat_anthropic(fake, "fallback")},
        primary=STALL,
        failover=make_failover(
            seed_config(
                fallbacks={STALL: F}, first_token_timeout_s=ANSWERING_LIMIT_S, max_retries=2
            )
        ),
    )
    fake.set_fault("stall", Fault.slow(first_token_s=5.0))
    chunks = await stream_chunks(model, mode)
    # Invisible: nothing of the stalled attempt (not even its role delta) reached the consumer.
    assert "".join(c.text for c in chunks) == "from fallback"
    assert not any(c.response_metadata.get("model_provider") == "openai" for c in chunks)
    fake.wait_for_requests("stall", 1)  # counted by the fake's thread, maybe after the cut
    assert (fake.requests("stall"), fake.requests("fallback")) == (1, 1)
    assert otel.events("swerve.retry") == []
    assert swaps(otel) == [(STALL, F, "timeout")]


@pytest.mark.anyio
@pytest.mark.parametrize("mode", STREAMS)
async def test_a_stream_that_stalls_after_content_restarts_on_the_fallback_after_one_stall(
    mode: str, fake: FakeProvider, make_failover: Callable[..., Failover], otel: Otel,
    clock: FakeClock,
) -> None:  # fmt: skip
    # The stall happens on the injected clock, so no real-time bound decides the outcome (a
    # slow first chunk on a loaded machine would be a stall before content, a silent swap):
    # once the first content is out the clock jumps past the limit. Async, the next wait is
    # cut at once (the route sends nothing more, only the limit can end it); a sync read
    # cannot be cut, so the route's next chunk comes at once and is found late.
    model = FailoverChatModel(
        routes={STALL: chat_openai(fake, "stall"), F: chat_anthropic(fake, "fallback")},
        primary=STALL,
        failover=make_failover(
            seed_config(fallbacks={STALL: F}, stall_timeout_s=30, max_retries=2)
        ),
        mid_stream="restart",
    )
    fake.set_reply("stall", Reply(text="hello from stall"))
    if not is_sync(mode):
        fake.set_fault("stall", Fault.slow(per_chunk_s=120))  # the first chunk, then silence
    chunks: list[AIMessageChunk] = []

    def seen(chunk: AIMessageChunk) -> None:
        if chunk.text and not any(c.text for c in chunks):
            clock.advance(31)
        chunks.append(chunk)

    if mode == "stream":
        for chunk in model.stream("hi"):
            seen(chunk)
    else:
        async for chunk in model.astream("hi"):
            seen(chunk)
    before = chunks[: len(chunks) - len(after_reset(chunks))]
    assert "".join(c.text for c in before) == "hello"
    assert "".join(c.text for c in after_reset(chunks)) == "from fallback"
    assert (fake.requests("stall"), fake.requests("fallback")) == (1, 1)
    assert otel.events("swerve.retry") == []
    assert swaps(otel) == [(STALL, F, "timeout")]
    (reset,) = otel.events("swerve.stream_reset")
    assert reset[1] == {"swerve.route.from": STALL, "swerve.route.to": F}


# --- context overflow: its own map, and the route is not to blame ------------------------------
@pytest.mark.anyio
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", list(PRIMARIES))
async def test_a_context_overflow_moves_to_the_larger_route_and_leaves_the_primary_warm(
    name: str, mode: str, large: FakeProvider, make_failover: Callable[..., Failover],
    otel: Otel, clock: FakeClock, health: MemoryHealth,
) -> None:  # fmt: skip
    fake = large
    primary, factory, _ = PRIMARIES[name]
    model = FailoverChatModel(
        routes={
            primary: factory(fake),
            F: chat_anthropic(fake, "fallback"),
            LARGE: chat_openai(fake, "large", "fake-model-large"),
        },
        primary=primary,
        failover=make_failover(
            seed_config(
                fallbacks={primary: F, F: primary},
                fallbacks_by_failure={"context_overflow": {primary: LARGE}},
                max_retries=2,
            )
        ),
    )
    fake.script("primary", [Fault.context_overflow()])
    message = await run(model, mode)
    assert message.text == "from large"
    assert message.response_metadata["model_name"] == "fake-model-large"
    assert message.response_metadata["swerve"]["served"] == LARGE
    # One request each: no retry of the overflowing prompt, the ordinary fallback untouched.
    assert counts(fake, "primary", "large", "fallback") == (1, 1, 0)
    assert swaps(otel) == [(primary, LARGE, "context_overflow")]
    assert otel.events("swerve.retry") == [] and otel.events("swerve.cooldown") == []
    assert primary not in health.unavailable(clock.now)

    # The prompt was to blame, not the route: the next (short) call starts on the primary.
    second = await run(model, mode)
    assert second.text == "from primary"
    assert second.response_metadata["swerve"] == {
        "requested": primary, "served": primary, "retries": 0, "swaps": 0,
    }  # fmt: skip
    assert (fake.requests("primary"), fake.requests("large")) == (2, 1)
    assert otel.events("swerve.route_skipped") == []


@pytest.mark.anyio
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", list(PRIMARIES))
async def test_without_the_map_a_context_overflow_surfaces_as_the_sdks_error(
    name: str, mode: str, fake: FakeProvider, make_failover: Callable[..., Failover],
    otel: Otel, clock: FakeClock, health: MemoryHealth,
) -> None:  # fmt: skip
    route, _, error = PRIMARIES[name]
    _, model = primary_and_fallback(fake, name, make_failover(two_way(route, max_retries=2)))
    fake.script("primary", [Fault.context_overflow()])
    with pytest.raises(error) as info:
        await run(model, mode)
    assert info.value.status_code == 400
    # The route model's own error class, not a swerve wrapper.
    assert type(info.value).__module__.split(".")[0] in {
        "openai", "anthropic", "openrouter", "langchain_openai", "langchain_anthropic",
    }  # fmt: skip
    assert any(f"requested {route}" in note for note in info.value.__notes__)
    assert (fake.requests("primary"), fake.requests("fallback")) == (1, 0)
    assert swaps(otel) == [] and otel.events("swerve.cooldown") == []
    (declined,) = otel.events("swerve.swap_declined")
    assert declined[1]["swerve.reason"] == "not_qualifying"
    assert route not in health.unavailable(clock.now)


# --- content filter: never retried, never swapped ----------------------------------------------
@pytest.mark.anyio
@pytest.mark.parametrize("mode", MODES)
async def test_a_content_filter_400_surfaces_even_with_400_listed(
    mode: str, fake: FakeProvider, make_failover: Callable[..., Failover], otel: Otel,
    clock: FakeClock, health: MemoryHealth,
) -> None:  # fmt: skip
    config = seed_config(fallback_on=FallbackConfig().fallback_on | {400}, max_retries=2)
    model = FailoverChatModel(
        routes={P: chat_openai(fake, "primary"), F: chat_anthropic(fake, "fallback")},
        primary=P,
        failover=make_failover(config),
    )
    fake.script("primary", [CONTENT_FILTER])
    with pytest.raises(openai.BadRequestError) as info:
        await run(model, mode)
    assert info.value.code == "content_filter"
    assert (fake.requests("primary"), fake.requests("fallback")) == (1, 0)
    assert otel.events("swerve.retry") == [] and swaps(otel) == []
    assert otel.events("swerve.cooldown") == [] and clock.sleeps == []
    (declined,) = otel.events("swerve.swap_declined")
    assert declined[1] == {"swerve.route": P, "swerve.reason": "not_qualifying"}
    assert P not in health.unavailable(clock.now)


# --- recovery: one probe, doubled cooldowns ----------------------------------------------------
async def fifty(model: FailoverChatModel, mode: str) -> list[AIMessage]:
    """50 calls at once: gathered on the loop (async), or 50 threads released together."""
    if not is_sync(mode):
        return list(await asyncio.gather(*(run(model, mode) for _ in range(50))))
    barrier = threading.Barrier(50)

    def one() -> AIMessage:
        barrier.wait()
        return run_blocking(model, mode)

    with ThreadPoolExecutor(max_workers=50) as pool:
        futures = [pool.submit(one) for _ in range(50)]
        return [f.result() for f in futures]


@pytest.mark.anyio
@pytest.mark.parametrize("mode", MODES)
async def test_a_recovered_route_is_probed_by_exactly_one_call(
    mode: str, fake: FakeProvider, make_failover: Callable[..., Failover], otel: Otel,
    clock: FakeClock, health: MemoryHealth,
) -> None:  # fmt: skip
    model = FailoverChatModel(
        routes={P: chat_openai(fake, "primary"), F: chat_anthropic(fake, "fallback")},
        primary=P,
        failover=make_failover(seed_config(cooldown_s=5, cooldown_max_s=40, max_retries=2)),
    )

    def probes() -> list[object]:
        return [a["swerve.probe.outcome"] for _, a in otel.events("swerve.probe")]

    def cooldowns() -> list[object]:
        return [a["swerve.cooldown.seconds"] for _, a in otel.events("swerve.cooldown")]

    # The primary dies: one call pays its retries, swaps, and cools it down for 5 s.
    fake.set_fault("primary", Fault.status(503))
    assert (await run(model, mode)).text == "from fallback"
    assert (fake.requests("primary"), fake.requests("fallback")) == (3, 1)
    assert cooldowns() == [5.0]

    # The cooldown ends with the primary still dead: of 50 calls at once, one probes it (one
    # request, no retry) and the rest walk past it; every call is answered by the fallback.
    clock.advance(6)
    answers = await fifty(model, mode)
    assert [a.text for a in answers] == ["from fallback"] * 50
    assert {a.response_metadata["swerve"]["served"] for a in answers} == {F}
    assert (fake.requests("primary"), fake.requests("fallback")) == (4, 51)
    assert probes() == ["failure"]
    assert cooldowns() == [5.0, 10.0]  # the failed probe doubled it
    assert len(otel.events("swerve.retry")) == 2  # the first call's: the probe was not retried

    # Healed, but still cooling (10 s now): calls stay on the fallback.
    fake.set_fault("primary", Fault.ok())
    clock.advance(6)
    assert (await run(model, mode)).text == "from fallback"
    assert fake.requests("primary") == 4

    # Past the doubled cooldown: the next call probes the primary and is served there, and so
    # are the calls after it, without probing again.
    clock.advance(5)
    probe = await run(model, mode)
    assert probe.text == "from primary"
    assert probe.response_metadata["swerve"] == {
        "requested": P, "served": P, "retries": 0, "swaps": 0,
    }  # fmt: skip
    assert probes() == ["failure", "success"]
    for _ in range(3):
        assert (await run(model, mode)).text == "from primary"
    assert fake.requests("primary") == 8
    assert probes() == ["failure", "success"]
    assert P not in health.unavailable(clock.now)


# --- a stream with its finish information but no terminator is complete -----------------------
@pytest.mark.anyio
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", list(PRIMARIES))
async def test_a_stream_without_its_terminator_is_complete(
    name: str, mode: str, fake: FakeProvider, make_failover: Callable[..., Failover],
    otel: Otel, clock: FakeClock, health: MemoryHealth,
) -> None:  # fmt: skip
    route = PRIMARIES[name][0]
    _, model = primary_and_fallback(fake, name, make_failover(two_way(route, max_retries=2)))
    fake.set_fault("primary", Fault.no_done())  # no [DONE] / message_stop, every call
    for n in (1, 2):
        message = await run(model, mode)
        assert message.text == "from primary"
        assert message.response_metadata["swerve"] == {
            "requested": route, "served": route, "retries": 0, "swaps": 0,
        }  # fmt: skip
        assert (fake.requests("primary"), fake.requests("fallback")) == (n, 0)
    assert otel.events("swerve.cooldown") == [] and otel.events("swerve.retry") == []
    assert route not in health.unavailable(clock.now)
    outcomes = [s.attributes["swerve.attempt.outcome"] for s in otel.attempt_spans()]  # type: ignore[index]
    assert outcomes == ["success", "success"]


# --- undecodable stream data is a transport failure ---------------------------------------------
@pytest.mark.anyio
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", list(PRIMARIES))
async def test_undecodable_data_before_content_is_retried_then_swapped(
    name: str, mode: str, fake: FakeProvider, make_failover: Callable[..., Failover],
    otel: Otel, clock: FakeClock, health: MemoryHealth,
) -> None:  # fmt: skip
    route = PRIMARIES[name][0]
    _, model = primary_and_fallback(fake, name, make_failover(two_way(route)))
    # Streamed: a truncated SSE event after the role delta; invoked: a 200 body cut in half.
    fake.set_fault("primary", Fault.malformed_before_content())
    message = await run(model, mode)
    assert message.text == "from fallback"
    assert message.response_metadata["swerve"] == {
        "requested": route, "served": "fallback/fake-model-large", "retries": 1, "swaps": 1,
    }  # fmt: skip
    assert (fake.requests("primary"), fake.requests("fallback")) == (2, 1)
    (retry,) = otel.events("swerve.retry")
    assert retry[1]["swerve.failure.kind"] == "transport"
    assert swaps(otel) == [(route, "fallback/fake-model-large", "transport")]
    assert route in health.unavailable(clock.now)


@pytest.mark.anyio
@pytest.mark.parametrize("mode", MODES)
async def test_undecodable_data_from_chat_openrouter_surfaces_as_its_own_error_when_nothing_is_left(
    mode: str, fake: FakeProvider, make_failover: Callable[..., Failover], clock: FakeClock,
    health: MemoryHealth,
) -> None:  # fmt: skip
    """The openrouter SDK reports undecodable data as a validation error; swerve reads it as a
    transport failure, and when no route is left that error surfaces as the SDK raised it."""
    route = PRIMARIES["openrouter"][0]
    fallback = "fallback/fake-model-large"
    # The map names nothing after the primary: its retries, then the error.
    config = seed_config(fallbacks={fallback: route}, max_retries=1)
    _, model = primary_and_fallback(fake, "openrouter", make_failover(config))
    fake.set_fault("primary", Fault.malformed_before_content())
    # invoke: the SDK's ResponseValidationError; a stream: the pydantic error it raised.
    expected = openrouter.errors.OpenRouterError if mode.endswith("invoke") else ValidationError
    with pytest.raises(expected) as info:
        await run(model, mode)
    assert not isinstance(info.value, MalformedStreamError)  # not swerve's reading of it
    assert any(f"requested {route}" in note for note in info.value.__notes__)
    assert (fake.requests("primary"), fake.requests("fallback")) == (2, 0)
    assert route in health.unavailable(clock.now)  # a route that garbles its data cools down


@pytest.mark.anyio
@pytest.mark.parametrize("mode", STREAMS)
@pytest.mark.parametrize("name", list(PRIMARIES))
async def test_undecodable_data_after_content_restarts_on_the_next_route(
    name: str, mode: str, fake: FakeProvider, make_failover: Callable[..., Failover],
    otel: Otel,
) -> None:  # fmt: skip
    route = PRIMARIES[name][0]
    fallback = "fallback/fake-model-large"
    _, model = primary_and_fallback(
        fake, name, make_failover(seed_config(fallbacks={route: fallback})), mid_stream="restart"
    )
    fake.set_reply("primary", Reply(text="one two three four"))
    fake.script("primary", [Fault.malformed_after(2)])
    chunks = await stream_chunks(model, mode)
    restarted = after_reset(chunks)
    before = chunks[: len(chunks) - len(restarted)]
    assert "".join(c.text for c in before) == "one two"
    assert "".join(c.text for c in restarted) == "from fallback"
    marks = restarted[0].response_metadata[RESET_KEY]
    assert marks == [{"route_from": route, "route_to": fallback}]
    assert (fake.requests("primary"), fake.requests("fallback")) == (1, 1)
    (reset,) = otel.events("swerve.stream_reset")
    assert reset[1] == {"swerve.route.from": route, "swerve.route.to": fallback}
    assert swaps(otel) == [(route, fallback, "transport")]


@pytest.mark.anyio
@pytest.mark.parametrize("mode", STREAMS)
async def test_undecodable_data_after_content_is_a_typed_mid_stream_error_by_default(
    mode: str, fake: FakeProvider, make_failover: Callable[..., Failover], clock: FakeClock,
    health: MemoryHealth,
) -> None:  # fmt: skip
    _, model = primary_and_fallback(fake, "openai", make_failover(two_way(P)))
    fake.set_reply("primary", Reply(text="one two three four"))
    fake.script("primary", [Fault.malformed_after(2)])
    with pytest.raises(MidStreamError) as info:
        await stream_chunks(model, mode)
    assert info.value.failure.kind.value == "transport" and info.value.partial
    assert (fake.requests("primary"), fake.requests("fallback")) == (1, 0)
    assert P in health.unavailable(clock.now)


# --- the other entry points --------------------------------------------------------------------
PROMPT = ChatPromptTemplate.from_messages([("user", "{question}")])


@pytest.mark.anyio
@pytest.mark.parametrize("mode", MODES)
async def test_with_failover_a_chain_follows_the_context_overflow_map(
    mode: str, large: FakeProvider, make_failover: Callable[..., Failover], otel: Otel,
    clock: FakeClock, health: MemoryHealth,
) -> None:  # fmt: skip
    fake = large
    chain = with_failover(
        {
            P: PROMPT | chat_openai(fake, "primary"),
            F: PROMPT | chat_anthropic(fake, "fallback"),
            LARGE: PROMPT | chat_openai(fake, "large", "fake-model-large"),
        },
        P,
        failover=make_failover(
            seed_config(
                fallbacks={P: F},
                fallbacks_by_failure={"context_overflow": {P: LARGE}},
                max_retries=2,
            )
        ),
    )
    fake.script("primary", [Fault.context_overflow()])
    out = await run(chain, mode, {"question": "a long one"})
    assert out.text == "from large"
    assert counts(fake, "primary", "large", "fallback") == (1, 1, 0)
    assert swaps(otel) == [(P, LARGE, "context_overflow")]
    assert otel.events("swerve.cooldown") == [] and P not in health.unavailable(clock.now)
    assert (await run(chain, mode, {"question": "short"})).text == "from primary"


@pytest.mark.anyio
@pytest.mark.parametrize("use_async", [False, True])
async def test_an_agent_step_that_overflows_runs_on_the_larger_route_and_the_next_run_does_not(
    use_async: bool, large: FakeProvider, make_failover: Callable[..., Failover], otel: Otel,
) -> None:  # fmt: skip
    fake = large
    routes = {
        P: chat_openai(fake, "primary"),
        F: chat_anthropic(fake, "fallback"),
        LARGE: chat_openai(fake, "large", "fake-model-large"),
    }
    failover = make_failover(
        seed_config(fallbacks={P: F}, fallbacks_by_failure={"context_overflow": {P: LARGE}})
    )
    agent = create_agent(
        model=routes[P], tools=[], middleware=[FailoverMiddleware(routes, P, failover=failover)]
    )
    fake.script("primary", [Fault.context_overflow()])
    state = {"messages": [HumanMessage("a long one")]}
    first = await agent.ainvoke(state) if use_async else agent.invoke(state)
    assert first["messages"][-1].text == "from large"
    assert first["messages"][-1].response_metadata["swerve"]["served"] == LARGE
    second = await agent.ainvoke(state) if use_async else agent.invoke(state)
    assert second["messages"][-1].text == "from primary"
    assert counts(fake, "primary", "large", "fallback") == (2, 1, 0)
    assert swaps(otel) == [(P, LARGE, "context_overflow")]
