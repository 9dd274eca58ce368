"""The transport keeps the call's time limits on the call's clock (issue 21): a transport timeout
runs on swerve.testing.FakeClock, with no real waiting, as the engine's do.

Each upstream is an in-process ``httpx.MockTransport`` whose handler moves the fake clock on
(an upstream that took that long), so what the transport decides is read from the clock the
Failover was given, never from ``time.monotonic()``.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

import swerve
from swerve import FallbackConfig, MemoryHealth
from swerve.httpx import AsyncFailoverTransport, FailoverTransport, Upstream
from swerve.testing import FakeClock

from ._canned import COMPLETION

P, F = "p/m", "f/m"
BODY = COMPLETION

Handler = Callable[[httpx.Request], httpx.Response]


def _answer(request: httpx.Request) -> httpx.Response:
    return httpx.Response(200, headers={"content-type": "application/json"}, content=BODY)


def _late(clock: FakeClock, seconds: float) -> Handler:
    """An upstream whose answer comes ``seconds`` after the request, on the fake clock."""

    def handle(request: httpx.Request) -> httpx.Response:
        clock.advance(seconds)
        return _answer(request)

    return handle


def _timing_out(clock: FakeClock, seconds: float) -> Handler:
    """An upstream that hangs ``seconds`` (fake) until httpx's own timer gives up on it."""

    def handle(request: httpx.Request) -> httpx.Response:
        clock.advance(seconds)
        raise httpx.ReadTimeout("timed out", request=request)

    return handle


def _stream(clock: FakeClock, gap_s: float) -> Handler:
    """An SSE upstream whose second event comes ``gap_s`` after its first, on the fake clock."""

    def events() -> Iterator[bytes]:
        chunk = {"id": "r1", "object": "chat.completion.chunk", "created": 1, "model": "m"}
        first = {**chunk, "choices": [{"index": 0, "delta": {"content": "one"}}]}
        yield f"data: {json.dumps(first)}\n\n".encode()
        clock.advance(gap_s)
        second = {**chunk, "choices": [{"index": 0, "delta": {"content": " two"}}]}
        yield f"data: {json.dumps(second)}\n\n".encode()
        yield b"data: [DONE]\n\n"

    def handle(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=events())

    return handle


def _failover(clock: FakeClock, **limits: float) -> swerve.Failover:
    config = FallbackConfig(fallbacks={P: F}, max_retries=0, **limits)  # type: ignore[arg-type]
    return swerve.Failover(config, MemoryHealth(), clock=clock)


def _upstreams(primary: Handler, fallback: Handler = _answer) -> dict[str, Upstream]:
    return {
        P: Upstream("http://p.invalid/v1", api_key="k", transport=httpx.MockTransport(primary)),
        F: Upstream("http://f.invalid/v1", api_key="k", transport=httpx.MockTransport(fallback)),
    }


def _post(client: httpx.Client, stream: bool = False) -> httpx.Response:
    body = {"model": P, "messages": [{"role": "user", "content": "hi"}], "stream": stream}
    response = client.post("http://p.invalid/v1/chat/completions", json=body)
    response.read()
    return response


# -- sync: every read is checked against the limits on the call's clock ------------------------
@pytest.mark.parametrize(
    ("limits", "late_s"),
    [({"attempt_timeout_s": 5.0}, 6.0), ({"deadline_s": 5.0, "attempt_timeout_s": 30.0}, 6.0)],
)
def test_sync_headers_after_the_limit_on_the_fake_clock_swap(
    limits: dict[str, float], late_s: float
) -> None:
    clock = FakeClock()
    fo = _failover(clock, **limits)
    transport = FailoverTransport(_upstreams(_late(clock, late_s)), failover=fo)
    with httpx.Client(transport=transport) as client:
        if "deadline_s" in limits:  # the call's time is spent: nowhere left to go
            with pytest.raises(httpx.ReadTimeout, match=r"^swerve: the deadline time limit"):
                _post(client)
            return
        response = _post(client)
    assert response.headers["x-swerve-route"] == F
    assert response.headers["x-swerve-attempts"] == "2"


def test_sync_headers_within_the_limit_on_the_fake_clock_are_served() -> None:
    clock = FakeClock()
    fo = _failover(clock, attempt_timeout_s=5.0)
    transport = FailoverTransport(_upstreams(_late(clock, 4.0)), failover=fo)
    with httpx.Client(transport=transport) as client:
        response = _post(client)
    assert response.headers["x-swerve-route"] == P


def test_sync_stall_between_events_on_the_fake_clock_is_the_stall_limit() -> None:
    clock = FakeClock()
    fo = _failover(clock, stall_timeout_s=2.0)
    transport = FailoverTransport(_upstreams(_stream(clock, 3.0)), failover=fo)
    with (
        httpx.Client(transport=transport) as client,
        pytest.raises(httpx.ReadTimeout, match=r"^swerve: the stall time limit ran out"),
    ):
        _post(client, stream=True)


def test_sync_a_gap_within_the_stall_limit_is_no_timeout() -> None:
    clock = FakeClock()
    fo = _failover(clock, stall_timeout_s=2.0)
    transport = FailoverTransport(_upstreams(_stream(clock, 1.5)), failover=fo)
    with httpx.Client(transport=transport) as client:
        response = _post(client, stream=True)
    assert response.headers["x-swerve-route"] == P
    assert b" two" in response.content


# -- both: an httpx timeout is named by the limit that ran out on the call's clock --------------
def _async_transport(primary: Handler, fallback: Handler, fo: swerve.Failover) -> Any:
    def wrapped(handler: Handler) -> Any:
        async def handle(request: httpx.Request) -> httpx.Response:
            return handler(request)

        return handle

    upstreams = {
        P: Upstream(
            "http://p.invalid/v1", api_key="k", transport=httpx.MockTransport(wrapped(primary))
        ),
        F: Upstream(
            "http://f.invalid/v1", api_key="k", transport=httpx.MockTransport(wrapped(fallback))
        ),
    }
    return AsyncFailoverTransport(upstreams, failover=fo)


@pytest.mark.parametrize("sync", [True, False], ids=["sync", "async"])
@pytest.mark.parametrize(
    ("limits", "words"),
    [
        ({"attempt_timeout_s": 5.0}, "attempt"),
        ({"deadline_s": 5.0, "attempt_timeout_s": 30.0}, "deadline"),
        ({"deadline_s": 30.0, "attempt_timeout_s": 5.0}, "attempt"),
    ],
)
def test_an_httpx_timeout_names_the_limit_passed_on_the_fake_clock(
    sync: bool, limits: dict[str, float], words: str
) -> None:
    clock = FakeClock()
    fo = _failover(clock, **limits)
    hang = _timing_out(clock, 6.0)
    body = {"model": P, "messages": [{"role": "user", "content": "hi"}]}
    url = "http://p.invalid/v1/chat/completions"
    if sync:
        transport = FailoverTransport(_upstreams(hang, hang), failover=fo)
        with httpx.Client(transport=transport) as client, pytest.raises(httpx.ReadTimeout) as info:
            client.post(url, json=body)
    else:

        async def go() -> None:
            transport = _async_transport(hang, hang, fo)
            async with httpx.AsyncClient(transport=transport) as client:
                await client.post(url, json=body)

        with pytest.raises(httpx.ReadTimeout) as info:
            asyncio.run(go())
    assert str(info.value).startswith(f"swerve: the {words} time limit ran out ("), info.value


@pytest.mark.parametrize("sync", [True, False], ids=["sync", "async"])
def test_an_httpx_timeout_before_any_limit_stays_the_clients(sync: bool) -> None:
    clock = FakeClock()
    fo = _failover(clock, attempt_timeout_s=30.0)
    hang = _timing_out(clock, 1.0)
    body = {"model": P, "messages": [{"role": "user", "content": "hi"}]}
    url = "http://p.invalid/v1/chat/completions"
    timeout = httpx.Timeout(1.0)  # the client's own, shorter than swerve's limit
    if sync:
        transport = FailoverTransport(_upstreams(hang, hang), failover=fo)
        with (
            httpx.Client(transport=transport, timeout=timeout) as client,
            pytest.raises(httpx.ReadTimeout) as info,
        ):
            client.post(url, json=body)
    else:

        async def go() -> None:
            transport = _async_transport(hang, hang, fo)
            async with httpx.AsyncClient(transport=transport, timeout=timeout) as client:
                await client.post(url, json=body)

        with pytest.raises(httpx.ReadTimeout) as info:
            asyncio.run(go())
    assert not str(info.value).startswith("swerve:"), info.value
