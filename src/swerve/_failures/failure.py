"""What went wrong on an attempt: a :class:`Failure`, its :class:`FailureKind`, and the
shapes of the user rules that produce or judge one."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol

__all__ = ["Classifier", "Failure", "FailureKind", "FailurePredicate"]


class FailureKind(StrEnum):
    """What went wrong, independent of provider and transport."""

    RATE_LIMITED = "rate_limited"
    OVERLOADED = "overloaded"
    SERVER_ERROR = "server_error"
    UNAVAILABLE = "unavailable"
    TRANSPORT = "transport"  # reset, refused, DNS, protocol error
    TIMEOUT = "timeout"
    INCOMPLETE = "incomplete"  # a stream ended without its finish signal
    CONTEXT_OVERFLOW = "context_overflow"
    AUTH = "auth"
    QUOTA = "quota"  # quota exhausted / payment required
    INVALID_REQUEST = "invalid_request"
    CONTENT_FILTER = "content_filter"
    ABORTED = "aborted"  # cancellation, KeyboardInterrupt
    BREAKER_OPEN = "breaker_open"  # swerve refused the attempt: the route's breaker is open
    UNKNOWN = "unknown"


@dataclass(frozen=True, slots=True)
class Failure:
    """A classified error of one attempt.

    ``message`` is redacted (no credentials) and bounded in length; it is safe for spans and
    logs. ``error_type`` is the low-cardinality value for OTel's ``error.type`` (a span and
    metric attribute), drawn from a closed vocabulary and never free provider text: the HTTP
    status as a string when the server sent one (``"100"``..``"599"``); else a provider error
    type or code from swerve's allow-list
    (:data:`~swerve._failures.error_types.KNOWN_ERROR_TYPES`, e.g. ``"overloaded_error"``,
    ``"rate_limit_exceeded"``); else, for an exception, its qualified class name
    (``"httpx.ReadTimeout"``) or one of swerve's own words (``"timeout"``, ``"breaker_open"``,
    ``"incomplete"``, ``"malformed"``); else the failure kind
    (``"unknown"``, ``"quota"``, ...). ``code`` is the provider's own code or type, cut to 64
    characters and redacted; it is for reading, not for attributes.
    """

    kind: FailureKind
    status: int | None = None
    retry_after: float | None = None
    in_stream: bool = False
    code: str | None = None
    message: str = ""
    error_type: str = "unknown"


FailurePredicate = Callable[[Failure], bool]
"""``FallbackConfig.fallback_on`` as a function: True acts on the failure (by its kind's
action, as a listed status does), False surfaces it."""


class Classifier(Protocol):
    """A user rule for ``Failover(classifiers=...)``: the :class:`Failure` an exception stands
    for, or None to leave it to the next rule (and finally to the built-in ``classify``)."""

    def __call__(self, error: BaseException, /) -> Failure | None: ...
