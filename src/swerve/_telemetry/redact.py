"""Scrub credentials from text bound for spans and logs, and bound its length."""

from __future__ import annotations

import re
from collections.abc import Iterable

__all__ = ["REDACTED", "printable", "redact", "scrub"]

REDACTED = "[REDACTED]"

# Order matters: a header or parameter name keeps its name and loses its value (including a
# "Bearer " prefix) before the free-standing patterns run over what is left.
_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    (
        re.compile(
            r"""(?ix)
            \b(x-api-key|x-goog-api-key|api[_-]?key|apikey|access[_-]?token|authorization
               |client[_-]?secret|password)
            (["']?\s*[:=]\s*["']?)
            (?:(?:bearer|basic)\s+)?[^\s"'&,;]+
            """
        ),
        rf"\1\2{REDACTED}",
    ),
    (re.compile(r"([?&]key=)[^\s&\"']+"), rf"\1{REDACTED}"),
    (re.compile(r"(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=-]{6,}"), rf"\1 {REDACTED}"),
    # sk-..., sk-ant-api03-..., sk-or-v1-..., sk-proj-...
    (re.compile(r"\bsk-[A-Za-z0-9_-]{6,}"), REDACTED),
    (re.compile(r"\bAIza[0-9A-Za-z_-]{30,}"), REDACTED),  # Google API keys
    # Long hex/base64 runs that mix letters and digits look like secrets; plain words and
    # most URL paths do not.
    (
        re.compile(
            r"(?<![A-Za-z0-9+/_-])(?=[A-Za-z0-9+/_-]*\d)(?=[A-Za-z0-9+/_-]*[A-Za-z])"
            r"[A-Za-z0-9+/_-]{32,}={0,2}"
        ),
        REDACTED,
    ),
)
_WHITESPACE = re.compile(r"\s+")


def redact(text: str, limit: int = 300) -> str:
    """Replace API-key-like tokens with ``[REDACTED]``; collapse whitespace; cap at ``limit``."""
    for pattern, replacement in _PATTERNS:
        text = pattern.sub(replacement, text)
    text = _WHITESPACE.sub(" ", text).strip()
    if len(text) > limit:
        # Redaction ran first, so the cut cannot expose the tail of a secret.
        text = text[: max(limit - 1, 0)].rstrip() + "…"
    return text


def scrub(text: str, secrets: Iterable[str]) -> str:
    """``text`` with every exact occurrence of each of ``secrets`` replaced by ``[REDACTED]``.

    The patterns of :func:`redact` know the usual key shapes only; a key of any other shape is
    found here because it is known. Pass the longest secrets first, so that one containing
    another goes whole.
    """
    for secret in secrets:
        if secret and secret in text:
            text = text.replace(secret, REDACTED)
    return text


def printable(text: str) -> str:
    """``text`` with control and other non-printable characters (newlines, ANSI escapes)
    escaped as Python would show them, so text from outside (a route name read from Redis)
    cannot forge lines or repaint a terminal."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
