"""What LangChain integrations raise, as swerve classifies it (through the adapter's
classifier), and what the caller gets: the route model's own exception, never a stand-in."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import httpx
import openai
import openrouter
import pytest
from langchain_core import exceptions as lc
from langchain_core.language_models import BaseChatModel
from langchain_openai import ChatOpenAI
from langchain_openrouter import ChatOpenRouter
from lc_support import F, P, seed_config
from openrouter.errors import ResponseValidationError
from pydantic import BaseModel, ValidationError
from swerve_langchain import FailoverChatModel, classify_langchain_error
from test_chat_model import MODES, run

from swerve import Failover, MidStreamError
from swerve._failures import Classifiers, Failure, FailureKind, classify
from swerve.testing import FakeProvider, Fault


def _through(exc: BaseException) -> Failure:
    """What the adapter's engine reads ``exc`` as: its classifier, then the core's rules."""
    return Classifiers([classify_langchain_error])(exc)


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


def test_a_timeout_or_connection_error_names_the_class_the_caller_catches() -> None:
    assert _through(lc.ModelTimeoutError("late")).error_type == (
        "langchain_core.exceptions.ModelTimeoutError"
    )
    assert _through(lc.ModelConnectionError("no")).error_type == (
        "langchain_core.exceptions.ModelConnectionError"
    )


def test_errors_the_core_reads_are_left_alone() -> None:
    assert classify_langchain_error(ConnectionResetError()) is None
    assert classify_langchain_error(ValueError("just a bug")) is None
    assert classify_langchain_error(KeyboardInterrupt()) is None


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


# --- what the caller gets ---------------------------------------------------------------------
def _recording(cls: type[BaseChatModel], raised: list[BaseException]) -> type[Any]:
    """``cls`` (a real integration), keeping every exception its calls raise, in order."""

    class Recording(cls):  # type: ignore[valid-type, misc]
        def _generate(self, *args: Any, **kwargs: Any) -> Any:
            try:
                return super()._generate(*args, **kwargs)
            except Exception as exc:
                raised.append(exc)
                raise

        async def _agenerate(self, *args: Any, **kwargs: Any) -> Any:
            try:
                return await super()._agenerate(*args, **kwargs)
            except Exception as exc:
                raised.append(exc)
                raise

        def _stream(self, *args: Any, **kwargs: Any) -> Iterator[Any]:
            try:
                yield from super()._stream(*args, **kwargs)
            except Exception as exc:
                raised.append(exc)
                raise

        async def _astream(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
            try:
                async for chunk in super()._astream(*args, **kwargs):
                    yield chunk
            except Exception as exc:
                raised.append(exc)
                raise

    return Recording


def _openai(fake: FakeProvider, provider: str, raised: list[BaseException]) -> BaseChatModel:
    model: BaseChatModel = _recording(ChatOpenAI, raised)(
        base_url=f"{fake.url(provider)}/v1", api_key="test", model="fake-model", max_retries=0
    )
    return model


def _openrouter(fake: FakeProvider, provider: str, raised: list[BaseException]) -> BaseChatModel:
    client = openrouter.OpenRouter(
        api_key="test",
        server_url=f"{fake.url(provider)}/v1",
        client=httpx.Client(),
        async_client=httpx.AsyncClient(),
    )
    model: BaseChatModel = _recording(ChatOpenRouter, raised)(
        base_url=f"{fake.url(provider)}/v1", api_key="test", model="anthropic/claude-fake",
        max_retries=0, client=client,
    )  # fmt: skip
    return model


# (route model, fault on both routes, the class the integration raises for it, its status)
CASES: dict[str, tuple[Callable[..., BaseChatModel], Fault, type[Exception], int]] = {
    # langchain-openai: the openai SDK's own error for a 503.
    "chat_openai-503": (_openai, Fault.status(503), openai.InternalServerError, 503),
    # langchain-openrouter: OpenRouter's error in a 200 body, which the openrouter SDK fails to
    # validate (a ResponseValidationError keeping the body's text); the core alone reads
    # nothing in it, the adapter's classifier reads the 503.
    "chat_openrouter-error-body": (
        _openrouter,
        Fault.error_before_content("openrouter"),
        openrouter.errors.ResponseValidationError,
        503,
    ),
}
# What each case covers: a stream of OpenRouter's error is ChatOpenRouter's finish_reason
# "error" chunk, swerve's own ProviderStreamError (test_failure_meaning).
CASE_MODES = [
    (case, mode)
    for case in CASES
    for mode in MODES
    if case == "chat_openai-503" or mode.endswith("invoke")
]


@pytest.mark.anyio
@pytest.mark.parametrize(("case", "mode"), CASE_MODES)
async def test_a_langchain_route_error_surfaces_as_its_own_class(
    case: str, mode: str, fake: FakeProvider, make_failover: Callable[..., Failover]
) -> None:
    """Both routes fail: the caller catches exactly what the last route model raised (the same
    object, not a swerve stand-in), with swerve's note, after swerve read it as its status
    (a retryable one: the call swapped)."""
    factory, fault, cls, status = CASES[case]
    raised: list[BaseException] = []
    model = FailoverChatModel(
        routes={P: factory(fake, "primary", raised), F: factory(fake, "fallback", raised)},
        primary=P,
        failover=make_failover(seed_config(max_retries=0, max_swaps=1)),
    )
    fake.set_fault("primary", fault)
    fake.set_fault("fallback", fault)
    with pytest.raises(cls) as info:
        await run(model, mode)
    assert type(info.value) is type(raised[-1]) and info.value is raised[-1]
    assert len(raised) == 2 and raised[0] is not raised[1]  # the swap happened on the status
    assert (fake.requests("primary"), fake.requests("fallback")) == (1, 1)
    notes = info.value.__notes__
    assert notes == [f"swerve: requested {P}; attempts: {P}#1, {F}#2"]
    assert _through(info.value).status == status  # what swerve read it as


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ["stream", "astream"])
async def test_after_content_the_route_error_is_the_mid_stream_errors_cause(
    mode: str, fake: FakeProvider, make_failover: Callable[..., Failover]
) -> None:
    raised: list[BaseException] = []
    model = FailoverChatModel(
        routes={P: _openai(fake, "primary", raised), F: _openai(fake, "fallback", raised)},
        primary=P,
        failover=make_failover(seed_config(max_retries=0, max_swaps=1)),
    )
    fake.set_fault("primary", Fault.error_after(2, "openrouter"))
    with pytest.raises(MidStreamError) as info:
        await run(model, mode)
    (original,) = raised
    assert info.value.__cause__ is original and isinstance(original, openai.APIError)
    assert info.value.failure.status == 503 and info.value.failure.in_stream
    assert fake.requests("fallback") == 0
