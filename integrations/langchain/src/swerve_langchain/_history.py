"""The wire rules on LangChain message objects: the conversation as a route should get it.

The step that applies the rules and reports what they did, the names they read, the reports
they give and the empty-text rule's decisions are the core's (:mod:`swerve.adapters`, the same
the transports use on raw JSON bodies); this module holds only what is LangChain's own: which
model a route is (:class:`Target`), and the walks of message lists that apply the rules, both
pure (the input list and its messages are never modified), offered to the core as
:class:`MessageRules`:

* :func:`fix_empty_text_cache`: for Claude targets (direct, or behind OpenRouter or another
  OpenAI-compatible gateway) empty and whitespace-only text blocks are dropped, and a
  ``cache_control`` marker one of them carried moves to the nearest earlier block that may
  carry it. Anthropic rejects markers on empty blocks (and, relayed, the blocks themselves);
  langchain-anthropic silently drops such blocks together with their marker, which loses the
  cache breakpoint. What goes and where a marker lands is decided by
  :class:`swerve.adapters.EmptyTextFix`, as for raw JSON bodies; LangChain's own part is that a
  string content may take a moved marker (it becomes one text block) and that a message whose
  blocks all go keeps an empty content rather than being dropped.
* :func:`adapt_for_target`: when the call moved to another route, Anthropic prompt-caching
  markers are removed for targets that are neither Anthropic nor Claude (as LangChain's
  ``ModelFallbackMiddleware`` does) and kept otherwise; signed reasoning written by another
  provider (Anthropic ``thinking`` / ``redacted_thinking`` blocks, OpenRouter
  ``reasoning_details``, OpenAI reasoning items) is removed from prior assistant messages, so
  the new provider neither rejects the turn nor takes it as its own. Visible text and tool
  calls stay.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage

from swerve.adapters import (
    ANTHROPIC_MARKABLE,
    CACHE_CONTROL,
    OPENAI_MARKABLE,
    REASONING,
    REASONING_DETAILS,
    SIGNED_THINKING,
    TEXT,
    CacheFix,
    Downgrade,
    EmptyTextFix,
    Wire,
    speaks_to_claude,
)

__all__ = ["MessageRules", "Target", "adapt_for_target", "fix_empty_text_cache", "target_of"]

# `_llm_type` of models that speak Anthropic's API (LangChain's ModelFallbackMiddleware list).
ANTHROPIC_LLM_TYPES = frozenset(
    {"anthropic-chat", "anthropic-bedrock-chat", "anthropic-chat-vertexai"}
)
# `_llm_type` of models that speak OpenAI chat completions (OpenRouter's is OpenAI-compatible).
OPENAI_LLM_TYPES = frozenset({"openai-chat", "azure-openai-chat", "openrouter-chat"})
# LangChain's standard content blocks add their own "reasoning" and "file" kinds, and its
# messages keep reasoning in additional_kwargs (langchain-openai's "reasoning_content" too).
_REASONING_BLOCKS = SIGNED_THINKING | {"reasoning"}
_REASONING_KWARGS = (REASONING_DETAILS, "reasoning_content", REASONING)
# A LangChain message may hold either wire's blocks.
_MARKABLE = ANTHROPIC_MARKABLE | OPENAI_MARKABLE | {"file"}
_NESTED = ("extras", "metadata")  # where LangChain blocks may keep a cache_control marker


@dataclass(frozen=True, slots=True)
class Target:
    """What the history adaptation needs to know about a route's model."""

    provider: str  # LangChain's provider key: "anthropic", "openai", "openrouter", ...
    model: str
    wire: Wire | None  # the API its SDK speaks; None for neither (another SDK's own)

    @property
    def claude(self) -> bool:
        return speaks_to_claude(self.wire, self.model)


def target_of(model: BaseChatModel) -> Target:
    llm_type = getattr(model, "_llm_type", "")
    name = getattr(model, "model_name", None) or getattr(model, "model", None) or ""
    try:
        provider = str(model._get_ls_params().get("ls_provider") or llm_type)
    except Exception:  # a model whose ls params need call arguments
        provider = str(llm_type)
    wire: Wire | None = None
    if llm_type in ANTHROPIC_LLM_TYPES:
        wire = "anthropic"
    elif llm_type in OPENAI_LLM_TYPES:
        wire = "openai"
    return Target(provider, str(name), wire)


@dataclass(frozen=True, slots=True)
class MessageRules:
    """The wire rules for a message list going to ``target``
    (a :class:`swerve.adapters.WireRules`)."""

    target: Target

    def adapt(self, messages: list[BaseMessage], /) -> tuple[list[BaseMessage], Downgrade | None]:
        return adapt_for_target(messages, self.target)

    def fix(self, messages: list[BaseMessage], /) -> tuple[list[BaseMessage], CacheFix | None]:
        return fix_empty_text_cache(messages, self.target)


def adapt_for_target(
    messages: Sequence[BaseMessage], target: Target
) -> tuple[list[BaseMessage], Downgrade | None]:
    """The history for a route the call moved to (see the module docs), and what was removed
    (``messages[2].content[0]``, ``messages[1].content[0].cache_control``,
    ``messages[3].additional_kwargs.reasoning_details``, ...)."""
    out: list[BaseMessage] = []
    removed: list[str] = []
    for i, message in enumerate(messages):
        here = f"messages[{i}]"
        content = message.content
        kwargs = message.additional_kwargs
        update: dict[str, Any] = {}
        if isinstance(message, AIMessage) and _foreign(message, target):
            if isinstance(content, list):
                gone = [j for j, b in enumerate(content) if _is_reasoning(b)]
                if gone:
                    removed += [f"{here}.content[{j}]" for j in gone]
                    kept = [b for b in content if not _is_reasoning(b)]
                    content = update["content"] = kept if kept else ""
            if any(k in kwargs for k in _REASONING_KWARGS):
                removed += [
                    f"{here}.additional_kwargs.{k}" for k in _REASONING_KWARGS if k in kwargs
                ]
                kwargs = update["additional_kwargs"] = {
                    k: v for k, v in kwargs.items() if k not in _REASONING_KWARGS
                }
        if not target.claude:
            if isinstance(content, list):
                stripped = [_without_cache_control(b) for b in content]
                changed = [
                    j for j, (a, b) in enumerate(zip(stripped, content, strict=True)) if a is not b
                ]
                if changed:
                    removed += [f"{here}.content[{j}].{CACHE_CONTROL}" for j in changed]
                    update["content"] = stripped
            if CACHE_CONTROL in kwargs:
                removed.append(f"{here}.additional_kwargs.{CACHE_CONTROL}")
                update["additional_kwargs"] = {
                    k: v for k, v in kwargs.items() if k != CACHE_CONTROL
                }
        out.append(message.model_copy(update=update) if update else message)
    return out, Downgrade(tuple(removed)) if removed else None


def fix_empty_text_cache(
    messages: Sequence[BaseMessage], target: Target
) -> tuple[list[BaseMessage], CacheFix | None]:
    """Drop empty text blocks for Claude targets, moving their cache markers back."""
    if not target.claude:
        return list(messages), None
    # Keys are (message, block in the input, block in the output): drops are reported where
    # they were, landed markers where they are now.
    rule: EmptyTextFix[tuple[int, int, int]] = EmptyTextFix(_MARKABLE, _marker)
    contents: dict[int, list[Any]] = {}  # message index -> its content, rewritten
    touched: set[int] = set()
    for i, message in enumerate(messages):
        if isinstance(message.content, str):
            if message.content.strip():  # a string becomes one text block if a marker lands
                contents[i] = [{"type": TEXT, "text": message.content}]
                rule.candidate((i, 0, 0), marked=False)
            continue
        new = contents[i] = []
        for j, block in enumerate(message.content):
            if rule.block((i, j, len(new)), block):
                touched.add(i)
            else:
                new.append(block)
    if not rule.drops:
        return list(messages), None
    for (i, _, j), marker in rule.landed.items():
        contents[i][j] = {**contents[i][j], CACHE_CONTROL: marker}
        touched.add(i)
    out = [
        m.model_copy(update={"content": contents[i] or ""}) if i in touched else m
        for i, m in enumerate(messages)
    ]
    moved_to = tuple(
        "dropped" if where is None else f"messages[{where[0]}].content[{where[2]}]"
        for where in rule.moved
    )
    dropped = tuple(f"messages[{i}].content[{j}]" for i, j, _ in rule.drops)
    return out, CacheFix(len(dropped), moved_to, dropped)


def _foreign(message: AIMessage, target: Target) -> bool:
    """Whether ``message`` was written by a provider other than the target's."""
    source = message.response_metadata.get("model_provider")
    return isinstance(source, str) and bool(source) and source != target.provider


def _is_reasoning(block: object) -> bool:
    return isinstance(block, dict) and block.get("type") in _REASONING_BLOCKS


def _marker(block: Any) -> Any:
    if not isinstance(block, dict):
        return None
    if block.get(CACHE_CONTROL) is not None:
        return block[CACHE_CONTROL]
    for nested in _NESTED:
        inner = block.get(nested)
        if isinstance(inner, dict) and inner.get(CACHE_CONTROL) is not None:
            return inner[CACHE_CONTROL]
    return None


def _without_cache_control(block: Any) -> Any:
    if not isinstance(block, dict):
        return block
    out = block
    if CACHE_CONTROL in block:
        out = {k: v for k, v in block.items() if k != CACHE_CONTROL}
    for nested in _NESTED:
        inner = out.get(nested)
        if isinstance(inner, dict) and CACHE_CONTROL in inner:
            if out is block:
                out = dict(block)
            out[nested] = {k: v for k, v in inner.items() if k != CACHE_CONTROL}
    return out
