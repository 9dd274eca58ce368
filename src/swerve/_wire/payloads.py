"""Wire fixes on raw JSON request bodies: pure functions that repair them before they are sent.

Two wires are understood:

* ``"anthropic"``: the Anthropic Messages API (``tools``, ``system`` as a string or a list of
  blocks, ``messages`` whose ``content`` is a string or a list of blocks).
* ``"openai"``: OpenAI chat completions as relayed by OpenRouter (``messages`` with roles
  ``system`` / ``user`` / ``assistant`` / ``tool``, ``content`` as a string or a list of parts,
  optional ``reasoning_details`` on assistant messages).

Nothing here mutates its input. A function returns a new body that copies only the
containers on the way to what changed (everything else is shared with the input), or the
input itself when nothing changed, together with a frozen report (``None`` when nothing
changed). Paths in reports are JSON paths such as ``"messages[2].content[0]"``.

:func:`fix_empty_text_cache` prevents Anthropic's 400s for empty text blocks;
:func:`adapt_for_target` strips what a swapped-to provider does not accept. :class:`JsonRules`
offers both to :func:`swerve._wire.rules.prepare_for_route`, which runs them in that order
and reports what they did. The names, the reports and that step live in
:mod:`swerve._wire.rules`, shared with the LangChain adapter's rules on message objects.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .rules import (
    ANTHROPIC_MARKABLE,
    CACHE_CONTROL,
    OPENAI_MARKABLE,
    REASONING,
    REASONING_DETAILS,
    CacheFix,
    Downgrade,
    EmptyTextFix,
    Wire,
    is_claude,
    speaks_to_claude,
)

__all__ = [
    "CacheFix",
    "Downgrade",
    "JsonRules",
    "Wire",
    "adapt_for_target",
    "fix_empty_text_cache",
    "is_claude",
]

_Path = tuple[str | int, ...]

# Message keys that carry nothing once the content is gone, so such a message can be dropped;
# anything else (tool_calls, tool_call_id, reasoning_details) must survive with the message.
_DROPPABLE_MESSAGE_KEYS = frozenset({"role", "content", "name", CACHE_CONTROL})
_REASONING_KEYS = (REASONING_DETAILS, REASONING)


@dataclass(frozen=True, slots=True)
class JsonRules:
    """The wire rules for a raw JSON body on ``wire`` going to ``target_model``
    (a :class:`swerve._wire.rules.WireRules`)."""

    wire: Wire
    target_model: str

    def adapt(self, body: dict[str, Any], /) -> tuple[dict[str, Any], Downgrade | None]:
        return adapt_for_target(body, self.wire, target_model=self.target_model)

    def fix(self, body: dict[str, Any], /) -> tuple[dict[str, Any], CacheFix | None]:
        return fix_empty_text_cache(body, self.wire)


def fix_empty_text_cache(
    body: Mapping[str, Any], wire: Wire
) -> tuple[dict[str, Any], CacheFix | None]:
    """Drop empty and whitespace-only text blocks, keeping their cache markers working.

    Anthropic rejects such blocks ("text content blocks must be non-empty", "... must contain
    non-whitespace text") and rejects markers on them ("cache_control cannot be set for empty
    text blocks"). Each such block is dropped wherever it sits: message content, ``system``
    (Anthropic wire), and the content of ``tool_result`` blocks. A ``cache_control`` it carried
    moves to the nearest earlier block that may carry one, searching backwards through earlier
    blocks of the same message, earlier messages, then ``system`` and then the last of
    ``tools`` (Anthropic wire only, in that order, which is the order of Anthropic's cached
    prefix). The cached prefix then still ends at the last real content before the blank
    block, short only of blocks that cannot carry a marker (thinking, unknown types) skipped on
    the way. If that block already has a marker the moved one is absorbed; if there is no such
    block the marker is dropped. Markers never land on ``thinking`` / ``redacted_thinking``
    blocks, which the API rejects them on.

    A message whose content list held nothing but empty text blocks is dropped (Anthropic merges
    consecutive same-role turns, so this keeps the body valid); a message-level
    ``cache_control`` it had moves like a block's. On the OpenAI wire a message that carries
    more than role and content (``tool_calls``, ``tool_call_id``, ``reasoning_details``) is
    kept, with content ``None`` (assistant) or ``""`` (other roles). A ``tool_result`` whose
    content list empties loses its ``content`` key (optional there: a result with no output), and a
    ``system`` list that empties is removed. A body whose every message is blank loses them all
    and stays invalid, as it was.

    Signed reasoning is never touched: ``thinking`` blocks (even whitespace-only ones carrying a
    signature), ``redacted_thinking`` blocks and ``reasoning_details`` pass through as they are.
    String content (``"content": ""``) is the caller's own text and carries no marker, so it is
    left alone too.

    On the OpenAI wire the fix applies only when ``body["model"]`` is Claude (OpenRouter relays
    those to Anthropic, which applies its checks); other models get the body back unchanged.
    """
    # The transport skips this call on the same test (routing._Way.fixes): keep them one.
    if not speaks_to_claude(wire, str(body.get("model") or "")):
        # _same(), written out: most bodies go to a model that has no such checks.
        return (body if isinstance(body, dict) else dict(body)), None
    plan = _CachePlan(wire)
    plan.walk(body)
    rule = plan.rule
    if not rule.drops:
        return _same(body), None
    for path, marker in rule.landed.items():
        plan.edits.assign(path, CACHE_CONTROL, marker)
    out = _apply(body, (), plan.edits)
    report = CacheFix(
        blocks=len(rule.drops),
        moved_to=tuple(
            "dropped" if p is None else _fmt(_out_path(p, plan.edits.drops)) for p in rule.moved
        ),
        paths=tuple(_fmt(p) for p in rule.drops),
        messages=tuple(_fmt(p) for p in plan.dropped_messages),
    )
    return out, report


def adapt_for_target(
    body: Mapping[str, Any], wire: Wire, *, target_model: str
) -> tuple[dict[str, Any], Downgrade | None]:
    """Remove from ``body`` what the provider behind ``target_model`` does not accept.

    Meant for a swap, where a body written for one route is sent on another:

    * OpenAI wire, non-Claude target: every ``cache_control`` goes (on content parts, on
      messages, on tools and at the top level), and so do ``reasoning_details`` and
      ``reasoning`` on assistant messages, because another provider's signed reasoning would be
      rejected or taken as the target's own. Visible text and tool calls stay.
    * OpenAI wire, Claude target: nothing changes; OpenRouter relays markers and
      ``reasoning_details`` to Anthropic.
    * Anthropic wire (the target is Claude by definition): thinking blocks stay, since whether a
      signature is Anthropic's cannot be told from the body; ``reasoning_details`` (and
      ``reasoning``) keys that leaked in from the OpenAI wire are removed from messages and
      blocks, because the Messages API rejects unknown fields.
    """
    drops: list[_Path] = []
    messages = body.get("messages")
    indexed = list(enumerate(messages)) if isinstance(messages, list) else []
    if wire == "openai":
        if is_claude(target_model):
            return _same(body), None
        if CACHE_CONTROL in body:
            drops.append((CACHE_CONTROL,))
        tools = body.get("tools")
        for i, tool in enumerate(tools if isinstance(tools, list) else []):
            if isinstance(tool, Mapping) and CACHE_CONTROL in tool:
                drops.append(("tools", i, CACHE_CONTROL))
        for i, message in indexed:
            if not isinstance(message, Mapping):
                continue
            path: _Path = ("messages", i)
            if CACHE_CONTROL in message:
                drops.append((*path, CACHE_CONTROL))
            if message.get("role") == "assistant":
                drops += [(*path, k) for k in _REASONING_KEYS if k in message]
            drops += _keyed_blocks(message, path, CACHE_CONTROL)
    else:
        for i, message in indexed:
            if not isinstance(message, Mapping):
                continue
            path = ("messages", i)
            drops += [(*path, k) for k in _REASONING_KEYS if k in message]
            drops += _keyed_blocks(message, path, REASONING_DETAILS)
    if not drops:
        return _same(body), None
    return _apply(body, (), _Edits.of(drops)), Downgrade(tuple(_fmt(p) for p in drops))


# --- internals ------------------------------------------------------------------------------


def _same(body: Mapping[str, Any]) -> dict[str, Any]:
    # Unchanged means the very same object; only a non-dict mapping has to become a dict.
    return body if isinstance(body, dict) else dict(body)


def _fmt(path: _Path) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else part)
    return out


def _out_path(path: _Path, drops: set[_Path]) -> _Path:
    """Where ``path`` (in the input) sits in the output, after the dropped items before it."""
    out: list[str | int] = []
    for n, part in enumerate(path):
        if isinstance(part, int):
            parent = path[:n]
            gone = [d[n] for d in drops if len(d) == n + 1 and d[:n] == parent]
            part -= sum(1 for j in gone if isinstance(j, int) and j < part)
        out.append(part)
    return tuple(out)


def _keyed_blocks(message: Mapping[str, Any], path: _Path, key: str) -> list[_Path]:
    content = message.get("content")
    if not isinstance(content, list):
        return []
    return [
        (*path, "content", j, key)
        for j, block in enumerate(content)
        if isinstance(block, Mapping) and key in block
    ]


@dataclass
class _Edits:
    """Removals (list items or mapping keys) and key assignments, by path."""

    drops: set[_Path] = field(default_factory=set)
    sets: dict[_Path, dict[str, Any]] = field(default_factory=dict)
    _touched: set[_Path] | None = field(default=None, init=False, repr=False)

    @classmethod
    def of(cls, drops: Iterable[_Path]) -> _Edits:
        return cls(drops=set(drops))

    def assign(self, path: _Path, key: str, value: Any) -> None:
        self.sets.setdefault(path, {})[key] = value
        self._touched = None

    def touched(self) -> set[_Path]:
        # Every container on the way to an edit is copied; everything else is shared.
        if self._touched is None:
            seen: set[_Path] = set()
            for path in self.drops:
                seen.update(path[:n] for n in range(len(path)))
            for path in self.sets:
                seen.update(path[:n] for n in range(len(path) + 1))
            self._touched = seen
        return self._touched


def _apply(node: Any, path: _Path, edits: _Edits) -> Any:
    if path not in edits.touched():
        return node
    if isinstance(node, Mapping):
        new = {
            k: _apply(v, (*path, k), edits)
            for k, v in node.items()
            if (*path, k) not in edits.drops
        }
        new.update(edits.sets.get(path, {}))
        return new
    if isinstance(node, list):
        return [
            _apply(v, (*path, j), edits)
            for j, v in enumerate(node)
            if (*path, j) not in edits.drops
        ]
    return node


class _CachePlan:
    """One walk over a body in prefix order, feeding :class:`EmptyTextFix` (which decides
    what goes and where markers land) and recording the structural edits that follow."""

    def __init__(self, wire: Wire) -> None:
        self.wire = wire
        self.edits = _Edits()
        self.rule: EmptyTextFix[_Path] = EmptyTextFix(
            ANTHROPIC_MARKABLE if wire == "anthropic" else OPENAI_MARKABLE
        )
        self.dropped_messages: list[_Path] = []

    def walk(self, body: Mapping[str, Any]) -> None:
        if self.wire == "anthropic":
            tools = body.get("tools")
            for i, tool in enumerate(tools if isinstance(tools, list) else []):
                if isinstance(tool, Mapping):
                    self.rule.candidate(("tools", i), marked=tool.get(CACHE_CONTROL) is not None)
            system = body.get("system")
            if isinstance(system, list) and self._blocks(system, ("system",)):
                self.edits.drops.add(("system",))  # nothing but blank blocks: no system prompt
        messages = body.get("messages")
        for i, message in enumerate(messages if isinstance(messages, list) else []):
            if isinstance(message, Mapping):
                self._message(message, ("messages", i))

    def _message(self, message: Mapping[str, Any], path: _Path) -> None:
        if not isinstance(message.get("role"), str):
            return  # a message swerve cannot read is the API's to refuse, as sent
        content = message.get("content")
        if not isinstance(content, list) or not self._blocks(content, (*path, "content")):
            return
        # Every block was blank: the message has nothing left to say.
        marker = message.get(CACHE_CONTROL) if self.wire == "openai" else None
        if marker is not None:
            self.rule.land(marker)
        if self.wire == "anthropic" or _DROPPABLE_MESSAGE_KEYS.issuperset(message):
            self.edits.drops.add(path)
            self.dropped_messages.append(path)
            return
        self.edits.assign(path, "content", None if message.get("role") == "assistant" else "")
        if marker is not None:
            self.edits.drops.add((*path, CACHE_CONTROL))

    def _blocks(self, blocks: Sequence[Any], path: _Path, *, nested: bool = False) -> bool:
        """Walk one content list; True when it was non-empty and every block got dropped.

        ``nested`` is a tool result's own content: the API reads blocks there but no deeper, so
        neither does the walk (a client body may nest tool results as deep as JSON allows).
        """
        dropped = 0
        for j, block in enumerate(blocks):
            here = (*path, j)
            if self.rule.block(here, block):
                dropped += 1
                self.edits.drops.add(here)
                continue
            # A tool result nests its own blocks, which the API checks the same way.
            inner = block.get("content") if isinstance(block, Mapping) else None
            if (
                self.wire == "anthropic"
                and not nested
                and isinstance(block, Mapping)
                and block.get("type") == "tool_result"
                and isinstance(inner, list)
                and self._blocks(inner, (*here, "content"), nested=True)
            ):
                self.edits.drops.add((*here, "content"))
        return bool(blocks) and dropped == len(blocks)
