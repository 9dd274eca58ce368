"""The fake provider's request handler: routes a request to its provider and wire, and serves
the reply or the fault (statuses, resets, hangs, broken streams and bodies)."""

from __future__ import annotations

import json
import socket
import struct
import threading
import zlib
from collections.abc import Iterable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from typing import TYPE_CHECKING, Any

from ._model import Fault, Reply
from ._wires import (
    WIRES,
    Body,
    Event,
    Wire,
    malformed_body,
    openai_error,
    stream_error,
    style_error,
)

if TYPE_CHECKING:
    from ._http_server import Server

__all__ = ["MAX_WAIT", "Handler", "cut_index", "models_body"]

MAX_WAIT = 120.0  # no delay or hang outlives this, so no thread lingers for long
_MODELS = ("fake-model", "fake-model-large")
_ECHOED = ("authorization", "x-api-key", "api-key")  # what Fault.echo_headers repeats
_PAD_PIECE = 64 * 1024  # Fault.gzip pads are compressed a piece at a time: never held whole
_BAD_CHUNK = b"zz\r\nnot a chunk size\r\n"


class Handler(BaseHTTPRequestHandler):
    server: Server
    protocol_version = "HTTP/1.1"  # keep-alive and chunked streams, like the real APIs
    disable_nagle_algorithm = True  # headers, body and events go out at once, no 40 ms stalls

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: tests read counts, not logs."""

    # -- routing --------------------------------------------------------------------------

    def _route(self) -> tuple[str, str]:
        provider, _, rest = self.path.split("?", 1)[0].lstrip("/").partition("/")
        return provider, rest.rstrip("/")

    def do_GET(self) -> None:
        provider, rest = self._route()
        if not provider or rest != "v1/models":
            return self._send_json(404, openai_error(404, f"no route for GET {self.path}"))
        anthropic = "anthropic-version" in self.headers  # the anthropic SDK always sends it
        fault, wake = self.server.providers.standing(provider)
        if fault.kind in ("status", "reset", "hang"):
            self._serve_error_fault(
                WIRES["v1/messages" if anthropic else "v1/chat/completions"], fault, wake
            )
            return
        self._send_json(200, models_body(provider, anthropic))

    def do_POST(self) -> None:
        provider, rest = self._route()
        raw = self._read_body()
        wire = WIRES.get(rest)
        if not provider or wire is None:
            return self._send_json(404, openai_error(404, f"no route for POST {self.path}"))
        try:
            body = json.loads(raw)
        except ValueError:
            body = None
        headers = {k.lower(): v for k, v in self.headers.items()}
        providers = self.server.providers
        if not isinstance(body, dict):
            providers.record(provider, {"_raw": raw.decode("utf-8", "replace")}, headers)
            return self._send_json(400, wire.error(400, "The request body is not valid JSON."))
        providers.record(provider, body, headers)
        invalid = wire.validate(body)
        if invalid is not None:
            return self._send_json(400, invalid)
        model = str(body["model"])
        fault, reply, wake = providers.next(provider, model)
        if self._serve_error_fault(wire, fault, wake):
            return
        text = reply.text if reply.text is not None else f"hello from {provider}"
        echo = _Echo(headers) if fault.kind == "echo_headers" else None
        if echo is not None and not fault.in_stream:
            return self._send_json(fault.code, wire.error(fault.code, echo.message), echo.headers)
        if body.get("stream") is True:
            options = body.get("stream_options")
            usage = isinstance(options, dict) and options.get("include_usage") is True
            return self._stream(wire, fault, wire.events(reply, text, model, usage), model, echo)
        self._respond(wire, fault, reply, text, model, echo)

    # -- faults ---------------------------------------------------------------------------

    def _serve_error_fault(self, wire: Wire, fault: Fault, wake: threading.Event) -> bool:
        """Serve the faults that replace the whole response; False when there is none."""
        if fault.kind == "hang":
            wake.wait(MAX_WAIT)
            self.close_connection = True  # hang up without a word
        elif fault.kind == "reset":
            self._reset()
        elif fault.kind == "context_overflow":
            self._send_json(400, wire.context_overflow())
        elif fault.kind == "status":
            headers = {}
            if fault.retry_after is not None:
                ra = fault.retry_after
                headers["Retry-After"] = ra if isinstance(ra, str) else f"{ra:g}"
            if fault.retry_after_ms is not None:
                headers["retry-after-ms"] = str(fault.retry_after_ms)
            if isinstance(fault.body, str):
                self._send(fault.code, fault.body.encode(), "text/html; charset=utf-8", headers)
            else:
                body = dict(fault.body) if fault.body is not None else wire.error(fault.code)
                self._send_json(fault.code, body, headers)
        else:
            return False
        return True

    def _respond(
        self, wire: Wire, fault: Fault, reply: Reply, text: str, model: str, echo: _Echo | None
    ) -> None:
        """A non-stream response under ``fault``."""
        if fault.kind == "reset_after":
            return self._reset()
        if fault.kind in ("error_before_content", "error_after"):
            return self._send_json(200, style_error(fault.style, fault.code))
        if echo is not None:
            return self._send_json(200, style_error(wire.style, fault.code, echo.message))
        if fault.kind == "slow" and self._pause(fault.first_token_s):
            return
        completion = wire.completion(reply, text, model, finished=fault.kind != "no_finish")
        if fault.kind in ("malformed_before_content", "malformed_after"):
            return self._send(200, malformed_body(completion), "application/json")
        body = json.dumps(completion).encode()
        if self._serve_body_fault(fault, body, "application/json"):
            return
        if fault.kind == "drop_after":
            # Promise the whole body, deliver half, hang up: a truncated response.
            self._send_headers(200, "application/json", {"Content-Length": str(len(body))})
            self.wfile.write(body[: len(body) // 2])
            self.close_connection = True
            return
        self._send(200, body, "application/json")

    def _serve_body_fault(self, fault: Fault, body: bytes, content_type: str) -> bool:
        """Serve a whole body under the faults that mangle its bytes; False when none does."""
        if fault.kind == "cut_after_bytes" and fault.after < len(body):
            self._send_headers(200, content_type, {"Content-Length": str(len(body))})
            self.wfile.write(body[: fault.after])
            self.close_connection = True
        elif fault.kind == "bad_chunking":
            self._send_headers(200, content_type, {"Transfer-Encoding": "chunked"})
            self._chunk(body[: len(body) // 2])
            self.wfile.write(_BAD_CHUNK)
            self.close_connection = True
        elif fault.kind == "content_type" and fault.content_type is not None:
            self._send(200, body, fault.content_type)
        elif fault.kind == "gzip":
            zipper = zlib.compressobj(6, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
            parts = [zipper.compress(body), *self._padding(zipper, fault.size, b""), zipper.flush()]
            packed = b"".join(parts)
            headers = {"Content-Length": str(len(packed)), "Content-Encoding": "gzip"}
            self._send_headers(200, content_type, headers)
            self.wfile.write(packed)
        elif fault.kind == "dribble":
            self._send_headers(200, content_type, {"Content-Length": str(len(body))})
            self._dribble(body, fault.per_chunk_s, chunked=False)
        else:
            return False
        return True

    def _padding(self, zipper: Any, size: int, prefix: bytes) -> Iterable[bytes]:
        """``prefix`` and ``size`` spaces, compressed a piece at a time (output only)."""
        if size <= 0:
            return
        out = zipper.compress(prefix)
        if out:
            yield out
        left = size
        while left > 0:
            piece = min(left, _PAD_PIECE)
            left -= piece
            out = zipper.compress(b" " * piece)
            if out:
                yield out

    def _dribble(self, data: bytes, interval: float, *, chunked: bool) -> None:
        for index in range(len(data)):
            if index and self._pause(interval):
                return
            byte = data[index : index + 1]
            if chunked:
                self._chunk(byte)
            else:
                self.wfile.write(byte)
            self.wfile.flush()
        if chunked:
            self._chunk(b"")

    def _stream_bytes_fault(self, fault: Fault, events: list[Event]) -> bool:
        """Serve an SSE stream under the faults that mangle its bytes; False when none does."""
        data = b"".join(raw for _, raw in events)
        if fault.kind == "cut_after_bytes" and fault.after < len(data):
            if fault.after:
                self._chunk(data[: fault.after])
            self.close_connection = True  # FIN without the chunked terminator
        elif fault.kind == "dribble":
            self._dribble(data, fault.per_chunk_s, chunked=True)
        elif fault.kind == "gzip":
            zipper = zlib.compressobj(6, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
            for out in self._padding(zipper, fault.size, b":"):
                self._chunk(out)
            ending = b"\n" if fault.size else b""  # ends the padding comment line
            for _, raw in events:  # each event flushed, so the client sees it as sent
                self._chunk(zipper.compress(ending + raw) + zipper.flush(zlib.Z_SYNC_FLUSH))
                ending = b""
            self._chunk(zipper.flush())
            self._chunk(b"")
        else:
            return False
        return True

    def _stream(
        self, wire: Wire, fault: Fault, events: list[Event], model: str, echo: _Echo | None
    ) -> None:
        """An SSE response under ``fault``, one HTTP chunk per event (clients see each as sent)."""
        headers = {"Cache-Control": "no-cache", "Transfer-Encoding": "chunked"}
        if fault.kind == "gzip":
            headers["Content-Encoding"] = "gzip"
        content_type = "text/event-stream; charset=utf-8"
        if fault.kind == "content_type" and fault.content_type is not None:
            content_type = fault.content_type
        self._send_headers(200, content_type, headers)
        if self._stream_bytes_fault(fault, events):
            return
        cut = cut_index(fault, events)
        first = True
        for index, (kind, data) in enumerate(events):
            if index == cut:
                if fault.kind == "drop_after":
                    self.close_connection = True  # FIN without the chunked terminator
                    return
                if fault.kind == "reset_after":
                    return self._reset()
                if fault.kind == "bad_chunking":
                    self.wfile.write(_BAD_CHUNK)
                    self.close_connection = True
                    return
                if fault.kind in ("malformed_before_content", "malformed_after"):
                    self._chunk(wire.malformed_event)  # inserted: the stream goes on after it
                elif echo is not None:
                    self._chunk(stream_error(wire.style, fault.code, model, echo.message))
                    break
                else:
                    self._chunk(stream_error(fault.style, fault.code, model))
                    break
            if (kind == "finish" and fault.kind == "no_finish") or (
                kind == "done" and fault.kind == "no_done"
            ):
                break
            if kind == "content" and fault.kind == "slow":
                if self._pause(fault.first_token_s if first else fault.per_chunk_s):
                    return
                first = False
            self._chunk(data)
        self._chunk(b"")

    def _pause(self, seconds: float) -> bool:
        """Wait ``seconds`` (capped); True when stop() interrupted, and the response is off."""
        if seconds > 0 and self.server.stopping.wait(min(seconds, MAX_WAIT)):
            self.close_connection = True
            return True
        return False

    def _reset(self) -> None:
        """Close with SO_LINGER 0, so the kernel sends RST instead of FIN."""
        self.close_connection = True
        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        # rfile holds a reference to the socket; the fd only really closes once it is gone.
        # (wfile holds none, and http.server still flushes it after the handler returns.)
        self.rfile.close()
        self.connection.close()

    # -- HTTP plumbing --------------------------------------------------------------------

    def _read_body(self) -> bytes:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            parts = []
            while size := int(self.rfile.readline().split(b";")[0].strip() or b"0", 16):
                parts.append(self.rfile.read(size))
                self.rfile.readline()
            while self.rfile.readline().strip():  # trailers, if any
                pass
            return b"".join(parts)
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def _send_headers(self, code: int, content_type: str, headers: dict[str, str]) -> None:
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()

    def _send(
        self, code: int, body: bytes, content_type: str, headers: dict[str, str] | None = None
    ) -> None:
        self._send_headers(
            code, content_type, {**(headers or {}), "Content-Length": str(len(body))}
        )
        self.wfile.write(body)

    def _send_json(self, code: int, body: Body, headers: dict[str, str] | None = None) -> None:
        self._send(code, json.dumps(body).encode(), "application/json", headers)

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))  # b"" writes the terminator


def models_body(provider: str, anthropic: bool) -> Body:
    """``GET /v1/models``: two models, in the Anthropic wire's shape or the OpenAI one's."""
    data: list[Body]
    if anthropic:
        data = [
            {"type": "model", "id": m, "display_name": m, "created_at": "2025-01-01T00:00:00Z"}
            for m in _MODELS
        ]
        return {"data": data, "has_more": False, "first_id": _MODELS[0], "last_id": _MODELS[-1]}
    data = [
        {"id": m, "object": "model", "created": 1735689600, "owned_by": provider} for m in _MODELS
    ]
    return {"object": "list", "data": data}


@dataclass(frozen=True, slots=True)
class _Echo:
    """What :meth:`Fault.echo_headers` repeats back: every received header in the error
    message, and the credentials again as ``x-echo-<name>`` response headers."""

    received: dict[str, str]

    @property
    def message(self) -> str:
        return f"received headers: {json.dumps(self.received)}"

    @property
    def headers(self) -> dict[str, str]:
        return {f"x-echo-{k}": self.received[k] for k in _ECHOED if k in self.received}


def cut_index(fault: Fault, events: list[Event]) -> int | None:
    """Index of the event a stream fault replaces (or, for the malformed faults, is inserted
    before): right after the first event for the before-content faults; else before content
    chunk ``after + 1`` or the finish, if sooner."""
    if fault.kind in ("error_before_content", "malformed_before_content") or (
        fault.kind == "echo_headers" and fault.after == 0
    ):
        return 1
    if fault.kind not in (
        "error_after",
        "drop_after",
        "reset_after",
        "malformed_after",
        "echo_headers",
        "bad_chunking",
    ):
        return None
    seen = 0
    for index, (kind, _) in enumerate(events):
        if kind in ("finish", "done") or (kind == "content" and seen == fault.after):
            return index
        seen += kind == "content"
    return len(events)
