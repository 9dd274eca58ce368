"""The wire rules in one place: the names they read, what they report, and the one step that
applies them to a request about to go to a route.

The empty-text rule is decided here, once, on content blocks (:class:`EmptyTextFix`); each
representation of a conversation only walks its own structure in prefix order and applies the
decisions: raw JSON request bodies (:mod:`swerve._wire.payloads`, used by the transports) and
LangChain message lists (``swerve_langchain._history``). Both give the same :class:`CacheFix` /
:class:`Downgrade` reports, and both go through :func:`prepare_for_route`, so a swap adapts,
fixes and reports alike whichever way the request is sent. The public names are re-exported
by :mod:`swerve.adapters`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, Literal, Protocol, TypeVar

from .._telemetry.decisions import CacheFixed, Downgraded

if TYPE_CHECKING:
    from .._telemetry.telemetry import Telemetry

__all__ = [
    "ANTHROPIC_MARKABLE",
    "CACHE_CONTROL",
    "OPENAI_MARKABLE",
    "REASONING",
    "REASONING_DETAILS",
    "SIGNED_THINKING",
    "TEXT",
    "CacheFix",
    "Downgrade",
    "EmptyTextFix",
    "Wire",
    "WireRules",
    "is_blank_text",
    "is_claude",
    "prepare_for_route",
    "speaks_to_claude",
]

Wire = Literal["anthropic", "openai"]
"""Which API a request speaks: Anthropic Messages, or OpenAI chat completions (OpenRouter and
other OpenAI-compatible gateways). The one spelling of it in swerve."""

CACHE_CONTROL = "cache_control"
"""Anthropic's prompt-caching marker (on blocks, messages, tools, or a whole request)."""
TEXT = "text"
"""The text block type (its ``text`` is the block's content)."""
# Block types Anthropic accepts a cache_control marker on (non-empty text is checked apart).
# Thinking blocks are left out on purpose: the API rejects markers there.
ANTHROPIC_MARKABLE = frozenset({"image", "document", "tool_use", "tool_result"})
OPENAI_MARKABLE = frozenset({"image_url"})
SIGNED_THINKING = frozenset({"thinking", "redacted_thinking"})
"""Anthropic's signed reasoning blocks: only Anthropic can read (or accept) their signature."""
REASONING_DETAILS = "reasoning_details"
REASONING = "reasoning"
"""OpenRouter's reasoning keys on assistant messages (``reasoning_details`` is signed)."""


def is_claude(model: str) -> bool:
    """Whether ``model`` is an Anthropic Claude model on any route.

    Matches ``"claude"`` anywhere in the name, case-insensitively, so ``"claude-sonnet-5"``,
    ``"anthropic/claude-sonnet-5"`` and ``"claude-3-5-haiku-latest"`` all count. Use this one
    test wherever Claude matters, so caching and routing never disagree (a seed bug).
    """
    return "claude" in model.lower()


def speaks_to_claude(wire: Wire | None, model: str) -> bool:
    """Whether a request ends up at Anthropic's checks: it is on Anthropic's own API, or it
    names a Claude model a gateway (OpenRouter, an OpenAI-compatible proxy) relays there.
    ``None`` is an API that is neither wire (another SDK's own)."""
    return wire == "anthropic" or is_claude(model)


def is_blank_text(block: object) -> bool:
    """Whether ``block`` is a text block with nothing but whitespace, which Anthropic rejects."""
    if not isinstance(block, Mapping) or block.get("type") != TEXT:
        return False
    text = block.get("text")
    return isinstance(text, str) and not text.strip()


def _own_marker(block: Mapping[str, Any]) -> Any:
    return block.get(CACHE_CONTROL)


K = TypeVar("K")


@dataclass(slots=True)
class EmptyTextFix(Generic[K]):
    """The empty-text cache rule, decided once for every representation of a conversation.

    Feed it a conversation's blocks in the order of Anthropic's cached prefix (tools, system,
    messages), each under a key of the caller's choosing (a JSON path, a message and block
    index): :meth:`block` says which blank text blocks go (:attr:`drops`), and a cache marker
    one of them carried goes to the nearest earlier block that may carry one
    (:attr:`landed`, absorbed when that block already has a marker; :attr:`moved` names it, or
    ``None`` when there was none). Blocks the API never checks (not mappings, no string
    ``type``) are skipped as they are. What is not a block but may carry a marker (a tool, a
    string content the caller would turn into a block) is offered with :meth:`candidate`; a
    marker from elsewhere (a dropped message's own) with :meth:`land`.
    """

    markable: frozenset[str]
    """Block types besides non-blank text that may carry a marker (never thinking blocks)."""
    marker: Callable[[Mapping[str, Any]], Any] = _own_marker
    """How to read a block's marker (a representation may keep it elsewhere on the block)."""
    drops: list[K] = field(default_factory=list)
    landed: dict[K, Any] = field(default_factory=dict)
    moved: list[K | None] = field(default_factory=list)
    _last: K | None = field(default=None, init=False, repr=False)
    _last_marked: bool = field(default=False, init=False, repr=False)

    def block(self, key: K, block: object) -> bool:
        """Take the next block; True when it is blank text, to be dropped."""
        if not isinstance(block, Mapping):
            return False
        kind = block.get("type")
        if not isinstance(kind, str):  # a client's junk ({"type": []}) is left as it is
            return False
        if is_blank_text(block):
            self.drops.append(key)
            marker = self.marker(block)
            if marker is not None:
                self.land(marker)
            return True
        if (kind == TEXT and isinstance(block.get("text"), str)) or kind in self.markable:
            self.candidate(key, marked=self.marker(block) is not None)
        return False

    def candidate(self, key: K, *, marked: bool) -> None:
        """``key`` may carry a marker (``marked``: it has one already)."""
        self._last = key
        self._last_marked = marked

    def land(self, marker: Any) -> None:
        """A marker leaves its block: on the nearest earlier candidate, if any."""
        self.moved.append(self._last)
        if self._last is not None and not self._last_marked:
            self.landed[self._last] = marker
            self._last_marked = True  # a second marker moving here is absorbed


@dataclass(frozen=True, slots=True)
class CacheFix:
    """What a fix of empty text blocks changed.

    ``paths`` and ``messages`` are positions in the input (those items are gone from the
    returned one); ``moved_to`` names positions in the *returned* body, so it can be looked
    up in what was sent.
    """

    blocks: int
    """How many empty or whitespace-only text blocks were dropped."""
    moved_to: tuple[str, ...]
    """For each cache_control marker that sat on a dropped block (or on a dropped message), in
    body order: the path in the returned body of the block now carrying it (a marker absorbed by
    one already there names that block too), or ``"dropped"`` when no earlier block could."""
    paths: tuple[str, ...]
    """Where the dropped blocks were, as paths in the input body."""
    messages: tuple[str, ...] = ()
    """Messages removed because every block they had was dropped (paths in the input body)."""


@dataclass(frozen=True, slots=True)
class Downgrade:
    """What an adaptation for another provider removed, as paths in the input
    (``"messages[1].content[0].cache_control"``, ``"messages[3].reasoning_details"``)."""

    removed: tuple[str, ...]


B = TypeVar("B")


class WireRules(Protocol[B]):
    """The wire rules for one target, on one representation ``B`` of a request."""

    def adapt(self, body: B, /) -> tuple[B, Downgrade | None]:
        """``body`` without what the target's provider does not accept (after a swap)."""
        ...

    def fix(self, body: B, /) -> tuple[B, CacheFix | None]:
        """``body`` without the empty text blocks the target rejects, markers kept working."""
        ...


def prepare_for_route(
    body: B, rules: WireRules[B], *, route: str, moved: bool, telemetry: Telemetry
) -> B:
    """``body`` as ``route`` should receive it: adapted for the route's provider when the call
    moved there from the route it asked for (its history was written for another), then fixed
    on every call; each change is a span event and a count."""
    if moved:
        body, downgrade = rules.adapt(body)
        if downgrade is not None:
            telemetry.emit(Downgraded(route, downgrade.removed))
    body, fix = rules.fix(body)
    if fix is not None:
        telemetry.emit(CacheFixed(route, fix.blocks, fix.moved_to))
    return body
