"""Failure classification: anything that went wrong on an attempt becomes a :class:`Failure`.

One function, :func:`classify`, reads httpx (and httpx2) exceptions and responses, provider
SDK exceptions (duck-typed: ``status_code`` / ``response`` / ``body``, never imported), in-stream
error payloads (OpenRouter, OpenAI-compatible, Anthropic ``event: error``), swerve's own timeout
and breaker errors, and cancellation.
"""

from __future__ import annotations

import contextlib
import email.utils
import errno
import json
import logging
import math
import re
import socket
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from datetime import UTC
from enum import StrEnum
from typing import Protocol

from swerve._redact import redact

__all__ = [
    "KNOWN_ERROR_TYPES",
    "RETRY_AFTER_MAX_S",
    "AttemptTimeout",
    "CircuitOpenError",
    "Classifier",
    "Failure",
    "FailureKind",
    "FailurePredicate",
    "InStreamError",
    "IncompleteStreamError",
    "MalformedStreamError",
    "UpstreamError",
    "classify",
    "parse_retry_after",
    "status_kind",
]


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
    type or code from swerve's allow-list (:data:`KNOWN_ERROR_TYPES`, e.g.
    ``"overloaded_error"``, ``"rate_limit_exceeded"``); else, for an exception, its qualified
    class name (``"httpx.ReadTimeout"``) or one of swerve's own words (``"timeout"``,
    ``"breaker_open"``, ``"incomplete"``, ``"malformed"``); else the failure kind
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
    for, or None to leave it to the next rule (and finally to :func:`classify`)."""

    def __call__(self, error: BaseException, /) -> Failure | None: ...


class UpstreamError(Exception):
    """Raise this from a hand-written ``fn`` to say how the upstream failed.

    ``UpstreamError(503)`` classifies exactly as an HTTP 503 would (its kind, ``error.type``
    ``"503"``, the statuses in ``fallback_on``); ``retry_after`` is read like a Retry-After
    header (negative is 0, at most a week, then capped by the config); ``code`` and
    ``message`` are read like an error body's (``code="overloaded_error"`` without a status
    counts as a 529, a message saying the prompt is too long is a context overflow).
    """

    def __init__(
        self,
        status: int | None = None,
        *,
        retry_after: float | None = None,
        message: str = "",
        code: str | None = None,
    ) -> None:
        if status is not None and (
            not isinstance(status, int) or isinstance(status, bool) or not 100 <= status <= 599
        ):
            raise ValueError(f"UpstreamError status must be 100-599, not {status!r}")
        self.status = status
        self.retry_after = retry_after
        self.message = message
        self.code = code
        default = f"upstream error {status}" if status is not None else "upstream error"
        super().__init__(message or default)


class InStreamError(Exception):
    """An error payload found inside a stream (usually a 200 one); adapters raise it.

    ``payload`` is the decoded JSON of the error event or chunk, e.g. OpenRouter's
    ``{"error": {"code": 503, "message": "..."}}`` or Anthropic's
    ``{"type": "error", "error": {"type": "overloaded_error", ...}}``.
    """

    def __init__(self, payload: Mapping[str, object], *, route: str | None = None) -> None:
        self.payload = payload
        self.route = route
        super().__init__(f"error inside the stream{f' of {route}' if route else ''}")


class IncompleteStreamError(Exception):
    """A stream ended without its finish signal (``[DONE]``, ``message_stop``, ...)."""


class MalformedStreamError(Exception):
    """A stream chunk or event that cannot be decoded: the upstream broke its protocol.

    A ``transport``-kind failure, like a reset: retried or swapped before content, restarted
    after content in restart mode.
    """


class AttemptTimeout(TimeoutError):
    """An attempt ran out of one of its time limits.

    ``limit`` is one of ``"attempt"``, ``"first_token"``, ``"stall"``, ``"deadline"``.
    """

    def __init__(self, limit: str, seconds: float) -> None:
        self.limit = limit
        self.seconds = seconds
        super().__init__(f"{limit} timeout after {seconds:g}s")


class CircuitOpenError(Exception):
    """swerve did not try the route because its circuit breaker is open."""

    def __init__(self, route: str) -> None:
        self.route = route
        super().__init__(f"circuit breaker open for route {route}")


# --- classification ----------------------------------------------------------------------

_MAX_CHAIN = 16  # exceptions looked at along __cause__/__context__/groups
_MATCH_CHARS = 4000  # how much of a message the patterns scan
_BODY_PEEK = 4096  # bytes of a non-JSON body kept for the message
_TOKEN_CHARS = 64  # provider codes/types become error.type: keep them short

_ABORT_NAMES = frozenset({"CancelledError", "Cancelled"})  # asyncio/concurrent, trio
# APITimeoutError subclasses APIConnectionError (openai, anthropic): timeouts are checked first.
_TIMEOUT_NAMES = frozenset(
    {"APITimeoutError", "ConnectTimeout", "ReadTimeout", "WriteTimeout", "PoolTimeout"}
    | {"TimeoutException"}
)
_TRANSPORT_NAMES = frozenset(
    {"APIConnectionError", "ConnectError", "ReadError", "WriteError", "CloseError"}
    | {"NetworkError", "RemoteProtocolError", "LocalProtocolError", "ProtocolError"}
    | {"ProxyError", "TransportError"}
)
# ECONNRESET & co. already arrive as ConnectionError subclasses; these do not.
_NETWORK_ERRNOS = frozenset(
    getattr(errno, name)
    for name in ("ENETUNREACH", "EHOSTUNREACH", "ENETDOWN", "EHOSTDOWN")
    if hasattr(errno, name)
)

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
_TYPE_STATUS = {
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
_CONTENT_FILTER_CODES = frozenset({"content_filter", "content_policy_violation"})

KNOWN_ERROR_TYPES = frozenset(
    set(_TYPE_STATUS)
    | _CONTENT_FILTER_CODES
    | {"context_length_exceeded", "insufficient_quota", "invalid_api_key", "model_not_found"}
    | {"engine_overloaded", "service_unavailable", "requests", "tokens"}
)
"""Provider error types and codes that may become ``error.type`` as they are. Any other
provider word is replaced by the failure kind: provider text in an attribute can carry an
echoed secret, and every distinct value would be a new metric series."""

RETRY_AFTER_MAX_S = 7 * 24 * 3600.0
"""The longest wait :func:`parse_retry_after` returns: a week. A server asking for longer is
taken at that; the engine caps it again at ``retry_after_max_s`` and ``cooldown_max_s``."""
# Delay-seconds as servers send it: ASCII digits (not any Unicode digit float() accepts), an
# optional fraction, and a minus sign read as "now".
_DELAY_RE = re.compile(r"-?[0-9]+(?:\.[0-9]+)?")

_CONTEXT_RE = re.compile(
    r"maximum context length|context_length_exceeded|context window|prompt is too long"
    r"|exceeds? (?:the )?context limit",
    re.IGNORECASE,
)
# Bedrock throttles with "Too many tokens, please wait": only trusted off 429 and 5xx.
_VAGUE_CONTEXT_RE = re.compile(r"too many tokens", re.IGNORECASE)
_QUOTA_RE = re.compile(r"insufficient_quota|exceeded your current quota|\bcredits?\b", re.I)
_TAGS_RE = re.compile(r"<[^>]*>")


@dataclass(frozen=True, slots=True)
class _Payload:
    """What an error payload says, before it becomes a Failure."""

    status: int | None  # from a numeric ``code``
    code: str | None
    type: str | None
    message: str
    detail: str  # extra text worth matching (OpenRouter's relayed provider error)
    finish_reason: str | None


def classify(error: object, *, in_stream: bool = False) -> Failure:
    """Turn an exception, an httpx response, or an in-stream error payload into a Failure."""
    try:
        if isinstance(error, BaseException):
            return _from_exception_chain(error, in_stream)
        if isinstance(error, Mapping):
            return _from_payload(error, in_stream=in_stream)
        if _is_response(error):
            return _from_response(error, in_stream)
        return Failure(FailureKind.UNKNOWN, in_stream=in_stream, message=_describe(error))
    except Exception:  # never let classification mask the real error
        return Failure(FailureKind.UNKNOWN, in_stream=in_stream)


def parse_retry_after(headers: Mapping[str, str], *, now: float | None = None) -> float | None:
    """Seconds to wait from ``retry-after-ms``, ``retry-after`` (seconds or HTTP date).

    Always None (nothing usable) or a finite number in ``[0, RETRY_AFTER_MAX_S]``: a negative
    delay or a date in the past is 0; ``NaN``, ``inf``, ``1e3``, non-ASCII digits and other
    garbage are None; a huge delay or a far date is capped.
    """
    try:
        # Plain dicts are case-sensitive; httpx.Headers is not. Lowering covers both.
        lowered = {str(k).lower(): v for k, v in headers.items()}
        millis = _delay(lowered.get("retry-after-ms"))
        if millis is not None:
            return _bounded(millis / 1000.0)
        raw = lowered.get("retry-after")
        seconds = _delay(raw)
        if seconds is not None:
            return _bounded(seconds)
        if not isinstance(raw, str):
            return None
        when = email.utils.parsedate_to_datetime(raw.strip())
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        return _bounded(when.timestamp() - (time.time() if now is None else now))
    except Exception:  # garbage dates, odd mappings
        return None


def _from_exception_chain(error: BaseException, in_stream: bool) -> Failure:
    # The first exception that says something wins, except a bare SDK connection error: what
    # it wraps (a timeout, a reset) is more specific.
    fallback: Failure | None = None
    for exc in _chain(error):
        failure = _from_exception(exc, in_stream)
        if failure is None:
            continue
        names = _mro_names(exc)
        if fallback is None and "APIConnectionError" in names and "APITimeoutError" not in names:
            fallback = failure
            continue
        return failure
    if fallback is not None:
        return fallback
    return Failure(
        FailureKind.UNKNOWN,
        in_stream=in_stream,
        message=redact(_exc_message(error)),
        error_type=_exc_type(error),
    )


def _chain(error: BaseException) -> Iterator[BaseException]:
    """The exception, then its causes, contexts and group members; bounded and cycle-safe."""
    queue: deque[BaseException] = deque([error])
    seen: set[int] = set()
    while queue and len(seen) < _MAX_CHAIN:
        exc = queue.popleft()
        if id(exc) in seen:
            continue
        seen.add(id(exc))
        yield exc
        if isinstance(exc, BaseExceptionGroup):
            queue.extend(exc.exceptions)
        queue.extend(e for e in (exc.__cause__, exc.__context__) if isinstance(e, BaseException))


def _from_exception(exc: BaseException, in_stream: bool) -> Failure | None:
    """Classify one exception, or None when it tells nothing by itself."""
    names = _mro_names(exc)
    message = redact(_exc_message(exc))
    if names & _ABORT_NAMES or isinstance(exc, KeyboardInterrupt | GeneratorExit | SystemExit):
        return Failure(
            FailureKind.ABORTED, in_stream=in_stream, message=message, error_type=_exc_type(exc)
        )
    if isinstance(exc, AttemptTimeout):
        return Failure(
            FailureKind.TIMEOUT, in_stream=in_stream, message=message, error_type="timeout"
        )
    if isinstance(exc, CircuitOpenError):
        return Failure(FailureKind.BREAKER_OPEN, message=message, error_type="breaker_open")
    if isinstance(exc, IncompleteStreamError):
        return Failure(
            FailureKind.INCOMPLETE, in_stream=True, message=message, error_type="incomplete"
        )
    if isinstance(exc, InStreamError):
        return _from_payload(exc.payload, in_stream=True, fallback_message=_exc_message(exc))
    if isinstance(exc, UpstreamError):
        return _from_upstream_error(exc, in_stream)
    if isinstance(exc, MalformedStreamError | json.JSONDecodeError):
        # An SDK that cannot decode a chunk raises JSONDecodeError from inside its stream:
        # the upstream sent something that is not its protocol, which is the route's fault.
        return Failure(
            FailureKind.TRANSPORT, in_stream=in_stream, message=message, error_type="malformed"
        )

    # HTTP status errors: httpx.HTTPStatusError (.response) and SDK errors (.status_code,
    # .response, .body); the SDKs are never imported.
    response = _attr(exc, "response")
    status = _int(_attr(exc, "status_code"))
    if status is None and _is_response(response):
        status = _int(_attr(response, "status_code"))
    if status is not None:
        body = _attr(exc, "body")
        if body is None and response is not None:
            body = _response_body(response)
        return _from_http(status, body, _attr(response, "headers"), _exc_message(exc), in_stream)

    error_type = _exc_type(exc)
    if names & _TIMEOUT_NAMES or isinstance(exc, TimeoutError):
        return Failure(
            FailureKind.TIMEOUT, in_stream=in_stream, message=message, error_type=error_type
        )
    if (
        names & _TRANSPORT_NAMES
        or isinstance(exc, ConnectionError | socket.gaierror | socket.herror)
        or (isinstance(exc, OSError) and exc.errno in _NETWORK_ERRNOS)
    ):
        return Failure(
            FailureKind.TRANSPORT, in_stream=in_stream, message=message, error_type=error_type
        )
    # openai raises a status-less APIError whose body is the error object of a stream chunk.
    body = _attr(exc, "body")
    if isinstance(body, Mapping) and (payload := _read_payload(body)) is not None:
        return _from_parts(None, payload, _exc_message(exc), None, in_stream=True)
    return None


def _from_upstream_error(exc: UpstreamError, in_stream: bool) -> Failure:
    """What an HTTP error with this status, Retry-After and error body would classify as."""
    code = exc.code if isinstance(exc.code, str) and exc.code else None
    message = exc.message if isinstance(exc.message, str) else ""
    payload = None
    if code is not None or message:
        payload = _Payload(None, code[:_TOKEN_CHARS] if code else None, None, message, "", None)
    failure = _from_parts(exc.status, payload, _exc_message(exc), None, in_stream=in_stream)
    delay = _delay(exc.retry_after)
    if delay is None:
        return failure
    return replace(failure, retry_after=_bounded(delay))


def _from_response(response: object, in_stream: bool) -> Failure:
    status = _int(_attr(response, "status_code"))
    reason = _attr(response, "reason_phrase")
    fallback = f"HTTP {status}" + (f" {reason}" if isinstance(reason, str) and reason else "")
    headers = _attr(response, "headers")
    return _from_http(status, _response_body(response), headers, fallback, in_stream)


def _from_http(
    status: int | None, body: object, headers: object, fallback_message: str, in_stream: bool
) -> Failure:
    if isinstance(body, str | bytes) and body[:1] in ("{", b"{", "[", b"["):
        # openrouter's SDK keeps it as JSON text; nesting too deep for the decoder is not an
        # error body swerve can read, and must not cost the status it came with.
        with contextlib.suppress(ValueError, RecursionError):
            body = json.loads(body)
    if isinstance(body, list | tuple) and body:  # Gemini-style streams wrap errors in a list
        body = body[0]
    payload = _read_payload(body) if isinstance(body, Mapping) else None
    text = ""
    if payload is None and isinstance(body, str | bytes):
        raw = body[:_BODY_PEEK]
        raw = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
        text = _TAGS_RE.sub(" ", raw)  # an HTML 502 page reads better without its markup
    if payload is not None and (status is None or status < 400):
        # An error body on a 2xx: Anthropic's SDK raises `event: error` this way.
        return _from_parts(None, payload, fallback_message, headers, in_stream=True)
    message = text.strip() or fallback_message
    return _from_parts(status, payload, message, headers, in_stream=in_stream)


def _from_payload(
    payload: object,
    *,
    in_stream: bool,
    fallback_message: str = "unrecognised error payload",
) -> Failure:
    parsed = _read_payload(payload) if isinstance(payload, Mapping) else None
    if parsed is None:
        return Failure(FailureKind.UNKNOWN, in_stream=in_stream, message=redact(fallback_message))
    return _from_parts(None, parsed, fallback_message, None, in_stream=in_stream)


def _read_payload(payload: Mapping[object, object]) -> _Payload | None:
    """Find the error object in an OpenRouter, OpenAI-compatible or Anthropic payload."""
    error = payload.get("error")
    obj: Mapping[object, object] | None = None
    if isinstance(error, Mapping):
        obj = error
    elif isinstance(error, str) and error:
        obj = {"message": error, "code": payload.get("code")}
    elif "message" in payload or "code" in payload:  # a bare error object (openai SDK .body)
        obj = payload
    finish = _finish_reason(payload)
    if obj is None:
        if finish is None:
            return None
        obj = {}

    status: int | None = None
    code: str | None = None
    raw_code = obj.get("code")
    if isinstance(raw_code, str) and re.fullmatch(r"\s*[0-9]{3}\s*", raw_code):
        raw_code = int(raw_code)  # OpenRouter sends "503" as well as 503
    if isinstance(raw_code, int) and not isinstance(raw_code, bool):
        if 100 <= raw_code <= 599:
            status = raw_code
        else:
            code = str(raw_code)
    elif isinstance(raw_code, str) and raw_code:
        code = raw_code[:_TOKEN_CHARS]
    raw_type = obj.get("type")
    message = obj.get("message")
    metadata = obj.get("metadata")
    detail = metadata.get("raw") if isinstance(metadata, Mapping) else None
    return _Payload(
        status=status,
        code=code,
        type=raw_type[:_TOKEN_CHARS] if isinstance(raw_type, str) and raw_type else None,
        message=message if isinstance(message, str) else "",
        detail=detail if isinstance(detail, str) else "",
        finish_reason=finish,
    )


def _finish_reason(payload: Mapping[object, object]) -> str | None:
    finish = payload.get("finish_reason")
    choices = payload.get("choices")
    if finish is None and isinstance(choices, list) and choices and isinstance(choices[0], Mapping):
        finish = choices[0].get("finish_reason")
    return finish if isinstance(finish, str) else None


def _from_parts(
    status: int | None,
    payload: _Payload | None,
    fallback_message: str,
    headers: object,
    *,
    in_stream: bool,
) -> Failure:
    """Decide kind, status, error_type and message from everything found."""
    code = type_ = None
    message = fallback_message
    synthetic = False
    if payload is not None:
        code, type_ = payload.code, payload.type
        message = ": ".join(m for m in (payload.message, payload.detail) if m) or message
        if status is None:
            status = payload.status
        if status is None:
            # Provider words are matched case-insensitively, as error.type reports them.
            status = _TYPE_STATUS.get((code or "").lower()) or _TYPE_STATUS.get(
                (type_ or "").lower()
            )
            synthetic = status is not None
    tokens = {t.lower() for t in (code, type_) if t}
    text = message[:_MATCH_CHARS]
    finish = payload.finish_reason if payload is not None else None

    if (
        "context_length_exceeded" in tokens
        or _CONTEXT_RE.search(text)
        or (
            (status is None or (400 <= status < 500 and status != 429))
            and _VAGUE_CONTEXT_RE.search(text)
        )
    ):
        kind = FailureKind.CONTEXT_OVERFLOW
    elif tokens & _CONTENT_FILTER_CODES or finish == "content_filter":
        kind = FailureKind.CONTENT_FILTER
    elif "insufficient_quota" in tokens or (status in (None, 400, 429) and _QUOTA_RE.search(text)):
        kind = FailureKind.QUOTA
    elif status is not None:
        kind = status_kind(status)
    else:
        kind = FailureKind.UNKNOWN

    retry_after = parse_retry_after(headers) if isinstance(headers, Mapping) else None
    provider_code = code or type_
    return Failure(
        kind,
        status=status,
        retry_after=retry_after,
        in_stream=in_stream,
        code=redact(provider_code, _TOKEN_CHARS) if provider_code else None,
        message=redact(message),
        error_type=_error_type(None if synthetic else status, code, type_, kind),
    )


def _error_type(status: int | None, code: str | None, type_: str | None, kind: FailureKind) -> str:
    """``error.type`` from a closed vocabulary (see :class:`Failure`): the status the server
    sent, else the provider's word if it is a known one, else the kind."""
    if status is not None and 100 <= status <= 599:
        return str(status)
    for word in (code, type_):
        if word and word.lower() in KNOWN_ERROR_TYPES:
            return word.lower()
    return kind.value


def status_kind(status: int) -> FailureKind:
    """The kind an HTTP status stands for when nothing else is known about the failure."""
    if status in _STATUS_KINDS:
        return _STATUS_KINDS[status]
    if 500 <= status <= 599:
        return FailureKind.SERVER_ERROR
    if 400 <= status <= 499:
        return FailureKind.INVALID_REQUEST
    return FailureKind.UNKNOWN


def _response_body(response: object) -> object:
    """The decoded body if it was already read; never reads a streaming response."""
    try:
        content = _attr(response, "content")  # httpx raises ResponseNotRead if unread
        if not isinstance(content, bytes) or not content:
            return None
        try:
            return json.loads(content)
        except (ValueError, RecursionError):
            return content[:_BODY_PEEK]
    except Exception:
        return None


def _is_response(obj: object) -> bool:
    return _int(_attr(obj, "status_code")) is not None and _attr(obj, "headers") is not None


def _attr(obj: object, name: str) -> object:
    try:
        return getattr(obj, name, None)
    except Exception:  # properties that raise (httpx's .request, .content, ...)
        return None


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _delay(value: object) -> float | None:
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


def _bounded(seconds: float) -> float | None:
    if math.isnan(seconds):
        return None
    return min(max(seconds, 0.0), RETRY_AFTER_MAX_S)


def _mro_names(exc: BaseException) -> set[str]:
    return {cls.__name__ for cls in type(exc).__mro__}


def _exc_type(exc: BaseException) -> str:
    cls = type(exc)
    return (
        cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"
    )


def _exc_message(exc: BaseException) -> str:
    try:
        text = str(exc)
    except Exception:
        text = ""
    return text or type(exc).__name__


def _describe(obj: object) -> str:
    return (
        redact(obj) if isinstance(obj, str) else f"unrecognised error object {type(obj).__name__}"
    )


# --- user rules ----------------------------------------------------------------------------

_log = logging.getLogger("swerve")


class Classifiers:
    """User classifiers tried in order before :func:`classify`; the first Failure wins.

    A classifier that raises (or returns something that is not a Failure) counts as having
    returned None, and is logged once at WARNING: a bug in a rule never masks the upstream
    error. swerve's own errors (a timeout it enforced, an open breaker) and cancellation are
    not offered to the rules: they mean the same whatever the upstream.
    """

    __slots__ = ("_rules", "_warned")

    def __init__(self, rules: Iterable[Classifier] = ()) -> None:
        self._rules = tuple(rules)
        for rule in self._rules:
            if not callable(rule):
                raise TypeError(f"a classifier must be callable, not {type(rule).__name__}")
        self._warned: set[int] = set()

    def __call__(self, error: BaseException, *, in_stream: bool = False) -> Failure:
        if self._rules and isinstance(error, Exception) and not isinstance(error, _OWN_ERRORS):
            for index, rule in enumerate(self._rules):
                try:
                    failure = rule(error)
                except Exception as problem:
                    what = f"raised {type(problem).__name__}: {_exc_message(problem)}"
                    self._warn(index, rule, what)
                    continue
                if failure is None:
                    continue
                if isinstance(failure, Failure):
                    return failure
                self._warn(index, rule, f"returned {type(failure).__name__}, not a Failure")
        return classify(error, in_stream=in_stream)

    def _warn(self, index: int, rule: Classifier, what: str) -> None:
        if index in self._warned:
            return
        self._warned.add(index)
        name = getattr(rule, "__qualname__", None) or type(rule).__qualname__
        _log.warning(
            "swerve: classifier %s %s; ignored (treated as None), the built-in rules apply",
            redact(str(name), _TOKEN_CHARS),
            redact(what),
        )


_OWN_ERRORS = (AttemptTimeout, CircuitOpenError)
