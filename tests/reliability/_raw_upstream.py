"""A raw HTTP/1.1 upstream on 127.0.0.1 for what the fake provider cannot send: a response
head dribbled a byte at a time, header values that are not ASCII, an unbounded run of events
before any content, and a record of request bodies exactly as they arrived (streamed ones
too). Each path prefix is served by a function that writes the raw response to the socket.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

Serve = Callable[[socket.socket, "Received"], None]


@dataclass
class Received:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class RawUpstream:
    """``routes`` maps a path prefix to the function that answers it; every request is kept in
    ``received``. Connections are closed after each response."""

    routes: dict[str, Serve] = field(default_factory=dict)
    received: list[Received] = field(default_factory=list)
    open_connections: int = 0
    _listener: socket.socket | None = None
    _stop: threading.Event = field(default_factory=threading.Event)

    def __enter__(self) -> RawUpstream:
        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        listener.listen(64)
        listener.settimeout(0.2)
        self._listener = listener
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        if self._listener is not None:
            self._listener.close()

    @property
    def url(self) -> str:
        assert self._listener is not None
        return f"http://127.0.0.1:{self._listener.getsockname()[1]}"

    def _accept(self) -> None:
        assert self._listener is not None
        while not self._stop.is_set():
            try:
                conn, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        self.open_connections += 1
        try:
            with conn:
                conn.settimeout(10)
                request = _read_request(conn)
                if request is None:
                    return
                self.received.append(request)
                for prefix, serve in self.routes.items():
                    if request.path.startswith(prefix):
                        with contextlib.suppress(OSError):
                            serve(conn, request)
                        return
                with contextlib.suppress(OSError):
                    conn.sendall(head(404, [("content-length", "0")]))
        finally:
            self.open_connections -= 1


def _read_request(conn: socket.socket) -> Received | None:
    data = b""
    while b"\r\n\r\n" not in data:
        piece = conn.recv(65536)
        if not piece:
            return None
        data += piece
    raw_head, _, rest = data.partition(b"\r\n\r\n")
    lines = raw_head.decode("latin-1").split("\r\n")
    method, path, _ = lines[0].split(" ", 2)
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    if "content-length" in headers:
        length = int(headers["content-length"])
        while len(rest) < length:
            piece = conn.recv(65536)
            if not piece:
                break
            rest += piece
        body = rest[:length]
    elif headers.get("transfer-encoding", "").lower() == "chunked":
        body = b""
        while True:
            while b"\r\n" not in rest:
                rest += conn.recv(65536)
            size_line, _, rest = rest.partition(b"\r\n")
            size = int(size_line.split(b";")[0], 16)
            while len(rest) < size + 2:
                rest += conn.recv(65536)
            body += rest[:size]
            rest = rest[size + 2 :]
            if size == 0:
                break
    else:
        body = b""
    return Received(method, path, headers, body)


def head(status: int, headers: list[tuple[str, str | bytes]]) -> bytes:
    out = [f"HTTP/1.1 {status} X\r\n".encode()]
    for name, value in [*headers, ("connection", "close")]:
        raw = value if isinstance(value, bytes) else value.encode("latin-1")
        out.append(name.encode() + b": " + raw + b"\r\n")
    return b"".join(out) + b"\r\n"


def chat_json(text: str) -> bytes:
    return json.dumps(
        {
            "id": "raw",
            "object": "chat.completion",
            "model": "m",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": text},
                    "finish_reason": "stop",
                }
            ],
        }
    ).encode()


def chat_sse(text: str) -> bytes:
    def event(delta: dict[str, object], finish: str | None = None) -> bytes:
        chunk = {"id": "raw", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
        return b"data: " + json.dumps(chunk).encode() + b"\n\n"

    return event({"content": text}) + event({}, "stop") + b"data: [DONE]\n\n"


def answer(
    text: str, *, extra: list[tuple[str, str | bytes]] | None = None, status: int = 200
) -> Serve:
    """A whole JSON answer (non-stream) or an SSE one (stream requests), with ``extra``
    headers."""

    def serve(conn: socket.socket, request: Received) -> None:
        stream = json.loads(request.body or b"{}").get("stream") is True
        body = chat_sse(text) if stream else chat_json(text)
        ctype = "text/event-stream" if stream else "application/json"
        headers = [("content-type", ctype), ("content-length", str(len(body))), *(extra or [])]
        conn.sendall(head(status, headers) + body)

    return serve


def dribbled_head(interval_s: float, padding: int = 400) -> Serve:
    """A head sent one byte per ``interval_s``: each read is quick, the head never ends in time."""

    def serve(conn: socket.socket, request: Received) -> None:
        body = chat_json("too late")
        raw = head(200, [("x-pad", "p" * padding), ("content-length", str(len(body)))])
        for i in range(len(raw)):
            conn.sendall(raw[i : i + 1])
            time.sleep(interval_s)
        conn.sendall(body)

    return serve


def wait_until(predicate: Callable[[], bool], timeout: float = 5.0) -> bool:
    """Poll ``predicate`` (bounded) until it holds."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.02)
    return predicate()


@contextlib.contextmanager
def raw_upstream(**routes: Serve) -> Iterator[RawUpstream]:
    with RawUpstream({f"/{k}": v for k, v in routes.items()}) as server:
        yield server
