"""The ``swerve`` summary in ``response_metadata``: on the final chunk of a stream (where a reader
of the last chunk looks for it) and on the aggregated message; and, for each degraded route a
call walked past, whether this wrapper learned its cooldown or it was learned elsewhere on the
same health store (the process-wide one, by default)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from langchain_core.messages import AIMessageChunk
from lc_support import F, Otel, P, chat_anthropic, chat_openai, seed_config
from swerve_langchain import FailoverChatModel

from swerve import Failover, FallbackConfig, MemoryHealth
from swerve._engine.failover import default_health
from swerve.testing import FakeProvider, Fault

MODES = ["invoke", "ainvoke", "stream", "astream"]


async def chunks_of(model: FailoverChatModel, mode: str) -> list[AIMessageChunk]:
    if mode == "stream":
        return list(model.stream("hi"))
    return [c async for c in model.astream("hi")]


async def answer(model: FailoverChatModel, mode: str) -> Any:
    """One call in ``mode``; a stream's chunks aggregated into one message."""
    if mode == "invoke":
        return model.invoke("hi")
    if mode == "ainvoke":
        return await model.ainvoke("hi")
    chunks = await chunks_of(model, mode)
    total = chunks[0]
    for chunk in chunks[1:]:
        total = total + chunk
    return total


def two_openai_routes(fake: FakeProvider, failover: Failover) -> FailoverChatModel:
    return FailoverChatModel(
        routes={P: chat_openai(fake, "primary"), F: chat_openai(fake, "fallback")},
        primary=P,
        failover=failover,
    )


# --- the final chunk ------------------------------------------------------------------------------
@pytest.mark.anyio
@pytest.mark.parametrize("mode", ["stream", "astream"])
@pytest.mark.parametrize("swap", [False, True], ids=["primary", "after-a-swap"])
async def test_the_final_chunk_of_a_stream_carries_the_summary(
    mode: str, swap: bool, fake: FakeProvider, make_failover: Callable[..., Failover]
) -> None:
    model = two_openai_routes(fake, make_failover(seed_config(max_retries=1)))
    if swap:
        fake.script("primary", [Fault.status(503), Fault.status(503)])
    chunks = await chunks_of(model, mode)
    served = F if swap else P
    expected = {"requested": P, "served": served, "retries": int(swap), "swaps": int(swap)}
    last = chunks[-1]
    assert last.response_metadata["swerve"] == expected
    assert last.response_metadata["model_provider"] == "openai"
    # It is the stream's one last chunk: langchain-core adds no empty chunk after it.
    assert last.chunk_position == "last"
    assert [c.chunk_position for c in chunks[:-1]] == [None] * (len(chunks) - 1)
    assert not any("swerve" in c.response_metadata for c in chunks[:-1])
    total = chunks[0]
    for chunk in chunks[1:]:
        total = total + chunk
    assert total.text == f"from {'fallback' if swap else 'primary'}"
    assert total.response_metadata["swerve"] == expected


# --- where a skipped route's cooldown was learned -----------------------------------------------
@pytest.mark.anyio
@pytest.mark.parametrize("mode", MODES)
async def test_a_wrapper_on_a_shared_store_says_the_cooldown_was_learned_elsewhere(
    mode: str, fake: FakeProvider, make_failover: Callable[..., Failover], otel: Otel
) -> None:
    """Two wrappers, each with its own config, on one store: the second sends nothing to the
    primary the first cooled down, and says why."""
    first = FailoverChatModel(
        routes={P: chat_openai(fake, "primary"), F: chat_anthropic(fake, "fallback")},
        primary=P,
        failover=make_failover(seed_config(max_retries=1)),
    )
    second = FailoverChatModel(
        routes={P: chat_openai(fake, "primary"), F: chat_anthropic(fake, "fallback")},
        primary=P,
        failover=make_failover(seed_config(cooldown_s=5)),
    )
    fake.script("primary", [Fault.status(503), Fault.status(503)])
    assert "skipped" not in (await answer(first, mode)).response_metadata["swerve"]
    message = await answer(second, mode)
    assert message.text == "from fallback"
    assert message.response_metadata["swerve"] == {
        "requested": P, "served": F, "retries": 0, "swaps": 0,
        "skipped": [{"route": P, "learned": "elsewhere"}],
    }  # fmt: skip
    assert fake.requests("primary") == 2  # the second wrapper sent the primary nothing
    again = await answer(first, mode)
    assert again.response_metadata["swerve"]["skipped"] == [
        {"route": P, "learned": "this_failover"}
    ]
    skips = otel.events("swerve.route_skipped")
    assert [e["swerve.cooldown.learned"] for _, e in skips] == ["elsewhere", "this_failover"]


@pytest.fixture
def process_wide() -> Iterator[tuple[str, str]]:
    """Route names no other test uses, cleared from the process-wide store afterwards."""
    routes = ("primary/process-wide-model", "fallback/process-wide-model")
    yield routes
    for route in routes:
        default_health().clear(route)


@pytest.mark.anyio
@pytest.mark.parametrize("mode", MODES)
async def test_wrappers_without_a_store_share_the_process_wide_one_and_say_so(
    mode: str, fake: FakeProvider, process_wide: tuple[str, str]
) -> None:
    primary, fallback = process_wide

    def wrapper(**config: Any) -> FailoverChatModel:
        return FailoverChatModel(
            routes={primary: chat_openai(fake, "primary"), fallback: chat_openai(fake, "fallback")},
            primary=primary,
            config=FallbackConfig(
                fallbacks={primary: fallback}, max_retries=0, attempt_timeout_s=60, **config
            ),
        )

    fake.script("primary", [Fault.status(503)])
    first = await answer(wrapper(cooldown_s=60), mode)
    assert first.response_metadata["swerve"]["served"] == fallback
    # A new wrapper with a config of its own: the primary is healthy, but cooled process-wide.
    message = await answer(wrapper(cooldown_s=1), mode)
    assert message.text == "from fallback" and fake.requests("primary") == 1
    assert message.response_metadata["swerve"]["skipped"] == [
        {"route": primary, "learned": "elsewhere"}
    ]
    # A wrapper on a store of its own decides alone.
    alone = FailoverChatModel(
        routes={primary: chat_openai(fake, "primary"), fallback: chat_openai(fake, "fallback")},
        primary=primary,
        config=FallbackConfig(fallbacks={primary: fallback}, max_retries=0, attempt_timeout_s=60),
        health=MemoryHealth(),
    )
    own = await answer(alone, mode)
    assert own.text == "from primary" and "skipped" not in own.response_metadata["swerve"]
