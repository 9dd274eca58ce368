"""History for the route a call moved to, on exact message lists, and on the wire."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage
from lc_support import F, Otel, P, chat_anthropic, chat_openai, seed_config
from swerve_langchain import FailoverChatModel
from swerve_langchain._history import Target, adapt_for_target, fix_empty_text_cache

from swerve import Failover
from swerve.adapters import Downgrade
from swerve.testing import FakeProvider, Fault

EPHEMERAL = {"type": "ephemeral"}
ANTHROPIC = Target("anthropic", "claude-fake", wire="anthropic")
CLAUDE_VIA_OPENROUTER = Target("openai", "anthropic/claude-sonnet-5", wire="openai")
OPENAI = Target("openai", "gpt-fake", wire="openai")


def text(value: str, **extra: Any) -> dict[str, Any]:
    return {"type": "text", "text": value, **extra}


def history() -> list[Any]:
    return [
        SystemMessage([text("You are terse.", cache_control=EPHEMERAL)]),
        HumanMessage([text("What is 2+2?"), text("  ", cache_control=EPHEMERAL)]),
        AIMessage(
            [
                {"type": "thinking", "thinking": "easy", "signature": "sig-anthropic"},
                text("4"),
            ],
            response_metadata={"model_provider": "anthropic"},
        ),
        AIMessage(
            "5",
            additional_kwargs={
                "reasoning_details": [{"type": "reasoning.text", "text": "hm", "signature": "s"}],
                "reasoning_content": "hm",
            },
            response_metadata={"model_provider": "openrouter"},
        ),
        HumanMessage(
            [text("And 3+3?", cache_control=EPHEMERAL), text("", cache_control=EPHEMERAL)]
        ),
    ]


def test_empty_text_blocks_never_carry_cache_control_to_claude() -> None:
    before = history()
    out, fix = fix_empty_text_cache(before, ANTHROPIC)
    assert [m.content for m in out] == [
        [text("You are terse.", cache_control=EPHEMERAL)],
        [text("What is 2+2?", cache_control=EPHEMERAL)],  # the marker moved back one block
        before[2].content,
        "5",
        [text("And 3+3?", cache_control=EPHEMERAL)],  # absorbed by the marker already there
    ]
    assert fix is not None and fix.blocks == 2
    assert fix.moved_to == ("messages[1].content[0]", "messages[4].content[0]")
    assert fix.paths == ("messages[1].content[1]", "messages[4].content[1]")  # in the input
    assert before == history()  # the input was not modified
    # The same for Claude behind OpenRouter; nothing for other models.
    assert fix_empty_text_cache(before, CLAUDE_VIA_OPENROUTER)[0] == out
    assert fix_empty_text_cache(before, OPENAI) == (before, None)


def test_a_marker_with_no_earlier_block_is_dropped_and_strings_can_take_one() -> None:
    out, fix = fix_empty_text_cache([HumanMessage([text(" ", cache_control=EPHEMERAL)])], ANTHROPIC)
    assert [m.content for m in out] == [""] and fix is not None and fix.moved_to == ("dropped",)
    out, fix = fix_empty_text_cache(
        [SystemMessage("Be brief."), HumanMessage([text("", cache_control=EPHEMERAL)])], ANTHROPIC
    )
    assert [m.content for m in out] == [[text("Be brief.", cache_control=EPHEMERAL)], ""]
    assert fix is not None and fix.moved_to == ("messages[0].content[0]",)


def test_a_swap_to_a_non_anthropic_model_strips_markers_and_foreign_signed_reasoning() -> None:
    out, report = adapt_for_target(history(), OPENAI)
    assert report == Downgrade(
        removed=(
            "messages[0].content[0].cache_control",
            "messages[1].content[1].cache_control",
            "messages[2].content[0]",
            "messages[3].additional_kwargs.reasoning_details",
            "messages[3].additional_kwargs.reasoning_content",
            "messages[4].content[0].cache_control",
            "messages[4].content[1].cache_control",
        )
    )
    assert [m.content for m in out] == [
        [text("You are terse.")],
        [text("What is 2+2?"), text("  ")],
        [text("4")],
        "5",
        [text("And 3+3?"), text("")],
    ]
    assert out[3].additional_kwargs == {}  # OpenRouter's signed reasoning is gone too
    assert [m.response_metadata for m in out] == [m.response_metadata for m in history()]


def test_a_swap_to_claude_keeps_markers_and_drops_only_other_providers_reasoning() -> None:
    out, report = adapt_for_target(history(), ANTHROPIC)
    assert report == Downgrade(
        removed=(
            "messages[3].additional_kwargs.reasoning_details",
            "messages[3].additional_kwargs.reasoning_content",
        )
    )
    assert out[0].content == history()[0].content and out[4].content == history()[4].content
    assert out[2].content == history()[2].content  # Anthropic's own signed thinking stays
    assert out[3].additional_kwargs == {}
    via_openrouter, _ = adapt_for_target(
        history(), Target("openrouter", "anthropic/claude-x", "openai")
    )
    assert via_openrouter[2].content == [text("4")]  # Anthropic's signature means nothing there
    assert via_openrouter[3].additional_kwargs == history()[3].additional_kwargs
    assert via_openrouter[4].content == history()[4].content  # markers kept for Claude


# --- on the wire -------------------------------------------------------------------------------
def _model(fake: FakeProvider, make_failover: Callable[..., Failover], primary: str,
           routes: dict[str, Any]) -> FailoverChatModel:  # fmt: skip
    fallbacks = {r: next(x for x in routes if x != r) for r in routes}
    return FailoverChatModel(
        routes=routes, primary=primary, failover=make_failover(seed_config(fallbacks=fallbacks))
    )


def test_on_a_swap_to_anthropic_the_wire_carries_moved_markers_and_no_empty_blocks(
    fake: FakeProvider, make_failover: Callable[..., Failover], otel: Otel
) -> None:
    model = _model(
        fake,
        make_failover,
        P,
        {P: chat_openai(fake, "primary"), F: chat_anthropic(fake, "fallback")},
    )
    fake.script("primary", [Fault.status(503)])
    assert model.invoke(history()).text == "from fallback"  # the fake 400s an empty block
    body = fake.received("fallback")[0]
    assert body["system"] == [text("You are terse.", cache_control=EPHEMERAL)]
    messages = body["messages"]
    assert messages[0] == {
        "role": "user",
        "content": [text("What is 2+2?", cache_control=EPHEMERAL)],
    }
    assert messages[-1]["content"] == [text("And 3+3?", cache_control=EPHEMERAL)]
    # OpenRouter's reasoning was not replayed to Anthropic; Anthropic's own thinking was.
    assert "reasoning_details" not in str(messages)
    assert {"type": "thinking", "thinking": "easy", "signature": "sig-anthropic"} in messages[1][
        "content"
    ]
    (event,) = otel.all_events("swerve.cache_fix")
    assert event["swerve.route"] == F and event["swerve.cache_fix.blocks"] == 2
    assert otel.counter("swerve.cache_fixes", swerve__route=F) == 1


def test_on_a_swap_to_a_non_claude_model_no_marker_or_signature_reaches_the_wire(
    fake: FakeProvider, make_failover: Callable[..., Failover], otel: Otel
) -> None:
    other = "fallback/fake-model-large"
    routes = {
        F: chat_anthropic(fake, "primary"),
        other: chat_openai(fake, "fallback", "fake-model-large"),
    }
    model = _model(fake, make_failover, F, routes)
    fake.script("primary", [Fault.status(529)])
    assert model.invoke(history()).text == "from fallback"
    body = str(fake.received("fallback")[0])
    assert "cache_control" not in body and "sig-anthropic" not in body and "thinking" not in body
    # The requested route got the conversation as written (less the empty blocks).
    assert "sig-anthropic" in str(fake.received("primary")[0])
    (event,) = otel.all_events("swerve.downgrade")
    assert event["swerve.route"] == other
    assert "messages[2].content[0]" in event["swerve.downgrade.removed"]  # type: ignore[operator]
    assert otel.counter("swerve.downgrades", swerve__route=other) == 1


@pytest.mark.parametrize("model_name", ["anthropic/claude-fake"])
def test_claude_behind_openrouter_keeps_markers_and_gets_no_empty_blocks(
    model_name: str, fake: FakeProvider, make_failover: Callable[..., Failover]
) -> None:
    via = f"fallback/{model_name}"
    model = _model(
        fake, make_failover, P,
        {P: chat_openai(fake, "primary"), via: chat_openai(fake, "fallback", model_name)},
    )  # fmt: skip
    fake.script("primary", [Fault.status(503)])
    assert model.invoke(history()).text == "from fallback"  # the fake 400s empty Claude blocks
    body = fake.received("fallback")[0]
    user = [m for m in body["messages"] if m["role"] == "user"]
    assert user[0]["content"] == [text("What is 2+2?", cache_control=EPHEMERAL)]
    assert user[-1]["content"] == [text("And 3+3?", cache_control=EPHEMERAL)]
