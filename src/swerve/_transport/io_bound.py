"""Every socket operation of an attempt held to the attempt's limits, on the call's clock.

httpx's timeouts are per operation: an upstream that sends its response head a byte at a time
never trips a read timeout, and no check of swerve's runs until the whole head is in. So the
inner transports swerve drives get a network backend whose streams clamp each ``read`` /
``write`` (and ``connect``) timeout to the time the current attempt has left, and fail at once
when it has none: a dribbled head ends at the limit, sync and async alike, and an async send
left to end by itself (see :class:`~swerve.httpx.AsyncFailoverTransport`) ends there too.

The current attempt's limits are a :class:`~contextvars.ContextVar`, set by the transport
around the send (and, sync, around each read of the body): a thread per call and an asyncio
task per send each see their own. Outside an attempt (a request passed through, another client
sharing the transport) the streams are the backend's own, untouched.

Which inner transports an async attempt may cancel mid-send (:func:`cut_safe`) is read here
too: it is a property of their pools, as the clamp is.
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Iterable, Iterator
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import ssl

__all__ = ["CURRENT", "cut_safe", "held", "install"]

# The streams and backends below keep httpcore's own signatures (``timeout=`` included, which
# ruff's ASYNC109 flags): httpcore calls them.


class Bound(Protocol):
    """What the streams read of an attempt: the seconds until its soonest limit ends (on the
    call's clock), and that limit's name."""

    def left(self) -> tuple[float, str]: ...


CURRENT: ContextVar[Bound | None] = ContextVar("swerve_attempt_bound", default=None)


def _clamped(timeout: float | None, error: type[Exception]) -> float | None:
    """``timeout`` cut to what the current attempt has left; ``error`` when nothing is left."""
    bound = CURRENT.get()
    if bound is None:
        return timeout
    left, name = bound.left()
    if left == math.inf:
        return timeout
    if left <= 0:
        raise error(f"swerve: the {name.replace('_', ' ')} time limit ran out")
    return left if timeout is None or left < timeout else timeout


class _Errors:
    """The timeout errors of one httpcore flavour (httpcore or httpcore2): what httpx maps to
    its own ``ReadTimeout`` / ``WriteTimeout`` / ``ConnectTimeout``."""

    __slots__ = ("connect", "read", "write")

    def __init__(self, module: Any) -> None:
        self.read: type[Exception] = module.ReadTimeout
        self.write: type[Exception] = module.WriteTimeout
        self.connect: type[Exception] = module.ConnectTimeout


class _Stream:
    __slots__ = ("_errors", "_stream")

    def __init__(self, stream: Any, errors: _Errors) -> None:
        self._stream = stream
        self._errors = errors

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        data: bytes = self._stream.read(max_bytes, _clamped(timeout, self._errors.read))
        return data

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._stream.write(buffer, _clamped(timeout, self._errors.write))

    def close(self) -> None:
        self._stream.close()

    def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> _Stream:
        timeout = _clamped(timeout, self._errors.connect)
        return _Stream(self._stream.start_tls(ssl_context, server_hostname, timeout), self._errors)

    def get_extra_info(self, info: str) -> Any:
        return self._stream.get_extra_info(info)


class _AsyncStream:
    __slots__ = ("_errors", "_stream")

    def __init__(self, stream: Any, errors: _Errors) -> None:
        self._stream = stream
        self._errors = errors

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:  # noqa: ASYNC109
        data: bytes = await self._stream.read(max_bytes, _clamped(timeout, self._errors.read))
        return data

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:  # noqa: ASYNC109
        await self._stream.write(buffer, _clamped(timeout, self._errors.write))

    async def aclose(self) -> None:
        await self._stream.aclose()

    async def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,  # noqa: ASYNC109
    ) -> _AsyncStream:
        timeout = _clamped(timeout, self._errors.connect)
        tls = await self._stream.start_tls(ssl_context, server_hostname, timeout)
        return _AsyncStream(tls, self._errors)

    def get_extra_info(self, info: str) -> Any:
        return self._stream.get_extra_info(info)


class _Backend:
    __slots__ = ("_backend", "_errors")

    def __init__(self, backend: Any, errors: _Errors) -> None:
        self._backend = backend
        self._errors = errors

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> _Stream:
        timeout = _clamped(timeout, self._errors.connect)
        stream = self._backend.connect_tcp(host, port, timeout, local_address, socket_options)
        return _Stream(stream, self._errors)

    def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[Any] | None = None
    ) -> _Stream:
        timeout = _clamped(timeout, self._errors.connect)
        stream = self._backend.connect_unix_socket(path, timeout, socket_options)
        return _Stream(stream, self._errors)

    def sleep(self, seconds: float) -> None:
        self._backend.sleep(seconds)


class _AsyncBackend:
    __slots__ = ("_backend", "_errors")

    def __init__(self, backend: Any, errors: _Errors) -> None:
        self._backend = backend
        self._errors = errors

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> _AsyncStream:
        timeout = _clamped(timeout, self._errors.connect)
        stream = await self._backend.connect_tcp(host, port, timeout, local_address, socket_options)
        return _AsyncStream(stream, self._errors)

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,  # noqa: ASYNC109
        socket_options: Iterable[Any] | None = None,
    ) -> _AsyncStream:
        timeout = _clamped(timeout, self._errors.connect)
        stream = await self._backend.connect_unix_socket(path, timeout, socket_options)
        return _AsyncStream(stream, self._errors)

    async def sleep(self, seconds: float) -> None:
        await self._backend.sleep(seconds)


def install(transport: object) -> bool:
    """Clamp the socket operations of ``transport`` (an httpx or httpx2 ``HTTPTransport`` /
    ``AsyncHTTPTransport``, whose httpcore pool takes a network backend) to the current
    attempt's time; whether they now are. Other transports (httpx-aiohttp's, a user's own)
    are left alone: False. Idempotent; inert outside an attempt."""
    pool = getattr(transport, "_pool", None)
    backend = getattr(pool, "_network_backend", None)
    if backend is None:
        return False
    if isinstance(backend, _Backend | _AsyncBackend):
        return True
    try:
        module = importlib.import_module(type(pool).__module__.partition(".")[0])
        errors = _Errors(module)
        is_async = isinstance(backend, module.AsyncNetworkBackend)
        is_sync = isinstance(backend, module.NetworkBackend)
    except (ImportError, AttributeError):  # not httpcore's pool after all
        return False
    if not (is_async or is_sync):
        return False
    wrapped = _AsyncBackend(backend, errors) if is_async else _Backend(backend, errors)
    pool._network_backend = wrapped  # type: ignore[union-attr]
    return True


def cut_safe(transport: object) -> bool:
    """Whether a send of ``transport``'s may be cancelled mid-way and leave it whole: an httpx or
    httpx2 ``MockTransport`` (no pool), or a pool of httpcore2's, which gives back the
    connection of a cancelled request. httpcore 1.0's keeps one assigned to a request cancelled
    while it connects, for good (encode/httpcore#1093); any other transport is not known."""
    kind = type(transport)
    if kind.__name__ == "MockTransport":
        return kind.__module__.partition(".")[0] in ("httpx", "httpx2")
    pool = getattr(transport, "_pool", None)
    return pool is not None and type(pool).__module__.partition(".")[0] == "httpcore2"


def held(reads: Iterator[bytes], bound: Bound) -> Iterator[bytes]:
    """``reads`` (a sync body's), each held to ``bound``: the variable is set only while a read
    runs, never across the ``yield`` (a generator shares its consumer's context)."""
    while True:
        token = CURRENT.set(bound)
        try:
            data = next(reads, None)
        finally:
            CURRENT.reset(token)
        if data is None:
            return
        yield data
