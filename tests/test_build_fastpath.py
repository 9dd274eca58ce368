"""What a routed request sends upstream, byte for byte, once its rewrite takes the fast path
(issue 21): the Headers made ready by an earlier request with the same headers, and the body
read and written without json's Python wrappers.

Each upstream is an in-process ``MockTransport`` of the client's library (httpx or httpx2,
sync and async) that records the raw headers and the body of every request swerve sends it.
A request is compared with what it sends through a new transport, one that has sent nothing
(its headers made for it alone), and with the form every request takes: Host first, the
client's headers in order, the upstream's, Content-Length last.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from opentelemetry import metrics, trace

from swerve import Failover, FallbackConfig, MemoryHealth, Telemetry
from swerve.httpx import Upstream
from swerve.testing import FakeClock

from ._canned import COMPLETION
from ._drive import SWERVE, Mode

ROUTE, OTHER = "p/m", "f/m"
CONFIG = FallbackConfig(fallbacks={ROUTE: OTHER}, max_retries=0)
AT_SWERVE = f"{SWERVE}/v1/chat/completions"
AT_UPSTREAM = "http://p.invalid/v1/chat/completions"  # the keyless upstream's own host
SHORT = json.dumps({"model": ROUTE, "messages": [{"role": "user", "content": "hi"}]}).encode()
LONG = SHORT.replace(b'"hi"', b'"hello there"')
TINY = json.dumps({"model": ROUTE, "messages": []}).encode()

Sent = tuple[list[tuple[bytes, bytes]], bytes]
Call = tuple[str, list[tuple[str, str]], bytes]  # where the client posts, its headers, the body


class Recorder:
    """An upstream's inner transport: answers every request with a completion, recording it."""

    def __init__(self, module: Any, meddle: bool = False) -> None:
        self.module = module
        self.meddle = meddle
        self.sent: list[Sent] = []
        self.transport = module.MockTransport(self.handle)

    def handle(self, request: Any) -> Any:
        self.sent.append((list(request.headers.raw), request.content))
        if self.meddle:  # as a hook or an instrumented transport may, on the request it got
            request.headers["x-meddled"] = "1"
            request.headers["x-trace"] = "meddled"
        return self.module.Response(
            200, headers={"content-type": "application/json"}, content=COMPLETION
        )


def _failover() -> Failover:
    clock = FakeClock()  # nothing here waits: no backoff, no cooldown
    telemetry = Telemetry(trace.NoOpTracerProvider(), metrics.NoOpMeterProvider())
    return Failover(CONFIG, MemoryHealth(clock=clock), telemetry=telemetry, clock=clock)


def client(mode: Mode, module: Any, recorder: Recorder, keyless: bool = False) -> Any:
    """A client whose route p/m is served by ``recorder`` (``keyless``: with no api_key)."""
    ups = {
        ROUTE: Upstream(
            "http://p.invalid/v1",
            api_key=None if keyless else "sk-p-0123456789",
            headers={"x-tenant": "t1"},
            transport=recorder.transport,
        ),
        OTHER: Upstream(
            "http://f.invalid/v1", api_key="sk-f-0123456789", transport=Recorder(module).transport
        ),
    }
    return mode.client(ups, module=module, failover=_failover())


def send(
    mode: Mode, module: Any, calls: list[Call], keyless: bool = False, meddle: bool = False
) -> list[Sent]:
    """What ``calls``, made in turn through one transport, send to the route's upstream
    (``meddle``: which changes the headers of every request it gets)."""
    recorder = Recorder(module, meddle)
    with client(mode, module, recorder, keyless) as c:
        for url, headers, body in calls:
            response = c.post(url, content=body, headers=headers)
            assert response.status_code == 200, response.text
    return recorder.sent


def alone(mode: Mode, module: Any, calls: list[Call], keyless: bool = False) -> list[Sent]:
    """What each of ``calls`` sends through a transport of its own."""
    return [sent for call in calls for sent in send(mode, module, [call], keyless)]


def names(sent: Sent) -> list[bytes]:
    return [name.lower() for name, _ in sent[0]]


def value(sent: Sent, name: bytes) -> bytes | None:
    return next((v for k, v in sent[0] if k.lower() == name), None)


def assert_form(sent: Sent) -> None:
    """Host first; Content-Length, the body's own, last (unless the client chunks it)."""
    headers, content = sent
    assert headers[0] == (b"Host", b"p.invalid")
    assert not [n for n in names(sent) if n.startswith(b"x-swerve-")]
    if value(sent, b"transfer-encoding") is None:
        assert headers[-1] == (b"Content-Length", str(len(content)).encode())
        assert names(sent).count(b"content-length") == 1
    else:
        assert b"content-length" not in names(sent)


def test_every_request_sends_what_it_sends_alone(mode: Mode, module: Any) -> None:
    h1 = [("x-trace", "1"), ("x-extra", "e")]
    h2 = [("x-trace", "2"), ("x-extra", "e")]
    pinned = [("x-trace", "2"), ("x-swerve-route", ROUTE)]  # swerve's own: filtered by name
    chunked = [("x-trace", "2"), ("transfer-encoding", "chunked")]
    calls: list[Call] = [
        (AT_SWERVE, h1, SHORT),  # new headers: sent as they come
        (AT_SWERVE, h1, SHORT),  # repeated: made ready
        (AT_SWERVE, h1, LONG),  # ready, another length
        (AT_SWERVE, h1, SHORT),  # ready, the length they were made with
        (AT_SWERVE, h1, TINY),
        (AT_SWERVE, h2, SHORT),  # a header changed
        (AT_SWERVE, h2, LONG),
        (AT_SWERVE, h2, TINY),
        (AT_SWERVE, h2[:1], LONG),  # a header gone
        (AT_SWERVE, h2[:1], SHORT),
        (AT_SWERVE, pinned, LONG),
        (AT_SWERVE, pinned, SHORT),
        (AT_SWERVE, pinned, TINY),
        (AT_SWERVE, chunked, SHORT),  # no length: the client's chunking instead
        (AT_SWERVE, chunked, LONG),
        (AT_SWERVE, chunked, LONG),
        (AT_SWERVE, h2[:1], LONG),  # and a length again
        (AT_SWERVE, h2[:1], LONG),
    ]
    got = send(mode, module, calls)
    assert got == alone(mode, module, calls)
    for sent, (_, headers, _) in zip(got, calls, strict=True):
        assert_form(sent)
        assert value(sent, b"x-trace") == headers[0][1].encode()
        assert value(sent, b"authorization") == b"Bearer sk-p-0123456789"
        assert value(sent, b"x-tenant") == b"t1"
    assert [value(sent, b"x-extra") for sent in got[4:9]] == [b"e", b"e", b"e", b"e", None]
    lengths = [value(sent, b"content-length") for sent in got[:5]]
    assert lengths == [str(len(sent[1])).encode() for sent in got[:5]]
    assert lengths[0] == lengths[1] == lengths[3] != lengths[2] != lengths[4] != lengths[0]
    # The client's headers in their order, then the upstream's, then the length.
    assert names(got[5])[-6:] == [
        b"user-agent",
        b"x-trace",
        b"x-extra",
        b"authorization",
        b"x-tenant",
        b"content-length",
    ]
    assert value(got[14], b"transfer-encoding") == b"chunked"
    assert value(got[16], b"content-length") == value(got[2], b"content-length")


def test_a_header_changed_between_requests_is_sent_changed(mode: Mode, module: Any) -> None:
    calls: list[Call] = [
        (AT_SWERVE, [("x-trace", trace_id), ("x-user", "u")], SHORT)
        for trace_id in ("a", "a", "a", "b", "b", "a")
    ]
    # The upstream changes the headers of each request it gets: each request's headers are
    # its own, so no change is sent with the next.
    got = send(mode, module, calls, meddle=True)
    assert [value(sent, b"x-trace") for sent in got] == [b"a", b"a", b"a", b"b", b"b", b"a"]
    assert not [sent for sent in got if value(sent, b"x-meddled") is not None]
    assert got == alone(mode, module, calls)


def test_the_body_sent_is_the_json_the_client_sent_for_the_route(mode: Mode, module: Any) -> None:
    text = {"model": ROUTE, "messages": [{"role": "user", "content": "héllo ☃ \U0001f600"}]}
    bodies = [
        SHORT,
        json.dumps(text).encode(),
        json.dumps(text, ensure_ascii=False).encode(),  # UTF-8 as it is
        b" \n" + SHORT + b"\n ",  # whitespace around the value: json.loads's own reading
        b"\xef\xbb\xbf" + SHORT,  # a UTF-8 byte order mark
        json.dumps(text).encode("utf-16"),  # another encoding json.loads detects
        b'{"model": "p/m", "messages": [], "x": "\xed\xa0\x80"}',  # a lone surrogate, as bytes
        b'{"model": "p/m", "messages": [], "n": [1.5, -2e3, true, null, {"a": [[]]}]}',
        # What json.loads reads beyond strict JSON, and numbers at their edges: written back
        # as json.dumps writes them.
        b'{"model": "p/m", "messages": [], "n": [NaN, Infinity, -Infinity, 1e400, -0.0, 0.1]}',
        b'{"model": "p/m", "messages": [], "n": [123456789012345678901234567890, -1, 0]}',
        b'{"model": "p/m", "messages": [], "d": ' + b"[" * 200 + b"]" * 200 + b"}",
        b'{"messages": [], "k": {"": 1, "\\u00e9\\n": "\\"q\\""}, "model": "p/m"}',
    ]
    calls: list[Call] = [(AT_SWERVE, [], body) for body in bodies]
    got = send(mode, module, calls)
    for sent, body in zip(got, bodies, strict=True):
        expected = json.loads(body)
        expected["model"] = "m"  # the route's model, in the place of the client's
        assert sent[1] == json.dumps(expected).encode()
        assert_form(sent)


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"   ",
        b'{"model": "p/m",}',
        b'{"model": "p/m"} {}',  # a second value after the first
        b'{"model": "p/m"}x',
        b'{"model": "p/m", "s": "\xff"}',  # no encoding json.loads reads
        b'\x00{"model": "p/m"}',
        b"[" * 100_000,  # nested too deeply
    ],
    ids=["empty", "blank", "comma", "extra", "trailing", "undecodable", "nul", "deep"],
)
def test_a_body_that_is_not_json_gets_json_loads_own_error(
    mode: Mode, module: Any, body: bytes
) -> None:
    recorder = Recorder(module)
    with client(mode, module, recorder) as c:
        response = c.post(AT_SWERVE, content=body)
    try:
        json.loads(body)
    except RecursionError:
        problem = "is nested too deeply to read"
    except ValueError as exc:
        problem = f"is not JSON ({exc})"
    assert response.status_code == 400
    assert response.json()["error"]["message"] == (
        f"swerve: the request body {problem}; routes are named by its 'model'"
    )
    assert recorder.sent == []


def test_a_keyless_upstream_gets_the_clients_credentials_only_at_its_own_host(
    mode: Mode, module: Any
) -> None:
    def auth(key: str) -> list[tuple[str, str]]:
        return [("authorization", f"Bearer {key}"), ("x-trace", "1")]

    calls: list[Call] = [
        (AT_UPSTREAM, auth("c1"), SHORT),
        (AT_UPSTREAM, auth("c1"), LONG),  # made ready
        (AT_UPSTREAM, auth("c1"), SHORT),
        (AT_UPSTREAM, auth("c2"), SHORT),  # the client's key changed: sent changed
        (AT_SWERVE, auth("c2"), SHORT),  # another host: none of the client's credentials
        (AT_SWERVE, auth("c2"), LONG),
        (AT_UPSTREAM, auth("c2"), SHORT),  # its own host again
        (AT_UPSTREAM, auth("c2"), LONG),
    ]
    got = send(mode, module, calls, keyless=True)
    assert got == alone(mode, module, calls, keyless=True)
    assert [value(sent, b"authorization") for sent in got] == [
        b"Bearer c1",
        b"Bearer c1",
        b"Bearer c1",
        b"Bearer c2",
        None,
        None,
        b"Bearer c2",
        b"Bearer c2",
    ]
    for sent in got:
        assert_form(sent)
