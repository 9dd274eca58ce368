"""smolagents' real ``ToolCallingAgent`` over the failover transport (docs/frameworks.md), the
primary failing: one ``@tool``, the final answer given by its ``final_answer`` tool call, on an
``OpenAIServerModel`` whose ``openai.OpenAI`` client runs over ``FailoverTransport``, with
smolagents' own retrier off (``retry=False``). Run whole and streamed (``stream_outputs=True``,
``run(stream=True)``); smolagents is sync only.

smolagents does not trace with OpenTelemetry itself (that is openinference's separate
instrumentation): swerve's call spans nest under the application's own span around the run.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx2
import openai
import pytest
from opentelemetry.sdk.trace import ReadableSpan
from smolagents import (
    ChatMessageStreamDelta,
    FinalAnswerStep,
    LogLevel,
    OpenAIServerModel,
    ToolCallingAgent,
    tool,
)

from swerve import Failover, FallbackConfig, MemoryHealth
from swerve._telemetry import names as n
from swerve.httpx import FailoverTransport
from swerve.testing import FakeClock, FakeProvider, Fault, Reply, TelemetryRecorder, ToolCall

from ._agents import ANSWER, FALLBACK, HANG_LIMITS, MODEL, PRIMARY, QUESTION, SWERVE_URL, upstreams

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


@pytest.fixture(params=sorted(FAULTS))
def fault(request: pytest.FixtureRequest, fake: FakeProvider) -> Iterator[str]:
    """The primary fails by the fault; yields its name."""
    fake.set_fault("primary", FAULTS[request.param][0])
    yield request.param
    fake.set_fault("primary", Fault.ok())  # releases a hung request before the server stops


@pytest.fixture
def client(
    fake: FakeProvider, otel: TelemetryRecorder, clock: FakeClock, fault: str
) -> Iterator[Any]:
    """As docs/frameworks.md builds it, on the fake provider, with a store of its own."""
    config = FallbackConfig(fallbacks={PRIMARY: FALLBACK}, **FAULTS[fault][2])
    failover = Failover(
        config, health=MemoryHealth(clock=clock), telemetry=otel.telemetry, clock=clock
    )
    sdk = openai.OpenAI(
        base_url=SWERVE_URL,
        api_key="unused",
        max_retries=0,  # swerve retries; two retry loops multiply
        http_client=httpx2.Client(transport=FailoverTransport(upstreams(fake), failover=failover)),
    )
    yield sdk
    sdk.close()


def _agent(client: Any, calls: list[str], *, stream: bool) -> ToolCallingAgent:
    @tool
    def get_weather(city: str) -> str:
        """The weather in a city.

        Args:
            city: The city's name.
        """
        calls.append(city)
        return f"sunny in {city}"

    # retry=False: smolagents' own retrier would wait 60 s and resend on any error whose text
    # says "429"; swerve has already retried and swapped by the time an error gets there.
    model = OpenAIServerModel(PRIMARY, client=client, retry=False)
    return ToolCallingAgent(
        tools=[get_weather],
        model=model,
        stream_outputs=stream,
        max_steps=4,
        verbosity_level=LogLevel.OFF,
    )


def _script_fallback(fake: FakeProvider) -> None:
    # ToolCallingAgent answers through tool calls only: the tool, then final_answer, which
    # ends the run with its "answer" argument.
    fake.script(
        "fallback",
        [
            Reply(text="", tool_calls=[ToolCall("get_weather", {"city": "Oslo"})]),
            Reply(text="", tool_calls=[ToolCall("final_answer", {"answer": ANSWER})]),
        ],
    )


def _texts(body: dict[str, Any]) -> list[str]:
    """The text parts of a request's messages, in order."""
    return [part["text"] for m in body["messages"] for part in m["content"] if "text" in part]


def _parent(span: ReadableSpan) -> int | None:
    return span.parent.span_id if span.parent is not None else None


@pytest.mark.parametrize("stream", [False, True], ids=["run", "streamed"])
def test_tool_calling_agent_fails_over(
    stream: bool, fault: str, fake: FakeProvider, otel: TelemetryRecorder, client: Any
) -> None:
    _script_fallback(fake)
    calls: list[str] = []
    agent = _agent(client, calls, stream=stream)

    with otel.tracer_provider.get_tracer("app").start_as_current_span("app") as app:
        if stream:
            events = list(agent.run(QUESTION, stream=True))
            (final,) = [e for e in events if isinstance(e, FinalAnswerStep)]
            output = final.output
            # The model's turns arrived as stream deltas (its tool calls, the answer's included).
            assert [e for e in events if isinstance(e, ChatMessageStreamDelta)]
        else:
            output = agent.run(QUESTION)

    assert output == ANSWER
    assert calls == ["Oslo"]  # the tool ran once, across the swap

    primary, fallback = fake.received("primary"), fake.received("fallback")
    primary_requests = FAULTS[fault][1]
    assert len(primary) == primary_requests and len(fallback) == 2
    assert {body["model"] for body in primary + fallback} == {MODEL}
    assert {body.get("stream") is True for body in primary + fallback} == {stream}
    # The fallback got the task, then the tool's one result (smolagents sends it as a user
    # "Observation"); nothing replayed a call.
    assert _texts(fallback[0])[-1] == f"New task:\n{QUESTION}"
    observations = [t for t in _texts(fallback[1]) if t.startswith("Observation:")]
    assert observations == ["Observation:\nsunny in Oslo"]
    assert fake.remaining("fallback") == 0

    # One swerve call span per model call, under the app's span; the first one swapped.
    calls_spans = otel.call_spans()
    assert len(calls_spans) == 2
    assert {_parent(span) for span in calls_spans} == {app.get_span_context().span_id}
    first, second = sorted(calls_spans, key=lambda span: span.start_time or 0)

    def routes(call: ReadableSpan) -> list[object]:
        return [
            a.attributes[n.ROUTE]
            for a in otel.attempt_spans()
            if a.attributes and _parent(a) == call.context.span_id
        ]

    assert routes(first) == [PRIMARY] * primary_requests + [FALLBACK]
    assert routes(second) == [FALLBACK]
