"""How long a server asks to be left alone: Retry-After (seconds or an HTTP date) and
retry-after-ms, read defensively and bounded."""

from __future__ import annotations

import email.utils
import math
import re
import time
from collections.abc import Mapping
from datetime import UTC

__all__ = ["RETRY_AFTER_MAX_S", "bounded", "delay", "parse_retry_after"]

RETRY_AFTER_MAX_S = 7 * 24 * 3600.0
"""The longest wait :func:`parse_retry_after` returns: a week. A server asking for longer is
taken at that; the engine caps it again at ``retry_after_max_s`` and ``cooldown_max_s``."""
# Delay-seconds as servers send it: ASCII digits (not any Unicode digit float() accepts), an
# optional fraction, and a minus sign read as "now".
_DELAY_RE = re.compile(r"-?[0-9]+(?:\.[0-9]+)?")


def parse_retry_after(headers: Mapping[str, str], *, now: float | None = None) -> float | None:
    """Seconds to wait from ``retry-after-ms``, ``retry-after`` (seconds or HTTP date).

    Always None (nothing usable) or a finite number in ``[0, RETRY_AFTER_MAX_S]``: a negative
    delay or a date in the past is 0; ``NaN``, ``inf``, ``1e3``, non-ASCII digits and other
    garbage are None; a huge delay or a far date is capped.
    """
    try:
        # Plain dicts are case-sensitive; httpx.Headers is not. Lowering covers both.
        lowered = {str(k).lower(): v for k, v in headers.items()}
        millis = delay(lowered.get("retry-after-ms"))
        if millis is not None:
            return bounded(millis / 1000.0)
        raw = lowered.get("retry-after")
        seconds = delay(raw)
        if seconds is not None:
            return bounded(seconds)
        if not isinstance(raw, str):
            return None
        when = email.utils.parsedate_to_datetime(raw.strip())
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        return bounded(when.timestamp() - (time.time() if now is None else now))
    except Exception:  # garbage dates, odd mappings
        return None


def delay(value: object) -> float | None:
    """A delay as a header (or a number a caller put in a mapping) gives it; None if garbage."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        number = float(value)
    elif isinstance(value, str) and _DELAY_RE.fullmatch(text := value.strip()):
        number = float(text)  # ASCII digits only: this cannot raise; 400 digits give inf
    else:
        return None
    return None if math.isnan(number) else number


def bounded(seconds: float) -> float | None:
    if math.isnan(seconds):
        return None
    return min(max(seconds, 0.0), RETRY_AFTER_MAX_S)
