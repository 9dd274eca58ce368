"""Classification: :func:`classify`, the built-in rules, turns anything that went wrong into a
:class:`Failure`; :class:`Classifiers` tries the user's rules (``Failover(classifiers=...)``)
before it.

The built-in rules read httpx (and httpx2) exceptions and responses, provider SDK exceptions
(duck-typed: ``status_code`` / ``response`` / ``body``, never imported), in-stream error payloads
(OpenRouter, OpenAI-compatible, Anthropic ``event: error``), :class:`UpstreamError`, swerve's
own timeout and breaker errors, and cancellation.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import json
import logging
import math
import re
import socket
from collections import deque
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, replace

from .._telemetry.redact import printable, redact
from .error_types import CONTENT_FILTER_CODES, TOKEN_CHARS, TYPE_STATUS, error_type, status_kind
from .errors import (
    AttemptTimeout,
    CircuitOpenError,
    IncompleteStreamError,
    InStreamError,
    MalformedStreamError,
    UpstreamError,
)
from .failure import Classifier, Failure, FailureKind
from .retry_after import bounded, delay, parse_retry_after

__all__ = ["Classifiers", "classify", "exc_message"]

_MAX_CHAIN = 16  # exceptions looked at along __cause__/__context__/groups
_MATCH_CHARS = 4000  # how much of a message the patterns scan
_BODY_PEEK = 4096  # bytes of a non-JSON body kept for the message

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
        message=redact(exc_message(error)),
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
    message = redact(exc_message(exc))
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
        return _from_payload(exc.payload, in_stream=True, fallback_message=exc_message(exc))
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
        return _from_http(status, body, _attr(response, "headers"), exc_message(exc), in_stream)

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
        return _from_parts(None, payload, exc_message(exc), None, in_stream=True)
    return None


def _from_upstream_error(exc: UpstreamError, in_stream: bool) -> Failure:
    """What an HTTP error with this status, Retry-After and error body would classify as."""
    code = exc.code if isinstance(exc.code, str) and exc.code else None
    message = exc.message if isinstance(exc.message, str) else ""
    payload = None
    if code is not None or message:
        payload = _Payload(None, code[:TOKEN_CHARS] if code else None, None, message, "", None)
    failure = _from_parts(exc.status, payload, exc_message(exc), None, in_stream=in_stream)
    wait = delay(exc.retry_after)
    if wait is None:
        return failure
    return replace(failure, retry_after=bounded(wait))


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
        code = raw_code[:TOKEN_CHARS]
    raw_type = obj.get("type")
    message = obj.get("message")
    metadata = obj.get("metadata")
    detail = metadata.get("raw") if isinstance(metadata, Mapping) else None
    return _Payload(
        status=status,
        code=code,
        type=raw_type[:TOKEN_CHARS] if isinstance(raw_type, str) and raw_type else None,
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
            status = TYPE_STATUS.get((code or "").lower()) or TYPE_STATUS.get((type_ or "").lower())
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
    elif tokens & CONTENT_FILTER_CODES or finish == "content_filter":
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
        code=redact(provider_code, TOKEN_CHARS) if provider_code else None,
        message=redact(message),
        error_type=error_type(None if synthetic else status, code, type_, kind),
    )


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


def _mro_names(exc: BaseException) -> set[str]:
    return {cls.__name__ for cls in type(exc).__mro__}


def _exc_type(exc: BaseException) -> str:
    cls = type(exc)
    return (
        cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"
    )


def exc_message(exc: BaseException) -> str:
    try:
        text = str(exc)
    except Exception:
        text = ""
    return text or type(exc).__name__


def _describe(obj: object) -> str:
    return (
        redact(obj) if isinstance(obj, str) else f"unrecognised error object {type(obj).__name__}"
    )


# -- the user's rules, tried before the built-in ones ------------------------------------------
_log = logging.getLogger("swerve")


class Classifiers:
    """User classifiers tried in order before :func:`classify`; the first Failure wins.

    A classifier that raises, returns something that is not a Failure, or a Failure whose
    fields have the wrong types (a ``kind`` that is a plain string, ``retry_after="5"``)
    counts as having returned None, and is logged once at WARNING: a bug in a rule never masks
    the upstream error. A rule runs inline, once per failure: its time counts against the
    call's deadline. swerve's own errors (a timeout it enforced, an open breaker) and
    cancellation are not offered to the rules: they mean the same whatever the upstream.
    """

    __slots__ = ("_rules", "_warned")

    def __init__(self, rules: Iterable[Classifier] = ()) -> None:
        self._rules = tuple(rules)
        for rule in self._rules:
            if not callable(rule):
                raise TypeError(f"a classifier must be callable, not {type(rule).__name__}")
        self._warned: set[int] = set()

    def after(self, first: Iterable[Classifier]) -> Classifiers:
        """These rules with ``first`` tried before them (a rule already here is kept once)."""
        new = tuple(rule for rule in first if rule not in self._rules)
        return Classifiers((*new, *self._rules)) if new else self

    def __call__(self, error: BaseException, *, in_stream: bool = False) -> Failure:
        if self._rules and isinstance(error, Exception) and not isinstance(error, _OWN_ERRORS):
            for index, rule in enumerate(self._rules):
                try:
                    failure = rule(error)
                except Exception as problem:
                    what = f"raised {type(problem).__name__}: {exc_message(problem)}"
                    self._warn(index, rule, what)
                    continue
                if failure is None:
                    continue
                if not isinstance(failure, Failure):
                    what = f"returned {type(failure).__name__}, not a Failure"
                elif (wrong := _wrong_field(failure)) is None:
                    return _safe(failure)
                else:
                    what = f"returned a Failure whose {wrong}"
                self._warn(index, rule, what)
        return classify(error, in_stream=in_stream)

    def _warn(self, index: int, rule: Classifier, what: str) -> None:
        if index in self._warned:
            return
        self._warned.add(index)
        name = getattr(rule, "__qualname__", None) or type(rule).__qualname__
        # The rule's name and its error's text are the user's: escaped, they cannot forge a
        # log line or repaint the terminal that shows it.
        _log.warning(
            "classifier %s %s; ignored (treated as None), the built-in rules apply",
            printable(redact(str(name), TOKEN_CHARS)),
            printable(redact(what)),
        )


def _wrong_field(failure: Failure) -> str | None:
    """What is wrong with a user's Failure (its field and the value's type), or None. Checked
    here, on the failure path, not in Failure itself, which every classification builds."""
    f = failure
    if not isinstance(f.kind, FailureKind):
        return f"kind is {type(f.kind).__name__}, not a FailureKind"
    if f.status is not None and (
        type(f.status) is not int or not 100 <= f.status <= 599  # bool is not a status
    ):
        return f"status is {_shown(f.status)}, not an HTTP status (100-599) or None"
    if f.retry_after is not None and (
        type(f.retry_after) not in (int, float)
        or not math.isfinite(f.retry_after)
        or f.retry_after < 0
    ):
        return f"retry_after is {_shown(f.retry_after)}, not seconds (a number >= 0) or None"
    if type(f.in_stream) is not bool:
        return f"in_stream is {type(f.in_stream).__name__}, not bool"
    for name in ("message", "error_type", "code"):
        value = getattr(f, name)
        if not isinstance(value, str) and not (name == "code" and value is None):
            return f"{name} is {type(value).__name__}, not str"
    return None


def _safe(failure: Failure) -> Failure:
    """The user's Failure with its texts made what a Failure promises (no credentials, no
    control characters, bounded), since spans and log lines carry them."""
    message = printable(redact(failure.message))
    code = None if failure.code is None else printable(redact(failure.code, 64))
    if message == failure.message and code == failure.code:
        return failure
    return dataclasses.replace(failure, message=message, code=code)


def _shown(value: object) -> str:
    """A value's type, and the value itself when it is a short number (never user text)."""
    if type(value) in (int, float):
        return f"{value!r}"
    return type(value).__name__


_OWN_ERRORS = (AttemptTimeout, CircuitOpenError)
