"""What LangChain integrations raise, as swerve classifies it (through the adapter)."""

from __future__ import annotations

import pytest
from langchain_core import exceptions as lc
from swerve_langchain._errors import translate, unwrap

from swerve import MidStreamError, Route
from swerve.failures import Failure, FailureKind, classify


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
