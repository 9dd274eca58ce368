"""Hedged streams reach the LangChain adapter through the engine (issue 24): a chat model whose
first token is late is raced by its fallback, and only the winner's chunks reach LangChain.

A race between two real waits, so these wait for real, briefly."""

from __future__ import annotations

import time

import pytest
from lc_support import F, P, chat_anthropic, chat_openai
from swerve_langchain import FailoverChatModel

from swerve import Failover, FallbackConfig, MemoryHealth
from swerve.testing import FakeProvider, Fault, Reply

SLOW_S = 3.0
CONFIG = FallbackConfig(
    fallbacks={P: F}, max_retries=0, hedge_after=0.2, learned={"hedge_budget": 1.0}
)


def hedged_model(fake: FakeProvider) -> FailoverChatModel:
    fake.set_reply("primary", Reply(text="from primary"))
    fake.set_reply("fallback", Reply(text="from fallback"))
    fake.set_fault("primary", Fault.slow(first_token_s=SLOW_S))
    return FailoverChatModel(
        routes={P: chat_openai(fake, "primary"), F: chat_anthropic(fake, "fallback")},
        primary=P,
        failover=Failover(CONFIG, MemoryHealth()),
    )


def test_a_slow_first_token_is_hedged_in_a_sync_stream(fake: FakeProvider) -> None:
    model = hedged_model(fake)
    t0 = time.monotonic()
    text = "".join(chunk.text for chunk in model.stream("hi"))
    assert text == "from fallback"
    assert time.monotonic() - t0 < SLOW_S
    assert (fake.requests("primary"), fake.requests("fallback")) == (1, 1)


@pytest.mark.anyio
async def test_a_slow_first_token_is_hedged_in_an_async_stream(fake: FakeProvider) -> None:
    model = hedged_model(fake)
    t0 = time.monotonic()
    events = [e async for e in model.astream_events("hi", version="v2")]
    streamed = [e["data"]["chunk"] for e in events if e["event"] == "on_chat_model_stream"]
    # Only the winner's chunks: none of the primary's (OpenAI's) reached LangChain.
    assert "".join(c.text for c in streamed) == "from fallback"
    assert not any(c.response_metadata.get("model_provider") == "openai" for c in streamed)
    assert time.monotonic() - t0 < SLOW_S
    assert (fake.requests("primary"), fake.requests("fallback")) == (1, 1)
