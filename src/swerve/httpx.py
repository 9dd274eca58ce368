"""A failover httpx transport: failover for raw HTTP clients and the provider SDKs.

Every client of an LLM API that is built on httpx (or httpx2, which the current openai and
anthropic SDKs use) sends through a transport. :class:`FailoverTransport` and
:class:`AsyncFailoverTransport` sit at that seam: a request whose body names a configured
route (``"model": "openrouter/anthropic/claude-sonnet-5"``, or the upstream's own model name
at the upstream's URL) is sent to that route's :class:`Upstream`, and retried, swapped and
cooled down by the core engine exactly as :class:`swerve.Failover` does. Other requests pass
through untouched.

Streams are peeked: the response is handed to the client only once the upstream has sent its
first content event, so an error inside a 200 stream before that is an ordinary failure,
retried or swapped where the client cannot see it.
"""

from __future__ import annotations

import asyncio
import time
import zlib
from collections.abc import AsyncIterator, Iterable, Iterator, Mapping
from typing import Any

import httpx

from ._attempt import _SPEC, _Chunk, _Head, _is_stream, _Limits, _module_of, _returned
from ._client_side import _byte_stream, _given_up
from ._config import FallbackConfig
from ._engine import Attempt, Failover
from ._failures import AttemptTimeout
from ._health import HealthStore
from ._routes import Route
from ._routing import _SWERVE_PREFIX, _Core, _Plan
from ._upstream import (
    ROUTE_HEADER,
    SWITCH_HEADER,
    ResponseTooLarge,
    Upstream,
    UpstreamStatusError,
    Wire,
)

__all__ = [
    "ROUTE_HEADER",
    "SWITCH_HEADER",
    "AsyncFailoverTransport",
    "FailoverTransport",
    "ResponseTooLarge",
    "Upstream",
    "UpstreamStatusError",
    "Wire",
]


_PIECE = 64 * 1024  # the most one step of decompression may produce


def _encoded(response: Any) -> bool:
    """A gzip body swerve inflates itself, a bounded piece at a time (httpx would inflate a
    whole network read at once: a small read of a gzip bomb is gigabytes)."""
    return str(response.headers.get("content-encoding", "")).strip().lower() in ("gzip", "x-gzip")


def _inflate(data: bytes, inflater: Any) -> Iterator[bytes]:
    while data:
        try:
            piece = inflater.decompress(data, _PIECE)
        except zlib.error as exc:
            raise httpx.DecodingError(
                f"swerve: the upstream's gzip body is corrupt ({exc})"
            ) from exc
        if piece:
            yield piece
        data = inflater.unconsumed_tail


def _chunks(response: Any) -> Iterator[bytes]:
    """The decoded body, in pieces of bounded size where swerve decodes it."""
    if not _encoded(response):
        yield from response.iter_bytes()
        return
    inflater = zlib.decompressobj(32 + zlib.MAX_WBITS)  # gzip or zlib header, detected
    for data in response.iter_raw():
        yield from _inflate(data, inflater)


async def _achunks(response: Any) -> AsyncIterator[bytes]:
    if not _encoded(response):
        async for data in response.aiter_bytes():
            yield data
        return
    inflater = zlib.decompressobj(32 + zlib.MAX_WBITS)
    async for data in response.aiter_raw():
        for piece in _inflate(data, inflater):
            yield piece


def _read_limited(chunks: Iterable[bytes], limit: int, limits: _Limits | None = None) -> bytes:
    out = bytearray()
    for chunk in chunks:
        if limits is not None:
            limits.check(True)
        out += chunk
        if len(out) > limit:
            raise ResponseTooLarge(f"the upstream body exceeded {limit} bytes")
    return bytes(out)


async def _aread_limited(chunks: AsyncIterator[bytes], limit: int) -> bytes:
    out = bytearray()
    async for chunk in chunks:
        out += chunk
        if len(out) > limit:
            raise ResponseTooLarge(f"the upstream body exceeded {limit} bytes")
    return bytes(out)


def _strip_swerve(request: Any) -> Any:
    """A request passed through, less the headers that are swerve's (they never leave)."""
    headers = request.headers
    names = [k for k in headers if k.lower().startswith(_SWERVE_PREFIX)]
    for name in names:
        del headers[name]
    return request


def _bounded_by_client(request: Any) -> bool:
    """Whether every phase of ``request`` has a finite httpx timeout, so that a send left to
    run on its own ends by itself."""
    timeout = request.extensions.get("timeout")
    return isinstance(timeout, dict) and all(
        timeout.get(phase) is not None for phase in ("connect", "read", "write", "pool")
    )


class _Transport:
    """What both transports hold: the routing core, and the inner transports they made."""

    def __init__(
        self,
        upstreams: Mapping[str, Upstream],
        config: FallbackConfig | None = None,
        *,
        failover: Failover | None = None,
        health: HealthStore | None = None,
        max_body_bytes: int = 32 * 1024 * 1024,
    ) -> None:
        failover = failover if failover is not None else Failover(config, health)
        self._core = _Core(upstreams, failover, max_body_bytes, config)
        self._inner: dict[Any, Any] = {}

    @property
    def failover(self) -> Failover:
        return self._core.failover


class FailoverTransport(_Transport, httpx.BaseTransport):
    """A sync transport with failover; works under ``httpx.Client`` and ``httpx2.Client``.

    ``upstreams`` maps each route to its :class:`Upstream`. ``config`` (or ``failover``, a
    ready :class:`swerve.Failover`) sets the policy; with neither, ``$SWERVE_FALLBACK_CONFIG``.
    Swaps that would cross wires are refused here, when the transport is built.
    """

    def handle_request(self, request: Any) -> Any:
        core = self._core
        plan = core.plan(request)
        if plan is None:
            inner = core.inner(request, None, self._inner, True)
            return inner.handle_request(_strip_swerve(request))
        if not isinstance(plan, _Plan):
            return plan  # an error response naming what was wrong
        route = plan.route
        started = time.monotonic()

        def send(attempt: Attempt, limits: _Limits | None) -> Any:
            upstream_request = core.build(request, plan, attempt)
            inner = core.inner(request, str(attempt.route), self._inner, True)
            response = inner.handle_request(upstream_request)
            if limits is not None:
                try:
                    limits.check(False)  # headers that came too late are a timeout too
                except AttemptTimeout:
                    response.close()
                    raise
            return response

        def body(response: Any, limits: _Limits | None) -> tuple[bytes, bool]:
            try:
                if limits is None and core.fits(response):
                    return bytes(response.read()), True  # cached on the response, reused
                return _read_limited(_chunks(response), core.limit, limits), False
            finally:
                response.close()

        def once(attempt: Attempt) -> Any:
            try:
                limits = core.limits(attempt, stream=False)
                response = send(attempt, limits)
                content, whole = body(response, limits)
                return core.complete(str(attempt.route), response, content, whole)
            except Exception as exc:
                core.scrubbed(exc)  # the same exception, its secrets taken out
                raise

        def chunks(attempt: Attempt) -> Iterator[_Chunk]:
            try:
                limits = core.limits(attempt, stream=True)
                response = send(attempt, limits)
                try:
                    yield _Head(response.status_code, _returned(response.headers))
                    if not _is_stream(response):
                        content, _ = body(response, limits)
                        yield core.whole(str(attempt.route), response, content)
                        return
                    reader = core.reader(str(attempt.route), response)
                    for data in _chunks(response):
                        if limits is not None:
                            limits.check(reader.committed)
                        for event in reader.feed(data):
                            if limits is not None:
                                limits.last = time.monotonic()
                            yield event
                    yield from reader.flush()
                finally:
                    response.close()
            except Exception as exc:
                core.scrubbed(exc)  # the same exception, its secrets taken out
                raise

        fo = core.failover
        try:
            if plan.off:
                return once(Attempt(Route.parse(route), Route.parse(route)))
            if not plan.stream:
                return fo.call(route, once, pin=plan.pin).value
            stream = fo.stream(route, chunks, _SPEC, pin=plan.pin)
            head = next(stream)
        except Exception as exc:
            return _given_up(request, exc, core, started)
        assert isinstance(head, _Head)
        module = _module_of(request)
        return module.Response(
            head.status,
            headers=head.headers,
            stream=_byte_stream(module, True, stream, core, started),
        )

    def close(self) -> None:
        for transport in self._inner.values():
            transport.close()
        for upstream in self._core.upstreams.values():
            if upstream.transport is not None:
                upstream.transport.close()


class AsyncFailoverTransport(_Transport, httpx.AsyncBaseTransport):
    """The async :class:`FailoverTransport`, for ``httpx.AsyncClient`` / ``httpx2.AsyncClient``.

    Any async inner transport can serve the upstreams (set ``Upstream.transport``): swerve
    only needs ``handle_async_request``.

    swerve ends an attempt that runs out of time by cancelling the wait for it. The send
    itself (pool, connect, request, response head) is never cancelled mid-way when its httpx
    timeouts bound it: httpcore's pool keeps a connection it had assigned to a cancelled
    request, never connected, for good, until every later request waits for a free one. Such
    a send runs on by itself to its own timeout, and its response is closed.
    """

    def __init__(
        self,
        upstreams: Mapping[str, Upstream],
        config: FallbackConfig | None = None,
        *,
        failover: Failover | None = None,
        health: HealthStore | None = None,
        max_body_bytes: int = 32 * 1024 * 1024,
    ) -> None:
        super().__init__(
            upstreams, config, failover=failover, health=health, max_body_bytes=max_body_bytes
        )
        self._left: set[asyncio.Future[Any]] = set()  # sends left to end by themselves

    async def handle_async_request(self, request: Any) -> Any:
        core = self._core
        plan = core.plan(request)
        if plan is None:
            inner = core.inner(request, None, self._inner, False)
            return await inner.handle_async_request(_strip_swerve(request))
        if not isinstance(plan, _Plan):
            return plan
        route = plan.route
        started = time.monotonic()

        async def send(attempt: Attempt) -> Any:
            upstream_request = core.build(request, plan, attempt)
            inner = core.inner(request, str(attempt.route), self._inner, False)
            return await self._send(inner, upstream_request)

        async def body(response: Any) -> tuple[bytes, bool]:
            try:
                if core.fits(response):
                    return bytes(await response.aread()), True
                return await _aread_limited(_achunks(response), core.limit), False
            finally:
                await response.aclose()

        async def once(attempt: Attempt) -> Any:
            try:
                response = await send(attempt)
                content, whole = await body(response)
                return core.complete(str(attempt.route), response, content, whole)
            except Exception as exc:
                core.scrubbed(exc)  # the same exception, its secrets taken out
                raise

        async def chunks(attempt: Attempt) -> AsyncIterator[_Chunk]:
            try:
                response = await send(attempt)
                try:
                    yield _Head(response.status_code, _returned(response.headers))
                    if not _is_stream(response):
                        content, _ = await body(response)
                        yield core.whole(str(attempt.route), response, content)
                        return
                    reader = core.reader(str(attempt.route), response)
                    async for data in _achunks(response):
                        for event in reader.feed(data):
                            yield event
                    for event in reader.flush():
                        yield event
                finally:
                    await response.aclose()
            except Exception as exc:
                core.scrubbed(exc)  # the same exception, its secrets taken out
                raise

        fo = core.failover
        try:
            if plan.off:
                return await once(Attempt(Route.parse(route), Route.parse(route)))
            if not plan.stream:
                return (await fo.acall(route, once, pin=plan.pin)).value
            stream = fo.astream(route, chunks, _SPEC, pin=plan.pin)
            head = await anext(stream)
        except Exception as exc:
            return _given_up(request, exc, core, started)
        assert isinstance(head, _Head)
        module = _module_of(request)
        return module.Response(
            head.status,
            headers=head.headers,
            stream=_byte_stream(module, False, stream, core, started),
        )

    async def _send(self, inner: Any, request: Any) -> Any:
        """``inner.handle_async_request(request)``, never cancelled mid-way when it is bounded
        by its own timeouts (see the class docstring)."""
        if not _bounded_by_client(request):
            return await inner.handle_async_request(request)  # nothing would end it: cancel
        task = asyncio.ensure_future(inner.handle_async_request(request))
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            self._leave(task)
            raise

    def _leave(self, task: asyncio.Future[Any]) -> None:
        """Let ``task`` end by itself; close the response it brings, if any."""
        left = self._left
        left.add(task)

        def ended(done: asyncio.Future[Any]) -> None:
            left.discard(done)
            if done.cancelled() or done.exception() is not None:
                return  # its error is nobody's now (retrieved, so asyncio does not log it)
            closing = asyncio.ensure_future(done.result().aclose())
            left.add(closing)
            closing.add_done_callback(closed)

        def closed(done: asyncio.Future[Any]) -> None:
            left.discard(done)
            if not done.cancelled():
                done.exception()  # retrieved: a failed close is nobody's either

        task.add_done_callback(ended)

    async def aclose(self) -> None:
        left = list(self._left)
        for task in left:
            task.cancel()  # the pools close next: nothing can be orphaned in them any more
        if left:
            await asyncio.gather(*left, return_exceptions=True)
        for transport in self._inner.values():
            await transport.aclose()
        for upstream in self._core.upstreams.values():
            if upstream.transport is not None:
                await upstream.transport.aclose()
