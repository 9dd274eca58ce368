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

Every response to a routed request says who answered: ``x-swerve-route`` (the route that
served it, the one to pin to get it again), ``x-swerve-attempts``, and ``x-swerve-requested``
when the route requested was another. An upstream's own ``x-swerve-*`` headers never reach the
client.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator, Mapping
from functools import partial
from typing import Any

import httpx

from ._engine.config import FallbackConfig
from ._engine.failover import Failover
from ._engine.results import Attempt
from ._health.store import HealthStore
from ._transport.flavour import Request, Response
from ._transport.io_bound import CURRENT
from ._transport.reading import SPEC, Chunk, Receiving, given_up, respond, scrubbed, scrubbing
from ._transport.routing import Exchange, Routing
from ._transport.upstream import (
    ATTEMPTS_HEADER,
    REQUESTED_HEADER,
    ROUTE_HEADER,
    SWITCH_HEADER,
    ResponseTooLarge,
    Upstream,
    UpstreamStatusError,
    Wire,
)

__all__ = [
    "ATTEMPTS_HEADER",
    "REQUESTED_HEADER",
    "ROUTE_HEADER",
    "SWITCH_HEADER",
    "AsyncFailoverTransport",
    "FailoverTransport",
    "ResponseTooLarge",
    "Upstream",
    "UpstreamStatusError",
    "Wire",
]


def _bounded_by_client(request: Request) -> bool:
    """Whether every phase of ``request`` has a finite httpx timeout, so that a send left to
    run on its own ends by itself."""
    timeout = request.extensions.get("timeout")
    # Written out (no generator): every async attempt asks.
    return (
        isinstance(timeout, dict)
        and timeout.get("connect") is not None
        and timeout.get("read") is not None
        and timeout.get("write") is not None
        and timeout.get("pool") is not None
    )


class _Transport:
    """What both transports hold: their routes, and the inner transports they made.

    The two differ only in I/O (blocking calls or awaited ones); every decision is made once
    for both, without I/O: where a request goes and what each attempt sends in
    :mod:`swerve._transport.routing`, what becomes of an attempt's response (and what the
    client gets) in :mod:`swerve._transport.reading`.
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
        failover = failover if failover is not None else Failover(config, health)
        self._routing = Routing(upstreams, failover, max_body_bytes, config)
        self._inner: dict[Any, Any] = {}
        self._left: set[asyncio.Future[Any]] = set()  # async: sends left to end by themselves

    @property
    def failover(self) -> Failover:
        return self._routing.failover


class FailoverTransport(_Transport, httpx.BaseTransport):
    """A sync transport with failover; works under ``httpx.Client`` and ``httpx2.Client``.

    ``upstreams`` maps each route to its :class:`Upstream`. ``config`` (or ``failover``, a
    ready :class:`swerve.Failover`) sets the policy; with neither, ``$SWERVE_FALLBACK_CONFIG``.
    Swaps that would cross wires are refused here, when the transport is built.
    """

    def handle_request(self, request: Request) -> Any:
        ex = Exchange(self._routing, request, self._inner, sync=True)
        plan = ex.plan
        if plan is None:
            if ex.answer is not None:
                return ex.answer  # an error response naming what was wrong
            inner, request = ex.passed_through()
            return inner.handle_request(request)
        fo = self._routing.failover
        try:
            if plan.off:
                return self._once(ex, ex.direct())
            if not plan.stream:
                return fo.call(plan.route, partial(self._once, ex), pin=plan.pin).value
            stream = fo.stream(plan.route, lambda a: self._chunks(ex, a), SPEC, pin=plan.pin)
            head = next(stream)
        except Exception as exc:
            return given_up(ex, exc)
        return respond(ex, head, stream)

    def _once(self, ex: Exchange, attempt: Attempt) -> Response:
        # Written out (no context manager, no helper per step): every unary attempt runs it.
        try:
            rx = Receiving(ex, attempt, stream=False)
            token = CURRENT.set(rx.bound)  # every socket operation keeps to the attempt's time
            try:
                response = rx.inner.handle_request(rx.request)
                if rx.limits is not None:  # headers that came too late are a timeout too
                    try:
                        rx.limits.check_soonest(True)  # a unary attempt waits for no token
                    except BaseException:
                        response.close()
                        raise
                content = self._read(rx, response)
                return rx.complete(response, content)
            except Exception as exc:
                if (limit := rx.ran_out(exc)) is None:
                    raise
                raise limit from exc
            finally:
                CURRENT.reset(token)
        except Exception as exc:
            # Every configured secret out before the engine, the spans or the client see it.
            scrubbed(exc, ex.routing.secrets)
            raise

    def _chunks(self, ex: Exchange, attempt: Attempt) -> Iterator[Chunk]:
        with scrubbing(ex.routing.secrets):
            rx = Receiving(ex, attempt, stream=True)
            try:
                # Set only while swerve itself runs: never across a yield (the consumer's).
                token = CURRENT.set(rx.bound)
                try:
                    response = self._send(rx)
                finally:
                    CURRENT.reset(token)
                try:
                    yield rx.head(response)
                    if not rx.streams(response):
                        token = CURRENT.set(rx.bound)
                        try:
                            content = self._read(rx, response)
                        finally:
                            CURRENT.reset(token)
                        yield rx.last(response, content)
                        return
                    for data in rx.reads(response):
                        yield from rx.batches(data)
                    if last := rx.end():
                        yield last
                finally:
                    response.close()
            except Exception as exc:
                # httpx enforced one of swerve's limits (its timeouts): say which, as async does.
                if (limit := rx.ran_out(exc)) is None:
                    raise
                raise limit from exc

    def _send(self, rx: Receiving) -> Response:
        response: Response = rx.inner.handle_request(rx.request)
        try:
            rx.arrived()
        except BaseException:
            response.close()
            raise
        return response

    def _read(self, rx: Receiving, response: Response) -> bytes:
        try:
            if rx.at_once(response):
                return bytes(response.read())  # cached on the response, handed on with it
            for data in rx.reads(response):
                rx.add(data)
            return rx.content()
        finally:
            response.close()

    def close(self) -> None:
        self._routing.release()
        for transport in self._routing.transports(self._inner):
            transport.close()


class AsyncFailoverTransport(_Transport, httpx.AsyncBaseTransport):
    """The async :class:`FailoverTransport`, for ``httpx.AsyncClient`` / ``httpx2.AsyncClient``.

    Any async inner transport can serve the upstreams (set ``Upstream.transport``): swerve
    only needs ``handle_async_request``.

    swerve ends an attempt that runs out of time by cancelling it. On an inner transport of
    httpx's (httpcore 1.0) the send itself (pool, connect, request, response head) is never
    cancelled mid-way when its httpx timeouts bound it: httpcore's pool keeps a connection it
    had assigned to a cancelled request, never connected, for good, until every later request
    waits for a free one. Such a send runs on by itself to its own timeout, and its response
    is closed. httpx2's pools (httpcore2) and ``MockTransport`` are cancelled as they are.
    """

    async def handle_async_request(self, request: Request) -> Any:
        ex = Exchange(self._routing, request, self._inner, sync=False)
        plan = ex.plan
        if plan is None:
            if ex.answer is not None:
                return ex.answer  # an error response naming what was wrong
            inner, request = ex.passed_through()
            return await inner.handle_async_request(request)
        fo = self._routing.failover
        try:
            if plan.off:
                return await self._once(ex, ex.direct())
            if not plan.stream:
                return (await fo.acall(plan.route, partial(self._once, ex), pin=plan.pin)).value
            stream = fo.astream(plan.route, lambda a: self._chunks(ex, a), SPEC, pin=plan.pin)
            head = await anext(stream)
        except Exception as exc:
            return given_up(ex, exc)
        return respond(ex, head, stream)

    async def _once(self, ex: Exchange, attempt: Attempt) -> Response:
        # Written out as the sync one is: every unary attempt runs it.
        try:
            rx = Receiving(ex, attempt, stream=False)
            try:
                response = await self._send(rx)
                content = await self._read(rx, response)
                return rx.complete(response, content)
            except Exception as exc:
                if (limit := rx.ran_out(exc)) is None:
                    raise
                raise limit from exc
        except Exception as exc:
            # Every configured secret out before the engine, the spans or the client see it.
            scrubbed(exc, ex.routing.secrets)
            raise

    async def _chunks(self, ex: Exchange, attempt: Attempt) -> AsyncIterator[Chunk]:
        with scrubbing(ex.routing.secrets):
            rx = Receiving(ex, attempt, stream=True)
            try:
                response = await self._send(rx)
                try:
                    yield rx.head(response)
                    if not rx.streams(response):
                        yield rx.last(response, await self._read(rx, response))
                        return
                    async for data in rx.reads(response):
                        for batch in rx.batches(data):
                            yield batch
                    if last := rx.end():
                        yield last
                finally:
                    await response.aclose()
            except Exception as exc:
                if (limit := rx.ran_out(exc)) is None:
                    raise
                raise limit from exc

    async def _send(self, rx: Receiving) -> Response:
        # The send's socket operations keep to the attempt's time: a send left to end by
        # itself (the task copies this context) ends at the limit, never holding a connection.
        token = CURRENT.set(rx.bound)
        try:
            response = await self._unbroken(rx.inner, rx.request)
        finally:
            CURRENT.reset(token)
        try:
            rx.arrived()
        except BaseException:
            await response.aclose()
            raise
        return response

    async def _read(self, rx: Receiving, response: Response) -> bytes:
        try:
            if rx.at_once(response):
                return bytes(await response.aread())  # cached on the response, handed on with it
            async for data in rx.reads(response):
                rx.add(data)
            return rx.content()
        finally:
            await response.aclose()

    async def _unbroken(self, inner: Any, request: Request) -> Response:
        """``inner.handle_async_request(request)``, never cancelled mid-way when it is bounded
        by its own timeouts and cancelling it could strand a pool connection (see the class
        docstring)."""
        response: Response
        if id(inner) in self._routing.cut_safe or not _bounded_by_client(request):
            # Safe to cancel, or nothing else would end it: the engine's cut ends it.
            response = await inner.handle_async_request(request)
            return response
        task = asyncio.ensure_future(inner.handle_async_request(request))
        try:
            response = await asyncio.shield(task)
            return response
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
        self._routing.release()
        left = list(self._left)
        for task in left:
            task.cancel()  # the pools close next: nothing can be orphaned in them any more
        if left:
            await asyncio.gather(*left, return_exceptions=True)
        for transport in self._routing.transports(self._inner):
            await transport.aclose()
