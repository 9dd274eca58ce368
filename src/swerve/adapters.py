"""What an adapter (a framework integration such as ``swerve-langchain``) builds on.

* The errors an adapter raises while reading a stream (:class:`InStreamError`,
  :class:`IncompleteStreamError`, :class:`MalformedStreamError`) or catches from swerve's own
  limits (:class:`AttemptTimeout`, :class:`CircuitOpenError`), and :func:`classify`, which
  turns any error into the :class:`swerve.Failure` the engine decides on.
* The wire rules, applied to a request about to go to a route: :func:`prepare_for_route` runs
  a representation's :class:`WireRules` and reports what they changed (:class:`CacheFix`,
  :class:`Downgrade`). The rules are written once, on content blocks:
  :class:`EmptyTextFix` decides which blank text blocks (:func:`is_blank_text`) go and where
  their cache markers (:data:`CACHE_CONTROL`) move; :func:`speaks_to_claude` says whether a
  request on a :data:`Wire` to a model ends up at Anthropic's checks. The names the rules
  read (block types, marker and reasoning keys) are here too, so an adapter reads the same.

* The trace an adapter runs in: :func:`in_llm_span` marks a context whose current span is a
  framework's LLM span (one the adapter made current), so a call started in it leaves the
  call's token usage to that span, which counts it already.

Every name is the very object swerve's own transport uses; docs/extending.md shows each part.
"""

from __future__ import annotations

from ._failures import (
    AttemptTimeout,
    CircuitOpenError,
    IncompleteStreamError,
    InStreamError,
    MalformedStreamError,
    UpstreamError,
    classify,
)
from ._telemetry.telemetry import in_llm_span
from ._wire.rules import (
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
    WireRules,
    is_blank_text,
    is_claude,
    prepare_for_route,
    speaks_to_claude,
)

__all__ = [
    "ANTHROPIC_MARKABLE",
    "CACHE_CONTROL",
    "OPENAI_MARKABLE",
    "REASONING",
    "REASONING_DETAILS",
    "SIGNED_THINKING",
    "TEXT",
    "AttemptTimeout",
    "CacheFix",
    "CircuitOpenError",
    "Downgrade",
    "EmptyTextFix",
    "InStreamError",
    "IncompleteStreamError",
    "MalformedStreamError",
    "UpstreamError",
    "Wire",
    "WireRules",
    "classify",
    "in_llm_span",
    "is_blank_text",
    "is_claude",
    "prepare_for_route",
    "speaks_to_claude",
]
