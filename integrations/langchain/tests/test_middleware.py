"""FailoverMiddleware in langchain's create_agent: steps, runs, streams, interrupts."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain.agents.middleware.types import ModelRequest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.errors import GraphInterrupt
from lc_support import F, FakeClock, Otel, P, chat_anthropic, chat_openai, seed_config
from swerve_langchain import FailoverChatModel, FailoverMiddleware

from swerve import Failover, MemoryHealth
from swerve.testing import FakeProvider, Fault, Reply, ToolCall


def weather_tool(fake: FakeProvider) -> Any:
    @tool
    def get_weather(city: str) -> str:
        """The weather in a city."""
        # The model's next turn answers in words (the fake's reply is per provider).
        fake.set_reply("fallback", Reply(text=f"It is sunny in {city}."))
        fake.set_reply("primary", Reply(text=f"It is sunny in {city}."))
        return f"sunny in {city}"

    return get_weather


def ask_for_tool(fake: FakeProvider, provider: str) -> None:
    fake.set_reply(provider, Reply(text="", tool_calls=[ToolCall("get_weather", {"city": "Oslo"})]))


@pytest.fixture
def routes(fake: FakeProvider) -> dict[str, Any]:
    return {P: chat_openai(fake, "primary"), F: chat_anthropic(fake, "fallback")}


@pytest.fixture
def failover(make_failover: Callable[..., Failover]) -> Failover:
    return make_failover(seed_config(max_retries=1))


@pytest.mark.anyio
@pytest.mark.parametrize("use_async", [False, True])
async def test_two_steps_the_second_starts_on_the_healthy_route(
    use_async: bool, routes: dict[str, Any], fake: FakeProvider, failover: Failover,
    otel: Otel, clock: FakeClock, health: MemoryHealth,
) -> None:  # fmt: skip
    agent = create_agent(
        model=routes[P],
        tools=[weather_tool(fake)],
        middleware=[FailoverMiddleware(routes, P, failover=failover)],
    )
    ask_for_tool(fake, "fallback")
    fake.script("primary", [Fault.status(503), Fault.status(503)])
    state_in = {"messages": [HumanMessage("Weather in Oslo?")]}
    first = await agent.ainvoke(state_in) if use_async else agent.invoke(state_in)
    _, tool_turn, tool_result, final = first["messages"]
    assert isinstance(tool_turn, AIMessage) and tool_turn.tool_calls[0]["name"] == "get_weather"
    assert tool_turn.response_metadata["model_name"] == "claude-fake"
    assert tool_turn.response_metadata["swerve"] == {
        "requested": P, "served": F, "retries": 1, "swaps": 1,
    }  # fmt: skip
    assert isinstance(tool_result, ToolMessage) and tool_result.content == "sunny in Oslo"
    assert isinstance(final, AIMessage) and final.text == "It is sunny in Oslo."
    assert final.response_metadata["swerve"] == {
        "requested": P, "served": F, "retries": 0, "swaps": 0,
        "skipped": [{"route": P, "learned": "this_failover"}],
    }  # fmt: skip
    # Step 1 paid the retry and the swap; step 2 went straight to the fallback.
    assert (fake.requests("primary"), fake.requests("fallback")) == (2, 2)
    assert P in health.unavailable(clock.now)
    assert len(otel.call_spans()) == 2
    assert [e[1]["swerve.route"] for e in otel.events("swerve.route_skipped")] == [P]
    # The tools went to each provider in its own format.
    assert fake.received("primary")[0]["tools"][0]["function"]["name"] == "get_weather"
    assert fake.received("fallback")[0]["tools"][0]["name"] == "get_weather"

    # A new run of the agent: still no request to the primary while it cools down.
    ask_for_tool(fake, "fallback")
    second = await agent.ainvoke(state_in) if use_async else agent.invoke(state_in)
    assert second["messages"][-1].text == "It is sunny in Oslo."
    assert fake.requests("primary") == 2 and fake.requests("fallback") == 4


@pytest.mark.anyio
async def test_the_agent_accepts_a_failover_chat_model_directly(
    routes: dict[str, Any], fake: FakeProvider, failover: Failover
) -> None:
    model = FailoverChatModel(routes=routes, primary=P, failover=failover)
    agent = create_agent(model=model, tools=[weather_tool(fake)])
    ask_for_tool(fake, "primary")
    fake.script("primary", [Fault.ok(), Fault.status(503), Fault.status(503)])
    out = await agent.ainvoke({"messages": [HumanMessage("Weather in Oslo?")]})
    assert out["messages"][-1].text == "It is sunny in Oslo."
    assert out["messages"][-1].response_metadata["swerve"]["served"] == F


@pytest.mark.anyio
async def test_messages_stream_mode_shows_no_token_of_a_failed_attempt(
    routes: dict[str, Any], fake: FakeProvider, failover: Failover
) -> None:
    agent = create_agent(
        model=routes[P], tools=[], middleware=[FailoverMiddleware(routes, P, failover=failover)]
    )
    fake.script("primary", [Fault.error_before_content("openrouter")] * 2)
    tokens = [
        chunk
        async for chunk, _ in agent.astream(
            {"messages": [HumanMessage("hi")]}, stream_mode="messages"
        )
    ]
    text = "".join(t.text for t in tokens if isinstance(t, AIMessage))
    assert text.startswith("from fallback") and "primary" not in text
    assert not any(t.response_metadata.get("model_provider") == "openai" for t in tokens)


@pytest.mark.parametrize("use_async", [False, True])
@pytest.mark.anyio
async def test_interrupts_pass_straight_through(
    use_async: bool, routes: dict[str, Any], fake: FakeProvider, failover: Failover, otel: Otel
) -> None:
    middleware = FailoverMiddleware(routes, P, failover=failover)
    interrupt = GraphInterrupt(())
    request = ModelRequest(model=routes[P], messages=[HumanMessage("hi")])
    seen: list[Any] = []

    def handler(req: ModelRequest[Any]) -> Any:
        seen.append(req.model)
        raise interrupt

    async def ahandler(req: ModelRequest[Any]) -> Any:
        return handler(req)

    with pytest.raises(GraphInterrupt) as info:
        if use_async:
            await middleware.awrap_model_call(request, ahandler)
        else:
            middleware.wrap_model_call(request, handler)
    assert info.value is interrupt and not getattr(interrupt, "__notes__", None)
    assert len(seen) == 1 and isinstance(seen[0], FailoverChatModel)
    assert seen[0].primary == P
    assert otel.call_spans() == [] and fake.requests("primary") == 0


def test_a_model_that_is_not_a_route_passes_through(routes: dict[str, Any], fake: FakeProvider,
                                                    failover: Failover) -> None:  # fmt: skip
    middleware = FailoverMiddleware(routes, P, failover=failover)
    other = chat_openai(fake, "primary", "other-model")
    request = ModelRequest(model=other, messages=[HumanMessage("hi")])
    seen: list[Any] = []
    middleware.wrap_model_call(request, lambda req: seen.append(req.model))  # type: ignore[arg-type,func-returns-value]
    assert seen == [other]


BLOCK_LANGCHAIN = """
import importlib.abc, sys

class NoLangchain(importlib.abc.MetaPathFinder):
    # As if the "agents" extra were not installed: langchain (v1) cannot be imported.
    def find_spec(self, name, path, target=None):
        if name == "langchain" or name.startswith("langchain."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, NoLangchain())
import swerve_langchain
print(swerve_langchain.FailoverChatModel.__name__)  # the rest works without langchain
try:
    from swerve_langchain import FailoverMiddleware
except ImportError as exc:
    print(f"{type(exc).__name__}: {exc}")
"""


def test_failover_middleware_without_langchain_says_which_extra_to_install() -> None:
    import subprocess
    import sys

    proc = subprocess.run(
        [sys.executable, "-c", BLOCK_LANGCHAIN], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        "FailoverChatModel",
        "ImportError: FailoverMiddleware needs langchain (v1): "
        "install swerve-langchain's agents extra (README: Use it in your project)",
    ]
