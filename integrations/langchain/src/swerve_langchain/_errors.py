"""What LangChain integrations raise, made readable to :func:`swerve._failures.classify`.

The openai and anthropic SDK errors (and langchain-openai / langchain-anthropic's
``ModelError`` subclasses of them) carry ``status_code`` and ``body``, which the core reads
as they are. A few things do not:

* langchain-openrouter reports errors as ``ValueError("... (code: 503)")``;
* langchain-openai raises ``ValueError(<error object>)`` when a 200 JSON body holds an error
  (OpenRouter answers a non-streaming request that way);
* langchain-core's provider-neutral ``ModelError`` classes, raised without any SDK base;
* ChatOpenRouter turns an OpenRouter in-stream error chunk into an ordinary chunk with
  ``finish_reason="error"``, dropping the error's code;
* the openrouter SDK reports data it could not decode (a 200 body, or a stream event, that is
  not JSON) as a validation error, not as the ``JSONDecodeError`` the core reads as malformed.

:func:`translate` wraps such an error in an exception the core classifies (the original is
its ``__cause__``); :func:`unwrap` puts the original back when the error surfaces, so callers
see exactly what the route model raised, with swerve's note attached.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

from langchain_core import exceptions as lc_exc
from pydantic import ValidationError

from swerve import MidStreamError
from swerve._failures import IncompleteStreamError, InStreamError, MalformedStreamError, classify

__all__ = ["ProviderStreamError", "translate", "unwrap"]

_CODE_RE = re.compile(r"\(code:\s*([0-9]{3})\)\s*$")


class ProviderStreamError(IncompleteStreamError):
    """A stream ended with ``finish_reason="error"``: the provider failed inside it but the
    integration did not pass the error on (ChatOpenRouter drops OpenRouter's error chunk)."""


class _Translated(InStreamError):
    """An error payload recovered from an exception the core cannot read; ``__cause__`` is
    the original and :func:`unwrap` restores it."""


class _Malformed(MalformedStreamError):
    """Data an SDK could not decode, reported as something else (``__cause__``)."""


class _Timeout(TimeoutError):
    """A langchain-core ``ModelTimeoutError`` with no SDK base (``__cause__``)."""


class _Connection(ConnectionError):
    """A langchain-core ``ModelConnectionError`` with no SDK base (``__cause__``)."""


class _StatusError(Exception):
    """A langchain-core ``ModelError`` without an HTTP status of its own: the status its
    class stands for, so the configured status list applies."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status_code = status
        self.body = {"error": {"code": status, "message": message}}


# langchain-core's provider-neutral classes, most specific first (ContextOverflowError is
# read from its message by the core; the others map to the status they document).
_MODEL_ERROR_STATUS: tuple[tuple[type[BaseException], int], ...] = (
    (lc_exc.ModelAuthenticationError, 401),
    (lc_exc.ModelPermissionDeniedError, 403),
    (lc_exc.ModelNotFoundError, 404),
    (lc_exc.ModelRateLimitError, 429),
    (lc_exc.ModelAPIError, 500),
    (lc_exc.ModelInvalidRequestError, 400),
)


@contextmanager
def classifiable() -> Iterator[None]:
    """Re-raise an integration's error as one ``classify`` reads, with the original as its
    cause (the error that finally surfaces is unwrapped again)."""
    try:
        yield
    except Exception as exc:
        wrapped = translate(exc)
        if wrapped is None:
            raise
        raise wrapped from exc


def translate(exc: BaseException) -> BaseException | None:
    """An exception ``classify`` reads correctly in place of ``exc``, or None if it already
    does (or nothing better is known)."""
    if not isinstance(exc, Exception) or isinstance(exc, InStreamError | MidStreamError):
        return None
    if classify(exc).kind.value != "unknown":
        return None
    wrapped: BaseException | None = None
    if isinstance(exc, ValueError):
        wrapped = _from_value_error(exc)
    if wrapped is None:
        wrapped = _from_body(exc)
    if wrapped is None and isinstance(exc, ValidationError):
        wrapped = _from_validation(exc)
    if wrapped is None and isinstance(exc, lc_exc.ModelError):
        wrapped = _from_model_error(exc)
    if wrapped is None:
        return None
    wrapped.__cause__ = exc
    return wrapped


def _from_value_error(exc: ValueError) -> BaseException | None:
    arg = exc.args[0] if exc.args else None
    if isinstance(arg, Mapping) and ("code" in arg or "type" in arg or "message" in arg):
        # langchain-openai: ValueError(response["error"]) for an error body on a 200.
        return _Translated({"error": dict(arg)})
    text = str(exc)
    match = _CODE_RE.search(text)
    if match:  # langchain-openrouter: "OpenRouter API returned an error...: msg (code: 503)"
        return _Translated({"error": {"code": int(match.group(1)), "message": text}})
    return None


def _from_body(exc: BaseException) -> BaseException | None:
    """An SDK error whose raw body text is a JSON error object (the openrouter SDK keeps the
    body as text when it fails to validate it), or, on a successful response, is not JSON at
    all: the upstream broke its protocol (malformed, a transport failure)."""
    body = getattr(exc, "body", None)
    if isinstance(body, bytes):
        body = body.decode("utf-8", "replace")
    if not isinstance(body, str):
        return None
    try:
        data = json.loads(body)
    except ValueError:
        status = getattr(exc, "status_code", None)
        if isinstance(status, int) and 200 <= status < 300:
            return _Malformed(f"the response body is not JSON: {exc}")
        return None
    if isinstance(data, Mapping) and isinstance(data.get("error"), Mapping):
        return _Translated(data)
    return None


def _from_validation(exc: ValidationError) -> BaseException | None:
    """A validation error over text that looks like JSON but does not decode: the openrouter
    SDK hands a stream event it could not decode to its model as the raw text."""
    for error in exc.errors(include_url=False):
        value = error.get("input")
        if isinstance(value, str) and value.lstrip()[:1] in ("{", "[") and not _decodes(value):
            return _Malformed("a stream event is not JSON")  # (no text of it: it is output)
    return None


def _decodes(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


def _from_model_error(exc: lc_exc.ModelError) -> BaseException | None:
    message = str(exc) or type(exc).__name__
    if isinstance(exc, lc_exc.ContextOverflowError):
        return _Translated({"error": {"code": "context_length_exceeded", "message": message}})
    if isinstance(exc, lc_exc.ModelTimeoutError):
        return _Timeout(message)
    if isinstance(exc, lc_exc.ModelConnectionError):
        return _Connection(message)
    for cls, status in _MODEL_ERROR_STATUS:
        if isinstance(exc, cls):
            return _StatusError(status, message)
    return None


_WRAPPERS = (_Translated, _StatusError, _Timeout, _Connection, _Malformed)


def unwrap(exc: BaseException) -> BaseException:
    """The exception to surface for ``exc``: the original of a translated error (carrying
    the notes swerve added to the wrapper); a :class:`MidStreamError` gets the original as
    its cause."""
    if isinstance(exc, MidStreamError):
        cause = exc.__cause__
        if isinstance(cause, _WRAPPERS) and cause.__cause__ is not None:
            exc.__cause__ = cause.__cause__
        return exc
    original = exc.__cause__ if isinstance(exc, _WRAPPERS) else None
    if original is None:
        return exc
    for note in getattr(exc, "__notes__", ()):
        if note not in getattr(original, "__notes__", ()):
            original.add_note(note)
    return original
