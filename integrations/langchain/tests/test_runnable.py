"""with_failover: any runnable, and no swap once a tool ran inside the failed attempt."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import openai
import pytest
from langchain_core.messages import AIMessage
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.runnables import RunnableLambda
from langchain_core.tools import tool
from lc_support import FakeClock, Otel, chat_openai, seed_config
from swerve_langchain import STREAM_RESET_EVENT, with_failover

from swerve import Failover, MemoryHealth
from swerve.testing import FakeProvider, Fault, Reply, ToolCall

A, B = "primary/fake-model", "fallback/fake-model-large"
PROMPT = ChatPromptTemplate.from_messages([("user", "{question}")])


@pytest.fixture
def failover(make_failover: Callable[..., Failover]) -> Failover:
    return make_failover(seed_config(fallbacks={A: B, B: A}, max_retries=1))


def chains(fake: FakeProvider) -> dict[str, Any]:
    return {
        A: PROMPT | chat_openai(fake, "primary"),
        B: PROMPT | chat_openai(fake, "fallback", "fake-model-large"),
    }


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ["invoke", "ainvoke", "stream", "astream"])
async def test_a_chain_fails_over(
    mode: str, fake: FakeProvider, failover: Failover, otel: Otel, clock: FakeClock,
    health: MemoryHealth,
) -> None:  # fmt: skip
    chain = with_failover(chains(fake), A, failover=failover)
    fake.script("primary", [Fault.status(503), Fault.error_before_content("openrouter")])
    value = {"question": "hi"}
    if mode == "invoke":
        out = chain.invoke(value)
    elif mode == "ainvoke":
        out = await chain.ainvoke(value)
    elif mode == "stream":
        parts = list(chain.stream(value))
        out = parts[0]
        for part in parts[1:]:
            out += part
    else:
        parts = [p async for p in chain.astream(value)]
        out = parts[0]
        for part in parts[1:]:
            out += part
    assert out.text == "from fallback"
    assert (fake.requests("primary"), fake.requests("fallback")) == (2, 1)
    assert A in health.unavailable(clock.now)
    (call,) = otel.call_spans()
    assert call.attributes is not None and call.attributes["swerve.route.served"] == B


@tool
def charge_card(amount: int) -> str:
    """Charge the customer's card."""
    CHARGES.append(amount)
    return f"charged {amount}"


CHARGES: list[int] = []


def agent_step(model: Any) -> Any:
    """One agent step: the model asks for a tool, the tool runs, the model answers."""

    def step(question: str, config: Any) -> AIMessage:
        first = model.bind_tools([charge_card]).invoke(question, config)
        messages: list[Any] = [("user", question), first]
        for call in first.tool_calls:
            result = charge_card.invoke(call, config)
            messages.append(result)
        return model.invoke(messages, config)  # type: ignore[no-any-return]

    return RunnableLambda(step)


@pytest.mark.anyio
@pytest.mark.parametrize("use_async", [False, True])
async def test_a_swap_is_declined_after_a_tool_ran_in_the_failed_attempt(
    use_async: bool, fake: FakeProvider, failover: Failover, otel: Otel, clock: FakeClock,
    health: MemoryHealth,
) -> None:  # fmt: skip
    CHARGES.clear()
    fake.set_reply("primary", Reply(text="", tool_calls=[ToolCall("charge_card", {"amount": 42})]))
    # Step on the primary: the model asks for the tool, the tool runs, the next model call fails.
    fake.script("primary", [Fault.ok(), Fault.status(503)])
    step = with_failover(
        {A: agent_step(chat_openai(fake, "primary")), B: agent_step(chat_openai(fake, "fallback"))},
        A,
        failover=failover,
    )
    with pytest.raises(openai.InternalServerError) as info:
        await step.ainvoke("pay") if use_async else step.invoke("pay")
    assert info.value.status_code == 503
    assert CHARGES == [42]  # charged once, never again on another route or a retry
    assert (fake.requests("primary"), fake.requests("fallback")) == (2, 0)
    (declined,) = otel.events("swerve.swap_declined")
    assert declined[1] == {"swerve.route": A, "swerve.reason": "effects"}
    assert A in health.unavailable(clock.now)  # still cooled down


@pytest.mark.anyio
async def test_tool_calls_that_were_only_streamed_are_no_effect(
    fake: FakeProvider, failover: Failover
) -> None:
    """The primary streams a tool call and then fails: nothing ran, so the step swaps."""
    fake.set_reply("primary", Reply(text="", tool_calls=[ToolCall("charge_card", {"amount": 7})]))
    fake.script("primary", [Fault.error_after(2, "openrouter"), Fault.error_after(2, "openrouter")])
    CHARGES.clear()
    model_a = chat_openai(fake, "primary", streaming=True).bind_tools([charge_card])
    model_b = chat_openai(fake, "fallback", "fake-model-large").bind_tools([charge_card])
    step = with_failover({A: model_a, B: model_b}, A, failover=failover)
    out = await step.ainvoke("pay")
    assert out.text == "from fallback" and not out.tool_calls
    assert CHARGES == []
    assert (fake.requests("primary"), fake.requests("fallback")) == (2, 1)


@pytest.mark.anyio
async def test_a_restarted_stream_sends_the_reset_event(
    fake: FakeProvider, make_failover: Callable[..., Failover]
) -> None:
    chain = with_failover(
        chains(fake), A, failover=make_failover(seed_config(fallbacks={A: B})), mid_stream="restart"
    )
    fake.script("primary", [Fault.error_after(2, "openrouter")])
    events = [e async for e in chain.astream_events({"question": "hi"}, version="v2")]
    (reset,) = [
        e for e in events if e["event"] == "on_custom_event" and e["name"] == STREAM_RESET_EVENT
    ]
    assert reset["name"] == "swerve.stream_reset"
    assert reset["data"] == {"route_from": A, "route_to": B, "requested": A}
    at = events.index(reset)
    outer = [
        e["data"]["chunk"]
        for e in events[at:]
        if e["event"] == "on_chain_stream" and e["name"] == chain.get_name()
    ]
    assert "".join(c.text for c in outer) == "from fallback"
