"""Haystack: the ``Agent`` component on ``OpenAIChatGenerator`` whose openai clients run over the
failover transport, with one ``Tool``, against the fake provider.

The primary fails on the agent's first model call; the fallback calls the tool and then
answers. The tool runs once, and the primary, cooled down, is not asked again.
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx2
import openai
import pytest
from haystack.components.agents import Agent
from haystack.components.generators.chat import OpenAIChatGenerator
from haystack.dataclasses import ChatMessage, StreamingChunk
from haystack.tools import Tool
from haystack.utils import Secret
from pydantic import BaseModel

from swerve.testing import FakeProvider, Reply

from ._agents import (
    ANSWER,
    FAULTS,
    PRIMARY,
    QUESTION,
    SWERVE_URL,
    Weather,
    assert_served_by_fallback,
    async_transport,
    script_outage,
    transport,
)


def generator(fake: FakeProvider, fault: str, **kwargs: Any) -> OpenAIChatGenerator:
    # max_retries=0: the generator's default is 5 retries of its own, under swerve's.
    chat = OpenAIChatGenerator(
        api_key=Secret.from_token("unused"),
        model=PRIMARY,
        api_base_url=SWERVE_URL,
        max_retries=0,
        **kwargs,
    )
    # Clients set before warm_up() are the ones it uses, sync and async.
    chat.client = openai.OpenAI(
        base_url=SWERVE_URL,
        api_key="unused",
        max_retries=0,
        http_client=httpx2.Client(transport=transport(fake, fault)),
    )
    chat.async_client = openai.AsyncOpenAI(
        base_url=SWERVE_URL,
        api_key="unused",
        max_retries=0,
        http_client=httpx2.AsyncClient(transport=async_transport(fake, fault)),
    )
    return chat


def weather_tool(weather: Weather) -> Tool:
    return Tool(
        name="get_weather",
        description="The weather in a city.",
        parameters={
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
        function=weather,
    )


def _run(agent: Agent, mode: str) -> dict[str, Any]:
    messages = [ChatMessage.from_user(QUESTION)]
    if mode == "run":
        return agent.run(messages=messages)

    async def run() -> dict[str, Any]:
        result = await agent.run_async(messages=messages)
        chat = agent.chat_generator
        assert isinstance(chat, OpenAIChatGenerator)
        await chat.close_async()  # the async client's pool, on the loop that opened it
        return result

    return asyncio.run(run())


@pytest.mark.parametrize("streaming", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("mode", ["run", "run_async"])
@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_agent_fails_over_and_runs_the_tool_once(
    fake_provider: FakeProvider, fault: str, mode: str, streaming: bool
) -> None:
    script_outage(fake_provider, fault)
    weather = Weather()
    tokens: list[str] = []

    def on_chunk(chunk: StreamingChunk) -> None:
        tokens.append(chunk.content)

    async def on_chunk_async(chunk: StreamingChunk) -> None:
        on_chunk(chunk)

    callback = (on_chunk if mode == "run" else on_chunk_async) if streaming else None
    agent = Agent(
        chat_generator=generator(fake_provider, fault),
        tools=[weather_tool(weather)],
        streaming_callback=callback,
    )
    agent.warm_up()

    result = _run(agent, mode)
    assert result["last_message"].text == ANSWER
    assert_served_by_fallback(fake_provider, weather)
    sent = fake_provider.received("primary") + fake_provider.received("fallback")
    assert [body.get("stream", False) for body in sent] == [streaming] * 3
    if streaming:  # the failed primary streamed nothing to the callback
        assert "".join(tokens) == ANSWER


class Forecast(BaseModel):
    city: str
    summary: str


@pytest.mark.parametrize("mode", ["run", "run_async"])
@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_structured_answer_from_the_fallback(
    fake_provider: FakeProvider, fault: str, mode: str
) -> None:
    forecast = Forecast(city="Oslo", summary="sunny")
    script_outage(fake_provider, fault, Reply(text=forecast.model_dump_json()))
    weather = Weather()
    # openai's parse() (which a response_format takes) reads tool calls of strict tools only.
    agent = Agent(
        chat_generator=generator(
            fake_provider,
            fault,
            generation_kwargs={"response_format": Forecast},
            tools_strict=True,
        ),
        tools=[weather_tool(weather)],
    )
    agent.warm_up()

    result = _run(agent, mode)
    assert Forecast.model_validate_json(result["last_message"].text) == forecast
    assert_served_by_fallback(fake_provider, weather)
    for body in fake_provider.received("fallback"):
        assert body["response_format"]["json_schema"]["name"] == "Forecast"
