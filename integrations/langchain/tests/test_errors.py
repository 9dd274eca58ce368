"""What LangChain integrations raise, as swerve classifies it (through the adapter)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from langchain_core import exceptions as lc
from openrouter.errors import ResponseValidationError
from pydantic import BaseModel, ValidationError
from swerve_langchain._errors import translate, unwrap

from swerve import MidStreamError, Route
from swerve._failures import Failure, FailureKind, classify


def _through(exc: BaseException) -> Failure:
    wrapped = translate(exc)
    return classify(wrapped if wrapped is not None else exc)


@pytest.mark.parametrize(
    ("error", "kind", "status"),
    [
        # langchain-openrouter, streaming and not
        (
            ValueError("OpenRouter API returned an error: Overloaded (code: 503)"),
            "unavailable",
            503,
        ),
        (
            ValueError("OpenRouter API returned an error during streaming: x (code: 429)"),
            "rate_limited",
            429,
        ),
        (ValueError("OpenRouter API returned an error: bad (code: 400)"), "invalid_request", 400),
        # langchain-openai: ValueError(response["error"]) for an error body on a 200
        (ValueError({"code": 502, "message": "Bad gateway"}), "server_error", 502),
        (ValueError({"type": "overloaded_error", "message": "Overloaded"}), "overloaded", 529),
        # langchain-core's provider-neutral classes, without any SDK base
        (lc.ModelRateLimitError("slow down"), "rate_limited", 429),
        (lc.ModelAPIError("boom"), "server_error", 500),
        (lc.ModelConnectionError("refused"), "transport", None),
        (lc.ModelTimeoutError("late"), "timeout", None),
        (lc.ModelAuthenticationError("who"), "auth", 401),
        (lc.ModelPermissionDeniedError("no"), "auth", 403),
        (lc.ModelInvalidRequestError("bad"), "invalid_request", 400),
        (lc.ContextOverflowError("too long"), "context_overflow", None),
    ],
)
def test_classification(error: BaseException, kind: str, status: int | None) -> None:
    assert classify(error).kind is FailureKind.UNKNOWN or isinstance(error, lc.ModelError)
    failure = _through(error)
    assert (failure.kind.value, failure.status) == (kind, status)


def test_errors_the_core_reads_are_left_alone() -> None:
    assert translate(ConnectionResetError()) is None
    assert translate(ValueError("just a bug")) is None
    assert translate(KeyboardInterrupt()) is None


def test_unwrap_surfaces_the_original_with_swerves_note() -> None:
    original = ValueError("OpenRouter API returned an error: x (code: 503)")
    wrapped = translate(original)
    assert wrapped is not None and wrapped.__cause__ is original
    wrapped.add_note("swerve: requested a/b; attempts: a/b#1")
    assert unwrap(wrapped) is original
    assert original.__notes__ == ["swerve: requested a/b; attempts: a/b#1"]
    mid = MidStreamError(Route("a", "b"), Route("a", "b"), classify(wrapped), ())
    mid.__cause__ = wrapped
    assert unwrap(mid) is mid and mid.__cause__ is original


class _Event(BaseModel):
    data: dict[str, Any]


def _invalid(value: object) -> ValidationError:
    """What the openrouter SDK raises for a stream event: its model validated on the text."""
    try:
        _Event(data=value)  # type: ignore[arg-type]
    except ValidationError as exc:
        return exc
    raise AssertionError("validated")


def _unreadable(status: int, body: str) -> ResponseValidationError:
    """What the openrouter SDK raises for a response body it cannot unmarshal."""
    request = httpx.Request("POST", "http://127.0.0.1/v1/chat/completions")
    response = httpx.Response(status, text=body, request=request)
    return ResponseValidationError("Response validation failed", response, ValueError(), body)


@pytest.mark.parametrize(
    ("error", "kind"),
    [
        # Undecodable data is malformed (a transport failure): an event that is not JSON, a
        # 200 body cut short.
        (_invalid('{"choices": [{"delta": '), "transport"),
        (_unreadable(200, '{"id": "chatcmpl-1", "choices": [{"ind'), "transport"),
        # Data that decodes but does not fit the SDK's model is not malformed data.
        (_invalid('{"choices": []}'), "unknown"),
        (_invalid("not json at all"), "unknown"),
        (_unreadable(200, '{"id": "chatcmpl-1", "choices": "odd"}'), "unknown"),
    ],
)
def test_undecodable_data_the_openrouter_sdk_reports_as_validation_errors(
    error: BaseException, kind: str
) -> None:
    assert classify(error).kind is FailureKind.UNKNOWN
    assert _through(error).kind.value == kind
    wrapped = translate(error)
    if wrapped is not None:  # the original surfaces
        assert unwrap(wrapped) is error
