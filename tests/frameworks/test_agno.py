"""Agno: an ``Agent`` on ``OpenAIChat`` given its own openai clients over the failover
transport, with one tool, against the fake provider.

The primary fails on the agent's first model call; the fallback calls the tool and then
answers. The tool runs once, and the primary, cooled down, is not asked again.
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx2
import openai
import pytest
from agno.agent import Agent
from agno.models.openai import OpenAIChat
from agno.run.agent import RunContentEvent, RunOutput
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


def model(fake: FakeProvider, fault: str) -> OpenAIChat:
    # Agno's own retries (Model.retries) are off by default; the SDK's are turned off here.
    return OpenAIChat(
        id=PRIMARY,
        client=openai.OpenAI(
            base_url=SWERVE_URL,
            api_key="unused",
            max_retries=0,
            http_client=httpx2.Client(transport=transport(fake, fault)),
        ),
        async_client=openai.AsyncOpenAI(
            base_url=SWERVE_URL,
            api_key="unused",
            max_retries=0,
            http_client=httpx2.AsyncClient(transport=async_transport(fake, fault)),
        ),
    )


def weather_tool(weather: Weather) -> Any:
    def get_weather(city: str) -> str:
        """The weather in a city.

        Args:
            city: The city.
        """
        return weather(city)

    return get_weather


def _run(agent: Agent, mode: str) -> str:
    """The answer: the run's content, or the text its content events streamed."""
    if mode == "run":
        output = agent.run(QUESTION)
        assert isinstance(output, RunOutput)
        return str(output.content)
    if mode == "arun":
        output = asyncio.run(agent.arun(QUESTION))
        assert isinstance(output, RunOutput)
        return str(output.content)
    if mode == "stream":
        events = list(agent.run(QUESTION, stream=True))
    else:

        async def collect() -> list[Any]:
            return [event async for event in agent.arun(QUESTION, stream=True)]

        events = asyncio.run(collect())
    return "".join(str(e.content) for e in events if isinstance(e, RunContentEvent) and e.content)


@pytest.mark.parametrize("mode", ["run", "arun", "stream", "astream"])
@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_agent_fails_over_and_runs_the_tool_once(
    fake_provider: FakeProvider, fault: str, mode: str
) -> None:
    script_outage(fake_provider, fault)
    weather = Weather()
    agent = Agent(model=model(fake_provider, fault), tools=[weather_tool(weather)], telemetry=False)

    assert _run(agent, mode) == ANSWER
    assert_served_by_fallback(fake_provider, weather)
    sent = fake_provider.received("primary") + fake_provider.received("fallback")
    assert [body.get("stream", False) for body in sent] == [mode in ("stream", "astream")] * 3


class Forecast(BaseModel):
    city: str
    summary: str


@pytest.mark.parametrize("mode", ["run", "arun"])
@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_structured_output_from_the_fallback(
    fake_provider: FakeProvider, fault: str, mode: str
) -> None:
    forecast = Forecast(city="Oslo", summary="sunny")
    script_outage(fake_provider, fault, Reply(text=forecast.model_dump_json()))
    weather = Weather()
    agent = Agent(
        model=model(fake_provider, fault),
        tools=[weather_tool(weather)],
        output_schema=Forecast,
        telemetry=False,  # agno reports runs to its own service by default
    )

    output = agent.run(QUESTION) if mode == "run" else asyncio.run(agent.arun(QUESTION))
    assert isinstance(output, RunOutput)
    assert output.content == forecast
    assert_served_by_fallback(fake_provider, weather)
    for body in fake_provider.received("fallback"):
        assert body["response_format"]["json_schema"]["name"] == "Forecast"
