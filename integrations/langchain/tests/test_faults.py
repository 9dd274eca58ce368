"""Every fault mode of the fake provider, through every route model LangChain users have
(ChatOpenAI, ChatOpenAI on an OpenRouter-style Claude route, ChatAnthropic, ChatOpenRouter),
sync and async, streaming and not. Each case states what must happen: an invisible swap to
the fallback, a typed mid-stream error, or the route's own error surfacing at once."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

import pytest
from langchain_core.messages import AIMessage
from lc_support import ANSWERING_LIMIT_S, chat_anthropic, chat_openai, chat_openrouter, seed_config
from swerve_langchain import FailoverChatModel
from test_chat_model import MODES, run

from swerve import Failover, MidStreamError
from swerve.testing import FakeProvider, Fault

FALLBACK = "fallback/fake-model-large"
Outcome = Literal["swap", "mid_stream", "surface"]

MODELS: dict[str, tuple[str, Callable[[FakeProvider, str], Any], tuple[str, ...]]] = {
    # name: (model part of the route, factory(fake, provider), in-stream error styles the
    # provider really sends)
    "openai": ("fake-model", lambda f, p: chat_openai(f, p), ("openai", "openrouter")),
    "openai-openrouter": (
        "anthropic/claude-fake",
        lambda f, p: chat_openai(f, p, "anthropic/claude-fake"),
        ("openrouter",),
    ),
    "anthropic": ("claude-fake", lambda f, p: chat_anthropic(f, p), ("anthropic",)),
    "openrouter": ("anthropic/claude-fake", lambda f, p: chat_openrouter(f, p), ("openrouter",)),
}


def cases() -> list[Any]:
    out = []
    for name, (_, _, styles) in MODELS.items():
        for mode in MODES:
            streaming = mode.endswith("stream")
            table: list[tuple[str, Fault, Outcome]] = [
                ("503", Fault.status(503), "swap"),
                ("429-retry-after", Fault.status(429, retry_after=1), "swap"),
                (
                    "502-html",
                    Fault.status(502, body="<html><h1>502 Bad Gateway</h1></html>"),
                    "swap",
                ),
                ("529", Fault.status(529), "swap"),
                ("reset", Fault.reset(), "swap"),
                ("reset-before-content", Fault.reset_after(0), "swap"),
                ("drop-after-2", Fault.drop_after(2), "mid_stream" if streaming else "swap"),
                ("reset-after-2", Fault.reset_after(2), "mid_stream" if streaming else "swap"),
                ("no-finish", Fault.no_finish(), "mid_stream" if streaming else "swap"),
                ("context-overflow", Fault.context_overflow(), "surface"),
                ("401-not-listed", Fault.status(401), "surface"),
            ]
            # An error inside a 200 body: streams for everyone; a JSON body only where the
            # provider really answers that way (OpenRouter), never Anthropic's API.
            if streaming or name != "anthropic":
                for style in styles:
                    table.append(
                        (f"in-stream-{style}", Fault.error_before_content(style), "swap")  # type: ignore[arg-type]
                    )
                    table.append(
                        (
                            f"in-stream-{style}-after-2",
                            Fault.error_after(2, style),  # type: ignore[arg-type]
                            "mid_stream" if streaming else "swap",
                        )
                    )
            if mode in ("ainvoke", "astream"):  # async code enforces time limits itself
                table.append(("hang", Fault.hang(), "swap"))
                table.append(("slow-first-token", Fault.slow(first_token_s=5.0), "swap"))
            for label, fault, outcome in table:
                out.append(pytest.param(name, mode, fault, outcome, id=f"{name}-{mode}-{label}"))
    return out


@pytest.mark.anyio
@pytest.mark.parametrize(("name", "mode", "fault", "outcome"), cases())
async def test_fault(
    name: str, mode: str, fault: Fault, outcome: Outcome, fake: FakeProvider,
    make_failover: Callable[..., Failover],
) -> None:  # fmt: skip
    model_name, factory, _ = MODELS[name]
    # A request cut by a time limit may reach the server after the test: it goes to a provider
    # of its own, where it can take no other test's scripted fault or count. The limit bounds
    # the fallback's attempt too (ANSWERING_LIMIT_S).
    timed = fault.kind in ("hang", "slow")
    provider = "stall" if timed else "primary"
    route = f"{provider}/{model_name}"
    limit = ANSWERING_LIMIT_S if timed else None
    config = seed_config(fallbacks={route: FALLBACK}, attempt_timeout_s=limit)
    model = FailoverChatModel(
        routes={
            route: factory(fake, provider),
            FALLBACK: chat_openai(fake, "fallback", "fake-model-large"),
        },
        primary=route,
        failover=make_failover(config),
    )
    fake.script(provider, [fault])
    if outcome == "swap":
        message: AIMessage = await run(model, mode)
        assert message.text == "from fallback"
        assert message.response_metadata["model_name"] == "fake-model-large"
        assert message.response_metadata["swerve"]["served"] == FALLBACK
        assert fake.requests("fallback") == 1
        if not timed:
            assert fake.requests("primary") == 1
        return
    with pytest.raises(Exception) as info:  # noqa: PT011 - each outcome checks the type
        await run(model, mode)
    assert fake.requests("fallback") == 0
    if outcome == "mid_stream":
        assert isinstance(info.value, MidStreamError)
        assert info.value.partial  # output had reached the consumer
        assert info.value.route == model.engine.route(route)
        return
    # The route model's own error, as it raised it (not a swerve wrapper).
    assert not isinstance(info.value, MidStreamError)
    assert type(info.value).__module__.split(".")[0] in {
        "openai", "anthropic", "langchain_openai", "langchain_anthropic", "openrouter",
    }  # fmt: skip
    assert fake.requests("primary") == 1
