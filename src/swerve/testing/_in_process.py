"""The fake provider in-process: httpx transports that answer from its state with no server.

What the served handler does for a request (``_handler``), computed as one :class:`_Answer`
and then played out by a sync or an async httpx transport, as ``httpx.MockTransport`` would.
Only the faults about the connection and its bytes need the socket; they are refused here.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

import httpx

from ._handler import MAX_WAIT, cut_index, models_body
from ._model import Fault
from ._providers import Providers
from ._wires import WIRES, Wire, malformed_body, openai_error, stream_error, style_error

__all__ = ["SOCKET_FAULTS", "AsyncInProcessTransport", "InProcessTransport"]

SOCKET_FAULTS = frozenset(
    {
        "reset",
        "reset_after",
        "bad_chunking",
        "cut_after_bytes",
        "content_type",
        "gzip",
        "dribble",
        "echo_headers",
    }
)
"""The fault kinds the in-process transports refuse (NotImplementedError): what they test is
the connection, its bytes or its headers, which only the served fake has."""

_MODELS_PATH = "v1/models"


@dataclass
class _Answer:
    """What the fake sends for one request: a wait before the response (a hang, or a slow
    first token), then the status, headers and body pieces (each after a pause), then either
    the end or ``cut`` (the connection closed early)."""

    wait: float = 0.0
    hang: threading.Event | None = None
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    pieces: list[tuple[float, bytes]] = field(default_factory=list)
    cut: bool = False


def _json(status: int, body: Any, headers: dict[str, str] | None = None) -> _Answer:
    headers = {"content-type": "application/json", **(headers or {})}
    return _Answer(status=status, headers=headers, pieces=[(0.0, json.dumps(body).encode())])


def _refuse(fault: Fault) -> None:
    if fault.kind in SOCKET_FAULTS:
        raise NotImplementedError(
            f"Fault.{fault.kind} needs a socket: serve the FakeProvider (start() or with) and "
            "use fake.url(provider) instead of its in-process transport"
        )


def _error(wire: Wire, fault: Fault, wake: threading.Event) -> _Answer | None:
    """The faults that replace the whole response (the handler's ``_serve_error_fault``)."""
    if fault.kind == "hang":
        return _Answer(wait=MAX_WAIT, hang=wake)
    if fault.kind == "context_overflow":
        return _json(400, wire.context_overflow())
    if fault.kind != "status":
        return None
    extra: dict[str, str] = {}
    if fault.retry_after is not None:
        ra = fault.retry_after
        extra["Retry-After"] = ra if isinstance(ra, str) else f"{ra:g}"
    if fault.retry_after_ms is not None:
        extra["retry-after-ms"] = str(fault.retry_after_ms)
    if isinstance(fault.body, str):
        html = {"content-type": "text/html; charset=utf-8", **extra}
        return _Answer(status=fault.code, headers=html, pieces=[(0.0, fault.body.encode())])
    error = dict(fault.body) if fault.body is not None else wire.error(fault.code)
    return _json(fault.code, error, extra)


def _answer(providers: Providers, request: httpx.Request) -> _Answer:
    """The served handler's ``do_GET`` / ``do_POST``, for the faults that need no socket."""
    provider, _, rest = request.url.path.lstrip("/").partition("/")
    rest = rest.rstrip("/")
    if request.method == "GET" and provider and rest == _MODELS_PATH:
        anthropic = "anthropic-version" in request.headers
        fault, wake = providers.standing(provider)
        if fault.kind in ("status", "reset", "hang"):
            _refuse(fault)
            shape = WIRES["v1/messages" if anthropic else "v1/chat/completions"]
            answer = _error(shape, fault, wake)
            assert answer is not None
            return answer
        return _json(200, models_body(provider, anthropic))
    wire = WIRES.get(rest)
    if request.method != "POST" or not provider or wire is None:
        path = request.url.path
        return _json(404, openai_error(404, f"no route for {request.method} {path}"))
    raw = request.read()
    try:
        body = json.loads(raw)
    except ValueError:
        body = None
    headers = {k.lower(): v for k, v in request.headers.items()}
    if not isinstance(body, dict):
        providers.record(provider, {"_raw": raw.decode("utf-8", "replace")}, headers)
        return _json(400, wire.error(400, "The request body is not valid JSON."))
    providers.record(provider, body, headers)
    if (invalid := wire.validate(body)) is not None:
        return _json(400, invalid)
    model = str(body["model"])
    fault, reply, wake = providers.next(provider, model)
    _refuse(fault)
    if (error := _error(wire, fault, wake)) is not None:
        return error
    text = reply.text if reply.text is not None else f"hello from {provider}"
    first = fault.first_token_s if fault.kind == "slow" else 0.0
    if body.get("stream") is not True:
        if fault.kind in ("error_before_content", "error_after"):
            return _json(200, style_error(fault.style, fault.code))
        completion = wire.completion(reply, text, model, finished=fault.kind != "no_finish")
        if fault.kind in ("malformed_before_content", "malformed_after"):
            data = malformed_body(completion)
        else:
            data = json.dumps(completion).encode()
        answer = _Answer(wait=first, headers={"content-type": "application/json"})
        if fault.kind == "drop_after":  # half the body, then the connection closes
            return replace(answer, pieces=[(0.0, data[: len(data) // 2])], cut=True)
        return replace(answer, pieces=[(0.0, data)])
    options = body.get("stream_options")
    usage = isinstance(options, dict) and options.get("include_usage") is True
    events = wire.events(reply, text, model, usage)
    answer = _Answer(headers={"content-type": "text/event-stream; charset=utf-8"})
    cut, started = cut_index(fault, events), False
    for index, (kind, data) in enumerate(events):
        if index == cut:
            if fault.kind == "drop_after":
                answer.cut = True
                return answer
            if fault.kind in ("malformed_before_content", "malformed_after"):
                answer.pieces.append((0.0, wire.malformed_event))
            else:
                answer.pieces.append((0.0, stream_error(fault.style, fault.code, model)))
                return answer
        if (kind == "finish" and fault.kind == "no_finish") or (
            kind == "done" and fault.kind == "no_done"
        ):
            return answer
        pause = 0.0
        if kind == "content" and fault.kind == "slow":
            pause = fault.first_token_s if not started else fault.per_chunk_s
            started = True
        answer.pieces.append((pause, data))
    return answer


def _read_limit(request: httpx.Request) -> float:
    """The request's read timeout, as httpx would enforce it on a socket."""
    read = request.extensions.get("timeout", {}).get("read")
    return MAX_WAIT if read is None else min(float(read), MAX_WAIT)


def _late(request: httpx.Request) -> httpx.ReadTimeout:
    return httpx.ReadTimeout("timed out (in-process fake)", request=request)


def _closed(request: httpx.Request) -> httpx.RemoteProtocolError:
    return httpx.RemoteProtocolError(
        "peer closed connection without sending complete message body", request=request
    )


class _Body(httpx.SyncByteStream):
    def __init__(self, answer: _Answer, request: httpx.Request, stop: threading.Event) -> None:
        self.answer, self.request, self.stop = answer, request, stop

    def __iter__(self) -> Iterator[bytes]:
        limit = _read_limit(self.request)
        for pause, data in self.answer.pieces:
            if pause and self.stop.wait(min(pause, limit)):
                raise _closed(self.request)  # the fake stopped mid-pause and hung up
            if pause > limit:
                raise _late(self.request)
            yield data
        if self.answer.cut:
            raise _closed(self.request)


class _AsyncBody(httpx.AsyncByteStream):
    def __init__(self, answer: _Answer, request: httpx.Request) -> None:
        self.answer, self.request = answer, request

    async def __aiter__(self) -> AsyncIterator[bytes]:
        limit = _read_limit(self.request)
        for pause, data in self.answer.pieces:
            if pause:
                await asyncio.sleep(min(pause, limit))  # the caller cancels at its own limit
                if pause > limit:
                    raise _late(self.request)
            yield data
        if self.answer.cut:
            raise _closed(self.request)


class InProcessTransport(httpx.BaseTransport):
    """``FakeProvider.transport()``: the fake's answers for an ``httpx.Client``."""

    def __init__(self, providers: Providers, stopping: threading.Event) -> None:
        self._providers, self._stopping = providers, stopping

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        answer = _answer(self._providers, request)
        limit = _read_limit(request)
        if answer.wait:
            woken = (answer.hang or self._stopping).wait(min(answer.wait, limit))
            if not woken and answer.wait > limit:
                raise _late(request)
            if answer.hang is not None:
                raise _closed(request)  # released, or waited out: it hangs up without a word
        stream = _Body(answer, request, self._stopping)
        return httpx.Response(answer.status, headers=answer.headers, stream=stream)


class AsyncInProcessTransport(httpx.AsyncBaseTransport):
    """``FakeProvider.async_transport()``: the fake's answers for an ``httpx.AsyncClient``."""

    def __init__(self, providers: Providers) -> None:
        self._providers = providers

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        await request.aread()
        answer = _answer(self._providers, request)
        limit = _read_limit(request)
        if answer.wait:
            waited, step = 0.0, 0.01
            # Polled, not awaited on the event: a threading.Event would block the loop, and a
            # hang must still wake when set_fault (or stop) releases it.
            while waited < min(answer.wait, limit):
                if answer.hang is not None and answer.hang.is_set():
                    raise _closed(request)
                await asyncio.sleep(step)
                waited += step
            if answer.wait > limit:
                raise _late(request)
            if answer.hang is not None:
                raise _closed(request)  # waited out: it hangs up without a word
        return httpx.Response(
            answer.status, headers=answer.headers, stream=_AsyncBody(answer, request)
        )
