"""The OpenAI Agents SDK's real agent over the failover transport (docs/frameworks.md), the
primary failing: ``Runner.run``, ``Runner.run_sync`` and ``Runner.run_streamed`` with one
function tool, and structured output, on an ``AsyncOpenAI`` over ``AsyncFailoverTransport``
given per agent (``OpenAIChatCompletionsModel``), on the fake provider.

The SDK's tracing is its own (exported to OpenAI), not OpenTelemetry: each run turns it off
(``RunConfig(tracing_disabled=True)``, per run, so no process-wide switch outlives a test), and
swerve's call spans nest under the application's own OTel span around the run.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Literal

import httpx2
import openai
import pytest
from agents import (
    Agent,
    FunctionTool,
    OpenAIChatCompletionsModel,
    RunConfig,
    Runner,
    function_tool,
)
from opentelemetry.sdk.trace import ReadableSpan
from pydantic import BaseModel

from swerve import Failover, FallbackConfig, MemoryHealth
from swerve._telemetry import names as n
from swerve.httpx import AsyncFailoverTransport
from swerve.testing import FakeClock, FakeProvider, Fault, Reply, TelemetryRecorder, ToolCall

from ._agents import ANSWER, FALLBACK, HANG_LIMITS, MODEL, PRIMARY, QUESTION, SWERVE_URL, upstreams

NO_TRACES = RunConfig(tracing_disabled=True)

# How the primary fails, and how many requests it gets for it: a 503 and an error inside a 200
# stream are retried twice (the backoffs on the fake clock) before the swap; a hang is a timeout,
# swapped at once. The run's second model call goes straight to the fallback (the primary is
# cooling down). A non-stream request gets the in-stream error as a 200 JSON body, as
# OpenRouter sends it. Only the hang has time limits (HANG_LIMITS).
FAULTS: dict[str, tuple[Fault, int, dict[str, float]]] = {
    "503": (Fault.status(503), 3, {}),
    "hang": (Fault.hang(), 1, HANG_LIMITS),
    "error-in-200-stream": (Fault.error_before_content("openai"), 3, {}),
}
Mode = Literal["run", "run_sync", "run_streamed"]


class Weather(BaseModel):
    city: str
    sky: str


@pytest.fixture(params=sorted(FAULTS))
def fault(request: pytest.FixtureRequest, fake: FakeProvider) -> Iterator[str]:
    """The primary fails by the fault; yields its name."""
    fake.set_fault("primary", FAULTS[request.param][0])
    yield request.param
    fake.set_fault("primary", Fault.ok())  # releases a hung request before the server stops


def _client(
    fake: FakeProvider, otel: TelemetryRecorder, clock: FakeClock, fault: str
) -> openai.AsyncOpenAI:
    """As docs/frameworks.md builds it, on the fake provider, with a store of its own."""
    config = FallbackConfig(fallbacks={PRIMARY: FALLBACK}, **FAULTS[fault][2])
    failover = Failover(
        config, health=MemoryHealth(clock=clock), telemetry=otel.telemetry, clock=clock
    )
    return openai.AsyncOpenAI(
        base_url=SWERVE_URL,
        api_key="unused",
        max_retries=0,  # swerve retries; two retry loops multiply
        http_client=httpx2.AsyncClient(
            transport=AsyncFailoverTransport(upstreams(fake), failover=failover)
        ),
    )


def _agent(client: openai.AsyncOpenAI, calls: list[str], **kwargs: Any) -> Agent[Any]:
    def get_weather(city: str) -> str:
        """The weather in a city."""
        calls.append(city)
        return f"sunny in {city}"

    tool: FunctionTool = function_tool(get_weather)
    return Agent(
        name="weather",
        instructions="Answer with the weather tool.",
        tools=[tool],
        model=OpenAIChatCompletionsModel(model=PRIMARY, openai_client=client),
        **kwargs,
    )


def _script_fallback(fake: FakeProvider, final: str) -> None:
    fake.script(
        "fallback",
        [Reply(text="", tool_calls=[ToolCall("get_weather", {"city": "Oslo"})]), Reply(text=final)],
    )


def _run(
    mode: Mode, agent: Agent[Any], client: openai.AsyncOpenAI, otel: TelemetryRecorder
) -> tuple[Any, list[str]]:
    """The run's final output and its streamed text deltas, inside the app's own span."""
    tracer = otel.tracer_provider.get_tracer("app")

    async def run() -> tuple[Any, list[str]]:
        deltas: list[str] = []
        try:
            with tracer.start_as_current_span("app"):
                if mode == "run_streamed":
                    streamed = Runner.run_streamed(agent, QUESTION, run_config=NO_TRACES)
                    async for event in streamed.stream_events():
                        if event.type == "raw_response_event" and (
                            event.data.type == "response.output_text.delta"
                        ):
                            deltas.append(event.data.delta)
                    return streamed.final_output, deltas
                result = await Runner.run(agent, QUESTION, run_config=NO_TRACES)
                return result.final_output, deltas
        finally:
            await client.close()

    def run_sync() -> tuple[Any, list[str]]:
        # run_sync runs on the thread's default event loop and leaves it open (the client's
        # connections live on it): a thread of its own, whose loop is closed here, after it.
        try:
            with tracer.start_as_current_span("app"):
                output = Runner.run_sync(agent, QUESTION, run_config=NO_TRACES).final_output
        finally:
            loop = asyncio.get_event_loop_policy().get_event_loop()
            loop.run_until_complete(client.close())
            loop.close()
        return output, []

    if mode == "run_sync":
        with ThreadPoolExecutor(1) as thread:
            return thread.submit(run_sync).result()
    return asyncio.run(run())


def _check_requests(fake: FakeProvider, primary_requests: int, *, stream: bool) -> None:
    primary, fallback = fake.received("primary"), fake.received("fallback")
    assert len(primary) == primary_requests and len(fallback) == 2
    assert {body["model"] for body in primary + fallback} == {MODEL}
    assert {body.get("stream") is True for body in primary + fallback} == {stream}
    # The fallback got the question, then the tool's one result; nothing replayed a call.
    assert fallback[0]["messages"][-1] == {"role": "user", "content": QUESTION}
    tool_results = [m for m in fallback[1]["messages"] if m["role"] == "tool"]
    assert [m["content"] for m in tool_results] == ["sunny in Oslo"]
    assert fake.remaining("fallback") == 0


def _check_spans(otel: TelemetryRecorder, primary_requests: int) -> None:
    """One swerve call span per model call, under the app's span; the first swapped."""
    (app,) = [s for s in otel.finished() if s.name == "app"]
    calls = otel.call_spans()
    assert len(calls) == 2
    assert all(_parent(call) == app.context.span_id for call in calls)

    def routes(call: ReadableSpan) -> list[object]:
        attempts = otel.attempt_spans()
        return [
            a.attributes[n.ROUTE]
            for a in attempts
            if a.attributes and _parent(a) == call.context.span_id
        ]

    first, second = sorted(calls, key=lambda span: span.start_time or 0)
    assert routes(first) == [PRIMARY] * primary_requests + [FALLBACK]
    assert routes(second) == [FALLBACK]


def _parent(span: ReadableSpan) -> int | None:
    return span.parent.span_id if span.parent is not None else None


@pytest.mark.parametrize("mode", ["run", "run_sync", "run_streamed"])
def test_agent_with_a_tool_fails_over(
    mode: Mode, fault: str, fake: FakeProvider, otel: TelemetryRecorder, clock: FakeClock
) -> None:
    _script_fallback(fake, ANSWER)
    calls: list[str] = []
    client = _client(fake, otel, clock, fault)

    output, deltas = _run(mode, _agent(client, calls), client, otel)

    assert output == ANSWER
    assert calls == ["Oslo"]  # the tool ran once, across the swap
    if mode == "run_streamed":
        assert "".join(deltas) == ANSWER  # the fallback's answer reached the stream
    _check_requests(fake, FAULTS[fault][1], stream=mode == "run_streamed")
    _check_spans(otel, FAULTS[fault][1])


def test_structured_output_fails_over(
    fault: str, fake: FakeProvider, otel: TelemetryRecorder, clock: FakeClock
) -> None:
    _script_fallback(fake, Weather(city="Oslo", sky="sunny").model_dump_json())
    calls: list[str] = []
    client = _client(fake, otel, clock, fault)

    output, _ = _run("run", _agent(client, calls, output_type=Weather), client, otel)

    assert output == Weather(city="Oslo", sky="sunny")
    assert calls == ["Oslo"]
    _check_requests(fake, FAULTS[fault][1], stream=False)
    # Every request asked the route for the schema, the fallback's as the primary's.
    formats = [body["response_format"] for body in fake.received("fallback")]
    assert {f["json_schema"]["name"] for f in formats} == {"final_output"}
    _check_spans(otel, FAULTS[fault][1])
