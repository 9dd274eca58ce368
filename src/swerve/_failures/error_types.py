"""The closed vocabulary of ``error.type``: what each HTTP status stands for, which provider
words stand for a status, and which provider words may be reported as they are."""

from __future__ import annotations

from .failure import FailureKind

__all__ = [
    "CONTENT_FILTER_CODES",
    "KNOWN_ERROR_TYPES",
    "TOKEN_CHARS",
    "TYPE_STATUS",
    "error_type",
    "status_kind",
]

TOKEN_CHARS = 64  # provider codes/types become error.type: keep them short

_STATUS_KINDS = {
    429: FailureKind.RATE_LIMITED,
    529: FailureKind.OVERLOADED,
    503: FailureKind.UNAVAILABLE,
    500: FailureKind.SERVER_ERROR,
    502: FailureKind.SERVER_ERROR,
    504: FailureKind.TIMEOUT,
    408: FailureKind.TIMEOUT,
    409: FailureKind.SERVER_ERROR,  # a transient conflict; another attempt usually passes
    401: FailureKind.AUTH,
    403: FailureKind.AUTH,
    402: FailureKind.QUOTA,
}
# Provider error types/codes that stand for an HTTP status, so the configured status list
# applies to in-stream errors exactly as to HTTP ones.
TYPE_STATUS = {
    "overloaded_error": 529,
    "rate_limit_error": 429,
    "api_error": 500,
    "invalid_request_error": 400,
    "authentication_error": 401,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "billing_error": 402,
    "timeout_error": 504,
    "server_error": 500,
    "rate_limit_exceeded": 429,
}
CONTENT_FILTER_CODES = frozenset({"content_filter", "content_policy_violation"})

KNOWN_ERROR_TYPES = frozenset(
    set(TYPE_STATUS)
    | CONTENT_FILTER_CODES
    | {"context_length_exceeded", "insufficient_quota", "invalid_api_key", "model_not_found"}
    | {"engine_overloaded", "service_unavailable", "requests", "tokens"}
)
"""Provider error types and codes that may become ``error.type`` as they are. Any other
provider word is replaced by the failure kind: provider text in an attribute can carry an
echoed secret, and every distinct value would be a new metric series."""


def status_kind(status: int) -> FailureKind:
    """The kind an HTTP status stands for when nothing else is known about the failure."""
    if status in _STATUS_KINDS:
        return _STATUS_KINDS[status]
    if 500 <= status <= 599:
        return FailureKind.SERVER_ERROR
    if 400 <= status <= 499:
        return FailureKind.INVALID_REQUEST
    return FailureKind.UNKNOWN


def error_type(status: int | None, code: str | None, type_: str | None, kind: FailureKind) -> str:
    """``error.type`` from a closed vocabulary (see :class:`Failure`): the status the server
    sent, else the provider's word if it is a known one, else the kind."""
    if status is not None and 100 <= status <= 599:
        return str(status)
    for word in (code, type_):
        if word and word.lower() in KNOWN_ERROR_TYPES:
            return word.lower()
    return kind.value
