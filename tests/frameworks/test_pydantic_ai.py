"""pydantic-ai: its real ``Agent`` (one tool, a structured ``output_type``) on
``OpenAIChatModel`` and on ``AnthropicModel``, whose provider's ``http_client`` sends through
``AsyncFailoverTransport``, against the fake provider (docs/frameworks.md, pydantic-ai).

The primary fails on the agent's first model request (a 503, a hang, an error inside a 200
stream); the fallback calls the tool, then answers with the structured output. The tool runs
once, and the primary, cooled down, is not asked again. Every way pydantic-ai runs an agent is
driven: ``run``, ``run_sync``, ``run_stream`` and ``run_stream_sync``. Instrumented, swerve's
call span nests under pydantic-ai's model-request span.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx2
import pytest
from pydantic import BaseModel
from pydantic_ai import Agent, InstrumentationSettings
from pydantic_ai.capabilities import Instrumentation
from pydantic_ai.models import Model
from pydantic_ai.models.anthropic import AnthropicModel
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.anthropic import AnthropicProvider
from pydantic_ai.providers.openai import OpenAIProvider

from swerve import Failover, FallbackConfig, MemoryHealth
from swerve.httpx import AsyncFailoverTransport, Upstream, Wire
from swerve.testing import FakeClock, FakeProvider, Fault, Reply, TelemetryRecorder, ToolCall

from ._agents import ATTEMPT_S, FIRST_TOKEN_S

QUESTION = "What is the weather in Oslo?"
SWERVE = "http://swerve.invalid"  # the client addresses swerve: every request names a route

# Short limits (the agent frameworks' own, see _agents): a hung primary costs a test at most
# this much real time. The first-token limit is a stream's; a whole-body request (run,
# run_sync) is held to the attempt's.

MODES = ("run", "run_sync", "run_stream", "run_stream_sync")


class Forecast(BaseModel):
    """The agent's structured output."""

    city: str
    summary: str


FORECAST = Forecast(city="Oslo", summary="sunny, said the fallback")


@dataclass(frozen=True)
class Routes:
    """One wire's routes and model: the same outage on the OpenAI and the Anthropic wire."""

    wire: Wire
    model: str
    stream_error: Fault  # the wire's own error event inside a 200 stream

    @property
    def primary(self) -> str:
        return f"primary/{self.model}"

    @property
    def fallback(self) -> str:
        return f"fallback/{self.model}"


OPENAI = Routes("openai", "gpt-fake", Fault.error_before_content("openai"))
ANTHROPIC = Routes("anthropic", "claude-fake", Fault.error_before_content("anthropic"))

FAULTS = ("503", "hang", "stream-error")


def fault(wire: Routes, name: str) -> Fault:
    # The stream error reaches a whole-body request (run, run_sync) as a 200 JSON error body.
    return {"503": Fault.status(503), "hang": Fault.hang(), "stream-error": wire.stream_error}[name]


def config(wire: Routes) -> FallbackConfig:
    # No retries: the primary gets exactly one request, and no backoff is waited.
    return FallbackConfig(
        fallbacks={wire.primary: wire.fallback},
        max_retries=0,
        attempt_timeout_s=ATTEMPT_S,
        first_token_timeout_s=FIRST_TOKEN_S,
    )


@dataclass
class Setup:
    """The transport (on its own health store and clock) and the agent over it."""

    agent: Agent[None, Forecast]
    transport: AsyncFailoverTransport
    calls: list[str]  # the tool's runs: never two across a swap


def build(fake: FakeProvider, wire: Routes, recorder: TelemetryRecorder | None = None) -> Setup:
    clock = FakeClock()  # never advanced: the primary stays cooled down for the whole run
    failover = Failover(
        config(wire),
        health=MemoryHealth(clock=clock),
        clock=clock,
        telemetry=recorder.telemetry if recorder is not None else None,
    )
    transport = AsyncFailoverTransport(
        {
            route: Upstream(
                f"{fake.url(route.split('/')[0])}{'/v1' if wire.wire == 'openai' else ''}",
                api_key="sk-test-0123456789",
                model=wire.model,
                wire=wire.wire,
            )
            for route in (wire.primary, wire.fallback)
        },
        failover=failover,
    )
    http = httpx2.AsyncClient(transport=transport)
    model: Model
    if wire.wire == "openai":
        model = OpenAIChatModel(
            wire.primary,
            provider=OpenAIProvider(base_url=f"{SWERVE}/v1", api_key="unused", http_client=http),
        )
    else:
        model = AnthropicModel(
            wire.primary,
            provider=AnthropicProvider(base_url=SWERVE, api_key="unused", http_client=http),
        )
    capabilities = (
        [
            Instrumentation(
                settings=InstrumentationSettings(tracer_provider=recorder.tracer_provider)
            )
        ]
        if recorder is not None
        else []
    )
    agent = Agent(
        model,
        output_type=Forecast,
        # swerve retries and swaps; the SDK's own retries would send each failure again.
        model_settings={"max_retries": 0},
        capabilities=capabilities,
    )
    calls: list[str] = []

    @agent.tool_plain
    def get_weather(city: str) -> str:
        """The weather in a city."""
        calls.append(city)
        return f"sunny in {city}"

    return Setup(agent, transport, calls)


def ask(setup: Setup, mode: str) -> Forecast:
    """Runs the agent once, as ``mode`` says, and closes the transport after on the loop the
    run used (its connections belong to it)."""
    agent = setup.agent
    if mode in ("run_sync", "run_stream_sync"):
        try:
            if mode == "run_sync":
                return agent.run_sync(QUESTION).output
            return agent.run_stream_sync(QUESTION).get_output()
        finally:
            # The sync runs drive the thread's event loop, which stays set for the next.
            asyncio.get_event_loop().run_until_complete(setup.transport.aclose())

    async def run() -> Forecast:
        try:
            if mode == "run":
                return (await agent.run(QUESTION)).output
            async with agent.run_stream(QUESTION) as result:
                return await result.get_output()
        finally:
            await setup.transport.aclose()

    return asyncio.run(run())


def script_outage(fake: FakeProvider, wire: Routes, name: str) -> None:
    """The primary fails once; the fallback calls the tool, then gives the structured answer."""
    fake.script("primary", [fault(wire, name)])
    fake.set_fault("primary", Fault.status(500))  # a second request would show in the counts
    fake.script(
        "fallback",
        [
            Reply(text="", tool_calls=(ToolCall("get_weather", {"city": "Oslo"}),)),
            # pydantic-ai's structured output is a tool call of its own, ``final_result``.
            Reply(text="", tool_calls=(ToolCall("final_result", FORECAST.model_dump()),)),
        ],
    )


def tool_result(wire: Routes, body: dict[str, Any]) -> str:
    """The tool's result as the answer turn carried it on ``wire``."""
    last = body["messages"][-1]
    if wire.wire == "openai":
        assert last["role"] == "tool", last
        return str(last["content"])
    (block,) = last["content"]
    assert block["type"] == "tool_result", block
    return "".join(part["text"] for part in block["content"])


def assert_served_by_fallback(fake: FakeProvider, wire: Routes, setup: Setup, mode: str) -> None:
    assert setup.calls == ["Oslo"]  # once: the failed request never reached the tool
    # The primary is cooled down by its failure: the tool turn's follow-up skips it.
    (asked,) = fake.received("primary")
    assert asked["model"] == wire.model and asked.get("stream", False) == ("stream" in mode)
    assert fake.requests("fallback") == 2 and fake.remaining("fallback") == 0
    first, answer = fake.received("fallback")
    assert first["model"] == answer["model"] == wire.model
    assert first["messages"] == asked["messages"]  # the same request, sent to the fallback
    assert tool_result(wire, answer) == "sunny in Oslo"


@pytest.fixture
def fake() -> Iterator[FakeProvider]:
    with FakeProvider() as server:
        yield server


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", FAULTS)
@pytest.mark.parametrize("wire", [OPENAI, ANTHROPIC], ids=lambda w: w.wire)
def test_agent_fails_over(fake: FakeProvider, wire: Routes, name: str, mode: str) -> None:
    # OpenAIChatModel on the openai wire, AnthropicModel on the messages wire: both routes on
    # one wire, so a swap never crosses wires.
    script_outage(fake, wire, name)
    setup = build(fake, wire)
    assert ask(setup, mode) == FORECAST
    assert_served_by_fallback(fake, wire, setup, mode)


@pytest.mark.parametrize("mode", ["run", "run_stream"])
@pytest.mark.parametrize("wire", [OPENAI, ANTHROPIC], ids=lambda w: w.wire)
def test_swerve_call_span_nests_under_the_model_request_span(
    fake: FakeProvider, wire: Routes, mode: str
) -> None:
    recorder = TelemetryRecorder()
    try:
        script_outage(fake, wire, "503")
        setup = build(fake, wire, recorder)
        assert ask(setup, mode) == FORECAST
        spans = recorder.finished()
        by_id = {span.context.span_id: span for span in spans}
        calls = recorder.call_spans()
        assert len(calls) == 2  # one per model request: the swap, then the answer turn
        for call in calls:
            assert call.parent is not None
            parent = by_id[call.parent.span_id]
            # pydantic-ai's own model-request span ("chat <model>"), in its agent-run span.
            assert parent.instrumentation_scope is not None
            assert parent.instrumentation_scope.name == "pydantic-ai"
            assert parent.name == f"chat {wire.primary}"
            assert parent.parent is not None
            assert by_id[parent.parent.span_id].name.startswith("invoke_agent")
        swapped, answered = sorted(calls, key=lambda span: span.start_time or 0)
        attempts = recorder.attempt_spans()
        assert [
            a.name for a in attempts if a.parent and a.parent.span_id == swapped.context.span_id
        ] == [
            f"swerve attempt {wire.primary}",
            f"swerve attempt {wire.fallback}",
        ]
        assert [
            a.name for a in attempts if a.parent and a.parent.span_id == answered.context.span_id
        ] == [f"swerve attempt {wire.fallback}"]
    finally:
        recorder.shutdown()
