"""swerve._wire.payloads: exact request bodies in, exact request bodies out."""

from __future__ import annotations

import copy
import json
from types import MappingProxyType
from typing import Any

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from swerve._wire.payloads import (
    CacheFix,
    Downgrade,
    JsonRules,
    Wire,
    adapt_for_target,
    fix_empty_text_cache,
    is_claude,
)
from swerve._wire.rules import prepare_for_route
from swerve.testing import FakeProvider, TelemetryRecorder

Body = dict[str, Any]
MARK: Body = {"type": "ephemeral"}
HOUR: Body = {"type": "ephemeral", "ttl": "1h"}
SIG = "EqQBCkgIARABGAIiQL0sig=="
CLAUDE = "anthropic/claude-sonnet-5"


def text(value: str, mark: Body | None = None) -> Body:
    return {"type": "text", "text": value, **({"cache_control": mark} if mark else {})}


def user(*blocks: Body) -> Body:
    return {"role": "user", "content": list(blocks)}


def assistant(*blocks: Body) -> Body:
    return {"role": "assistant", "content": list(blocks)}


def fix(body: Body, wire: Wire = "anthropic") -> tuple[Body, CacheFix | None]:
    """fix_empty_text_cache, checking on the way that the input was not touched."""
    before = copy.deepcopy(body)
    out, report = fix_empty_text_cache(body, wire)
    assert body == before
    return out, report


def at(body: Any, path: str) -> Any:
    """Resolve a report path like ``messages[2].content[0]`` in ``body``."""
    node = body
    for part in path.replace("[", ".").replace("]", "").split("."):
        node = node[int(part)] if part.isdigit() else node[part]
    return node


# --- is_claude ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("model", "expected"),
    [
        ("claude-sonnet-5", True),
        ("anthropic/claude-sonnet-5", True),
        ("claude-3-5-haiku-latest", True),
        ("Anthropic/Claude-Opus-5", True),
        ("openai/gpt-5", False),
        ("google/gemini-3-pro", False),
        ("", False),
    ],
)
def test_is_claude(model: str, expected: bool) -> None:
    assert is_claude(model) is expected


# --- fix_empty_text_cache: where the empty block sits ------------------------------------------


def test_empty_marked_first_block_moves_to_previous_message() -> None:
    body = {
        "model": "claude-sonnet-5",
        "messages": [
            user(text("hello")),
            assistant(text("hi there")),
            user(text("", MARK), text("go on")),
        ],
    }
    out, report = fix(body)
    assert out == {
        "model": "claude-sonnet-5",
        "messages": [
            user(text("hello")),
            assistant(text("hi there", MARK)),
            user(text("go on")),
        ],
    }
    assert report == CacheFix(
        blocks=1, moved_to=("messages[1].content[0]",), paths=("messages[2].content[0]",)
    )


def test_empty_marked_middle_block_moves_to_the_block_before() -> None:
    body = {"model": "claude-sonnet-5", "messages": [user(text("a"), text("", MARK), text("b"))]}
    out, report = fix(body)
    assert out == {"model": "claude-sonnet-5", "messages": [user(text("a", MARK), text("b"))]}
    assert report == CacheFix(
        blocks=1, moved_to=("messages[0].content[0]",), paths=("messages[0].content[1]",)
    )


def test_empty_marked_last_block_moves_to_the_block_before() -> None:
    body = {"model": "claude-sonnet-5", "messages": [user(text("a"), text("b"), text("", MARK))]}
    out, report = fix(body)
    assert out == {"model": "claude-sonnet-5", "messages": [user(text("a"), text("b", MARK))]}
    assert report == CacheFix(
        blocks=1, moved_to=("messages[0].content[1]",), paths=("messages[0].content[2]",)
    )


@pytest.mark.parametrize("blank", [" \n\t", " ", "\n\n", "\u3000"])
def test_whitespace_only_counts_as_empty(blank: str) -> None:
    body = {"model": "claude-sonnet-5", "messages": [user(text("question"), text(blank, MARK))]}
    out, report = fix(body)
    assert out == {"model": "claude-sonnet-5", "messages": [user(text("question", MARK))]}
    assert report is not None and report.paths == ("messages[0].content[1]",)


def test_unmarked_empty_blocks_are_dropped_too() -> None:
    body = {"model": "claude-sonnet-5", "messages": [user(text(""), text("a"), text(" "))]}
    out, report = fix(body)
    assert out == {"model": "claude-sonnet-5", "messages": [user(text("a"))]}
    assert report == CacheFix(
        blocks=2, moved_to=(), paths=("messages[0].content[0]", "messages[0].content[2]")
    )


def test_message_whose_only_block_is_empty_is_dropped() -> None:
    body = {
        "model": "claude-sonnet-5",
        "messages": [
            user(text("first")),
            assistant(text(" \n\t", MARK)),
            user(text("second")),
            assistant(text("answer")),
        ],
    }
    out, report = fix(body)
    # Two user turns in a row are fine: Anthropic merges consecutive same-role turns.
    assert out == {
        "model": "claude-sonnet-5",
        "messages": [user(text("first", MARK)), user(text("second")), assistant(text("answer"))],
    }
    assert report == CacheFix(
        blocks=1,
        moved_to=("messages[0].content[0]",),
        paths=("messages[1].content[0]",),
        messages=("messages[1]",),
    )


def test_moved_to_names_positions_in_the_returned_body() -> None:
    body = {
        "model": "claude-sonnet-5",
        "messages": [
            user(text("")),
            assistant(text("")),
            user(text(""), text("x"), text("", MARK)),
        ],
    }
    out, report = fix(body)
    assert out == {"model": "claude-sonnet-5", "messages": [user(text("x", MARK))]}
    assert report is not None
    assert report.moved_to == ("messages[0].content[0]",)  # was messages[2].content[1]
    assert report.messages == ("messages[0]", "messages[1]")
    assert at(out, report.moved_to[0])["cache_control"] == MARK


def test_seed_bug_empty_trailing_part_via_openrouter() -> None:
    # The seed's production bug: applyCaching marked an empty trailing text part of the last
    # message, and OpenRouter relayed it to Anthropic, which answered 400.
    body = {
        "model": CLAUDE,
        "messages": [
            {"role": "system", "content": [text("You are terse.", MARK)]},
            {"role": "user", "content": [text("Summarise the file."), text("", MARK)]},
        ],
        "stream": True,
    }
    out, report = fix(body, "openai")
    assert out == {
        "model": CLAUDE,
        "messages": [
            {"role": "system", "content": [text("You are terse.", MARK)]},
            {"role": "user", "content": [text("Summarise the file.", MARK)]},
        ],
        "stream": True,
    }
    assert report == CacheFix(
        blocks=1, moved_to=("messages[1].content[0]",), paths=("messages[1].content[1]",)
    )


# --- fix_empty_text_cache: system and tools ----------------------------------------------------


TOOLS: list[Body] = [
    {"name": "read", "description": "Read a file", "input_schema": {"type": "object"}},
    {"name": "write", "description": "Write a file", "input_schema": {"type": "object"}},
]


def test_marker_moves_back_to_system() -> None:
    body = {
        "model": "claude-sonnet-5",
        "tools": TOOLS,
        "system": [text("You are a coding agent."), text("Be brief.")],
        "messages": [user(text("", MARK))],
    }
    out, report = fix(body)
    assert out == {
        "model": "claude-sonnet-5",
        "tools": TOOLS,
        "system": [text("You are a coding agent."), text("Be brief.", MARK)],
        "messages": [],
    }
    assert report == CacheFix(
        blocks=1,
        moved_to=("system[1]",),
        paths=("messages[0].content[0]",),
        messages=("messages[0]",),
    )
    assert out["tools"] is body["tools"]  # untouched parts are shared, not copied


def test_empty_system_block_marker_moves_to_last_tool() -> None:
    body = {
        "model": "claude-sonnet-5",
        "tools": TOOLS,
        "system": [text("  ", MARK)],
        "messages": [user(text("hi"))],
    }
    out, report = fix(body)
    assert out == {
        "model": "claude-sonnet-5",
        "tools": [TOOLS[0], {**TOOLS[1], "cache_control": MARK}],
        "messages": [user(text("hi"))],
    }
    assert report == CacheFix(blocks=1, moved_to=("tools[1]",), paths=("system[0]",))
    assert out["tools"][0] is TOOLS[0]


def test_marker_walks_past_string_system_to_tools() -> None:
    body = {
        "model": "claude-sonnet-5",
        "tools": TOOLS,
        "system": "You are a coding agent.",
        "messages": [user(text("", HOUR), text("hi"))],
    }
    out, report = fix(body)
    assert out["tools"] == [TOOLS[0], {**TOOLS[1], "cache_control": HOUR}]
    assert out["system"] == "You are a coding agent."
    assert out["messages"] == [user(text("hi"))]
    assert report is not None and report.moved_to == ("tools[1]",)


def test_marker_with_nowhere_to_go_is_dropped() -> None:
    body = {"model": "claude-sonnet-5", "messages": [user(text("", MARK), text("hi"))]}
    out, report = fix(body)
    assert out == {"model": "claude-sonnet-5", "messages": [user(text("hi"))]}
    assert report == CacheFix(blocks=1, moved_to=("dropped",), paths=("messages[0].content[0]",))


# --- fix_empty_text_cache: several markers -----------------------------------------------------


def test_two_markers_moving_to_the_same_block_become_one() -> None:
    body = {
        "model": "claude-sonnet-5",
        "messages": [user(text("context")), assistant(text("", MARK)), user(text(" ", HOUR))],
    }
    out, report = fix(body)
    # The first marker to arrive is placed; the second is absorbed (no duplicate, no extra).
    assert out == {"model": "claude-sonnet-5", "messages": [user(text("context", MARK))]}
    assert report == CacheFix(
        blocks=2,
        moved_to=("messages[0].content[0]", "messages[0].content[0]"),
        paths=("messages[1].content[0]", "messages[2].content[0]"),
        messages=("messages[1]", "messages[2]"),
    )


def test_marker_absorbed_by_a_block_that_already_has_one() -> None:
    body = {"model": "claude-sonnet-5", "messages": [user(text("a", HOUR), text("", MARK))]}
    out, report = fix(body)
    assert out == {"model": "claude-sonnet-5", "messages": [user(text("a", HOUR))]}
    assert report is not None and report.moved_to == ("messages[0].content[0]",)


# --- fix_empty_text_cache: which blocks may carry a marker -------------------------------------


def test_marker_lands_on_image_tool_use_and_tool_result() -> None:
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "x"}}
    tool_use = {"type": "tool_use", "id": "toolu_1", "name": "read", "input": {"path": "a"}}
    tool_result = {"type": "tool_result", "tool_use_id": "toolu_1", "content": "file body"}
    body = {
        "model": "claude-sonnet-5",
        "messages": [
            user(image, text("", MARK)),
            assistant(tool_use, text("\n", MARK)),
            user(tool_result, text("", MARK)),
        ],
    }
    out, report = fix(body)
    assert out["messages"] == [
        user({**image, "cache_control": MARK}),
        assistant({**tool_use, "cache_control": MARK}),
        user({**tool_result, "cache_control": MARK}),
    ]
    assert report is not None
    assert report.moved_to == (
        "messages[0].content[0]",
        "messages[1].content[0]",
        "messages[2].content[0]",
    )


def test_empty_text_inside_tool_result() -> None:
    result = {
        "type": "tool_result",
        "tool_use_id": "toolu_1",
        "content": [text("line 1"), text("", MARK)],
    }
    only_blank = {"type": "tool_result", "tool_use_id": "toolu_2", "content": [text(" ", MARK)]}
    body = {"model": "claude-sonnet-5", "messages": [user(result, only_blank)]}
    out, report = fix(body)
    assert out["messages"] == [
        user(
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": [text("line 1", MARK)]},
            {"type": "tool_result", "tool_use_id": "toolu_2", "cache_control": MARK},
        )
    ]
    assert report == CacheFix(
        blocks=2,
        moved_to=("messages[0].content[0].content[0]", "messages[0].content[1]"),
        paths=("messages[0].content[0].content[1]", "messages[0].content[1].content[0]"),
    )


def test_marker_never_lands_on_thinking() -> None:
    thinking = {"type": "thinking", "thinking": "Let me look.", "signature": SIG}
    redacted = {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix"}
    body = {
        "model": "claude-sonnet-5",
        "messages": [user(text("question")), assistant(thinking, redacted, text("", MARK))],
    }
    out, report = fix(body)
    assert out["messages"] == [user(text("question", MARK)), assistant(thinking, redacted)]
    assert out["messages"][1]["content"][0] is thinking
    assert out["messages"][1]["content"][1] is redacted
    assert report is not None and report.moved_to == ("messages[0].content[0]",)


# --- fix_empty_text_cache: signed reasoning survives -------------------------------------------


def test_signed_whitespace_thinking_is_kept_byte_for_byte() -> None:
    blank_thinking = {"type": "thinking", "thinking": " \n", "signature": SIG}
    unsigned_blank = {"type": "thinking", "thinking": "", "signature": ""}
    body: Body = {
        "model": "claude-sonnet-5",
        "messages": [
            user(text("q")),
            assistant(blank_thinking, unsigned_blank, text("answer"), text("")),
            user(text("next", MARK)),
        ],
    }
    out, _ = fix(body)
    kept = out["messages"][1]["content"]
    assert kept == [blank_thinking, unsigned_blank, text("answer")]
    assert json.dumps(kept[0]) == json.dumps(body["messages"][1]["content"][0])
    assert kept[0] is blank_thinking and kept[1] is unsigned_blank


def test_openrouter_reasoning_details_are_kept_byte_for_byte() -> None:
    details = [
        {
            "type": "reasoning.text",
            "text": " \n",
            "signature": SIG,
            "format": "anthropic-claude-v1",
        },
        {"type": "reasoning.encrypted", "data": "gAAAA==", "format": "anthropic-claude-v1"},
    ]
    reply = {"role": "assistant", "content": [text("")], "reasoning_details": details}
    body = {
        "model": CLAUDE,
        "messages": [{"role": "user", "content": [text("q", MARK)]}, reply],
    }
    out, report = fix(body, "openai")
    # Reasoning details are a payload of their own: the message stays, content or not.
    assert out["messages"][1] == {
        "role": "assistant",
        "content": None,
        "reasoning_details": details,
    }
    assert out["messages"][1]["reasoning_details"] is details
    assert json.dumps(out["messages"][1]["reasoning_details"]) == json.dumps(details)
    assert report == CacheFix(blocks=1, moved_to=(), paths=("messages[1].content[0]",))


def test_openai_messages_with_more_than_content_are_kept() -> None:
    call = {"id": "call_1", "type": "function", "function": {"name": "read", "arguments": "{}"}}
    body = {
        "model": CLAUDE,
        "messages": [
            {"role": "user", "content": [text("read a")]},
            {"role": "assistant", "content": [text(" ", MARK)], "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "call_1", "content": [text("")]},
            {"role": "user", "content": [text("")], "cache_control": HOUR},
            {"role": "user", "content": [text("and b?")]},
        ],
    }
    out, report = fix(body, "openai")
    assert out["messages"] == [
        {"role": "user", "content": [text("read a", MARK)]},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_1", "content": ""},
        {"role": "user", "content": [text("and b?")]},
    ]
    assert report == CacheFix(
        blocks=3,
        # The message-level marker of the dropped message is absorbed by the same target.
        moved_to=("messages[0].content[0]", "messages[0].content[0]"),
        paths=("messages[1].content[0]", "messages[2].content[0]", "messages[3].content[0]"),
        messages=("messages[3]",),
    )


def test_openai_image_url_part_takes_the_marker() -> None:
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,xx"}}
    body = {"model": CLAUDE, "messages": [{"role": "user", "content": [image, text("", MARK)]}]}
    out, _ = fix(body, "openai")
    assert out["messages"] == [{"role": "user", "content": [{**image, "cache_control": MARK}]}]


# --- fix_empty_text_cache: what is left alone --------------------------------------------------


def test_non_claude_openai_body_is_returned_unchanged() -> None:
    body = {"model": "openai/gpt-5", "messages": [{"role": "user", "content": [text("", MARK)]}]}
    out, report = fix(body, "openai")
    assert out is body and report is None


@pytest.mark.parametrize(
    ("wire", "body"),
    [
        (
            "anthropic",
            {
                "model": "claude-sonnet-5",
                "tools": TOOLS,
                "system": [text("sys", MARK)],
                "messages": [
                    user(text("q", MARK)),
                    assistant({"type": "thinking", "thinking": " ", "signature": SIG}),
                ],
            },
        ),
        ("anthropic", {"model": "claude-sonnet-5", "messages": [user(), {"role": "user"}]}),
        ("anthropic", {"model": "claude-sonnet-5", "messages": [{"role": "user", "content": ""}]}),
        ("openai", {"model": CLAUDE, "messages": [{"role": "user", "content": "hi"}]}),
        ("openai", {"model": CLAUDE, "messages": [{"role": "user", "content": [text("x", MARK)]}]}),
        ("openai", {"model": CLAUDE}),
        ("anthropic", {}),
    ],
)
def test_unchanged_body_is_the_same_object(wire: Wire, body: Body) -> None:
    out, report = fix(body, wire)
    assert out is body and report is None


def test_input_is_not_mutated_and_untouched_parts_are_shared() -> None:
    body: Body = {
        "model": "claude-sonnet-5",
        "tools": TOOLS,
        "system": [text("sys")],
        "messages": [
            user(text("a")),
            assistant(text("b"), text("", MARK)),
            user(text("c")),
        ],
    }
    snapshot = copy.deepcopy(body)
    out, _ = fix_empty_text_cache(body, "anthropic")
    assert body == snapshot
    assert out is not body and out["messages"] is not body["messages"]
    assert out["system"] is body["system"] and out["tools"] is body["tools"]
    assert out["messages"][0] is body["messages"][0]
    assert out["messages"][2] is body["messages"][2]
    assert out["messages"][1]["content"][0] is not body["messages"][1]["content"][0]


def test_mapping_input_that_is_not_a_dict() -> None:
    body = MappingProxyType({"model": "claude-sonnet-5", "messages": [user(text("hi"))]})
    out, report = fix_empty_text_cache(body, "anthropic")
    assert out == dict(body) and isinstance(out, dict) and report is None


# --- adapt_for_target --------------------------------------------------------------------------


DETAILS: list[Body] = [
    {
        "type": "reasoning.text",
        "text": "thinking",
        "signature": SIG,
        "format": "anthropic-claude-v1",
    }
]


def openai_history() -> Body:
    return {
        "model": CLAUDE,
        "messages": [
            {"role": "system", "content": [text("You are terse.", HOUR)]},
            {"role": "user", "content": [text("Summarise."), text("The file.", MARK)]},
            {
                "role": "assistant",
                "content": "Done.",
                "reasoning": "thinking",
                "reasoning_details": DETAILS,
            },
            {"role": "user", "content": "Thanks", "cache_control": MARK},
        ],
    }


def test_adapt_openai_for_a_non_claude_target() -> None:
    body = openai_history()
    snapshot = copy.deepcopy(body)
    out, report = adapt_for_target(body, "openai", target_model="openai/gpt-5")
    assert body == snapshot
    assert out == {
        "model": CLAUDE,  # choosing the model is the caller's business
        "messages": [
            {"role": "system", "content": [text("You are terse.")]},
            {"role": "user", "content": [text("Summarise."), text("The file.")]},
            {"role": "assistant", "content": "Done."},
            {"role": "user", "content": "Thanks"},
        ],
    }
    assert report == Downgrade(
        removed=(
            "messages[0].content[0].cache_control",
            "messages[1].content[1].cache_control",
            "messages[2].reasoning_details",
            "messages[2].reasoning",
            "messages[3].cache_control",
        )
    )
    assert out["messages"][1]["content"][0] is body["messages"][1]["content"][0]


def test_adapt_openai_tools_and_top_level_markers() -> None:
    tool = {"type": "function", "function": {"name": "read"}, "cache_control": MARK}
    body = {"model": "x", "cache_control": MARK, "tools": [tool], "messages": []}
    out, report = adapt_for_target(body, "openai", target_model="google/gemini-3-pro")
    assert out == {
        "model": "x",
        "tools": [{"type": "function", "function": {"name": "read"}}],
        "messages": [],
    }
    assert report == Downgrade(removed=("cache_control", "tools[0].cache_control"))


def test_adapt_openai_for_a_claude_target_keeps_everything() -> None:
    body = openai_history()
    out, report = adapt_for_target(body, "openai", target_model="anthropic/claude-opus-5")
    assert out is body and report is None


def test_adapt_openai_nothing_to_remove_is_the_same_object() -> None:
    body = {"model": "x", "messages": [{"role": "user", "content": [text("hi")]}]}
    out, report = adapt_for_target(body, "openai", target_model="openai/gpt-5")
    assert out is body and report is None


def test_adapt_anthropic_keeps_thinking_and_markers_but_not_leaked_details() -> None:
    thinking = {"type": "thinking", "thinking": " ", "signature": SIG}
    body = {
        "model": "claude-sonnet-5",
        "system": [text("sys", MARK)],
        "messages": [
            user(text("q", MARK)),
            {
                "role": "assistant",
                "content": [thinking, {**text("a"), "reasoning_details": DETAILS}],
                "reasoning_details": DETAILS,
            },
        ],
    }
    snapshot = copy.deepcopy(body)
    out, report = adapt_for_target(body, "anthropic", target_model="claude-sonnet-5")
    assert body == snapshot
    assert out == {
        "model": "claude-sonnet-5",
        "system": [text("sys", MARK)],
        "messages": [user(text("q", MARK)), assistant(thinking, text("a"))],
    }
    assert out["messages"][1]["content"][0] is thinking
    assert report == Downgrade(
        removed=("messages[1].reasoning_details", "messages[1].content[1].reasoning_details")
    )


def test_adapt_anthropic_clean_body_is_the_same_object() -> None:
    body = {"model": "claude-sonnet-5", "messages": [user(text("q", MARK))]}
    out, report = adapt_for_target(body, "anthropic", target_model="claude-sonnet-5")
    assert out is body and report is None


# --- the step both the transport and the LangChain adapter run ---------------------------------


def test_prepare_for_route_adapts_only_a_moved_call_then_fixes_and_reports_both() -> None:
    body: Body = {
        "model": "gpt-5",
        "messages": [
            user(text("q", MARK)),
            {"role": "assistant", "content": "a", "reasoning": "r"},
        ],
    }
    recorder = TelemetryRecorder()
    try:
        rules = JsonRules("openai", "gpt-5")
        kept = prepare_for_route(
            body, rules, route="b/gpt-5", moved=False, telemetry=recorder.telemetry
        )
        assert kept is body  # the route it asked for: nothing to adapt, nothing to fix
        out = prepare_for_route(
            body, rules, route="b/gpt-5", moved=True, telemetry=recorder.telemetry
        )
        assert out == adapt_for_target(body, "openai", target_model="gpt-5")[0]
        assert recorder.counter("swerve.downgrades", swerve__route="b/gpt-5") == 1
        claude: Body = {"model": CLAUDE, "messages": [user(text("q"), text(" ", MARK))]}
        fixed = prepare_for_route(
            claude, JsonRules("openai", CLAUDE), route="c/x", moved=False,
            telemetry=recorder.telemetry,
        )  # fmt: skip
        assert fixed == fix_empty_text_cache(claude, "openai")[0]
        assert recorder.counter("swerve.cache_fixes", swerve__route="c/x") == 1
        assert recorder.counter("swerve.downgrades", swerve__route="c/x") == 0
    finally:
        recorder.shutdown()


# --- end to end: the fake provider applies Anthropic's checks ----------------------------------


def post(fake: FakeProvider, wire: Wire, body: Body) -> httpx.Response:
    if wire == "anthropic":
        url = f"{fake.url('anthropic')}/v1/messages"
    else:
        url = f"{fake.url('openrouter')}/v1/chat/completions"
    return httpx.post(url, json=body, timeout=10)


E2E: list[tuple[Wire, Body, str]] = [
    (
        "anthropic",
        {
            "model": "claude-sonnet-5",
            "max_tokens": 64,
            "system": [text("sys")],
            "messages": [user(text("Summarise."), text("", MARK))],
        },
        "cache_control cannot be set for empty text blocks",
    ),
    (
        "anthropic",
        {
            "model": "claude-sonnet-5",
            "max_tokens": 64,
            "messages": [user(text("q")), assistant(text(" \n\t")), user(text("again"))],
        },
        "text content blocks must contain non-whitespace text",
    ),
    (
        "openai",
        {
            "model": CLAUDE,
            "messages": [
                {"role": "system", "content": [text("sys", MARK)]},
                {"role": "user", "content": [text("Summarise."), text("", MARK)]},
            ],
        },
        "cache_control cannot be set for empty text blocks",
    ),
    (
        "openai",
        {"model": CLAUDE, "messages": [{"role": "user", "content": [text(""), text("hi")]}]},
        "text content blocks must be non-empty",
    ),
]


@pytest.mark.parametrize(("wire", "body", "complaint"), E2E)
def test_fake_provider_rejects_unfixed_and_accepts_fixed(
    fake_provider: FakeProvider, wire: Wire, body: Body, complaint: str
) -> None:
    rejected = post(fake_provider, wire, body)
    assert rejected.status_code == 400
    assert complaint in rejected.text
    fixed, report = fix_empty_text_cache(body, wire)
    assert report is not None
    accepted = post(fake_provider, wire, fixed)
    assert accepted.status_code == 200, accepted.text


def test_fake_provider_after_a_swap_to_claude_via_openrouter(fake_provider: FakeProvider) -> None:
    # A body written on the direct route, swapped to Claude behind OpenRouter.
    body = {
        "model": CLAUDE,
        "messages": [{"role": "user", "content": [text("q"), text(" ", MARK)]}],
    }
    adapted, downgrade = adapt_for_target(body, "openai", target_model=CLAUDE)
    assert downgrade is None
    fixed, _ = fix_empty_text_cache(adapted, "openai")
    assert post(fake_provider, "openai", fixed).status_code == 200
    assert fake_provider.received("openrouter")[-1] == fixed


# --- properties --------------------------------------------------------------------------------


def count_markers(node: Any) -> int:
    if isinstance(node, dict):
        own = 1 if node.get("cache_control") is not None else 0
        return own + sum(count_markers(v) for v in node.values())
    if isinstance(node, list):
        return sum(count_markers(v) for v in node)
    return 0


def text_blocks(body: Body) -> list[Body]:
    found: list[Body] = []
    for block in body.get("system", []) if isinstance(body.get("system"), list) else []:
        found.append(block)
    for message in body["messages"]:
        for block in content_of(message):
            found.append(block)
            inner = block.get("content")
            found += inner if isinstance(inner, list) else []
    return [b for b in found if b.get("type") == "text"]


texts = st.sampled_from(["", " ", " \n\t", "\n", "a", "hello", " x "])
marks = st.sampled_from([None, MARK, HOUR])
blocks = st.builds(lambda t, m: text(t, m), texts, marks)
tool_results = st.builds(
    lambda i, inner, m: {
        "type": "tool_result",
        "tool_use_id": f"toolu_{i}",
        "content": inner,
        **({"cache_control": m} if m else {}),
    },
    st.integers(0, 9),
    st.lists(blocks, max_size=3),
    marks,
)
thinking = st.just({"type": "thinking", "thinking": " ", "signature": SIG})
image_url = st.just({"type": "image_url", "image_url": {"url": "data:image/png;base64,xx"}})
anthropic_messages = st.builds(
    lambda role, content: {"role": role, "content": content},
    st.sampled_from(["user", "assistant"]),
    st.lists(st.one_of(blocks, blocks, tool_results, thinking), min_size=1, max_size=5),
)
openai_messages = st.builds(
    lambda role, content, mark, details: {
        "role": role,
        "content": content,
        **({"cache_control": mark} if mark else {}),
        **({"reasoning_details": DETAILS} if details and role == "assistant" else {}),
    },
    st.sampled_from(["system", "user", "assistant"]),
    st.lists(st.one_of(blocks, blocks, image_url), min_size=1, max_size=5),
    marks,
    st.booleans(),
)


def content_of(message: Body) -> list[Body]:
    content = message.get("content")
    return content if isinstance(content, list) else []


@settings(max_examples=300, deadline=None)
@given(
    anthropic=st.tuples(
        st.just("anthropic"),
        st.lists(anthropic_messages, max_size=6),
        st.one_of(st.none(), st.lists(blocks, max_size=3)),
        st.booleans(),
    ),
    openai=st.tuples(st.just("openai"), st.lists(openai_messages, max_size=6)),
    which=st.booleans(),
)
def test_fix_invariants(
    anthropic: tuple[Wire, list[Body], list[Body] | None, bool],
    openai: tuple[Wire, list[Body]],
    which: bool,
) -> None:
    if which:
        wire, msgs, system, tools = anthropic
        body: Body = {"model": "claude-sonnet-5", "messages": msgs}
        if system is not None:
            body["system"] = system
        if tools:
            body["tools"] = copy.deepcopy(TOOLS)
    else:
        wire, msgs = openai
        body = {"model": CLAUDE, "messages": msgs}
    snapshot = copy.deepcopy(body)
    out, report = fix_empty_text_cache(body, wire)

    assert body == snapshot
    assert all(b["text"].strip() for b in text_blocks(out))
    assert count_markers(out) <= count_markers(body)
    # Signed reasoning passes through untouched, in order.
    thinking_in = [b for m in body["messages"] for b in content_of(m) if b["type"] == "thinking"]
    thinking_out = [b for m in out["messages"] for b in content_of(m) if b["type"] == "thinking"]
    assert thinking_out == thinking_in
    details_in = [m["reasoning_details"] for m in body["messages"] if "reasoning_details" in m]
    details_out = [m["reasoning_details"] for m in out["messages"] if "reasoning_details" in m]
    assert details_out == details_in
    if report is None:
        assert out is body
        return
    assert report.blocks == len(report.paths) > 0
    for path in report.moved_to:
        if path != "dropped":
            assert at(out, path)["cache_control"] is not None
    # A marker goes missing only by being absorbed or having nowhere to go.
    assert count_markers(body) - count_markers(out) <= len(report.moved_to)


# --- found by fuzzing (tests/reliability/test_fuzz_payloads.py) ----------------------------------


def test_a_block_whose_type_is_not_a_string_is_left_alone() -> None:
    # {"type": []} once raised TypeError (unhashable) out of the fix.
    body = {
        "model": "claude-x",
        "system": [{"type": [], "cache_control": {"type": "ephemeral"}}],
        "messages": [{"role": "user", "content": [{"type": {}}, {"type": "text", "text": " "}]}],
    }
    out, report = fix_empty_text_cache(body, "anthropic")
    assert report is not None and report.paths == ("messages[0].content[1]",)
    assert out["system"] == body["system"] and out["messages"][0]["content"] == [{"type": {}}]


def test_tool_results_nested_deeper_than_the_api_reads_are_not_walked() -> None:
    # The API reads a tool result's own blocks and no deeper; the fix once recursed through
    # any depth a client sent, towards a RecursionError.
    inner: Any = [{"type": "text", "text": " "}]
    for _ in range(3000):
        inner = [{"type": "tool_result", "tool_use_id": "t", "content": inner}]
    body = {"model": "claude-x", "messages": [{"role": "user", "content": inner}]}
    out, report = fix_empty_text_cache(body, "anthropic")
    assert (out, report) == (body, None)
    one_level = {
        "model": "claude-x",
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "t", "content": [TEXT_BLANK_MARKED]}
                ],
            }
        ],
    }
    fixed, one = fix_empty_text_cache(one_level, "anthropic")
    assert one is not None and one.paths == ("messages[0].content[0].content[0]",)
    assert fixed["messages"][0]["content"][0] == {
        "type": "tool_result",
        "tool_use_id": "t",
        "cache_control": {"type": "ephemeral"},
    }


TEXT_BLANK_MARKED = {"type": "text", "text": "", "cache_control": {"type": "ephemeral"}}


def test_a_message_without_a_readable_role_is_left_as_sent() -> None:
    # Found by fuzzing: a blank-only message whose role was a list (holding a signed thinking
    # block) was dropped whole, signed reasoning with it. A message swerve cannot read is the
    # API's to refuse, untouched.
    thinking = {"type": "thinking", "thinking": "", "signature": "EqQBCkYIBxgCKkD" + "x" * 40}
    message = {
        "role": [thinking],
        "content": [{"type": "text", "text": "", "cache_control": {"type": "ephemeral"}}],
    }
    body = {"model": "claude-x", "messages": [message]}
    out, report = fix_empty_text_cache(body, "anthropic")
    assert out == body and report is None
