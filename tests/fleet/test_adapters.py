"""The httpx transport and the LangChain adapter take a RedisHealth as they take any store: an
outage one of them learns is known to the other at once, through Redis, with no code changed.

Two stores stand for two processes: one behind a FailoverTransport (an httpx client), one
behind a FailoverChatModel whose routes are real ChatOpenAI and ChatAnthropic models. All of
it talks to the fake provider on 127.0.0.1, sync and async.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from langchain_anthropic import ChatAnthropic
from langchain_openai import ChatOpenAI
from swerve_langchain import FailoverChatModel

from swerve import FallbackConfig, RedisHealth
from swerve.httpx import AsyncFailoverTransport, FailoverTransport, Upstream
from swerve.testing import FakeProvider, Fault, Reply

from ._servers import RedisServer, wait_for

P = "primary/fake-model"
F = "fallback/claude-fake"
CONFIG = FallbackConfig(
    fallbacks={P: F}, max_retries=0, jitter=False, cooldown_s=60, attempt_timeout_s=60
)


@pytest.fixture
def fake() -> Iterator[FakeProvider]:
    with FakeProvider() as server:
        server.set_reply("primary", Reply(text="from primary"))
        server.set_reply("fallback", Reply(text="from fallback"))
        yield server


@pytest.fixture
def two(redis_server: RedisServer, tmp_path: Path) -> Iterator[tuple[RedisHealth, RedisHealth]]:
    stores = [RedisHealth.from_url(redis_server.url, prefix=tmp_path.name) for _ in range(2)]
    try:
        assert all(store.wait_until_shared(5) for store in stores)
        yield stores[0], stores[1]
    finally:
        for store in stores:
            store.close()


def _upstreams(fake: FakeProvider) -> dict[str, Upstream]:
    return {
        P: Upstream(f"{fake.url('primary')}/v1", api_key="test"),
        F: Upstream(f"{fake.url('fallback')}/v1", api_key="test"),  # the same wire as P
    }


def _body(stream: bool = False) -> dict[str, object]:
    return {"model": P, "messages": [{"role": "user", "content": "hi"}], "stream": stream}


def _chat_model(fake: FakeProvider, health: RedisHealth) -> FailoverChatModel:
    return FailoverChatModel(
        routes={
            P: ChatOpenAI(
                base_url=f"{fake.url('primary')}/v1", api_key="test", model="fake-model",
                max_retries=0,
            ),
            F: ChatAnthropic(
                base_url=fake.url("fallback"), api_key="test", model="claude-fake", max_retries=0
            ),
        },
        primary=P,
        config=CONFIG,
        health=health,
    )  # fmt: skip


def _streamed_text(body: bytes) -> str:
    """The text of an OpenAI chat-completions SSE stream."""
    events = [line[6:] for line in body.decode().splitlines() if line.startswith("data: {")]
    deltas = [json.loads(event)["choices"][0]["delta"] for event in events]
    return "".join(delta.get("content") or "" for delta in deltas)


def _cooled(store: RedisHealth) -> bool:
    return P in store.unavailable(time.time())


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_an_outage_the_transport_learns_sends_the_chat_model_straight_to_its_fallback(
    mode: str, fake: FakeProvider, two: tuple[RedisHealth, RedisHealth]
) -> None:
    behind_transport, behind_model = two
    fake.set_fault("primary", Fault.status(503))
    if mode == "sync":
        transport = FailoverTransport(_upstreams(fake), config=CONFIG, health=behind_transport)
        with httpx.Client(transport=transport) as client:
            answer = client.post("http://swerve/v1/chat/completions", json=_body())
    else:

        async def post() -> httpx.Response:
            transport = AsyncFailoverTransport(
                _upstreams(fake), config=CONFIG, health=behind_transport
            )
            async with httpx.AsyncClient(transport=transport) as client:
                return await client.post("http://swerve/v1/chat/completions", json=_body())

        answer = asyncio.run(post())
    assert answer.status_code == 200
    assert fake.requests("primary") == 1  # the transport paid for the outage, once

    wait_for("the chat model's process to learn it", lambda: _cooled(behind_model), 5)
    fake.reset_counts()
    model = _chat_model(fake, behind_model)
    if mode == "sync":
        reply = model.invoke("hi")
        streamed = "".join(str(chunk.content) for chunk in model.stream("hi"))
    else:

        async def ask() -> tuple[object, str]:
            reply = await model.ainvoke("hi")
            chunks = [str(chunk.content) async for chunk in model.astream("hi")]
            return reply, "".join(chunks)

        reply, streamed = asyncio.run(ask())
    assert getattr(reply, "content", None) == "from fallback"
    assert streamed == "from fallback"
    assert fake.requests("primary") == 0  # learned through Redis: not one request to it
    assert fake.requests("fallback") == 2


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_an_outage_the_chat_model_learns_sends_the_transport_straight_to_its_fallback(
    mode: str, fake: FakeProvider, two: tuple[RedisHealth, RedisHealth]
) -> None:
    behind_transport, behind_model = two
    fake.set_fault("primary", Fault.status(503))
    model = _chat_model(fake, behind_model)
    reply = model.invoke("hi") if mode == "sync" else asyncio.run(model.ainvoke("hi"))
    assert reply.content == "from fallback"

    wait_for("the transport's process to learn it", lambda: _cooled(behind_transport), 5)
    fake.reset_counts()
    if mode == "sync":
        transport = FailoverTransport(_upstreams(fake), config=CONFIG, health=behind_transport)
        with (
            httpx.Client(transport=transport) as client,
            client.stream(
                "POST", "http://swerve/v1/chat/completions", json=_body(stream=True)
            ) as response,
        ):
            body = response.read()
    else:

        async def post() -> bytes:
            transport = AsyncFailoverTransport(
                _upstreams(fake), config=CONFIG, health=behind_transport
            )
            async with (
                httpx.AsyncClient(transport=transport) as client,
                client.stream(
                    "POST", "http://swerve/v1/chat/completions", json=_body(stream=True)
                ) as response,
            ):
                return await response.aread()

        body = asyncio.run(post())
    assert _streamed_text(body) == "from fallback"
    assert fake.requests("primary") == 0
