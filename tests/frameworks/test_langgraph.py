"""LangGraph: ``langchain.agents.create_agent`` (a compiled LangGraph graph: a model node and a
tool node) on ``FailoverChatModel``, with one tool, against the fake provider.

The primary fails on the agent's first model call; the fallback calls the tool and then
answers. The tool runs once, and the primary, cooled down, is not asked again.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain.agents.structured_output import ToolStrategy
from langchain_core.messages import AIMessageChunk
from langchain_core.tools import BaseTool, tool
from langchain_openai import ChatOpenAI
from pydantic import BaseModel, SecretStr
from swerve_langchain import FailoverChatModel

from swerve import Failover, MemoryHealth
from swerve._telemetry import names as n
from swerve.testing import FakeProvider, Reply, TelemetryRecorder, ToolCall

from ._agents import (
    ANSWER,
    FALLBACK,
    FAULTS,
    MODEL,
    PRIMARY,
    QUESTION,
    Weather,
    assert_served_by_fallback,
    config,
    provider,
    script_outage,
)

INPUT = {"messages": [{"role": "user", "content": QUESTION}]}


def chat_model(fake: FakeProvider, fault: str, engine: Failover | None = None) -> FailoverChatModel:
    def route(name: str) -> ChatOpenAI:
        return ChatOpenAI(
            base_url=f"{fake.url(provider(name))}/v1",
            api_key=SecretStr("sk-test"),
            model=MODEL,
            max_retries=0,
        )

    return FailoverChatModel(
        routes={PRIMARY: route(PRIMARY), FALLBACK: route(FALLBACK)},
        primary=PRIMARY,
        failover=engine if engine is not None else Failover(config(fault), health=MemoryHealth()),
    )


def weather_tool(weather: Weather) -> BaseTool:
    @tool
    def get_weather(city: str) -> str:
        """The weather in a city."""
        return weather(city)

    return get_weather


def _run(agent: Any, mode: str) -> str:
    """The agent's answer, by ``mode``: the final state's last message, or the text the model
    node streamed (``stream_mode="messages"``)."""
    if mode == "invoke":
        return str(agent.invoke(INPUT)["messages"][-1].content)
    if mode == "ainvoke":
        return str(asyncio.run(agent.ainvoke(INPUT))["messages"][-1].content)
    if mode == "stream":
        pairs = list(agent.stream(INPUT, stream_mode="messages"))
    else:

        async def collect() -> list[Any]:
            return [pair async for pair in agent.astream(INPUT, stream_mode="messages")]

        pairs = asyncio.run(collect())
    # Tokens of the model node only (the tool node's result message streams too).
    return "".join(
        str(chunk.content)
        for chunk, meta in pairs
        if isinstance(chunk, AIMessageChunk) and meta["langgraph_node"] == "model"
    )


@pytest.mark.parametrize("mode", ["invoke", "ainvoke", "stream", "astream"])
@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_agent_fails_over_and_runs_the_tool_once(
    fake_provider: FakeProvider, fault: str, mode: str
) -> None:
    script_outage(fake_provider, fault)
    weather = Weather()
    agent = create_agent(model=chat_model(fake_provider, fault), tools=[weather_tool(weather)])

    assert _run(agent, mode) == ANSWER
    assert_served_by_fallback(fake_provider, weather)
    streamed = [
        body.get("stream", False)
        for body in fake_provider.received("primary") + fake_provider.received("fallback")
    ]
    assert streamed == [mode in ("stream", "astream")] * 3


class Forecast(BaseModel):
    city: str
    summary: str


@pytest.mark.parametrize("mode", ["invoke", "ainvoke"])
@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_structured_response_from_the_fallback(
    fake_provider: FakeProvider, fault: str, mode: str
) -> None:
    final = Reply(text="", tool_calls=[ToolCall("Forecast", {"city": "Oslo", "summary": "sunny"})])
    script_outage(fake_provider, fault, final)
    weather = Weather()
    agent = create_agent(
        model=chat_model(fake_provider, fault),
        tools=[weather_tool(weather)],
        response_format=ToolStrategy(Forecast),
    )

    state = agent.invoke(INPUT) if mode == "invoke" else asyncio.run(agent.ainvoke(INPUT))
    assert state["structured_response"] == Forecast(city="Oslo", summary="sunny")
    assert_served_by_fallback(fake_provider, weather)
    # Both tools were offered to the fallback on every turn.
    for body in fake_provider.received("fallback"):
        assert {t["function"]["name"] for t in body["tools"]} == {"get_weather", "Forecast"}


def test_swerve_call_span_nests_under_the_langchain_llm_span(
    fake_provider: FakeProvider,
) -> None:
    """With OpenInference's LangChain instrumentation on, each model call of the agent is one
    LLM span of LangChain's, under the graph's own span; swerve's call span is its child."""
    from openinference.instrumentation.langchain import LangChainInstrumentor

    script_outage(fake_provider, "503")
    weather = Weather()
    recorder = TelemetryRecorder()
    instrumentor = LangChainInstrumentor()
    instrumentor.instrument(tracer_provider=recorder.tracer_provider)
    try:
        engine = Failover(config("503"), health=MemoryHealth(), telemetry=recorder.telemetry)
        agent = create_agent(
            model=chat_model(fake_provider, "503", engine), tools=[weather_tool(weather)]
        )
        assert agent.invoke(INPUT)["messages"][-1].content == ANSWER
    finally:
        instrumentor.uninstrument()
    spans = recorder.finished()
    recorder.shutdown()
    assert_served_by_fallback(fake_provider, weather)

    by_id = {s.context.span_id: s for s in spans}

    def parent(span: Any) -> Any:
        return by_id.get(span.parent.span_id) if span.parent else None

    def kind(span: Any) -> Any:
        return (span.attributes or {}).get("openinference.span.kind")

    calls = [s for s in spans if n.ROUTE_REQUESTED in (s.attributes or {})]
    assert len(calls) == 2  # one per model turn: the swap, then the fallback straight away
    roots = [s for s in spans if parent(s) is None]
    assert len(roots) == 1 and kind(roots[0]) == "CHAIN"  # the agent's graph
    for call in calls:
        llm = parent(call)
        assert llm is not None and kind(llm) == "LLM"
        assert llm.instrumentation_scope.name == "openinference.instrumentation.langchain"
        up = llm
        while parent(up) is not None:
            up = parent(up)
        assert up is roots[0]
