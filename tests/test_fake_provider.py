"""The fake provider server, exercised over real sockets with real httpx clients."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from swerve.testing import FakeProvider, Fault, Reply, ToolCall

OPENAI = "/v1/chat/completions"
ANTHROPIC = "/v1/messages"
Event = tuple[str | None, str]  # (event name, data)


def body(model: str = "test-model", **extra: Any) -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "user", "content": "hi"}], **extra}


def parse_sse(lines: list[str]) -> list[Event]:
    events: list[Event] = []
    name: str | None = None
    data: list[str] = []
    for line in [*lines, ""]:
        if not line:
            if data:
                events.append((name, "\n".join(data)))
            name, data = None, []
        elif line.startswith("event:"):
            name = line.removeprefix("event:").strip()
        elif line.startswith("data:"):
            data.append(line.removeprefix("data:").strip())
    return events


def stream(
    http: httpx.Client, url: str, payload: dict[str, Any]
) -> tuple[list[Event], Exception | None]:
    """POST a streaming request; the events read, and the transport error that ended it."""
    lines: list[str] = []
    try:
        with http.stream("POST", url, json={**payload, "stream": True}) as response:
            assert response.status_code == 200
            assert response.headers["content-type"].startswith("text/event-stream")
            lines.extend(response.iter_lines())
    except httpx.TransportError as exc:
        return parse_sse(lines), exc
    return parse_sse(lines), None


def datas(events: list[Event]) -> list[Any]:
    return [json.loads(d) if d != "[DONE]" else d for _, d in events]


def openai_text(chunks: list[Any]) -> str:
    return "".join(
        c["choices"][0]["delta"].get("content") or ""
        for c in chunks
        if c != "[DONE]" and c["choices"]
    )


def openai_content_chunks(chunks: list[Any]) -> list[str]:
    return [
        c["choices"][0]["delta"]["content"]
        for c in chunks
        if c != "[DONE]" and c.get("choices") and c["choices"][0]["delta"].get("content")
    ]


@pytest.fixture
def fake() -> Iterator[FakeProvider]:
    with FakeProvider() as server:
        yield server


@pytest.fixture(scope="module")
def http() -> Iterator[httpx.Client]:
    # One pooled client, so keep-alive connections are exercised across requests.
    with httpx.Client(timeout=5) as client:
        yield client


# -- lifecycle --------------------------------------------------------------------------------


def test_url_is_loopback_with_provider_path(fake: FakeProvider) -> None:
    assert fake.url("primary") == f"http://127.0.0.1:{fake.port}/primary"
    with pytest.raises(ValueError, match="path segment"):
        fake.url("a/b")


def test_fake_provider_fixture_is_started(fake_provider: FakeProvider, http: httpx.Client) -> None:
    response = http.post(fake_provider.url("p") + OPENAI, json=body())
    assert response.json()["choices"][0]["message"]["content"] == "hello from p"


def test_url_needs_a_running_server() -> None:
    with pytest.raises(RuntimeError, match="not running"):
        FakeProvider().url("p")


def test_a_fake_never_takes_a_port_an_earlier_fake_had(
    monkeypatch: pytest.MonkeyPatch, http: httpx.Client
) -> None:
    # LangChain caches its default httpx clients by base_url: a later fake on an earlier one's
    # port would get that test's pooled connections (dead, or bound to a closed event loop).
    # Here the kernel offers the earlier port first, as it does about once in 16 binds.
    with FakeProvider() as earlier:
        taken = earlier.port
    real_bind, offered = socket.socket.bind, []

    def bind(self: socket.socket, address: Any) -> None:
        if address == ("127.0.0.1", 0) and not offered:
            offered.append(taken)
            address = ("127.0.0.1", taken)
        real_bind(self, address)

    monkeypatch.setattr(socket.socket, "bind", bind)
    with FakeProvider() as later:
        assert offered == [taken] and later.port != taken
        response = http.post(later.url("p") + OPENAI, json=body())
        assert response.json()["choices"][0]["message"]["content"] == "hello from p"


def test_stop_releases_a_hung_request_and_joins_its_threads() -> None:
    before = threading.active_count()
    fake = FakeProvider()
    fake.start()
    fake.set_fault("p", Fault.hang())
    errors: list[Exception] = []

    def call() -> None:
        try:
            httpx.post(fake.url("p") + OPENAI, json=body(), timeout=60)
        except httpx.HTTPError as exc:
            errors.append(exc)

    client = threading.Thread(target=call)
    client.start()
    assert fake.wait_for_requests("p", 1)
    assert threading.active_count() >= before + 3  # serve loop, request handler, client
    fake.stop()
    assert threading.active_count() <= before + 1  # only the client may be left
    client.join(timeout=10)  # far less than the 60 s client timeout: stop() hung up on it
    assert not client.is_alive()
    assert threading.active_count() == before
    assert len(errors) == 1
    assert isinstance(errors[0], httpx.RemoteProtocolError)


# -- OpenAI wire ------------------------------------------------------------------------------


def test_openai_json_reply(fake: FakeProvider, http: httpx.Client) -> None:
    fake.set_reply("primary", Reply(text="four words of text", usage=(12, 4)))
    response = http.post(fake.url("primary") + OPENAI, json=body("gpt-x"))
    assert response.status_code == 200
    data = response.json()
    assert data["object"] == "chat.completion"
    assert data["model"] == "gpt-x"
    assert data["choices"][0]["message"] == {"role": "assistant", "content": "four words of text"}
    assert data["choices"][0]["finish_reason"] == "stop"
    assert data["usage"] == {"prompt_tokens": 12, "completion_tokens": 4, "total_tokens": 16}


def test_openai_stream_event_sequence(fake: FakeProvider, http: httpx.Client) -> None:
    fake.set_reply("p", Reply(text="  one two  three ", usage=(3, 7)))
    events, error = stream(http, fake.url("p") + OPENAI, body("gpt-x"))
    assert error is None
    assert all(name is None for name, _ in events)
    chunks = datas(events)
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert openai_content_chunks(chunks) == ["  one", " two", "  three", " "]
    assert openai_text(chunks) == "  one two  three "
    assert chunks[-2]["choices"][0] == {
        "index": 0,
        "delta": {},
        "logprobs": None,
        "finish_reason": "stop",
    }
    assert chunks[-1] == "[DONE]"
    assert len(chunks) == 1 + 4 + 2  # role, words, finish, [DONE]: no usage chunk unasked
    assert {c["model"] for c in chunks[:-1]} == {"gpt-x"}
    assert len({c["id"] for c in chunks[:-1]}) == 1
    assert all("usage" not in c for c in chunks[:-1])


def test_openai_stream_usage_chunk_when_asked(fake: FakeProvider, http: httpx.Client) -> None:
    fake.set_reply("p", Reply(text="hi there", usage=(3, 7)))
    payload = body(stream_options={"include_usage": True})
    chunks = datas(stream(http, fake.url("p") + OPENAI, payload)[0])
    assert chunks[-3]["choices"][0]["finish_reason"] == "stop"
    assert chunks[-2]["choices"] == []
    assert chunks[-2]["usage"] == {"prompt_tokens": 3, "completion_tokens": 7, "total_tokens": 10}
    assert chunks[-1] == "[DONE]"
    assert all(c["usage"] is None for c in chunks[:-2])


def test_openai_tool_calls_json(fake: FakeProvider, http: httpx.Client) -> None:
    call = ToolCall("get_weather", {"city": "Paris", "days": [1, 2]}, id="call_1")
    fake.set_reply("p", Reply(text="", tool_calls=(call,)))
    data = http.post(fake.url("p") + OPENAI, json=body()).json()
    choice = data["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"]["content"] is None
    [tool] = choice["message"]["tool_calls"]
    assert tool["id"] == "call_1"
    assert tool["type"] == "function"
    assert tool["function"]["name"] == "get_weather"
    assert json.loads(tool["function"]["arguments"]) == {"city": "Paris", "days": [1, 2]}


def test_openai_tool_calls_stream_reassemble(fake: FakeProvider, http: httpx.Client) -> None:
    calls = [ToolCall("a", {"query": "a long enough query to split"}), ToolCall("b", {"n": 1})]
    fake.set_reply("p", Reply(text="Let me look.", tool_calls=tuple(calls)))
    chunks = datas(stream(http, fake.url("p") + OPENAI, body())[0])
    assert openai_text(chunks) == "Let me look."
    assembled: dict[int, dict[str, str]] = {}
    pieces = 0
    for chunk in chunks[:-1]:
        for delta in chunk["choices"][0]["delta"].get("tool_calls", []):
            entry = assembled.setdefault(delta["index"], {"id": "", "name": "", "arguments": ""})
            entry["id"] += delta.get("id", "")
            entry["name"] += delta.get("function", {}).get("name", "")
            entry["arguments"] += delta["function"]["arguments"]
            pieces += 1
    assert [e["name"] for e in assembled.values()] == ["a", "b"]
    assert all(e["id"].startswith("call_") for e in assembled.values())
    assert [json.loads(e["arguments"]) for e in assembled.values()] == [c.arguments for c in calls]
    assert pieces > 4  # the arguments really came in pieces
    assert chunks[-2]["choices"][0]["finish_reason"] == "tool_calls"


def test_openai_reasoning_is_signed(fake: FakeProvider, http: httpx.Client) -> None:
    fake.set_reply("p", Reply(text="ok", reasoning="think first"))
    message = http.post(fake.url("p") + OPENAI, json=body()).json()["choices"][0]["message"]
    assert message["reasoning"] == "think first"
    [detail] = message["reasoning_details"]
    assert detail["text"] == "think first"
    assert detail["signature"]
    chunks = datas(stream(http, fake.url("p") + OPENAI, body())[0])
    deltas = [c["choices"][0]["delta"] for c in chunks[1:-2]]
    assert "".join(d.get("reasoning", "") for d in deltas) == "think first"
    signatures = [
        r["signature"] for d in deltas for r in d.get("reasoning_details", []) if "signature" in r
    ]
    assert signatures == [detail["signature"]]


def test_providers_are_independent(fake: FakeProvider, http: httpx.Client) -> None:
    fake.set_reply("b", Reply(text="from b"))
    for name, text in [
        ("a", "hello from a"),
        ("b", "from b"),
        ("openrouter", "hello from openrouter"),
    ]:
        response = http.post(fake.url(name) + OPENAI, json=body())
        assert response.json()["choices"][0]["message"]["content"] == text
    assert (fake.requests("a"), fake.requests("b"), fake.requests("c")) == (1, 1, 0)


# -- Anthropic wire ---------------------------------------------------------------------------


def test_anthropic_json_reply(fake: FakeProvider, http: httpx.Client) -> None:
    fake.set_reply("anthropic", Reply(text="plain answer", usage=(20, 2)))
    response = http.post(fake.url("anthropic") + ANTHROPIC, json=body("claude-x"))
    assert response.status_code == 200
    data = response.json()
    assert data["type"] == "message"
    assert data["role"] == "assistant"
    assert data["model"] == "claude-x"
    assert data["content"] == [{"type": "text", "text": "plain answer"}]
    assert data["stop_reason"] == "end_turn"
    assert data["usage"]["input_tokens"] == 20
    assert data["usage"]["output_tokens"] == 2


def test_anthropic_stream_event_sequence(fake: FakeProvider, http: httpx.Client) -> None:
    fake.set_reply("a", Reply(text="one two three", usage=(9, 3)))
    events, error = stream(http, fake.url("a") + ANTHROPIC, body("claude-x"))
    assert error is None
    names = [name for name, _ in events]
    assert names == [
        "message_start",
        "content_block_start",
        "ping",
        *["content_block_delta"] * 3,
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    payloads = datas(events)
    assert [p["type"] for p in payloads] == names  # the data repeats the event name
    start = payloads[0]["message"]
    assert (start["model"], start["content"], start["stop_reason"]) == ("claude-x", [], None)
    assert start["usage"]["input_tokens"] == 9
    assert payloads[1]["content_block"] == {"type": "text", "text": ""}
    deltas = [p["delta"] for p in payloads[3:6]]
    assert {d["type"] for d in deltas} == {"text_delta"}
    assert "".join(d["text"] for d in deltas) == "one two three"
    assert payloads[-2]["delta"]["stop_reason"] == "end_turn"
    assert payloads[-2]["usage"] == {"output_tokens": 3}


def test_anthropic_tool_use_json_and_stream(fake: FakeProvider, http: httpx.Client) -> None:
    call = ToolCall("search", {"query": "failover middleware", "limit": 3}, id="toolu_1")
    fake.set_reply("a", Reply(text="", tool_calls=(call,), reasoning="need to search"))
    data = http.post(fake.url("a") + ANTHROPIC, json=body()).json()
    assert data["stop_reason"] == "tool_use"
    thinking, tool = data["content"]
    assert thinking["type"] == "thinking"
    assert thinking["thinking"] == "need to search"
    assert thinking["signature"]
    assert tool == {
        "type": "tool_use",
        "id": "toolu_1",
        "name": "search",
        "input": dict(call.arguments),
    }

    payloads = datas(stream(http, fake.url("a") + ANTHROPIC, body())[0])
    starts = [p["content_block"] for p in payloads if p["type"] == "content_block_start"]
    assert [s["type"] for s in starts] == ["thinking", "tool_use"]
    assert (starts[1]["id"], starts[1]["name"], starts[1]["input"]) == ("toolu_1", "search", {})
    deltas = [p["delta"] for p in payloads if p["type"] == "content_block_delta"]
    parts = [d["partial_json"] for d in deltas if d["type"] == "input_json_delta"]
    assert len(parts) > 1
    assert json.loads("".join(parts)) == call.arguments
    thought = "".join(d["thinking"] for d in deltas if d["type"] == "thinking_delta")
    assert thought == "need to search"
    assert [d["signature"] for d in deltas if d["type"] == "signature_delta"] == [
        thinking["signature"]
    ]
    assert payloads[-2]["delta"]["stop_reason"] == "tool_use"


# -- faults: whole-response -------------------------------------------------------------------


@pytest.mark.parametrize("path", [OPENAI, ANTHROPIC])
def test_status_with_retry_after_headers(fake: FakeProvider, path: str, http: httpx.Client) -> None:
    fake.set_fault("p", Fault.status(429, retry_after=2, retry_after_ms=1500))
    response = http.post(fake.url("p") + path, json=body())
    assert response.status_code == 429
    assert response.headers["retry-after"] == "2"
    assert response.headers["retry-after-ms"] == "1500"
    error = response.json()["error"]
    if path == OPENAI:
        assert set(error) >= {"message", "type", "code"}
        assert error["code"] == "rate_limit_exceeded"
    else:
        assert response.json()["type"] == "error"
        assert error["type"] == "rate_limit_error"


def test_status_without_retry_after_sends_no_header(fake: FakeProvider, http: httpx.Client) -> None:
    fake.set_fault("p", Fault.status(500))
    response = http.post(fake.url("p") + OPENAI, json=body())
    assert response.status_code == 500
    assert "retry-after" not in response.headers
    assert response.json()["error"]["type"] == "server_error"


@pytest.mark.parametrize(
    ("code", "error_type"),
    [
        (529, "overloaded_error"),
        (429, "rate_limit_error"),
        (500, "api_error"),
        (503, "api_error"),
        (400, "invalid_request_error"),
        (401, "authentication_error"),
    ],
)
def test_anthropic_error_types(
    fake: FakeProvider, code: int, error_type: str, http: httpx.Client
) -> None:
    fake.set_fault("p", Fault.status(code))
    response = http.post(fake.url("p") + ANTHROPIC, json=body())
    assert response.status_code == code
    assert response.json()["error"]["type"] == error_type
    assert response.json()["error"]["message"]


def test_status_body_override(fake: FakeProvider, http: httpx.Client) -> None:
    fake.set_fault(
        "p",
        Fault.status(
            502, body="<html>Bad Gateway</html>", retry_after="Wed, 21 Oct 2015 07:28:00 GMT"
        ),
    )
    response = http.post(fake.url("p") + OPENAI, json=body())
    assert response.status_code == 502
    assert response.headers["content-type"].startswith("text/html")
    assert response.text == "<html>Bad Gateway</html>"
    assert response.headers["retry-after"] == "Wed, 21 Oct 2015 07:28:00 GMT"
    fake.set_fault("p", Fault.status(503, body={"error": {"code": 503, "message": "custom"}}))
    response = http.post(fake.url("p") + ANTHROPIC, json=body())
    assert response.json() == {"error": {"code": 503, "message": "custom"}}


@pytest.mark.parametrize("streaming", [False, True])
def test_context_overflow(fake: FakeProvider, streaming: bool, http: httpx.Client) -> None:
    fake.set_fault("p", Fault.context_overflow())
    openai = http.post(fake.url("p") + OPENAI, json=body(stream=streaming))
    assert openai.status_code == 400
    assert openai.json()["error"]["code"] == "context_length_exceeded"
    assert openai.json()["error"]["message"].startswith("This model's maximum context length is")
    anthropic = http.post(fake.url("p") + ANTHROPIC, json=body(stream=streaming))
    assert anthropic.status_code == 400
    assert anthropic.json()["error"] == {
        "type": "invalid_request_error",
        "message": "prompt is too long: 250000 tokens > 200000 maximum",
    }


@pytest.mark.parametrize("path", [OPENAI, ANTHROPIC])
@pytest.mark.parametrize("streaming", [False, True])
def test_reset(fake: FakeProvider, path: str, streaming: bool, http: httpx.Client) -> None:
    fake.set_fault("p", Fault.reset())
    # ECONNRESET, not the orderly close that would read as RemoteProtocolError.
    with pytest.raises(httpx.ReadError, match="reset"):
        http.post(fake.url("p") + path, json=body(stream=streaming))
    assert fake.requests("p") == 1


def test_hang_times_out_and_is_released_by_a_fault_change(
    fake: FakeProvider, http: httpx.Client
) -> None:
    fake.set_fault("p", Fault.hang())
    with pytest.raises(httpx.ReadTimeout):
        http.post(fake.url("p") + ANTHROPIC, json=body(), timeout=0.3)
    errors: list[Exception] = []

    def call() -> None:
        try:
            http.post(fake.url("p") + OPENAI, json=body(), timeout=60)
        except httpx.HTTPError as exc:
            errors.append(exc)

    client = threading.Thread(target=call)
    client.start()
    assert fake.wait_for_requests("p", 2)
    fake.set_fault("p", Fault.ok())
    client.join(timeout=10)
    assert not client.is_alive()
    assert [type(e) for e in errors] == [httpx.RemoteProtocolError]
    # The next request gets the new standing fault.
    assert http.post(fake.url("p") + OPENAI, json=body()).status_code == 200


# -- faults: inside the stream ----------------------------------------------------------------


def test_openrouter_error_before_content(fake: FakeProvider, http: httpx.Client) -> None:
    fake.set_fault("or", Fault.error_before_content("openrouter", code=503))
    events, error = stream(http, fake.url("or") + OPENAI, body("anthropic/claude-x"))
    assert error is None
    chunks = datas(events)
    assert len(chunks) == 2  # role delta, error chunk, and no [DONE]
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    last = chunks[1]
    assert last["object"] == "chat.completion.chunk"
    assert last["error"]["code"] == 503
    assert last["error"]["message"]
    assert last["choices"] == [{"index": 0, "delta": {"content": ""}, "finish_reason": "error"}]


def test_openai_style_error_after_two_chunks(fake: FakeProvider, http: httpx.Client) -> None:
    fake.set_reply("p", Reply(text="one two three four"))
    fake.set_fault("p", Fault.error_after(2, "openai", code=500))
    events, error = stream(http, fake.url("p") + OPENAI, body())
    assert error is None
    chunks = datas(events)
    assert openai_content_chunks(chunks) == ["one", " two"]
    assert set(chunks[-1]) == {"error"}
    assert chunks[-1]["error"]["code"] == 500
    assert chunks[-1]["error"]["message"]
    assert "[DONE]" not in chunks


def test_anthropic_error_before_content(fake: FakeProvider, http: httpx.Client) -> None:
    fake.set_fault("a", Fault.error_before_content("anthropic"))
    events, error = stream(http, fake.url("a") + ANTHROPIC, body())
    assert error is None
    assert [name for name, _ in events] == ["message_start", "error"]
    assert json.loads(events[1][1]) == {
        "type": "error",
        "error": {"type": "overloaded_error", "message": "Overloaded"},
    }


def test_anthropic_error_after_two_chunks(fake: FakeProvider, http: httpx.Client) -> None:
    fake.set_reply("a", Reply(text="one two three"))
    fake.set_fault("a", Fault.error_after(2, "anthropic", code=529))
    events, error = stream(http, fake.url("a") + ANTHROPIC, body())
    assert error is None
    names = [name for name, _ in events]
    assert names == [
        "message_start",
        "content_block_start",
        "ping",
        "content_block_delta",
        "content_block_delta",
        "error",
    ]
    assert json.loads(events[-1][1])["error"]["type"] == "overloaded_error"


def test_error_after_more_chunks_than_the_reply_has_still_errors(
    fake: FakeProvider, http: httpx.Client
) -> None:
    fake.set_fault("p", Fault.error_after(50, "openrouter"))
    chunks = datas(stream(http, fake.url("p") + OPENAI, body())[0])
    assert openai_text(chunks) == "hello from p"
    assert chunks[-1]["choices"][0]["finish_reason"] == "error"
    assert "[DONE]" not in chunks


@pytest.mark.parametrize("style", ["openrouter", "openai", "anthropic"])
def test_in_stream_fault_on_a_json_request_is_a_200_error_body(
    fake: FakeProvider, style: Any, http: httpx.Client
) -> None:
    fake.set_fault("p", Fault.error_before_content(style, code=502))
    response = http.post(fake.url("p") + OPENAI, json=body())
    assert response.status_code == 200
    assert "error" in response.json()
    assert "choices" not in response.json()


def test_unknown_error_style_is_rejected() -> None:
    with pytest.raises(ValueError, match="unknown error style"):
        Fault.error_before_content("bedrock")  # type: ignore[arg-type]


@pytest.mark.parametrize("path", [OPENAI, ANTHROPIC])
def test_drop_after_closes_mid_body(fake: FakeProvider, path: str, http: httpx.Client) -> None:
    fake.set_reply("p", Reply(text="one two three four"))
    fake.set_fault("p", Fault.drop_after(2))
    events, error = stream(http, fake.url("p") + path, body())
    assert isinstance(error, httpx.RemoteProtocolError)
    payloads = datas(events)
    if path == OPENAI:
        assert openai_content_chunks(payloads) == ["one", " two"]
        assert "[DONE]" not in payloads
        assert all(c["choices"][0]["finish_reason"] is None for c in payloads)
    else:
        assert [p["delta"]["text"] for p in payloads if p["type"] == "content_block_delta"] == [
            "one",
            " two",
        ]
        assert {"message_delta", "message_stop"}.isdisjoint(p["type"] for p in payloads)


def test_drop_after_on_a_json_request_truncates_the_body(
    fake: FakeProvider, http: httpx.Client
) -> None:
    fake.set_fault("p", Fault.drop_after(0))
    with pytest.raises(httpx.RemoteProtocolError):
        http.post(fake.url("p") + OPENAI, json=body())


@pytest.mark.parametrize("path", [OPENAI, ANTHROPIC])
def test_reset_after_in_stream(fake: FakeProvider, path: str, http: httpx.Client) -> None:
    fake.set_fault("p", Fault.reset_after(1))
    events, error = stream(http, fake.url("p") + path, body())
    assert isinstance(error, httpx.ReadError)
    assert "reset" in str(error)
    assert "[DONE]" not in [d for _, d in events]
    assert "message_stop" not in [name for name, _ in events]


def test_no_finish(fake: FakeProvider, http: httpx.Client) -> None:
    fake.set_reply("p", Reply(text="all of it"))
    fake.set_fault("p", Fault.no_finish())
    events, error = stream(
        http, fake.url("p") + OPENAI, body(stream_options={"include_usage": True})
    )
    assert error is None  # the HTTP body ended properly
    chunks = datas(events)
    assert openai_text(chunks) == "all of it"
    assert "[DONE]" not in chunks
    assert all(c["choices"] and c["choices"][0]["finish_reason"] is None for c in chunks)

    events, error = stream(http, fake.url("p") + ANTHROPIC, body())
    assert error is None
    names = [name for name, _ in events]
    assert names[-1] == "content_block_stop"
    assert "message_delta" not in names
    assert "message_stop" not in names

    data = http.post(fake.url("p") + ANTHROPIC, json=body()).json()
    assert (data["content"][0]["text"], data["stop_reason"]) == ("all of it", None)


@pytest.mark.parametrize("path", [OPENAI, ANTHROPIC])
def test_no_done_sends_the_finish_but_no_terminator(
    fake: FakeProvider, path: str, http: httpx.Client
) -> None:
    fake.set_reply("p", Reply(text="all of it", usage=(3, 7)))
    fake.set_fault("p", Fault.no_done())
    events, error = stream(http, fake.url("p") + path, body(stream_options={"include_usage": True}))
    assert error is None  # the HTTP body ended properly
    payloads = datas(events)
    if path == OPENAI:
        assert openai_text(payloads) == "all of it"
        assert "[DONE]" not in payloads
        assert payloads[-2]["choices"][0]["finish_reason"] == "stop"
        assert payloads[-1]["choices"] == []
        assert payloads[-1]["usage"]["completion_tokens"] == 7
    else:
        names = [name for name, _ in events]
        assert names[-2:] == ["content_block_stop", "message_delta"]
        assert "message_stop" not in names
        assert payloads[-1]["delta"]["stop_reason"] == "end_turn"
        assert payloads[-1]["usage"] == {"output_tokens": 7}
    data = http.post(fake.url("p") + path, json=body()).json()  # a normal, complete body
    finish = data["choices"][0]["finish_reason"] if path == OPENAI else data["stop_reason"]
    assert finish == ("stop" if path == OPENAI else "end_turn")


def _undecodable(events: list[Event]) -> list[int]:
    """Indexes of the events whose data is not JSON."""
    bad = []
    for index, (_, data) in enumerate(events):
        if data != "[DONE]":
            try:
                json.loads(data)
            except ValueError:
                bad.append(index)
    return bad


@pytest.mark.parametrize("path", [OPENAI, ANTHROPIC])
def test_malformed_before_content(fake: FakeProvider, path: str, http: httpx.Client) -> None:
    fake.set_reply("p", Reply(text="one two three"))
    fake.set_fault("p", Fault.malformed_before_content())
    events, error = stream(http, fake.url("p") + path, body())
    assert error is None
    assert _undecodable(events) == [1]  # right after the role delta / message_start
    if path == OPENAI:
        assert events[1] == (None, '{"choices": [')
        good = datas(events[:1] + events[2:])
        assert openai_text(good) == "one two three"
        assert good[-1] == "[DONE]"  # the rest of the stream is whole
    else:
        assert events[1][0] == "content_block_delta"
        assert [name for name, _ in events][-1] == "message_stop"
    response = http.post(fake.url("p") + path, json=body())
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    with pytest.raises(json.JSONDecodeError):
        response.json()


@pytest.mark.parametrize("path", [OPENAI, ANTHROPIC])
def test_malformed_after_content_chunks(fake: FakeProvider, path: str, http: httpx.Client) -> None:
    fake.set_reply("p", Reply(text="one two three"))
    fake.set_fault("p", Fault.malformed_after(2))
    events, error = stream(http, fake.url("p") + path, body())
    assert error is None
    [bad] = _undecodable(events)
    before = datas(events[:bad])
    if path == OPENAI:
        assert openai_content_chunks(before) == ["one", " two"]
        assert openai_text(datas(events[bad + 1 :])) == " three"
        assert events[-1] == (None, "[DONE]")
    else:
        deltas = [p["delta"]["text"] for p in before if p["type"] == "content_block_delta"]
        assert deltas == ["one", " two"]
        assert events[-1][0] == "message_stop"
    with pytest.raises(json.JSONDecodeError):
        http.post(fake.url("p") + path, json=body()).json()


CREDENTIALS = {"authorization": "Bearer sk-test-ECHOED0123456789", "x-api-key": "sk-ant-ECHOED"}


@pytest.mark.parametrize("path", [OPENAI, ANTHROPIC])
def test_echo_headers_repeats_the_credentials_in_an_error(
    fake: FakeProvider, path: str, http: httpx.Client
) -> None:
    fake.set_fault("p", Fault.echo_headers(401))
    for payload in (body(), body(stream=True)):
        response = http.post(fake.url("p") + path, json=payload, headers=CREDENTIALS)
        assert response.status_code == 401
        received = fake.received_headers("p")[-1]
        error = response.json()["error"]
        assert error["message"] == f"received headers: {json.dumps(received)}"
        assert all(v in error["message"] for v in CREDENTIALS.values())
        if path == OPENAI:
            assert error["type"] == "invalid_request_error"
        else:
            assert (response.json()["type"], error["type"]) == ("error", "authentication_error")
        assert response.headers["x-echo-authorization"] == CREDENTIALS["authorization"]
        assert response.headers["x-echo-x-api-key"] == CREDENTIALS["x-api-key"]


@pytest.mark.parametrize("path", [OPENAI, ANTHROPIC])
@pytest.mark.parametrize("after", [0, 2])
def test_echo_headers_in_stream(
    fake: FakeProvider, path: str, after: int, http: httpx.Client
) -> None:
    fake.set_reply("p", Reply(text="one two three"))
    fake.set_fault("p", Fault.echo_headers(in_stream=True, after=after))
    url = fake.url("p") + path
    with http.stream("POST", url, json=body(stream=True), headers=CREDENTIALS) as response:
        assert response.status_code == 200
        events = parse_sse(list(response.iter_lines()))
    message = f"received headers: {json.dumps(fake.received_headers('p')[-1])}"
    payloads = datas(events)
    if path == OPENAI:
        assert openai_content_chunks(payloads) == ["one", " two"][:after]
        assert payloads[-1]["error"] == {"code": 400, "message": message}
        assert payloads[-1]["choices"][0]["finish_reason"] == "error"
    else:
        assert events[-1][0] == "error"
        assert payloads[-1]["error"] == {"type": "invalid_request_error", "message": message}
        deltas = [p for p in payloads if p["type"] == "content_block_delta"]
        assert len(deltas) == after
    response = http.post(url, json=body(), headers=CREDENTIALS)
    assert response.status_code == 200
    assert CREDENTIALS["x-api-key"] in response.json()["error"]["message"]


def test_slow_first_token(fake: FakeProvider, http: httpx.Client) -> None:
    fake.set_fault("p", Fault.slow(first_token_s=0.3))
    started = time.monotonic()
    with http.stream("POST", fake.url("p") + OPENAI, json=body(stream=True), timeout=5) as response:
        lines = response.iter_lines()
        first = json.loads(next(lines).removeprefix("data: "))
        assert first["choices"][0]["delta"] == {"role": "assistant", "content": ""}
        role_at = time.monotonic() - started
        content = next(line for line in lines if line)
        content_at = time.monotonic() - started
    assert json.loads(content.removeprefix("data: "))["choices"][0]["delta"] == {"content": "hello"}
    assert content_at >= 0.3
    assert role_at < content_at  # the role delta came before the wait

    started = time.monotonic()
    assert http.post(fake.url("p") + ANTHROPIC, json=body()).status_code == 200
    assert time.monotonic() - started >= 0.3


def test_slow_per_chunk_streams_each_chunk_as_written(
    fake: FakeProvider, http: httpx.Client
) -> None:
    fake.set_reply("p", Reply(text="a b c"))
    fake.set_fault("p", Fault.slow(per_chunk_s=0.2))
    arrivals: list[float] = []
    with http.stream(
        "POST", fake.url("p") + ANTHROPIC, json=body(stream=True), timeout=5
    ) as response:
        for line in response.iter_lines():
            if line.startswith("data:") and '"text_delta"' in line:
                arrivals.append(time.monotonic())
    assert len(arrivals) == 3
    # Had the server buffered the stream, the deltas would arrive together.
    assert arrivals[2] - arrivals[0] >= 0.3  # 0.4 apart when written; allow read jitter


# -- scripts, counts, received ----------------------------------------------------------------


def test_script_is_consumed_in_order_then_the_standing_fault_applies(
    fake: FakeProvider, http: httpx.Client
) -> None:
    url = fake.url("p") + OPENAI
    fake.script("p", [Fault.status(503), Fault.status(429), Fault.ok(), Fault.status(500)])
    codes = [http.post(url, json=body()).status_code for _ in range(6)]
    assert codes == [503, 429, 200, 500, 200, 200]
    fake.set_fault("p", Fault.status(502))
    fake.script("p", [Fault.ok()])
    codes = [http.post(url, json=body()).status_code for _ in range(3)]
    assert codes == [200, 502, 502]
    assert fake.requests("p") == 9


def test_script_replaces_the_previous_queue(fake: FakeProvider, http: httpx.Client) -> None:
    fake.script("p", [Fault.status(503), Fault.status(503)])
    fake.script("p", [Fault.status(429)])
    codes = [http.post(fake.url("p") + OPENAI, json=body()).status_code for _ in range(2)]
    assert codes == [429, 200]


def test_received_bodies_headers_and_reset_counts(fake: FakeProvider, http: httpx.Client) -> None:
    fake.set_fault("p", Fault.status(503))
    for i in range(3):
        http.post(
            fake.url("p") + ANTHROPIC, json=body(f"m{i}"), headers={"x-trace": str(i)}, timeout=5
        )
    assert fake.requests("p") == 3
    assert [b["model"] for b in fake.received("p")] == ["m0", "m1", "m2"]
    assert [h["x-trace"] for h in fake.received_headers("p")] == ["0", "1", "2"]
    assert fake.wait_for_requests("p", 3, timeout=1)
    fake.reset_counts()
    assert (fake.requests("p"), fake.received("p"), fake.received_headers("p")) == (0, [], [])
    assert not fake.wait_for_requests("p", 1, timeout=0.05)
    # Faults survive a reset of the counts.
    assert http.post(fake.url("p") + ANTHROPIC, json=body()).status_code == 503


@pytest.mark.anyio
async def test_async_client_and_wait_for_requests(fake: FakeProvider) -> None:
    fake.set_reply("p", Reply(text="async hello"))
    async with httpx.AsyncClient(base_url=fake.url("p"), timeout=5) as client:
        response = await client.post(OPENAI, json=body())
        assert response.json()["choices"][0]["message"]["content"] == "async hello"
        lines: list[str] = []
        async with client.stream("POST", ANTHROPIC, json=body(stream=True)) as streamed:
            lines.extend([line async for line in streamed.aiter_lines()])
        events = parse_sse(lines)
        assert events[-1][0] == "message_stop"
        text = "".join(
            p["delta"]["text"] for p in datas(events) if p["type"] == "content_block_delta"
        )
        assert text == "async hello"
    assert fake.wait_for_requests("p", 2, timeout=1)


# -- validation -------------------------------------------------------------------------------


@pytest.mark.parametrize("path", [OPENAI, ANTHROPIC])
def test_non_json_body_is_rejected(fake: FakeProvider, path: str, http: httpx.Client) -> None:
    response = http.post(fake.url("p") + path, content=b"{not json")
    assert response.status_code == 400
    assert response.json()["error"]["message"]
    assert fake.requests("p") == 1
    assert fake.received("p") == [{"_raw": "{not json"}]


@pytest.mark.parametrize("field", ["model", "messages"])
@pytest.mark.parametrize("path", [OPENAI, ANTHROPIC])
def test_missing_field_is_named(
    fake: FakeProvider, path: str, field: str, http: httpx.Client
) -> None:
    payload = body()
    del payload[field]
    response = http.post(fake.url("p") + path, json=payload)
    assert response.status_code == 400
    assert field in response.json()["error"]["message"]


def _blocks(*blocks: dict[str, Any], model: str = "claude-x") -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "user", "content": list(blocks)}]}


CACHE = {"cache_control": {"type": "ephemeral"}}


@pytest.mark.parametrize("text", ["", "  \n"])
def test_anthropic_rejects_cache_control_on_empty_text(
    fake: FakeProvider, text: str, http: httpx.Client
) -> None:
    payload = _blocks({"type": "text", "text": "fine"}, {"type": "text", "text": text, **CACHE})
    response = http.post(fake.url("a") + ANTHROPIC, json=payload)
    assert response.status_code == 400
    assert response.json() == {
        "type": "error",
        "error": {
            "type": "invalid_request_error",
            "message": "messages.0.content.1.text: "
            "cache_control cannot be set for empty text blocks",
        },
    }


def test_anthropic_rejects_empty_text_blocks_and_accepts_good_ones(
    fake: FakeProvider, http: httpx.Client
) -> None:
    url = fake.url("a") + ANTHROPIC
    response = http.post(url, json=_blocks({"type": "text", "text": ""}))
    assert response.status_code == 400
    assert response.json()["error"]["message"] == "messages: text content blocks must be non-empty"
    good = _blocks({"type": "text", "text": "x", **CACHE})
    assert http.post(url, json=good).status_code == 200


def test_openai_wire_checks_empty_blocks_only_for_claude(
    fake: FakeProvider, http: httpx.Client
) -> None:
    url = fake.url("or") + OPENAI
    bad = {"type": "text", "text": " ", **CACHE}
    response = http.post(url, json=_blocks(bad, model="anthropic/claude-x"))
    assert response.status_code == 400
    assert (
        "cache_control cannot be set for empty text blocks" in response.json()["error"]["message"]
    )
    assert http.post(url, json=_blocks(bad, model="openai/gpt-x")).status_code == 200


def test_invalid_requests_do_not_consume_the_script(fake: FakeProvider, http: httpx.Client) -> None:
    fake.script("p", [Fault.status(503)])
    assert http.post(fake.url("p") + OPENAI, json={"messages": []}).status_code == 400
    assert http.post(fake.url("p") + OPENAI, json=body()).status_code == 503
    assert fake.requests("p") == 2


def test_unknown_path_is_404(fake: FakeProvider, http: httpx.Client) -> None:
    assert http.post(fake.url("p") + "/v1/completions", json=body()).status_code == 404
    assert http.get(fake.url("p") + "/v2/models").status_code == 404


# -- models -----------------------------------------------------------------------------------


def test_models_list_in_both_shapes_and_obeys_a_standing_status(
    fake: FakeProvider, http: httpx.Client
) -> None:
    url = fake.url("p") + "/v1/models"
    openai = http.get(url).json()
    assert openai["object"] == "list"
    assert openai["data"][0]["object"] == "model"
    anthropic = http.get(url, headers={"anthropic-version": "2023-06-01"}).json()
    assert anthropic["data"][0]["type"] == "model"
    assert anthropic["has_more"] is False
    fake.set_fault("p", Fault.status(503, retry_after=1))
    response = http.get(url)
    assert (response.status_code, response.headers["retry-after"]) == (503, "1")
    fake.set_fault("p", Fault.error_before_content("openrouter"))  # a stream fault: ignored
    assert http.get(url).status_code == 200
    assert fake.requests("p") == 0  # probes are not completion requests


# --- byte-level faults ---------------------------------------------------------------------------
@pytest.mark.parametrize("path", [OPENAI, ANTHROPIC])
@pytest.mark.parametrize("stream", [True, False], ids=["stream", "json"])
def test_cut_after_bytes_sends_exactly_n_body_bytes(
    fake: FakeProvider, path: str, stream: bool
) -> None:
    url = fake.url("p") + path
    whole = httpx.post(url, json=body(stream=stream)).content
    for n in (0, 1, len(whole) // 2, len(whole) - 1):
        fake.script("p", [Fault.cut_after_bytes(n)])
        got = bytearray()
        request = httpx.stream("POST", url, json=body(stream=stream))
        with pytest.raises(httpx.RemoteProtocolError), request as r:
            assert r.status_code == 200
            for piece in r.iter_raw():
                got += piece
        assert len(got) == n
    fake.script("p", [Fault.cut_after_bytes(len(whole))])  # at the end: the whole body
    assert len(httpx.post(url, json=body(stream=stream)).content) == len(whole)
    with pytest.raises(ValueError, match="n >= 0"):
        Fault.cut_after_bytes(-1)


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "json"])
def test_bad_chunking_breaks_the_chunked_encoding(fake: FakeProvider, stream: bool) -> None:
    fake.script("p", [Fault.bad_chunking()])
    with pytest.raises(httpx.RemoteProtocolError):
        httpx.post(fake.url("p") + OPENAI, json=body(stream=stream))


def test_wrong_content_type_labels_the_usual_reply(fake: FakeProvider) -> None:
    fake.script("p", [Fault.wrong_content_type("text/plain")])
    r = httpx.post(fake.url("p") + OPENAI, json=body())
    assert r.headers["content-type"] == "text/plain"
    assert r.json()["choices"][0]["message"]["content"] == "hello from p"


@pytest.mark.parametrize("path", [OPENAI, ANTHROPIC])
def test_gzip_bodies_and_bombs(fake: FakeProvider, path: str) -> None:
    url = fake.url("p") + path
    plain = httpx.post(url, json=body()).json()
    fake.script("p", [Fault.gzip()])
    r = httpx.post(url, json=body())
    assert r.headers["content-encoding"] == "gzip"
    assert r.json()["model"] == plain["model"]
    fake.script("p", [Fault.gzip(pad=8 * 2**20)])
    r = httpx.post(url, json=body())
    assert len(r.content) > 8 * 2**20 and int(r.headers["content-length"]) < 2**20
    assert r.json()["model"] == plain["model"]  # spaces after the object: still JSON
    fake.script("p", [Fault.gzip(pad=2**20)])
    r = httpx.post(url, json=body(stream=True))
    assert r.text.startswith(":") and "data:" in r.text


def test_dribble_sends_one_byte_per_interval(fake: FakeProvider) -> None:
    fake.script("p", [Fault.dribble(0.002)])
    with httpx.stream("POST", fake.url("p") + OPENAI, json=body(stream=True)) as r:
        sizes = [len(piece) for piece in r.iter_raw()]
    assert sizes and max(sizes) <= 16  # a byte (or a few, as reads batch them) at a time
    assert len(sizes) > 50
    with pytest.raises(ValueError, match="interval_s >= 0"):
        Fault.dribble(-1)


# -- wrong types are refused at the call (issue 12) ---------------------------------------------


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            lambda f: f.script("p", Fault.status(503)),
            "script(): steps must be a list of Fault or Reply, e.g. "
            "[Fault.status(503), Reply(text='hi')], got Fault(kind='status', code=503, ",
        ),
        (
            lambda f: f.script("p", "status"),
            "script(): steps must be a list of Fault or Reply, e.g. "
            "[Fault.status(503), Reply(text='hi')], got str 'status'",
        ),
        (
            lambda f: f.script("p", 503),
            "script(): steps must be a list of Fault or Reply, e.g. "
            "[Fault.status(503), Reply(text='hi')], got int 503",
        ),
        (
            lambda f: f.script("p", [Fault.ok(), 503]),
            "script(): steps[1] must be a Fault or a Reply, e.g. Fault.status(503) "
            "or Reply(text='hi'), got int 503",
        ),
        (
            lambda f: f.set_fault("p", 503),
            "set_fault(): fault must be a Fault, e.g. Fault.status(503), got int 503",
        ),
        (
            lambda f: f.set_fault("p", [Fault.ok()]),
            "set_fault(): fault must be a Fault, e.g. Fault.status(503), got list [Fault(",
        ),
        (
            lambda f: f.set_reply("p", "hi"),
            "set_reply(): reply must be a Reply, e.g. Reply(text='hi'), got str 'hi'",
        ),
        (
            lambda f: f.set_fault(7, Fault.ok()),
            "provider must be a str (its URL path segment), got 7",
        ),
    ],
)
def test_a_wrong_type_is_a_type_error_at_the_call(
    fake: FakeProvider, http: httpx.Client, call: Any, message: str
) -> None:
    fake.set_fault("p", Fault.status(429))
    fake.script("p", [Fault.status(502)])
    with pytest.raises(TypeError) as info:
        call(fake)
    assert str(info.value).startswith(message), str(info.value)
    # Nothing was stored: the server still answers, with what was set before the bad call.
    url = f"{fake.url('p')}{OPENAI}"
    assert [http.post(url, json=body()).status_code for _ in range(2)] == [502, 429]
