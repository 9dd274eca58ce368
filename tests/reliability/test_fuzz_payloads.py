"""Fuzzing the wire fixes (``swerve._wire.payloads``) with random Anthropic and OpenAI message
lists.

For bodies that break only the rule the fix repairs (blank text blocks, with or without cache
markers), the fixed body passes :func:`anthropic_errors` / :func:`openai_errors`, a validator
of the provider rules involved. For any body at all, the fix never puts a marker on a block
that may not carry one, never alters signed reasoning, never adds a marker, and is
idempotent. The same goes for :func:`adapt_for_target`, the downgrade on a swap.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from swerve._wire.payloads import Wire, adapt_for_target, fix_empty_text_cache

from ._measure import fuzz

Report = Callable[..., None]
Body = dict[str, Any]


# --- the provider rules -------------------------------------------------------------------------
#
# Anthropic Messages API (docs.anthropic.com, "Messages" and "Prompt caching"):
#   A1 "text content blocks must be non-empty" / "text content blocks must contain
#      non-whitespace text": in messages, in system, and inside tool_result content.
#   A2 "cache_control cannot be set for empty text blocks" (implied by A1 once blanks are gone).
#   A3 cache_control goes on tools, system text blocks, and message blocks of type text,
#      image, document, tool_use and tool_result; "thinking blocks cannot be marked with
#      cache_control directly" (extended thinking + caching), nor can redacted_thinking.
#   A4 "A maximum of 4 blocks with cache_control may be provided."
#   A5 every message has non-empty content ("all messages must have non-empty content except
#      for the optional final assistant message"); a content list may not be empty.
#   A6 thinking and redacted_thinking blocks are replayed exactly as received: their
#      signature is checked against their content.
# OpenAI chat completions as OpenRouter relays them to Anthropic for Claude models: the same
# A1-A4 for content parts, where only text and image_url parts carry a marker (O3), and a
# message's content list is never empty (O5).

ANTHROPIC_MARKABLE = {"text", "image", "document", "tool_use", "tool_result"}
OPENAI_MARKABLE = {"text", "image_url"}
MAX_MARKERS = 4


def blocks_of(body: Body) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every content block of a body with a path-like place: system, messages, tool results."""
    system = body.get("system")
    for j, block in enumerate(system if isinstance(system, list) else []):
        if isinstance(block, dict):
            yield f"system[{j}]", block
    messages = body.get("messages")
    for i, message in enumerate(messages if isinstance(messages, list) else []):
        content = message.get("content") if isinstance(message, dict) else None
        for j, block in enumerate(content if isinstance(content, list) else []):
            if not isinstance(block, dict):
                continue
            yield f"messages[{i}].content[{j}]", block
            inner = block.get("content")
            if block.get("type") == "tool_result" and isinstance(inner, list):
                for k, sub in enumerate(inner):
                    if isinstance(sub, dict):
                        yield f"messages[{i}].content[{j}].content[{k}]", sub


def markers(node: Any) -> int:
    if isinstance(node, dict):
        own = 1 if node.get("cache_control") is not None else 0
        return own + sum(markers(v) for v in node.values())
    if isinstance(node, list):
        return sum(markers(v) for v in node)
    return 0


def anthropic_errors(body: Body) -> list[str]:
    """What the Messages API would refuse in ``body``, among the rules above."""
    errors = []
    for where, block in blocks_of(body):
        kind = block.get("type")
        if kind == "text" and not str(block.get("text", "")).strip():
            errors.append(f"{where}: A1 blank text block")
        if block.get("cache_control") is not None and kind not in ANTHROPIC_MARKABLE:
            errors.append(f"{where}: A3 cache_control on a {kind} block")
        if kind == "tool_result" and block.get("content") == []:
            errors.append(f"{where}: A5 empty tool_result content list")
    if markers(body) > MAX_MARKERS:
        errors.append("A4 more than 4 cache_control markers")
    if body.get("system") == []:
        errors.append("system: A5 empty list")
    for i, message in enumerate(body.get("messages", [])):
        if message.get("content") == []:
            errors.append(f"messages[{i}]: A5 empty content")
    return errors


def openai_errors(body: Body) -> list[str]:
    errors = []
    for where, block in blocks_of(body):
        kind = block.get("type")
        if kind == "text" and not str(block.get("text", "")).strip():
            errors.append(f"{where}: A1 blank text part")
        if block.get("cache_control") is not None and kind not in OPENAI_MARKABLE:
            errors.append(f"{where}: O3 cache_control on a {kind} part")
    if markers(body) > MAX_MARKERS:
        errors.append("A4 more than 4 cache_control markers")
    for i, message in enumerate(body.get("messages", [])):
        if message.get("content") == []:
            errors.append(f"messages[{i}]: O5 empty content")
    return errors


VALIDATORS: dict[str, Callable[[Body], list[str]]] = {
    "anthropic": anthropic_errors,
    "openai": openai_errors,
}


# --- random bodies -------------------------------------------------------------------------------

SIG = "EqQBCkYIBxgCKkD" + "x" * 40  # the shape of an Anthropic thinking signature
MARK = {"type": "ephemeral"}
blank = st.sampled_from(["", " ", "\n", " \t\r\n ", "\u3000", "\xa0"])
words = st.sampled_from(["a", "hello", " x ", "\u200b", "42"]) | st.text(min_size=1, max_size=8)
marks = st.sampled_from([None, None, MARK, {"type": "ephemeral", "ttl": "1h"}])


def _with_mark(block: dict[str, Any], mark: dict[str, str] | None) -> dict[str, Any]:
    return {**block, "cache_control": mark} if mark is not None else block


def text_block(text: st.SearchStrategy[str]) -> st.SearchStrategy[dict[str, Any]]:
    return st.builds(lambda t, m: _with_mark({"type": "text", "text": t}, m), text, marks)


texts = text_block(blank) | text_block(words)
image = st.builds(
    lambda m: _with_mark({"type": "image", "source": {"type": "url", "url": "https://x/i.png"}}, m),
    marks,
)
document = st.builds(
    lambda m: _with_mark({"type": "document", "source": {"type": "text", "data": "d"}}, m), marks
)
tool_use = st.builds(
    lambda i, m: _with_mark({"type": "tool_use", "id": f"toolu_{i}", "name": "f", "input": {}}, m),
    st.integers(0, 9),
    marks,
)
tool_result = st.builds(
    lambda i, inner, m: _with_mark(
        {"type": "tool_result", "tool_use_id": f"toolu_{i}", "content": inner}, m
    ),
    st.integers(0, 9),
    st.one_of(st.text(max_size=5), st.lists(texts | image, max_size=3)),
    marks,
)
# Signed reasoning, including the whitespace-only thinking a signature can cover.
thinking = st.builds(lambda t: {"type": "thinking", "thinking": t, "signature": SIG}, blank | words)
redacted = st.just({"type": "redacted_thinking", "data": "EmwKAhgBEgy" + "z" * 20})
anthropic_block = st.one_of(
    texts, texts, image, document, tool_use, tool_result, thinking, redacted
)
anthropic_message = st.builds(
    lambda role, content: {"role": role, "content": content},
    st.sampled_from(["user", "assistant"]),
    st.one_of(st.lists(anthropic_block, min_size=1, max_size=5), words),
)
TOOLS = [{"name": "f", "description": "d", "input_schema": {"type": "object"}}]


@st.composite
def anthropic_body(draw: st.DrawFn) -> Body:
    body: Body = {"model": "claude-sonnet-5", "max_tokens": 64}
    body["messages"] = draw(st.lists(anthropic_message, max_size=6))
    system = draw(st.one_of(st.none(), words, st.lists(texts, min_size=1, max_size=3)))
    if system is not None:
        body["system"] = system
    if draw(st.booleans()):
        body["tools"] = [_with_mark(dict(t), draw(marks)) for t in TOOLS]
    return body


DETAILS = [{"type": "reasoning.encrypted", "data": "enc", "format": "anthropic-claude-v1"}]
image_url = st.builds(
    lambda m: _with_mark({"type": "image_url", "image_url": {"url": "data:image/png;base64,x"}}, m),
    marks,
)
openai_message = st.builds(
    lambda role, content, mark, details, extra: {
        "role": role,
        "content": content,
        **({"cache_control": mark} if mark else {}),
        **(
            {"reasoning_details": copy.deepcopy(DETAILS)} if details and role == "assistant" else {}
        ),
        **({"reasoning": "r"} if details and role == "assistant" else {}),
        **({"tool_call_id": "call_1"} if extra and role == "tool" else {}),
        **({"name": "n"} if extra and role == "user" else {}),
    },
    st.sampled_from(["system", "user", "assistant", "tool"]),
    st.one_of(st.lists(st.one_of(texts, texts, image_url), min_size=1, max_size=5), words),
    marks,
    st.booleans(),
    st.booleans(),
)


@st.composite
def openai_body(draw: st.DrawFn) -> Body:
    model = draw(st.sampled_from(["anthropic/claude-sonnet-5", "Claude-3-5-haiku", "openai/gpt-5"]))
    body: Body = {"model": model, "messages": draw(st.lists(openai_message, max_size=6))}
    if draw(st.booleans()):
        body["cache_control"] = MARK
    return body


def _valid_except_blanks(wire: str, body: Body) -> bool:
    """Whether the only rule ``body`` breaks is the one the fix repairs (A1/A2)."""
    errors = VALIDATORS[wire](body)
    return all(": A1 " in e for e in errors)


junk = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner),
    max_leaves=8,
)
# Anything goes: markers on thinking blocks, blocks that are not objects, unknown types.
hostile_block = st.one_of(
    anthropic_block,
    image_url,
    st.builds(lambda b, m: _with_mark(dict(b), m), thinking | redacted, st.just(MARK)),
    st.dictionaries(st.sampled_from(["type", "text", "content", "cache_control"]), junk),
    junk,
)
hostile_body = st.fixed_dictionaries(
    {
        "model": st.sampled_from(["claude-x", "gpt-5", ""]) | junk,
        "messages": st.lists(
            st.dictionaries(
                st.sampled_from(["role", "content", "cache_control", "reasoning_details"]),
                st.one_of(st.lists(hostile_block, max_size=4), junk),
            )
            | junk,
            max_size=5,
        )
        | junk,
    },
    optional={
        "system": st.lists(hostile_block, max_size=3) | junk,
        "tools": st.lists(
            st.dictionaries(st.sampled_from(["name", "cache_control"]), junk), max_size=2
        )
        | junk,
    },
)

WIRE_BODIES = st.one_of(
    st.tuples(st.just("anthropic"), anthropic_body()),
    st.tuples(st.just("openai"), openai_body()),
)


# --- what must hold -------------------------------------------------------------------------------


def signed(body: Any, wire: str = "openai") -> list[Any]:
    """Signed reasoning, in order: thinking blocks with a signature and redacted_thinking
    blocks, and on the OpenAI wire OpenRouter's reasoning_details (on the Anthropic wire that
    key is foreign, refused by the API, and goes with its message)."""
    found: list[Any] = []
    if isinstance(body, dict):
        if body.get("type") == "redacted_thinking" or (
            body.get("type") == "thinking" and "signature" in body
        ):
            found.append(body)
            return found
        if wire == "openai" and "reasoning_details" in body:
            found.append(body["reasoning_details"])
        for key, value in body.items():
            if key != "reasoning_details":
                found += signed(value, wire)
    elif isinstance(body, list):
        for value in body:
            found += signed(value, wire)
    return found


def marked_blocks(body: Body) -> list[tuple[str, dict[str, Any]]]:
    return [(w, b) for w, b in blocks_of(body) if b.get("cache_control") is not None]


def check_fix(wire: Wire, body: Body) -> tuple[Body, bool]:
    snapshot = copy.deepcopy(body)
    out, report = fix_empty_text_cache(body, wire)
    assert body == snapshot  # the input is never modified
    assert signed(out, wire) == signed(body, wire)  # signed reasoning untouched, in order
    assert markers(out) <= markers(body)  # a marker is moved or absorbed, never added
    markable = ANTHROPIC_MARKABLE if wire == "anthropic" else OPENAI_MARKABLE
    before = {id(b) for _, b in marked_blocks(body)}
    for where, block in marked_blocks(out):
        # A marker on a block that may not carry one was there in the input (the caller's
        # own); the fix never put it there.
        kind = block.get("type")
        assert (isinstance(kind, str) and kind in markable) or id(block) in before, where
    again, second = fix_empty_text_cache(out, wire)
    assert again == out and second is None  # idempotent
    return out, report is not None


def test_fix_makes_bodies_the_api_accepts(soak_s: float, figure: Report) -> None:
    tried = fixed = 0

    @fuzz(soak_s, 400)
    @given(case=WIRE_BODIES)
    def prop(case: tuple[Wire, Body]) -> None:
        nonlocal tried, fixed
        wire, body = case
        tried += 1
        out, changed = check_fix(wire, body)
        fixed += changed
        claude = wire == "anthropic" or "claude" in body["model"].lower()
        if claude and _valid_except_blanks(wire, body):
            assert VALIDATORS[wire](out) == [], VALIDATORS[wire](out)

    prop()
    figure(
        "cache-marker fix on random Anthropic and OpenAI (Claude) message lists",
        "0 bodies the API would refuse; 0 markers on blocks that may not carry one; signed "
        "reasoning unchanged; fix(fix(x)) == fix(x)",
        measured=f"{tried} bodies ({fixed} changed), 0 refused, 0 violations",
    )


def test_fix_survives_hostile_bodies(soak_s: float, figure: Report) -> None:
    tried = 0

    @fuzz(soak_s, 300)
    @given(wire=st.sampled_from(["anthropic", "openai"]), body=hostile_body)
    def prop(wire: Wire, body: Body) -> None:
        nonlocal tried
        tried += 1
        check_fix(wire, body)
        for target in ("gpt-5", "claude-sonnet-5"):
            snapshot = copy.deepcopy(body)
            out, _ = adapt_for_target(body, wire, target_model=target)
            assert body == snapshot
            assert adapt_for_target(out, wire, target_model=target) == (out, None)

    prop()
    figure(
        "wire fixes on hostile bodies (junk blocks, markers on thinking, non-objects)",
        "0 exceptions; no marker added or moved onto a block that may not carry one; "
        "signed reasoning unchanged; idempotent",
        measured=f"{tried} bodies, 0 escaped, 0 violations",
    )


def test_deeply_nested_tool_results_do_not_recurse_without_bound() -> None:
    # A client body can nest tool_result blocks as deep as JSON allows; the API only reads
    # one level, and so does the fix.
    inner: Any = [{"type": "text", "text": " ", "cache_control": MARK}]
    for _ in range(5000):
        inner = [{"type": "tool_result", "tool_use_id": "t", "content": inner}]
    body = {"model": "claude-x", "messages": [{"role": "user", "content": inner}]}
    out, report = fix_empty_text_cache(body, "anthropic")
    assert report is None and out is body  # nothing at a level the API reads was blank


def test_downgrade_for_a_swap(soak_s: float, figure: Report) -> None:
    tried = 0

    @fuzz(soak_s, 300)
    @given(case=WIRE_BODIES, target=st.sampled_from(["gpt-5", "llama-4", "claude-sonnet-5"]))
    def prop(case: tuple[Wire, Body], target: str) -> None:
        nonlocal tried
        tried += 1
        wire, body = case
        snapshot = copy.deepcopy(body)
        out, _ = adapt_for_target(body, wire, target_model=target)
        assert body == snapshot
        again, second = adapt_for_target(out, wire, target_model=target)
        assert again == out and second is None  # idempotent
        if wire == "openai" and "claude" not in target:
            # Another provider gets no markers and no other provider's signed reasoning.
            assert markers(out) == 0 and signed(out) == []
            # ... and every word the user or the model wrote.
            assert [m.get("content") for m in out["messages"]] == [
                _unmarked(m.get("content")) for m in body["messages"]
            ]
        elif wire == "openai":
            assert out == body  # OpenRouter relays both to Anthropic
        else:
            # Anthropic keeps thinking blocks as they are, but no OpenAI-wire reasoning keys.
            assert "reasoning_details" not in str(out["messages"])
            assert [b for b in signed(out) if isinstance(b, dict)] == [
                b for b in signed(body) if isinstance(b, dict)
            ]
        # The documented order on a swap: downgrade, then the cache fix, gives a valid body.
        fixed, _ = fix_empty_text_cache(out, wire)
        claude = wire == "anthropic" or "claude" in str(out.get("model", "")).lower()
        if claude and _valid_except_blanks(wire, body):
            assert VALIDATORS[wire](fixed) == []

    prop()
    figure(
        "downgrade on a swap (adapt_for_target), then the cache fix",
        "idempotent; no markers or foreign signed reasoning to a non-Claude target; a body "
        "the API accepts",
        measured=f"{tried} bodies x targets, 0 violations",
    )


def _unmarked(content: Any) -> Any:
    if not isinstance(content, list):
        return content
    return [
        {k: v for k, v in b.items() if k != "cache_control"} if isinstance(b, dict) else b
        for b in content
    ]
