"""The wire rules in one place: the names they read, what they report, and the one step that
applies them to a request about to go to a route.

The rules themselves are written once per representation of a conversation: raw JSON request
bodies (:mod:`swerve._wire.payloads`, used by the transports) and LangChain message lists
(``swerve_langchain._history``). Both give the same :class:`CacheFix` / :class:`Downgrade`
reports, and both go through :func:`prepare_for_route`, so a swap adapts, fixes and reports
alike whichever way the request is sent.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Protocol, TypeVar

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
    "WireName",
    "WireRules",
    "is_claude",
    "prepare_for_route",
    "speaks_to_claude",
]

WireName = Literal["anthropic", "openai"]
"""Which request shape a body has: Anthropic Messages or OpenAI (OpenRouter) chat completions."""

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


def speaks_to_claude(anthropic_api: bool, model: str) -> bool:
    """Whether a request ends up at Anthropic's checks: it is on Anthropic's own API, or it
    names a Claude model a gateway (OpenRouter, an OpenAI-compatible proxy) relays there."""
    return anthropic_api or is_claude(model)


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
            telemetry.downgrade(route, downgrade.removed)
    body, fix = rules.fix(body)
    if fix is not None:
        telemetry.cache_fix(route, fix.blocks, fix.moved_to)
    return body
