"""Tests for swerve._failures.classify / parse_retry_after and swerve._telemetry.redact.redact."""

from __future__ import annotations

import asyncio
import email.utils
import errno
import socket
import time
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from swerve._failures import (
    KNOWN_ERROR_TYPES,
    RETRY_AFTER_MAX_S,
    AttemptTimeout,
    CircuitOpenError,
    Failure,
    FailureKind,
    IncompleteStreamError,
    InStreamError,
    classify,
    parse_retry_after,
)
from swerve._telemetry.redact import redact

K = FailureKind
URL = "https://api.example.test/v1/chat/completions"


def _request() -> httpx.Request:
    return httpx.Request("POST", URL)


def _response(
    status: int,
    *,
    json: object = None,
    content: bytes | None = None,
    headers: dict[str, str] | None = None,
) -> httpx.Response:
    if json is not None:
        return httpx.Response(status, json=json, headers=headers, request=_request())
    return httpx.Response(status, content=content, headers=headers, request=_request())


def _status_error(response: httpx.Response) -> httpx.HTTPStatusError:
    with pytest.raises(httpx.HTTPStatusError) as info:
        response.raise_for_status()
    return info.value


def _openai_body(message: str, type_: str, code: str | None = None) -> dict[str, object]:
    return {"error": {"message": message, "type": type_, "param": None, "code": code}}


def _anthropic_body(type_: str, message: str = "details") -> dict[str, object]:
    return {"type": "error", "error": {"type": type_, "message": message}}


# --- SDK look-alikes (openai 3.x / anthropic 2.x shapes; neither SDK is installed) -----------


class APIError(Exception):
    def __init__(self, message: str, request: httpx.Request, *, body: object) -> None:
        super().__init__(message)
        self.message = message
        self.request = request
        self.body = body


class APIStatusError(APIError):
    def __init__(self, message: str, *, response: httpx.Response, body: object) -> None:
        super().__init__(message, response.request, body=body)
        self.response = response
        self.status_code = response.status_code


class APIConnectionError(APIError):
    def __init__(self, *, message: str = "Connection error.", request: httpx.Request) -> None:
        super().__init__(message, request, body=None)


class APITimeoutError(APIConnectionError):
    def __init__(self, request: httpx.Request) -> None:
        super().__init__(message="Request timed out.", request=request)


# --- HTTP statuses ------------------------------------------------------------------------

STATUS_KINDS = [
    (429, K.RATE_LIMITED),
    (529, K.OVERLOADED),
    (503, K.UNAVAILABLE),
    (500, K.SERVER_ERROR),
    (502, K.SERVER_ERROR),
    (501, K.SERVER_ERROR),
    (520, K.SERVER_ERROR),
    (504, K.TIMEOUT),
    (408, K.TIMEOUT),
    (409, K.SERVER_ERROR),
    (401, K.AUTH),
    (403, K.AUTH),
    (402, K.QUOTA),
    (400, K.INVALID_REQUEST),
    (404, K.INVALID_REQUEST),
    (405, K.INVALID_REQUEST),
    (413, K.INVALID_REQUEST),
    (418, K.INVALID_REQUEST),
    (422, K.INVALID_REQUEST),
]


@pytest.mark.parametrize(("status", "kind"), STATUS_KINDS)
def test_status_mapping_from_response_and_status_error(status: int, kind: FailureKind) -> None:
    response = _response(status, json=_openai_body("something happened", "whatever"))
    for failure in (classify(response), classify(_status_error(response))):
        assert failure.kind is kind
        assert failure.status == status
        assert failure.error_type == str(status)
        assert failure.in_stream is False
        assert failure.message == "something happened"


@pytest.mark.parametrize(("status", "kind"), STATUS_KINDS)
def test_status_mapping_from_sdk_error(status: int, kind: FailureKind) -> None:
    response = _response(status, json={"unrelated": True})
    error = APIStatusError(f"Error code: {status}", response=response, body=None)
    failure = classify(error)
    assert (failure.kind, failure.status, failure.error_type) == (kind, status, str(status))


def test_exception_with_bare_status_code_attribute() -> None:
    class Upstream(Exception):
        status_code = 503

    failure = classify(Upstream("upstream said no"))
    assert (failure.kind, failure.status, failure.message) == (
        K.UNAVAILABLE,
        503,
        "upstream said no",
    )


# --- 429 vs quota ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "body"),
    [
        (
            429,
            _openai_body(
                "You exceeded your current quota, please check your plan and billing details.",
                "insufficient_quota",
                "insufficient_quota",
            ),
        ),
        (429, {"error": {"message": "no more money", "type": "insufficient_quota"}}),
        (429, {"error": {"message": "You exceeded your current quota.", "type": "requests"}}),
        (429, {"error": {"code": 429, "message": "Insufficient credits. Add more credits."}}),
        (400, _anthropic_body("invalid_request_error", "Your credit balance is too low.")),
    ],
)
def test_quota_exhaustion_is_not_a_rate_limit(status: int, body: dict[str, object]) -> None:
    failure = classify(_response(status, json=body))
    assert failure.kind is K.QUOTA
    assert failure.status == status  # the status stays, so configured statuses still apply


def test_plain_429_is_rate_limited() -> None:
    body = _openai_body(
        "Rate limit reached for gpt-4o in organization org-x on requests", "requests"
    )
    failure = classify(_response(429, json=body, headers={"retry-after": "3"}))
    assert (failure.kind, failure.retry_after, failure.code) == (K.RATE_LIMITED, 3.0, "requests")


# --- context overflow -----------------------------------------------------------------------

CONTEXT_MESSAGES = [
    "This model's maximum context length is 128000 tokens. However, your messages resulted in "
    "130000 tokens. Please reduce the length of the messages.",
    "Input exceeds the context window of this model",
    "prompt is too long: 210000 tokens > 200000 maximum",
    "input length and `max_tokens` exceed context limit: 190000 + 20000 > 200000, decrease "
    "input length or `max_tokens` and try again",
    "This endpoint's maximum context length is 8192 tokens. However, you requested about 9000.",
    "context_length_exceeded",
]


@pytest.mark.parametrize("message", CONTEXT_MESSAGES)
@pytest.mark.parametrize("status", [400, 413, 422, 500])
def test_context_overflow_by_message(message: str, status: int) -> None:
    failure = classify(_response(status, json={"error": {"message": message}}))
    assert failure.kind is K.CONTEXT_OVERFLOW
    assert failure.status == status


@pytest.mark.parametrize("message", CONTEXT_MESSAGES)
def test_context_overflow_in_stream(message: str) -> None:
    failure = classify(InStreamError({"error": {"message": message}}))
    assert (failure.kind, failure.in_stream) == (K.CONTEXT_OVERFLOW, True)


def test_context_overflow_by_openai_code() -> None:
    body = _openai_body("Too long, sorry.", "invalid_request_error", "context_length_exceeded")
    error = APIStatusError(
        "Error code: 400", response=_response(400, json=body), body=body["error"]
    )
    failure = classify(error)
    assert failure.kind is K.CONTEXT_OVERFLOW
    assert (failure.status, failure.code, failure.error_type) == (
        400,
        "context_length_exceeded",
        "400",
    )


def test_context_overflow_from_openrouter_string_code_in_stream() -> None:
    failure = classify({"error": {"code": "context_length_exceeded", "message": "Too long"}})
    assert failure.kind is K.CONTEXT_OVERFLOW
    assert failure.error_type == "context_length_exceeded"


def test_context_overflow_relayed_in_openrouter_metadata() -> None:
    raw = '{"error":{"message":"This model\'s maximum context length is 4096 tokens."}}'
    payload = {
        "error": {"code": 400, "message": "Provider returned error", "metadata": {"raw": raw}}
    }
    failure = classify(payload, in_stream=True)
    assert (failure.kind, failure.status) == (K.CONTEXT_OVERFLOW, 400)
    assert failure.message.startswith("Provider returned error")


def test_too_many_tokens_means_overflow_on_4xx_but_throttling_on_429() -> None:
    body = {"message": "Too many tokens, please wait before trying again."}
    assert classify(_response(413, json=body)).kind is K.CONTEXT_OVERFLOW
    assert classify(_response(429, json=body)).kind is K.RATE_LIMITED


# --- content filter -------------------------------------------------------------------------


def test_content_filter_by_code_keeps_status() -> None:
    body = {"error": {"code": "content_filter", "message": "The response was filtered."}}
    failure = classify(_response(400, json=body))
    assert (failure.kind, failure.status, failure.code) == (K.CONTENT_FILTER, 400, "content_filter")


def test_content_filter_by_type() -> None:
    body = _openai_body("Your request was rejected", "content_policy_violation")
    assert classify(_response(400, json=body)).kind is K.CONTENT_FILTER


def test_content_filter_by_finish_reason_chunk() -> None:
    chunk = {"choices": [{"index": 0, "delta": {}, "finish_reason": "content_filter"}]}
    failure = classify(InStreamError(chunk))
    assert (failure.kind, failure.in_stream) == (K.CONTENT_FILTER, True)


# --- Anthropic ------------------------------------------------------------------------------

ANTHROPIC_TYPES = [
    ("overloaded_error", 529, K.OVERLOADED),
    ("rate_limit_error", 429, K.RATE_LIMITED),
    ("api_error", 500, K.SERVER_ERROR),
    ("invalid_request_error", 400, K.INVALID_REQUEST),
    ("authentication_error", 401, K.AUTH),
    ("permission_error", 403, K.AUTH),
    ("not_found_error", 404, K.INVALID_REQUEST),
    ("request_too_large", 413, K.INVALID_REQUEST),
    ("billing_error", 402, K.QUOTA),
    ("timeout_error", 504, K.TIMEOUT),
]


@pytest.mark.parametrize(("type_", "status", "kind"), ANTHROPIC_TYPES)
def test_anthropic_in_stream_error_types(type_: str, status: int, kind: FailureKind) -> None:
    failure = classify(InStreamError(_anthropic_body(type_, "Overloaded"), route="a/claude"))
    assert failure == Failure(
        kind,
        status=status,
        in_stream=True,
        code=type_,
        message="Overloaded",
        error_type=type_,
    )


@pytest.mark.parametrize(("type_", "status", "kind"), ANTHROPIC_TYPES)
def test_anthropic_sdk_stream_error_on_a_200(type_: str, status: int, kind: FailureKind) -> None:
    # anthropic's SDK raises `event: error` as an APIStatusError carrying the 200 response.
    streamed = httpx.Response(
        200, headers={"content-type": "text/event-stream"}, request=_request()
    )
    body = _anthropic_body(type_)
    failure = classify(APIStatusError(str(body), response=streamed, body=body))
    assert (failure.kind, failure.status, failure.in_stream) == (kind, status, True)
    assert failure.error_type == type_


def test_anthropic_http_529() -> None:
    body = _anthropic_body("overloaded_error", "Overloaded")
    response = _response(529, json=body, headers={"retry-after": "10"})
    failure = classify(APIStatusError("Error code: 529", response=response, body=body))
    assert (failure.kind, failure.status, failure.error_type) == (K.OVERLOADED, 529, "529")
    assert (failure.code, failure.retry_after) == ("overloaded_error", 10.0)


# --- OpenRouter and OpenAI-compatible payloads --------------------------------------------------


@pytest.mark.parametrize("code", [503, "503", " 503 "])
def test_openrouter_numeric_code(code: object) -> None:
    failure = classify(
        {"error": {"code": code, "message": "No instances available"}}, in_stream=True
    )
    assert (failure.kind, failure.status, failure.error_type) == (K.UNAVAILABLE, 503, "503")
    assert failure.in_stream is True
    assert failure.message == "No instances available"


@pytest.mark.parametrize(
    ("code", "status", "kind"),
    [(502, 502, K.SERVER_ERROR), (429, 429, K.RATE_LIMITED), ("408", 408, K.TIMEOUT)],
)
def test_openrouter_other_numeric_codes(code: object, status: int, kind: FailureKind) -> None:
    failure = classify(InStreamError({"error": {"code": code, "message": "x"}}))
    assert (failure.kind, failure.status) == (kind, status)


def test_openrouter_string_rate_limit_code() -> None:
    failure = classify({"error": {"code": "rate_limit_exceeded", "message": "slow down"}})
    assert (failure.kind, failure.status) == (K.RATE_LIMITED, 429)
    assert (failure.code, failure.error_type) == ("rate_limit_exceeded", "rate_limit_exceeded")


def test_openai_compatible_server_error_chunk() -> None:
    chunk = {"error": {"message": "The server had an error", "type": "server_error", "code": None}}
    failure = classify(InStreamError(chunk))
    assert (failure.kind, failure.status, failure.error_type) == (
        K.SERVER_ERROR,
        500,
        "server_error",
    )


def test_openai_sdk_status_less_stream_error() -> None:
    # openai raises APIError(body=data["error"]) for an error chunk in a stream.
    body = {"message": "The server had an error", "type": "server_error", "code": None}
    failure = classify(APIError("The server had an error", _request(), body=body))
    assert (failure.kind, failure.in_stream, failure.status) == (K.SERVER_ERROR, True, 500)


def test_payload_with_plain_string_error() -> None:
    failure = classify({"error": "upstream exploded"})
    assert (failure.kind, failure.error_type, failure.message) == (
        K.UNKNOWN,
        "unknown",
        "upstream exploded",
    )
    assert classify({"error": "You have run out of credits"}).kind is K.QUOTA


@pytest.mark.parametrize(
    "payload",
    [{}, {"type": "message_start"}, {"error": None}, {"error": 3}, {"choices": []}],
)
def test_unrecognised_payloads(payload: dict[str, object]) -> None:
    failure = classify(payload)
    assert (failure.kind, failure.error_type) == (K.UNKNOWN, "unknown")
    in_stream = classify(InStreamError(payload))
    assert (in_stream.kind, in_stream.error_type, in_stream.in_stream) == (
        K.UNKNOWN,
        "unknown",
        True,
    )


def test_gemini_style_list_body() -> None:
    body = [
        {"error": {"code": 503, "message": "The model is overloaded.", "status": "UNAVAILABLE"}}
    ]
    failure = classify(APIStatusError("x", response=_response(200), body=body))
    assert (failure.kind, failure.status) == (K.UNAVAILABLE, 503)


# --- retry-after ------------------------------------------------------------------------------

NOW = 1_700_000_000.0


def _http_date(epoch: float) -> str:
    return email.utils.format_datetime(datetime.fromtimestamp(epoch, UTC), usegmt=True)


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"retry-after-ms": "1500"}, 1.5),
        ({"Retry-After-Ms": "250", "Retry-After": "9"}, 0.25),  # ms first
        ({"retry-after-ms": "soon", "retry-after": "9"}, 9.0),  # garbage ms falls through
        ({"Retry-After": "7"}, 7.0),  # plain dict, odd case
        ({"RETRY-AFTER": "2.5"}, 2.5),
        ({"retry-after": "86400"}, 86400.0),  # not capped here
        ({"retry-after": "-3"}, 0.0),
        ({"retry-after-ms": "-10"}, 0.0),
        ({"retry-after": _http_date(NOW + 30)}, 30.0),
        ({"retry-after": _http_date(NOW - 30)}, 0.0),
        ({"retry-after": "Wed, 21 Oct 2015 07:28:00"}, 0.0),  # no zone: read as UTC
        ({"retry-after": "soon"}, None),
        ({"retry-after": "nan"}, None),
        ({"retry-after": "inf"}, None),
        ({"retry-after": ""}, None),
        ({"content-type": "application/json"}, None),
        ({}, None),
    ],
)
def test_parse_retry_after(headers: dict[str, str], expected: float | None) -> None:
    assert parse_retry_after(headers, now=NOW) == expected


def test_parse_retry_after_http_date_defaults_to_now() -> None:
    value = parse_retry_after({"retry-after": _http_date(time.time() + 60)})
    assert value is not None
    assert 55 <= value <= 61


def test_parse_retry_after_zoneless_date_is_utc_whatever_the_local_zone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    zoneless = _http_date(NOW + 30).removesuffix(" GMT")
    monkeypatch.setenv("TZ", "IST-05:30")  # POSIX zone spec: no tz database needed
    time.tzset()
    try:
        assert parse_retry_after({"retry-after": zoneless}, now=NOW) == 30.0
    finally:
        monkeypatch.undo()
        time.tzset()


def test_parse_retry_after_with_httpx_headers() -> None:
    headers = httpx.Headers({"Retry-After-MS": "1200"})
    assert parse_retry_after(headers) == 1.2


def test_classify_reads_retry_after_from_response_headers() -> None:
    response = _response(429, json={}, headers={"Retry-After": _http_date(time.time() + 120)})
    retry_after = classify(_status_error(response)).retry_after
    assert retry_after is not None
    assert 115 <= retry_after <= 121
    assert classify(_response(503, headers={"retry-after": "garbage"})).retry_after is None


# --- response bodies ------------------------------------------------------------------------

NGINX_502 = (
    b"<html>\r\n<head><title>502 Bad Gateway</title></head>\r\n<body>\r\n<center><h1>502 Bad "
    b"Gateway</h1></center>\r\n<hr><center>nginx</center>\r\n</body>\r\n</html>\r\n" + b" " * 2000
)


def test_non_json_502_html_body() -> None:
    response = _response(502, content=NGINX_502, headers={"content-type": "text/html"})
    for failure in (classify(response), classify(_status_error(response))):
        assert (failure.kind, failure.status, failure.error_type) == (K.SERVER_ERROR, 502, "502")
        assert "502 Bad Gateway" in failure.message
        assert "<" not in failure.message
        assert len(failure.message) <= 300


def _unread(status: int) -> httpx.Response:
    def body() -> Iterator[bytes]:
        yield b'{"error": {"code": "context_length_exceeded", "message": "too long"}}'

    return httpx.Response(status, content=body(), request=_request())


def test_streaming_response_body_is_never_read() -> None:
    response = _unread(400)
    failure = classify(response)
    assert (failure.kind, failure.status, failure.message) == (
        K.INVALID_REQUEST,
        400,
        "HTTP 400 Bad Request",
    )
    assert not response.is_stream_consumed
    # Once read, the same response tells more.
    response.read()
    assert classify(response).kind is K.CONTEXT_OVERFLOW


def test_streaming_status_error_body_is_never_read() -> None:
    response = _unread(503)
    failure = classify(_status_error(response))
    assert (failure.kind, failure.status) == (K.UNAVAILABLE, 503)
    assert not response.is_stream_consumed


def test_duck_typed_httpx2_response() -> None:
    class Response:  # what an httpx2 response looks like from here
        status_code = 529
        headers = {"Retry-After-Ms": "700"}  # noqa: RUF012
        content = b'{"type": "error", "error": {"type": "overloaded_error", "message": "busy"}}'

    failure = classify(Response())
    assert (failure.kind, failure.status, failure.retry_after) == (K.OVERLOADED, 529, 0.7)
    assert failure.message == "busy"


# --- transport and timeouts ---------------------------------------------------------------------


@pytest.fixture
def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


@pytest.fixture
def silent_server() -> Iterator[int]:
    # Listening is enough: the kernel completes the handshake and nothing ever answers.
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(8)
        yield sock.getsockname()[1]


def test_connection_refused_is_transport(closed_port: int) -> None:
    with httpx.Client() as client, pytest.raises(httpx.ConnectError) as info:
        client.get(f"http://127.0.0.1:{closed_port}/")
    failure = classify(info.value)
    assert (failure.kind, failure.status, failure.error_type) == (
        K.TRANSPORT,
        None,
        "httpx.ConnectError",
    )


def test_read_timeout_is_timeout(silent_server: int) -> None:
    timeout = httpx.Timeout(1.0, read=0.1)
    with httpx.Client(timeout=timeout) as client, pytest.raises(httpx.ReadTimeout) as info:
        client.get(f"http://127.0.0.1:{silent_server}/")
    failure = classify(info.value, in_stream=True)
    assert (failure.kind, failure.error_type, failure.in_stream) == (
        K.TIMEOUT,
        "httpx.ReadTimeout",
        True,
    )


@pytest.mark.parametrize(
    ("error", "kind"),
    [
        (httpx.ConnectTimeout("connect timed out"), K.TIMEOUT),
        (httpx.WriteTimeout("write timed out"), K.TIMEOUT),
        (httpx.PoolTimeout("pool timed out"), K.TIMEOUT),
        (httpx.RemoteProtocolError("peer closed connection"), K.TRANSPORT),
        (httpx.LocalProtocolError("bad request line"), K.TRANSPORT),
        (httpx.ReadError("read failed"), K.TRANSPORT),
        (httpx.WriteError("write failed"), K.TRANSPORT),
        (httpx.ProxyError("proxy failed"), K.TRANSPORT),
    ],
)
def test_httpx_exception_classes(error: Exception, kind: FailureKind) -> None:
    failure = classify(error)
    assert failure.kind is kind
    assert failure.error_type == f"httpx.{type(error).__name__}"


def test_httpx2_exceptions_by_class_name() -> None:
    namespace: dict[str, Any] = {"__module__": "httpx2"}
    transport = type("TransportError", (Exception,), namespace)
    timeout = type("TimeoutException", (transport,), namespace)
    read_timeout = type("ReadTimeout", (timeout,), namespace)
    protocol = type("RemoteProtocolError", (transport,), namespace)
    assert classify(read_timeout("slow")).kind is K.TIMEOUT
    assert classify(read_timeout("slow")).error_type == "httpx2.ReadTimeout"
    assert classify(protocol("closed")).kind is K.TRANSPORT
    assert classify(type("Oops", (Exception,), namespace)("?")).kind is K.UNKNOWN


@pytest.mark.parametrize(
    ("error", "kind", "error_type"),
    [
        (ConnectionResetError(errno.ECONNRESET, "reset"), K.TRANSPORT, "ConnectionResetError"),
        (
            ConnectionRefusedError(errno.ECONNREFUSED, "refused"),
            K.TRANSPORT,
            "ConnectionRefusedError",
        ),
        (BrokenPipeError(errno.EPIPE, "pipe"), K.TRANSPORT, "BrokenPipeError"),
        (
            socket.gaierror(socket.EAI_NONAME, "Name or service not known"),
            K.TRANSPORT,
            "socket.gaierror",
        ),
        (OSError(errno.ENETUNREACH, "Network is unreachable"), K.TRANSPORT, "OSError"),
        (TimeoutError("timed out"), K.TIMEOUT, "TimeoutError"),
        (OSError(errno.ENOENT, "No such file"), K.UNKNOWN, "FileNotFoundError"),
        (ValueError("bug"), K.UNKNOWN, "ValueError"),
    ],
)
def test_builtin_exceptions(error: BaseException, kind: FailureKind, error_type: str) -> None:
    failure = classify(error)
    assert (failure.kind, failure.error_type) == (kind, error_type)


def test_sdk_timeout_error_wins_over_its_connection_base() -> None:
    try:
        try:
            raise httpx.ReadTimeout("read timed out")
        except httpx.ReadTimeout as exc:
            raise APITimeoutError(_request()) from exc
    except APITimeoutError as exc:
        failure = classify(exc)
    assert failure.kind is K.TIMEOUT
    assert failure.error_type.endswith("APITimeoutError")


def test_sdk_connection_error_alone_is_transport() -> None:
    failure = classify(APIConnectionError(request=_request()))
    assert failure.kind is K.TRANSPORT
    assert failure.error_type.endswith("APIConnectionError")


def test_sdk_connection_error_defers_to_what_it_wraps() -> None:
    error = APIConnectionError(request=_request())
    error.__cause__ = httpx.ReadTimeout("read timed out")
    assert classify(error).kind is K.TIMEOUT
    error.__cause__ = ConnectionResetError("reset")
    assert classify(error).error_type == "ConnectionResetError"


# --- chains, cancellation, swerve's own errors -------------------------------------------------


class WrapperError(Exception):
    """Like a LangChain wrapper: says nothing by itself."""


def test_cause_is_walked_when_the_top_says_nothing() -> None:
    status_error = _status_error(_response(503, json={"error": {"code": 503, "message": "down"}}))
    try:
        try:
            raise status_error
        except httpx.HTTPStatusError as exc:
            raise WrapperError("model call failed") from exc
    except WrapperError as exc:
        failure = classify(exc)
    assert (failure.kind, failure.status, failure.message) == (K.UNAVAILABLE, 503, "down")


def test_implicit_context_is_walked() -> None:
    def call() -> None:
        try:
            raise ConnectionResetError("reset by peer")
        except ConnectionResetError:
            raise WrapperError("oops") from None  # suppressed for display, still there

    with pytest.raises(WrapperError) as info:
        call()
    assert info.value.__cause__ is None
    assert classify(info.value).kind is K.TRANSPORT


def test_top_level_classification_beats_the_cause() -> None:
    error = _status_error(_response(429, json={}))
    error.__cause__ = ConnectionResetError("reset")
    assert classify(error).kind is K.RATE_LIMITED


def test_exception_group_members_are_walked() -> None:
    group = ExceptionGroup("task group failed", [WrapperError("x"), httpx.ReadTimeout("slow")])
    assert classify(group).kind is K.TIMEOUT


def test_cyclic_chain_terminates() -> None:
    first, second = WrapperError("a"), WrapperError("b")
    first.__cause__, second.__cause__ = second, first
    failure = classify(first)
    assert (failure.kind, failure.message) == (K.UNKNOWN, "a")
    assert failure.error_type.endswith("WrapperError")


def test_chain_walk_is_bounded() -> None:
    def wrapped(depth: int) -> BaseException:
        error: BaseException = ConnectionResetError("reset")
        for _ in range(depth):
            outer = WrapperError("wrapper")
            outer.__cause__ = error
            error = outer
        return error

    assert classify(wrapped(3)).kind is K.TRANSPORT
    assert classify(wrapped(100)).kind is K.UNKNOWN


@pytest.mark.parametrize(
    "error", [asyncio.CancelledError(), KeyboardInterrupt(), GeneratorExit(), SystemExit(1)]
)
def test_cancellation_is_aborted(error: BaseException) -> None:
    assert classify(error).kind is K.ABORTED


def test_cancellation_of_a_real_task_is_aborted() -> None:
    async def main() -> BaseException:
        task = asyncio.create_task(asyncio.Event().wait())
        await asyncio.sleep(0)
        task.cancel()
        try:
            await task
        except asyncio.CancelledError as exc:
            return exc
        raise AssertionError("not cancelled")

    assert classify(asyncio.run(main())).kind is K.ABORTED


def test_cancellation_wrapped_is_aborted_and_cancellation_wins_over_its_context() -> None:
    wrapped = WrapperError("stopped")
    wrapped.__cause__ = asyncio.CancelledError()
    assert classify(wrapped).kind is K.ABORTED
    cancelled = asyncio.CancelledError()
    cancelled.__context__ = _status_error(_response(503))  # cancelled while backing off
    assert classify(cancelled).kind is K.ABORTED


def test_swerve_own_errors() -> None:
    timeout = classify(AttemptTimeout("first_token", 2.5))
    assert timeout == Failure(
        K.TIMEOUT, message="first_token timeout after 2.5s", error_type="timeout"
    )
    breaker = classify(CircuitOpenError("openrouter/claude"))
    assert (breaker.kind, breaker.error_type) == (K.BREAKER_OPEN, "breaker_open")
    assert "openrouter/claude" in breaker.message
    incomplete = classify(IncompleteStreamError("no [DONE]"))
    assert incomplete == Failure(
        K.INCOMPLETE, in_stream=True, message="no [DONE]", error_type="incomplete"
    )


class _ExplodingMapping(Mapping[str, object]):
    def __getitem__(self, key: str) -> object:
        raise RuntimeError("boom")

    def __iter__(self) -> Iterator[str]:
        raise RuntimeError("boom")

    def __len__(self) -> int:
        return 1


def test_classify_swallows_errors_from_hostile_inputs() -> None:
    assert classify(_ExplodingMapping()) == Failure(K.UNKNOWN)
    assert classify(InStreamError(_ExplodingMapping()), in_stream=True) == Failure(
        K.UNKNOWN, in_stream=True
    )
    assert parse_retry_after(_ExplodingMapping()) is None  # type: ignore[arg-type]


def test_non_error_inputs_are_unknown() -> None:
    assert classify(None).kind is K.UNKNOWN
    assert classify("sk-ant-api03-" + "a" * 40).message == "[REDACTED]"
    assert classify(42).error_type == "unknown"


# --- redaction ------------------------------------------------------------------------------

ANTHROPIC_KEY = "sk-ant-api03-abcdefGHIJKL0123456789_mnopqrSTUVWX-yz0123456789abcdEF"
BEARER = "xyzBearerSecretToken0123456789abcdefXYZ"


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        (f"invalid x-api-key: {ANTHROPIC_KEY} rejected", ANTHROPIC_KEY),
        (f"Authorization: Bearer {BEARER}", BEARER),
        (f"sent header 'Bearer {BEARER}'", BEARER),
        ("x-api-key: hunter2hunter2", "hunter2"),
        ("retrying with api_key=abc123secret&model=x", "abc123secret"),
        ('{"apiKey": "my-secret-value"}', "my-secret-value"),
        ("key sk-or-v1-0123456789abcdef0123 rejected", "sk-or-v1-0123456789abcdef0123"),
        ("key sk-proj-AbCdEf0123456789 rejected", "sk-proj-AbCdEf0123456789"),
        ("GET /v1beta/models?key=AIzaSyD-abcdefghijklmnopqrstuv012345", "AIzaSyD"),
        ("token 0123456789abcdef0123456789abcdef0123 leaked", "0123456789abcdef0123456789abcdef"),
        ("secret wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY9 leaked", "bPxRfiCY"),
    ],
)
def test_redact_removes_secrets(text: str, secret: str) -> None:
    cleaned = redact(text)
    assert secret not in cleaned
    assert "[REDACTED]" in cleaned


@pytest.mark.parametrize(
    "text",
    [
        "This model's maximum context length is 128000 tokens.",
        "Rate limit reached for gpt-4o on requests per min (RPM): Limit 500, Used 500.",
        "Server error '502 Bad Gateway' for url 'https://api.example.test/v1/chat/completions'",
        "Incorrect API key provided. You can find your API key at the dashboard.",
    ],
)
def test_redact_leaves_ordinary_messages_alone(text: str) -> None:
    assert redact(text) == text


def test_redact_truncates_and_collapses_whitespace() -> None:
    long = redact("x " * 5000)
    assert len(long) == 300
    assert long.endswith("…")
    assert redact("a\n\n  b\tc ") == "a b c"
    assert redact("abcdef", limit=4) == "abc…"


def test_classify_messages_are_redacted_and_bounded() -> None:
    message = f"bad key {ANTHROPIC_KEY}; sent Authorization: Bearer {BEARER}. " + "y" * 10_000
    body = _anthropic_body("authentication_error", message)
    for failure in (
        classify(_response(401, json=body)),
        classify(InStreamError(body)),
        classify(WrapperError(message)),
    ):
        assert ANTHROPIC_KEY not in failure.message
        assert "sk-ant" not in failure.message
        assert BEARER not in failure.message
        assert len(failure.message) <= 300


# --- classify never raises -----------------------------------------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=40),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4)
    ),
    max_leaves=20,
)
error_keys = st.sampled_from(["error", "code", "type", "message", "metadata", "raw", "choices"])
error_like = st.recursive(
    json_values,
    lambda inner: st.dictionaries(error_keys | st.text(max_size=8), inner, max_size=5),
    max_leaves=25,
)


class _Raises:
    def __getattr__(self, name: str) -> Any:
        raise RuntimeError(f"no {name}")


class _FakeResponse:
    def __init__(self, status_code: object, headers: object, content: object) -> None:
        self.status_code = status_code
        self.headers = headers
        self.content = content


weird_values = (
    error_like
    | st.builds(_Raises)
    | st.builds(
        _FakeResponse,
        status_code=st.integers() | json_values,
        headers=st.dictionaries(st.text(max_size=15), st.text(max_size=30)) | json_values,
        content=st.binary(max_size=60) | json_values,
    )
)
exception_names = st.sampled_from(
    [
        "ReadTimeout",
        "ConnectError",
        "APIConnectionError",
        "APITimeoutError",
        "HTTPStatusError",
        "CancelledError",
        "InStreamError",
        "Whatever",
        "APIStatusError",
    ]
)


class _BadStr(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no str")


@given(error_like)
@settings(max_examples=200, deadline=None)
def test_classify_never_raises_on_payloads(payload: object) -> None:
    for failure in (classify(payload), classify(payload, in_stream=True)):
        assert isinstance(failure.kind, FailureKind)
        assert len(failure.message) <= 300
    if isinstance(payload, dict):
        assert classify(InStreamError(payload)).in_stream is True


@given(
    exception_names,
    st.dictionaries(
        st.sampled_from(["status_code", "response", "body", "headers", "payload", "errno"]),
        weird_values,
        max_size=4,
    ),
    st.booleans(),
)
@settings(max_examples=200, deadline=None)
def test_classify_never_raises_on_weird_exceptions(
    name: str, attrs: dict[str, object], bad_str: bool
) -> None:
    cls = type(name, (_BadStr if bad_str else Exception,), {})
    error = cls("boom")
    for key, value in attrs.items():
        setattr(error, key, value)
    error.__cause__ = ConnectionResetError("reset")
    failure = classify(error)
    assert isinstance(failure.kind, FailureKind)
    assert isinstance(failure.error_type, str)
    assert (
        classify(_FakeResponse(attrs.get("status_code"), attrs.get("headers"), attrs.get("body")))
        is not None
    )


@given(
    st.dictionaries(st.sampled_from(["retry-after", "Retry-After-Ms", "x"]) | st.text(), st.text())
)
def test_parse_retry_after_never_raises(headers: dict[str, str]) -> None:
    value = parse_retry_after(headers, now=NOW)
    assert value is None or value >= 0


def test_an_error_body_kept_as_json_text_is_read() -> None:
    class SDKError(Exception):  # the openrouter SDK keeps the body as a string
        status_code = 400
        body = '{"error": {"code": 400, "message": "This model\'s maximum context length is 8k"}}'

    failure = classify(SDKError("bad request"))
    assert failure.kind is FailureKind.CONTEXT_OVERFLOW and failure.status == 400


# --- bounded outputs (issue 9: B6, B7, fuzzing) -------------------------------------------------


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"retry-after": "99999999999"}, RETRY_AFTER_MAX_S),  # B6: a week at most
        ({"retry-after-ms": "99999999999999"}, RETRY_AFTER_MAX_S),
        ({"retry-after": "Fri, 31 Dec 9999 23:59:59 GMT"}, RETRY_AFTER_MAX_S),
        ({"retry-after": "\u0663"}, None),  # float() reads Arabic-Indic 3; HTTP does not
        ({"retry-after": "\uff15"}, None),  # fullwidth 5
        ({"retry-after": "1e3"}, None),
        ({"retry-after": "-Infinity"}, None),
        ({"retry-after": 7}, 7.0),
        ({"retry-after": float("inf")}, RETRY_AFTER_MAX_S),
        ({"retry-after": float("nan")}, None),
    ],
)
def test_parse_retry_after_is_bounded_and_ascii(
    headers: dict[str, object], expected: float | None
) -> None:
    assert parse_retry_after(headers, now=NOW) == expected  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "payload",
    [
        {"error": {"code": "sk-live-0123456789abcdef0123", "message": "bad key"}},
        {"error": {"type": "my_custom_error_12345", "message": "x"}},
        {"type": "error", "error": {"type": "Bearer abcdefghijklmnop", "message": "x"}},
    ],
)
def test_error_type_is_never_free_provider_text(payload: dict[str, object]) -> None:
    # B7: error.type is a span and metric attribute: an echoed key showed up in it, and 100k
    # distinct codes made 100k metric series.
    failure = classify(InStreamError(payload))
    assert failure.error_type == failure.kind.value == "unknown"


def test_error_type_keeps_known_provider_words_and_real_statuses() -> None:
    upper = classify({"error": {"type": "OVERLOADED_ERROR", "message": "x"}})
    assert (upper.kind, upper.error_type) == (K.OVERLOADED, "overloaded_error")
    assert "overloaded_error" in KNOWN_ERROR_TYPES

    class Odd(Exception):
        status_code = 1000  # not an HTTP status: no "1000" series

    assert classify(Odd("x")).error_type == "unknown"


def test_provider_code_is_redacted_and_short() -> None:
    failure = classify({"error": {"code": "key=sk-live-0123456789abcdef " + "x" * 100}})
    assert failure.code is not None and "sk-live" not in failure.code
    assert len(failure.code) <= 64


def test_a_body_nested_past_the_decoders_limit_keeps_its_status() -> None:
    class SDKError(Exception):  # the openrouter SDK keeps the body as text
        status_code = 503
        body = "[" * 100_000

    failure = classify(SDKError("upstream"))
    assert (failure.kind, failure.status, failure.error_type) == (K.UNAVAILABLE, 503, "503")
