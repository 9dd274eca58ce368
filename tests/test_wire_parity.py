"""The wire rules agree on raw JSON bodies and on LangChain messages (issue 21).

The same conversation goes through the transport's path (:mod:`swerve._wire.payloads`, on an
Anthropic or OpenAI JSON body) and the LangChain adapter's (``swerve_langchain._history``, on
message objects), and the results are compared at the content-block level: each message's
blocks, and the reports. Comparing there, rather than after langchain-anthropic /
langchain-openai turned the messages into a request, is deliberate: their converters are
private (``_format_messages``), and langchain-anthropic silently drops empty text blocks
together with their marker, the very loss the rule exists to prevent, so it would hide the
differences this test is looking for.

What each representation does on its own, by design, is normalised here, not compared:
a message left with no blocks is dropped from a JSON body (it would be invalid) and kept
with an empty content in LangChain (the framework owns its list), so JSON report paths name
messages after the drops; LangChain keeps reasoning in ``additional_kwargs``. Beyond this test:
only JSON walks ``system`` and ``tools`` and the blocks of ``tool_result`` (LangChain has
system messages and tool messages instead), and only LangChain turns a string content into a
block to take a moved marker (a JSON string content is the caller's own text).
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from swerve_langchain._history import Target
from swerve_langchain._history import adapt_for_target as lc_adapt
from swerve_langchain._history import fix_empty_text_cache as lc_fix

from swerve._wire.payloads import adapt_for_target as json_adapt
from swerve._wire.payloads import fix_empty_text_cache as json_fix
from swerve.adapters import CacheFix, Downgrade, Wire

Block = dict[str, Any]
Turn = tuple[str, list[Block]]  # (role, blocks)
MARK = {"type": "ephemeral"}
MODEL = {"anthropic": "claude-sonnet-5", "openai": "anthropic/claude-sonnet-5"}


def text(value: str, **extra: Any) -> Block:
    return {"type": "text", "text": value, **extra}


def thinking(value: str = "hm") -> Block:
    return {"type": "thinking", "thinking": value, "signature": "sig"}


def image(wire: Wire, **extra: Any) -> Block:
    if wire == "anthropic":
        return {"type": "image", "source": {"type": "url", "url": "https://x/a.png"}, **extra}
    return {"type": "image_url", "image_url": {"url": "https://x/a.png"}, **extra}


def lc_messages(turns: list[Turn], provider: str = "anthropic") -> list[BaseMessage]:
    meta = {"model_provider": provider}
    out: list[BaseMessage] = []
    for role, blocks in turns:
        content: list[str | dict[Any, Any]] = list(blocks)
        out.append(
            HumanMessage(content) if role == "user" else AIMessage(content, response_metadata=meta)
        )
    return out


def body_of(turns: list[Turn], wire: Wire, model: str) -> dict[str, Any]:
    return {"model": model, "messages": [{"role": r, "content": b} for r, b in turns]}


def _renumber(path: str, kept: list[int]) -> str:
    """A LangChain path (no message dropped) as the JSON body names it (blank ones dropped)."""
    head, _, rest = path.partition("]")
    return f"messages[{kept.index(int(head.removeprefix('messages[')))}]{rest}"


def check_fix(turns: list[Turn], wire: Wire) -> CacheFix | None:
    target = Target(wire, MODEL[wire], wire)
    body, json_report = json_fix(body_of(turns, wire, MODEL[wire]), wire)
    messages, lc_report = lc_fix(lc_messages(turns), target)
    assert (json_report is None) == (lc_report is None)
    if json_report is None or lc_report is None:
        assert [m["content"] for m in body["messages"]] == [m.content for m in messages]
        return None
    # LangChain keeps the messages JSON drops (their content is ""): the rest must agree.
    emptied = [i for i, m in enumerate(messages) if m.content == "" and turns[i][1]]
    kept = [i for i in range(len(messages)) if i not in emptied]
    assert [m["content"] for m in body["messages"]] == [messages[i].content for i in kept]
    assert json_report.messages == tuple(f"messages[{i}]" for i in emptied)
    assert json_report.blocks == lc_report.blocks and json_report.paths == lc_report.paths
    assert json_report.moved_to == tuple(
        p if p == "dropped" else _renumber(p, kept) for p in lc_report.moved_to
    )
    return json_report


# --- hand-written cases, one per part of the rule ----------------------------------------------
FIX_CASES: dict[str, list[Turn]] = {
    "nothing blank": [("user", [text("hi", cache_control=MARK)]), ("assistant", [text("yo")])],
    "blank without marker": [("user", [text("hi"), text("")])],
    "whitespace-only is blank": [("user", [text("hi"), text(" \n\t")])],
    "marker moves back in its message": [("user", [text("hi"), text(" ", cache_control=MARK)])],
    "marker moves to an earlier message": [
        ("user", [text("hi")]),
        ("assistant", [text("", cache_control=MARK)]),
        ("user", [text("go")]),
    ],
    "marker already there absorbs it": [
        ("user", [text("hi", cache_control=MARK), text("", cache_control=MARK)])
    ],
    "no earlier block: marker dropped": [("user", [text(" ", cache_control=MARK), text("hi")])],
    "never onto thinking": [
        ("user", [text("hi")]),
        ("assistant", [thinking(), text("", cache_control=MARK)]),
    ],
    "whitespace thinking is signed, kept": [("assistant", [thinking(" "), text("ok")])],
    "two markers, one landing": [
        ("user", [text("a"), text("", cache_control=MARK), text(" ", cache_control=MARK)])
    ],
    "a message of blanks only": [
        ("user", [text("hi")]),
        ("assistant", [text(""), text(" ", cache_control=MARK)]),
        ("user", [text("again"), text("")]),
    ],
}


@pytest.mark.parametrize("wire", ["anthropic", "openai"])
@pytest.mark.parametrize("case", FIX_CASES, ids=list(FIX_CASES))
def test_the_cache_fix_agrees(case: str, wire: Wire) -> None:
    report = check_fix(FIX_CASES[case], wire)
    assert (report is None) == (case in {"nothing blank", "whitespace thinking is signed, kept"})


@pytest.mark.parametrize("wire", ["anthropic", "openai"])
def test_markable_blocks_of_each_wire_take_markers_alike(wire: Wire) -> None:
    report = check_fix([("user", [image(wire), text("", cache_control=MARK)])], wire)
    assert report is not None and report.moved_to == ("messages[0].content[0]",)


def test_non_claude_models_are_left_alone_on_both_paths() -> None:
    turns = FIX_CASES["marker moves back in its message"]
    body = body_of(turns, "openai", "gpt-5")
    assert json_fix(body, "openai") == (body, None)
    messages = lc_messages(turns)
    assert lc_fix(messages, Target("openai", "gpt-5", "openai")) == (messages, None)


def _removed(report: Downgrade | None) -> set[str]:
    return {p.replace("additional_kwargs.", "") for p in report.removed} if report else set()


def test_a_downgrade_for_a_non_claude_target_agrees() -> None:
    turns: list[Turn] = [
        ("user", [text("hi", cache_control=MARK), image("openai", cache_control=MARK)]),
        ("assistant", [text("yo")]),
        ("user", [text("more", cache_control=MARK)]),
    ]
    details = [{"type": "reasoning.text", "text": "hm", "signature": "s"}]
    body = body_of(turns, "openai", "gpt-5")
    body["messages"][1]["reasoning_details"] = details
    out, json_report = json_adapt(body, "openai", target_model="gpt-5")
    messages = lc_messages(turns, provider="openrouter")
    messages[1] = messages[1].model_copy(
        update={"additional_kwargs": {"reasoning_details": details}}
    )
    lc_out, lc_report = lc_adapt(messages, Target("openai", "gpt-5", "openai"))
    assert [m["content"] for m in out["messages"]] == [m.content for m in lc_out]
    assert "reasoning_details" not in out["messages"][1] and lc_out[1].additional_kwargs == {}
    assert (
        _removed(json_report)
        == _removed(lc_report)
        == {
            "messages[0].content[0].cache_control",
            "messages[0].content[1].cache_control",
            "messages[1].reasoning_details",
            "messages[2].content[0].cache_control",
        }
    )


def test_a_downgrade_for_claude_keeps_markers_and_anthropic_thinking_alike() -> None:
    turns: list[Turn] = [
        ("user", [text("hi", cache_control=MARK)]),
        ("assistant", [thinking(), text("yo")]),
    ]
    out, json_report = json_adapt(body_of(turns, "anthropic", "claude-x"), "anthropic",
                                  target_model="claude-x")  # fmt: skip
    lc_out, lc_report = lc_adapt(lc_messages(turns), Target("anthropic", "claude-x", "anthropic"))
    assert json_report is None and lc_report is None
    assert [m["content"] for m in out["messages"]] == [m.content for m in lc_out]


# --- random conversations ----------------------------------------------------------------------
def _blocks(wire: Wire) -> st.SearchStrategy[list[Block]]:
    marker = st.sampled_from([{}, {"cache_control": MARK}])
    texts = st.builds(lambda t, m: text(t, **m), st.sampled_from(["", " ", "\n", "hi"]), marker)
    images = st.builds(lambda m: image(wire, **m), marker)
    kinds = [texts, images]
    if wire == "anthropic":
        kinds.append(st.builds(thinking, st.sampled_from(["", " ", "hm"])))
    return st.lists(st.one_of(*kinds), min_size=1, max_size=4)


@st.composite
def conversations(draw: st.DrawFn) -> tuple[Wire, list[Turn]]:
    wire: Wire = draw(st.sampled_from(["anthropic", "openai"]))
    contents = draw(st.lists(_blocks(wire), min_size=1, max_size=5))
    return wire, [("user" if i % 2 == 0 else "assistant", b) for i, b in enumerate(contents)]


@settings(max_examples=300, deadline=None)
@given(conversations())
def test_random_conversations_fix_alike(case: tuple[Wire, list[Turn]]) -> None:
    wire, turns = case
    check_fix(turns, wire)


@st.composite
def swaps(draw: st.DrawFn) -> tuple[list[Turn], list[bool]]:
    """OpenAI-wire conversations (the wire a swap to a non-Claude model is on), and which
    assistant turns carry OpenRouter's signed ``reasoning_details``."""
    contents = draw(st.lists(_blocks("openai"), min_size=1, max_size=5))
    turns = [("user" if i % 2 == 0 else "assistant", b) for i, b in enumerate(contents)]
    reasoning = draw(st.lists(st.booleans(), min_size=len(turns), max_size=len(turns)))
    return turns, [r and role == "assistant" for r, (role, _) in zip(reasoning, turns, strict=True)]


@settings(max_examples=200, deadline=None)
@given(swaps())
def test_random_swaps_to_a_non_claude_model_downgrade_alike(
    case: tuple[list[Turn], list[bool]],
) -> None:
    turns, reasoning = case
    details = [{"type": "reasoning.text", "text": "hm", "signature": "s"}]
    body = body_of(turns, "openai", "gpt-5")
    messages = lc_messages(turns, provider="openrouter")
    for i, signed in enumerate(reasoning):
        if signed:
            body["messages"][i]["reasoning_details"] = details
            messages[i] = messages[i].model_copy(
                update={"additional_kwargs": {"reasoning_details": details}}
            )
    out, json_report = json_adapt(body, "openai", target_model="gpt-5")
    lc_out, lc_report = lc_adapt(messages, Target("openai", "gpt-5", "openai"))
    assert [m["content"] for m in out["messages"]] == [m.content for m in lc_out]
    assert _removed(json_report) == _removed(lc_report)
    assert not any("reasoning_details" in m for m in out["messages"])
    assert not any(m.additional_kwargs for m in lc_out)
