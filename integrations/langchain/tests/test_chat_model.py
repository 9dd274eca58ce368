"""FailoverChatModel against real LangChain route models and the fake provider: the seed's
sequence, stream semantics, metadata, tools, structured output, telemetry."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import anthropic
import openai
import pytest
from conftest import Mode
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.runnables import RunnableLambda
from langchain_core.tools import tool
from lc_support import F, FakeClock, Otel, P, chat_anthropic, chat_openai, seed_config
from opentelemetry import trace
from pydantic import BaseModel
from swerve_langchain import RESET_KEY, STREAM_RESET_EVENT, FailoverChatModel, SwerveRetryWarning

from swerve import BreakerConfig, Failover, MemoryHealth, MidStreamError
from swerve.testing import FakeProvider, Fault, Reply, ToolCall

# The harness is the ``mode`` fixture (conftest.Mode). These stay for the suite's other files,
# which parametrize by name and call through ``run``.
MODES = list(Mode.NAMES)


async def run(model: Any, mode: str, value: Any = "hi", **kwargs: Any) -> AIMessage:
    """One call in the mode named ``mode``: :meth:`conftest.Mode.call`."""
    return await Mode(mode).call(model, value, **kwargs)


# --- the seed's end-to-end case ----------------------------------------------------------------
@pytest.mark.anyio
async def test_two_503s_then_the_fallback_answers_and_the_next_call_starts_there(
    mode: Mode, model: FailoverChatModel, fake: FakeProvider, clock: FakeClock,
    health: MemoryHealth, otel: Otel,
) -> None:  # fmt: skip
    fake.script("primary", [Fault.status(503), Fault.status(503)])
    message = await mode.call(model)
    assert message.text == "from fallback"
    meta = message.response_metadata
    assert meta["model_name"] == "claude-fake" and meta["model_provider"] == "anthropic"
    assert meta["swerve"] == {"requested": P, "served": F, "retries": 1, "swaps": 1}
    usage = message.usage_metadata  # the fallback's (7 in, 3 out), never the primary's
    assert usage is not None and usage["output_tokens"] == 3
    # (streamed, langchain-anthropic reads input tokens from message_delta, which the fake
    # provider's Anthropic stream does not carry)
    assert usage["input_tokens"] == (0 if mode.stream else 7)
    assert (fake.requests("primary"), fake.requests("fallback")) == (2, 1)
    assert clock.sleeps == [2.0]  # one retry's backoff, on the injected clock
    assert P in health.unavailable(clock.now)

    (call,) = otel.call_spans()
    assert call.name == "chat fake-model"  # the inference span: the model asked for
    assert call.attributes is not None
    assert call.attributes["swerve.route.requested"] == P
    assert call.attributes["swerve.route.served"] == F
    assert call.attributes["gen_ai.response.model"] == "claude-fake"
    assert call.attributes["swerve.attempts"] == 3 and call.attributes["swerve.swaps"] == 1
    assert call.attributes.get("gen_ai.request.stream", False) is mode.stream
    attempts = otel.attempt_spans()
    assert [s.attributes["swerve.route"] for s in attempts] == [P, P, F]  # type: ignore[index]
    assert all(s.parent is not None and s.parent.span_id == call.context.span_id for s in attempts)
    assert [s.attributes["swerve.attempt.outcome"] for s in attempts] == [  # type: ignore[index]
        "failure",
        "failure",
        "success",
    ]
    assert attempts[0].attributes["http.response.status_code"] == 503  # type: ignore[index]
    names = [name for name, _ in otel.events()]
    assert names == ["swerve.retry", "swerve.cooldown", "swerve.swap"]
    (swap,) = otel.events("swerve.swap")
    assert swap[1] == {
        "swerve.route.from": P,
        "swerve.route.to": F,
        "swerve.reason": "unavailable",
        "swerve.swap.index": 1,
    }
    assert otel.counter("swerve.swaps", swerve__route__from=P, swerve__route__to=F) == 1
    assert otel.counter("swerve.retries", swerve__route=P) == 1
    assert otel.counter("swerve.attempts", swerve__route=P, swerve__attempt__outcome="failure") == 2
    assert otel.counter("swerve.cooldowns", swerve__route=P) == 1
    metrics = otel.metrics()
    degraded = {a["swerve.route"]: v for a, v in metrics["swerve.route.degraded"]}
    assert degraded[P] == 1
    (duration,) = metrics["swerve.call.duration"]
    assert duration == ({"swerve.route.requested": P, "swerve.route.served": F}, 1)
    (added,) = metrics["swerve.call.added_latency"]
    assert added == ({"swerve.route.requested": P, "swerve.route.served": F}, 1)
    assert {a["swerve.route"] for a, _ in metrics["swerve.attempt.duration"]} == {P, F}

    # The next call starts on the fallback: no request to the primary, no retries.
    second = await mode.call(model)
    assert second.text == "from fallback"
    assert second.response_metadata["swerve"] == {
        "requested": P,
        "served": F,
        "retries": 0,
        "swaps": 0,
        "skipped": [{"route": P, "learned": "this_failover"}],  # this model cooled it
    }
    assert fake.requests("primary") == 2
    assert [e[1]["swerve.route"] for e in otel.events("swerve.route_skipped")] == [P]
    assert otel.counter("swerve.route_skips", swerve__route=P) == 1
    # After the cooldown the primary answers again.
    clock.advance(61)
    assert (await mode.call(model)).text == "from primary"


def test_the_call_span_nests_under_the_current_span_and_records_no_prompt_text(
    model: FailoverChatModel, fake: FakeProvider, otel: Otel
) -> None:
    fake.script("primary", [Fault.status(503), Fault.status(503)])
    tracer = otel.tracer_provider.get_tracer("app")
    secret = "the user's private question about zebras"
    with tracer.start_as_current_span("agent step") as outer:
        model.invoke(secret)
    (call,) = otel.call_spans()
    assert call.parent is not None and call.parent.span_id == outer.get_span_context().span_id
    for span in otel.finished():
        texts = [str(v) for v in (span.attributes or {}).values()]
        texts += [str(v) for e in span.events for v in (e.attributes or {}).values()]
        assert not any("zebras" in t or "from fallback" in t for t in texts), span.name
    assert trace.get_current_span() is trace.INVALID_SPAN


def test_a_failed_fallback_leaves_the_requested_route_on_the_error(
    fake: FakeProvider, make_failover: Callable[..., Failover], otel: Otel
) -> None:
    model = FailoverChatModel(
        routes={P: chat_openai(fake, "primary"), F: chat_anthropic(fake, "fallback")},
        primary=P,
        failover=make_failover(seed_config(max_swaps=1)),
    )
    fake.set_fault("primary", Fault.status(503))
    fake.set_fault("fallback", Fault.status(500))
    with pytest.raises(anthropic.InternalServerError) as info:
        model.invoke("hi")
    # The route model's own error type, unchanged, with swerve's note.
    assert type(info.value).__module__.startswith("langchain_anthropic")
    assert info.value.status_code == 500  # type: ignore[attr-defined]
    assert any(f"requested {P}" in note for note in info.value.__notes__)
    (call,) = otel.call_spans()
    assert call.attributes is not None and "swerve.route.served" not in call.attributes
    assert call.attributes["error.type"] == "500"


def test_context_overflow_surfaces_at_once_without_a_swap(
    model: FailoverChatModel, fake: FakeProvider, otel: Otel
) -> None:
    fake.script("primary", [Fault.context_overflow()])
    with pytest.raises(openai.BadRequestError):
        model.invoke("hi")
    assert (fake.requests("primary"), fake.requests("fallback")) == (1, 0)
    (declined,) = otel.events("swerve.swap_declined")
    assert declined[1]["swerve.reason"] == "not_qualifying"


# --- streams -----------------------------------------------------------------------------------
@pytest.mark.anyio
async def test_in_stream_503_after_the_role_delta_swaps_invisibly(
    model: FailoverChatModel, fake: FakeProvider
) -> None:
    fake.script("primary", [Fault.error_before_content("openrouter")] * 2)
    events = [e async for e in model.astream_events("hi", version="v2")]
    streamed = [e["data"]["chunk"] for e in events if e["event"] == "on_chat_model_stream"]
    # Not even the primary's empty role delta reached the consumer: every chunk is the
    # fallback's (Anthropic's), and the text is the fallback's alone.
    assert streamed and all(
        c.response_metadata.get("model_provider") in (None, "anthropic") for c in streamed
    )
    assert not any(c.response_metadata.get("model_provider") == "openai" for c in streamed)
    assert "".join(c.text for c in streamed) == "from fallback"
    assert (fake.requests("primary"), fake.requests("fallback")) == (2, 1)
    assert not [e for e in events if e["event"] == "on_custom_event"]


def test_partial_output_then_in_stream_503_raises_a_typed_error_by_default(
    model: FailoverChatModel, fake: FakeProvider, clock: FakeClock, health: MemoryHealth,
    otel: Otel,
) -> None:  # fmt: skip
    fake.script("primary", [Fault.error_after(2, "openrouter")])
    seen: list[str] = []
    with pytest.raises(MidStreamError) as info:
        for chunk in model.stream("hi"):
            seen.append(chunk.text)
    assert "".join(seen) == "from primary"[: len("".join(seen))] and "".join(seen)
    error = info.value
    assert str(error.route) == P and error.failure.status == 503 and error.failure.in_stream
    assert isinstance(error.__cause__, openai.APIError)  # the route model's own error
    assert P in health.unavailable(clock.now)
    assert fake.requests("fallback") == 0
    assert otel.events("swerve.swap_declined")[-1][1]["swerve.reason"] == "mid_stream"


@pytest.mark.anyio
async def test_restart_mode_sends_the_reset_event_and_marks_the_new_routes_first_chunk(
    fake: FakeProvider, make_failover: Callable[..., Failover], otel: Otel
) -> None:
    model = FailoverChatModel(
        routes={P: chat_openai(fake, "primary"), F: chat_anthropic(fake, "fallback")},
        primary=P,
        failover=make_failover(),
        mid_stream="restart",
    )
    fake.script("primary", [Fault.error_after(2, "openrouter")])
    events = [e async for e in model.astream_events("hi", version="v2")]
    kinds = [e["event"] for e in events]
    (reset_at,) = [i for i, k in enumerate(kinds) if k == "on_custom_event"]
    reset = events[reset_at]
    assert reset["name"] == STREAM_RESET_EVENT
    assert reset["data"] == {"route_from": P, "route_to": F, "requested": P}
    llm_run = next(e for e in events if e["event"] == "on_chat_model_start")["run_id"]
    assert reset["run_id"] == llm_run
    before = [e["data"]["chunk"] for e in events[:reset_at] if e["event"] == "on_chat_model_stream"]
    after = [e["data"]["chunk"] for e in events[reset_at:] if e["event"] == "on_chat_model_stream"]
    assert "".join(c.text for c in before) == "from primary"[: len("".join(c.text for c in before))]
    assert before and after
    assert after[0].response_metadata[RESET_KEY] == [{"route_from": P, "route_to": F}]
    assert not any(RESET_KEY in c.response_metadata for c in after[1:] + before)
    assert "".join(c.text for c in after) == "from fallback"
    (event,) = otel.events("swerve.stream_reset")
    assert event[1] == {"swerve.route.from": P, "swerve.route.to": F}
    (discarded,) = otel.events("swerve.partial_discarded")
    assert discarded[1] == {"swerve.route": P, "swerve.discarded.text": 2}
    assert otel.counter("swerve.partial_discards", swerve__route=P) == 1
    routes = {a["swerve.route"] for a, _ in otel.metrics()["swerve.stream.time_to_first_chunk"]}
    assert routes == {P, F}  # both attempts committed


@pytest.mark.anyio
@pytest.mark.parametrize("mode", Mode.UNARY, indirect=True)
async def test_partial_output_then_in_stream_503_invoke_returns_only_the_fallbacks_text(
    mode: Mode, model: FailoverChatModel, fake: FakeProvider, otel: Otel
) -> None:
    fake.script("primary", [Fault.error_after(2, "openrouter")] * 2)
    message = await mode.call(model)
    assert message.text == "from fallback"
    assert message.response_metadata["swerve"]["served"] == F


@pytest.mark.anyio
@pytest.mark.parametrize("mid_stream", ["error", "restart"])
async def test_invoke_through_streaming_callbacks_never_returns_a_failed_attempts_output(
    mid_stream: str, fake: FakeProvider, make_failover: Callable[..., Failover]
) -> None:
    """astream_events makes LangChain route invoke() through streaming: tokens flow to the
    callbacks, but none before an attempt commits, and the message returned holds only the
    attempt that completed."""
    model = FailoverChatModel(
        routes={P: chat_openai(fake, "primary"), F: chat_anthropic(fake, "fallback")},
        primary=P,
        failover=make_failover(),
        mid_stream=mid_stream,  # type: ignore[arg-type]
    )
    step = RunnableLambda(lambda text: model.invoke(text))

    # Before content: invisible, whatever the mode.
    fake.script("primary", [Fault.error_before_content("openrouter")])
    events = [e async for e in step.astream_events("hi", version="v2")]
    tokens = [e["data"]["chunk"] for e in events if e["event"] == "on_chat_model_stream"]
    assert tokens and "".join(t.text for t in tokens) == "from fallback"
    assert not any(t.response_metadata.get("model_provider") == "openai" for t in tokens)
    end = next(e for e in events if e["event"] == "on_chain_end")
    assert end["data"]["output"].text == "from fallback"

    # After content: "error" raises; "restart" announces the reset and returns the fallback's.
    model.engine.health.clear()
    fake.script("primary", [Fault.error_after(2, "openrouter")])
    if mid_stream == "error":
        with pytest.raises(MidStreamError):
            _ = [e async for e in step.astream_events("hi", version="v2")]
        return
    events = [e async for e in step.astream_events("hi", version="v2")]
    names = [e["event"] for e in events]
    assert "on_custom_event" in names
    end = next(e for e in events if e["event"] == "on_chain_end")
    assert end["data"]["output"].text == "from fallback"
    assert end["data"]["output"].response_metadata["swerve"]["served"] == F


# --- metadata, warnings ------------------------------------------------------------------------
def test_sdk_retries_on_a_route_model_warn_once_at_construction(fake: FakeProvider) -> None:
    with pytest.warns(SwerveRetryWarning, match=r"primary/fake-model \(max_retries=None\)"):
        model = FailoverChatModel(
            routes={
                P: chat_openai(fake, "primary").model_copy(update={"max_retries": None}),
                F: chat_anthropic(fake, "fallback"),
            },
            primary=P,
            config=seed_config(attempt_timeout_s=60),
            health=MemoryHealth(),
        )
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model.bind_tools([])  # copies do not warn again
        FailoverChatModel(
            routes={P: chat_openai(fake, "primary"), F: chat_anthropic(fake, "fallback")},
            primary=P,
            config=seed_config(attempt_timeout_s=60),  # a time limit: no SwerveTimeoutWarning
            health=MemoryHealth(),
        )


@pytest.mark.anyio
async def test_batch_and_abatch(model: FailoverChatModel, fake: FakeProvider) -> None:
    fake.set_fault("primary", Fault.status(503))
    out = model.batch(["a", "b"])
    assert [m.text for m in out] == ["from fallback"] * 2
    out = await model.abatch(["c", "d"])
    assert [m.text for m in out] == ["from fallback"] * 2


def test_no_config_passes_straight_through(fake: FakeProvider, otel: Otel) -> None:
    model = FailoverChatModel(
        routes={P: chat_openai(fake, "primary"), F: chat_anthropic(fake, "fallback")},
        primary=P,
        failover=Failover(
            None, MemoryHealth(), env_var="SWERVE_TEST_UNSET", telemetry=otel.telemetry
        ),
    )
    fake.script("primary", [Fault.status(503)])
    with pytest.raises(openai.InternalServerError):
        model.invoke("hi")
    assert model.invoke("hi").text == "from primary"
    assert fake.requests("fallback") == 0 and otel.call_spans() == []


# --- tools and structured output ---------------------------------------------------------------
@tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"


@pytest.mark.anyio
async def test_tools_are_bound_on_every_route_and_called_through_a_swap(
    mode: Mode, model: FailoverChatModel, fake: FakeProvider
) -> None:
    fake.set_reply(
        "fallback", Reply(text="", tool_calls=[ToolCall("get_weather", {"city": "Oslo"})])
    )
    fake.script("primary", [Fault.status(503), Fault.status(503)])
    bound = model.bind_tools([get_weather])
    message = await mode.call(bound)
    assert [(c["name"], c["args"]) for c in message.tool_calls] == [
        ("get_weather", {"city": "Oslo"})
    ]
    assert message.response_metadata["swerve"]["served"] == F
    # Each provider got the tool in its own format.
    (openai_tool,) = fake.received("primary")[0]["tools"]
    assert openai_tool["function"]["name"] == "get_weather"
    (anthropic_tool,) = fake.received("fallback")[0]["tools"]
    assert anthropic_tool["name"] == "get_weather" and "input_schema" in anthropic_tool


class Answer(BaseModel):
    city: str
    temperature: int


@pytest.mark.anyio
@pytest.mark.parametrize("method", ["function_calling", "json_schema", "json_mode"])
@pytest.mark.parametrize("mode", Mode.UNARY, indirect=True)
async def test_structured_output_through_a_swap(
    method: str, mode: Mode, fake: FakeProvider, make_failover: Callable[..., Failover]
) -> None:
    fallback = "fallback/fake-model-large"
    model = FailoverChatModel(
        routes={
            P: chat_openai(fake, "primary"),
            fallback: chat_openai(fake, "fallback", "fake-model-large"),
        },
        primary=P,
        failover=make_failover(seed_config(fallbacks={P: fallback})),
    )
    payload = {"city": "Oslo", "temperature": 21}
    if method == "function_calling":
        fake.set_reply("fallback", Reply(text="", tool_calls=[ToolCall("Answer", payload)]))
    else:
        fake.set_reply("fallback", Reply(text=json.dumps(payload)))
    fake.script("primary", [Fault.status(503)])
    structured = model.with_structured_output(Answer, method=method, include_raw=True)
    out = structured.invoke("hi") if mode.sync else await structured.ainvoke("hi")
    assert out["parsed"] == Answer(city="Oslo", temperature=21)
    assert out["raw"].response_metadata["model_name"] == "fake-model-large"
    assert (fake.requests("primary"), fake.requests("fallback")) == (1, 1)


def test_structured_output_on_anthropic_through_a_swap(
    model: FailoverChatModel, fake: FakeProvider
) -> None:
    fake.set_reply(
        "fallback",
        Reply(text="", tool_calls=[ToolCall("Answer", {"city": "Rome", "temperature": 30})]),
    )
    fake.script("primary", [Fault.status(503), Fault.status(503)])
    out = model.with_structured_output(Answer).invoke([HumanMessage("weather?")])
    assert out == Answer(city="Rome", temperature=30)


def test_the_breaker_opens_on_the_failing_route(
    fake: FakeProvider, make_failover: Callable[..., Failover], otel: Otel
) -> None:
    breaker = BreakerConfig(min_calls=2, failure_rate=0.5, open_s=30)
    model = FailoverChatModel(
        routes={P: chat_openai(fake, "primary"), F: chat_anthropic(fake, "fallback")},
        primary=P,
        failover=make_failover(seed_config(max_retries=1, cooldown_s=0, breaker=breaker)),
    )
    fake.script("primary", [Fault.status(503), Fault.status(503)])
    assert model.invoke("hi").text == "from fallback"
    (event,) = otel.events("swerve.breaker")
    assert event[1] == {
        "swerve.route": P,
        "swerve.breaker.from": "closed",
        "swerve.breaker.to": "open",
    }
    assert otel.counter("swerve.breaker.transitions", swerve__route=P) == 1
    states = {a["swerve.route"]: v for a, v in otel.metrics()["swerve.breaker.state"]}
    assert states[P] == 2
    # The open breaker walks the next call past the primary (no cooldown was set).
    assert model.invoke("hi").text == "from fallback"
    assert fake.requests("primary") == 2


@pytest.mark.anyio
@pytest.mark.parametrize("mode", Mode.STREAMED, indirect=True)
async def test_a_route_that_does_not_stream_serves_a_stream(
    mode: Mode, fake: FakeProvider, make_failover: Callable[..., Failover]
) -> None:
    fallback = "fallback/fake-model-large"
    model = FailoverChatModel(
        routes={
            P: chat_openai(fake, "primary", disable_streaming=True),
            fallback: chat_openai(fake, "fallback", "fake-model-large", disable_streaming=True),
        },
        primary=P,
        failover=make_failover(seed_config(fallbacks={P: fallback})),
    )
    # OpenRouter answers a non-streaming request with an error body on a 200.
    fake.script("primary", [Fault.error_before_content("openrouter")])
    message = await mode.call(model)
    assert message.text == "from fallback"
    assert message.response_metadata["swerve"]["served"] == fallback
    assert not fake.received("fallback")[0].get("stream")  # asked without streaming
