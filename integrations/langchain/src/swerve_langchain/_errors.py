"""What LangChain integrations raise, read by swerve: one classifier for ``Failover``.

The openai and anthropic SDK errors (and langchain-openai / langchain-anthropic's
``ModelError`` subclasses of them) carry ``status_code`` and ``body``, which the core reads
as they are. A few things do not:

* langchain-openrouter reports errors as ``ValueError("... (code: 503)")``;
* langchain-openai raises ``ValueError(<error object>)`` when a 200 JSON body holds an error
  (OpenRouter answers a non-streaming request that way);
* langchain-core's provider-neutral ``ModelError`` classes, raised without any SDK base;
* ChatOpenRouter turns an OpenRouter in-stream error chunk into an ordinary chunk with
  ``finish_reason="error"``, dropping the error's code (:class:`ProviderStreamError`);
* the openrouter SDK reports data it could not decode (a 200 body, or a stream event, that is
  not JSON) as a validation error, not as the ``JSONDecodeError`` the core reads as malformed.

:func:`classify_langchain_error` reads them (``Failover(classifiers=[...])``, which the
adapter's own ``Failover`` is built with): the error itself is never replaced, so the one that
surfaces is exactly what the route model raised, with swerve's note attached.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import replace

from langchain_core import exceptions as lc_exc
from pydantic import ValidationError

from swerve import Failure, FailureKind, MidStreamError, UpstreamError
from swerve.adapters import IncompleteStreamError, InStreamError, MalformedStreamError, classify

__all__ = ["ProviderStreamError", "classify_langchain_error"]

_CODE_RE = re.compile(r"\(code:\s*([0-9]{3})\)\s*$")


class ProviderStreamError(IncompleteStreamError):
    """A stream ended with ``finish_reason="error"``: the provider failed inside it but the
    integration did not pass the error on (ChatOpenRouter drops OpenRouter's error chunk)."""


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


def classify_langchain_error(error: BaseException, /) -> Failure | None:
    """The :class:`swerve.Failure` a LangChain integration's error stands for, or None when
    the core reads it as it is (or nothing better is known): a :class:`swerve.Classifier`.

    The Failure is the core's reading of what the error says (an in-stream error payload, an
    HTTP status, a timeout, a broken connection, malformed data), so it classifies exactly as
    the same failure from an SDK the core knows.
    """
    if not isinstance(error, Exception) or isinstance(error, InStreamError | MidStreamError):
        return None
    if classify(error).kind is not FailureKind.UNKNOWN:
        return None
    said: BaseException | None = None
    if isinstance(error, ValueError):
        said = _from_value_error(error)
    if said is None:
        said = _from_body(error)
    if said is None and isinstance(error, ValidationError):
        said = _from_validation(error)
    if said is None and isinstance(error, lc_exc.ModelError):
        said = _from_model_error(error)
    if said is None:
        return None
    failure = classify(said)
    if isinstance(said, TimeoutError | ConnectionError):
        # error.type names the class the caller catches, as for any exception.
        failure = replace(failure, error_type=_qualified_name(error))
    return failure


# Each reader below returns what ``error`` says, as an exception the core reads.


def _from_value_error(exc: ValueError) -> BaseException | None:
    arg = exc.args[0] if exc.args else None
    if isinstance(arg, Mapping) and ("code" in arg or "type" in arg or "message" in arg):
        # langchain-openai: ValueError(response["error"]) for an error body on a 200.
        return InStreamError({"error": dict(arg)})
    text = str(exc)
    match = _CODE_RE.search(text)
    if match:  # langchain-openrouter: "OpenRouter API returned an error...: msg (code: 503)"
        return InStreamError({"error": {"code": int(match.group(1)), "message": text}})
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
            return MalformedStreamError(f"the response body is not JSON: {exc}")
        return None
    if isinstance(data, Mapping) and isinstance(data.get("error"), Mapping):
        return InStreamError(data)
    return None


def _from_validation(exc: ValidationError) -> BaseException | None:
    """A validation error over text that looks like JSON but does not decode: the openrouter
    SDK hands a stream event it could not decode to its model as the raw text."""
    for error in exc.errors(include_url=False):
        value = error.get("input")
        if isinstance(value, str) and value.lstrip()[:1] in ("{", "[") and not _decodes(value):
            return MalformedStreamError("a stream event is not JSON")  # (no text: it is output)
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
        return InStreamError({"error": {"code": "context_length_exceeded", "message": message}})
    if isinstance(exc, lc_exc.ModelTimeoutError):
        return TimeoutError(message)
    if isinstance(exc, lc_exc.ModelConnectionError):
        return ConnectionError(message)
    for cls, status in _MODEL_ERROR_STATUS:
        if isinstance(exc, cls):
            # The status its class stands for, so the configured status list applies.
            return UpstreamError(status, message=message)
    return None


def _qualified_name(exc: BaseException) -> str:
    cls = type(exc)
    return f"{cls.__module__}.{cls.__qualname__}"
