"""One client request through a failover transport, without I/O: every decision both make.

The sync and async transports only move bytes (send, read, close: blocking or awaited). What
to send, which limits a read is held to, how a body is decoded, what the engine gets from it
and what the client gets in the end is decided here, once for both.
"""

from __future__ import annotations

import time
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx

from .._engine.results import Attempt
from .._engine.routes import Route
from .._engine.timing import CallTime
from .._failures import AttemptTimeout
from .attempt import _Head, _is_stream, _ran_out, _Reader, _returned, _served_by, _Until
from .client_side import _byte_stream, _given_up
from .flavour import Flavour, flavour_of
from .io_bound import Bound, held
from .routing import _SWERVE_PREFIX, _Core, _Plan
from .sse import _Event
from .upstream import ResponseTooLarge

_PIECE = 64 * 1024  # the most one step of decompression may produce
_POOL_GRACE_S = 1.0  # see _graced
# httpx's timeout errors, by the phase of its timeout config each one enforces.
_PHASES = {
    "ConnectTimeout": "connect",
    "ReadTimeout": "read",
    "WriteTimeout": "write",
    "PoolTimeout": "pool",
}
_ENDS = ("deadline", "attempt")  # the limits of an attempt's own end (attempt.timeout)


class _Exchange:
    """One client request: its plan, and what becomes of it at either end.

    ``plan`` is what to do with a request swerve routes; ``answer`` an error response to hand
    back as it is (the request names a route swerve cannot serve); neither, a request that is
    not swerve's, passed through.
    """

    __slots__ = (
        "answer",
        "cache",
        "core",
        "flavour",
        "plan",
        "request",
        "started",
        "sync",
        "tried",
    )

    def __init__(self, core: _Core, request: Any, cache: dict[Any, Any], sync: bool) -> None:
        self.core = core
        self.request = request
        self.flavour = flavour_of(request)  # httpx or httpx2: every attempt's, and the answer's
        self.cache = cache  # the transport's own inner transports, by flavour and route
        self.sync = sync
        planned = core.plan(request)
        self.plan: _Plan | None = planned if isinstance(planned, _Plan) else None
        self.answer: Any = planned if self.plan is None else None
        self.started = time.monotonic()
        self.tried: Attempt | None = None  # the last attempt made

    def passed_through(self) -> tuple[Any, Any]:
        """The inner transport and the request to send it, for a request that is not swerve's:
        untouched but for the headers that are swerve's (they never leave)."""
        headers = self.request.headers
        for name in [k for k in headers if k.lower().startswith(_SWERVE_PREFIX)]:
            del headers[name]
        return self.core.inner(self.request, None, self.cache, self.sync), self.request

    def direct(self) -> Attempt:
        """The one attempt of a request with failover switched off (``plan.off``)."""
        assert self.plan is not None
        route = Route.parse(self.plan.route)
        return Attempt(route, route)

    @contextmanager
    def scrubbing(self) -> Iterator[None]:
        """An attempt's error, with every configured secret taken out before the engine, the
        spans or the client see it (the same exception, in place)."""
        try:
            yield
        except Exception as exc:
            self.core.scrubbed(exc)
            raise

    def given_up(self, error: Exception) -> Any:
        """The response (or, raised, the error) the client gets when swerve gave up: a response
        names the route it came from and the attempts made, as a served one does."""
        served = _served_by(self.tried) if self.tried is not None else []
        return _given_up(self.request, error, self.core, self.started, served)

    def respond(self, head: object, stream: Any) -> Any:
        """The response to a stream request, once its first content is in: its status line and
        headers now, its body from ``stream``."""
        assert isinstance(head, _Head)
        module = self.flavour
        body = _byte_stream(module, self.sync, stream, self.core, self.started)
        return module.Response(head.status, headers=head.headers, stream=body)


def _graced(request: Any, limit: float) -> None:
    """An async send on a clamped transport waits for a pool slot a little past its limit.

    The engine stops waiting for it at the limit anyway, and every socket operation it would
    make after that fails at once; but a pool timeout that fires just as a clamped neighbour
    frees its connection (both at the same limit, in a burst) races httpcore 1.0 into keeping
    a connection assigned to the timed-out request, never connected, for good
    (encode/httpcore#1093). Given the slot instead, the send fails its connect and the
    connection is dropped. A sync send is not cut by the engine: its pool wait stays within
    the limit.
    """
    timeout = request.extensions.get("timeout")
    if isinstance(timeout, dict) and timeout.get("pool") == limit:
        timeout["pool"] = limit + _POOL_GRACE_S


class _Receiving:
    """One attempt of an exchange: the request it sends, and what becomes of its response as
    the transport reads it (time limits, the size limit, decoding, SSE events)."""

    __slots__ = (
        "_body",
        "_inflater",
        "_reader",
        "asked",
        "attempt",
        "bound",
        "clamped",
        "core",
        "flavour",
        "inner",
        "limits",
        "request",
        "route",
        "stream",
        "sync",
        "whole",
    )

    def __init__(self, exchange: _Exchange, attempt: Attempt, stream: bool) -> None:
        core = self.core = exchange.core
        assert exchange.plan is not None
        exchange.tried = attempt
        self.attempt = attempt
        self.route = attempt.route._name
        self.sync = exchange.sync
        self.stream = stream
        self.asked = exchange.request  # as the client sent it: its own timeouts
        self.flavour: Flavour = exchange.flavour
        # The call's limits, on its clock (None for an attempt made outside a call): ``limits``
        # is what a sync attempt checks after every read (async, the engine cuts); ``bound``
        # what the attempt's socket operations are clamped to (both modes).
        time = attempt.time
        if time is None or (attempt.timeout is None and attempt.read_timeout is None):
            self.limits: CallTime | None = None
            self.bound: Bound | None = None
        elif self.sync:
            self.limits = self.bound = time
        else:
            self.limits, self.bound = None, _Until(time)
        self.request = core.build(exchange.request, exchange.plan, attempt, self.flavour)
        upstream = core.upstreams[self.route]
        self.inner = (
            upstream.transport
            if upstream.transport is not None
            else core.inner(exchange.request, self.route, exchange.cache, exchange.sync)
        )
        self.clamped = id(self.inner) in core.clamped
        if self.clamped and not self.sync and attempt.timeout is not None:
            _graced(self.request, attempt.timeout)
        self.whole = False  # the response itself holds the body, read at once
        self._inflater: Any = None
        self._reader: _Reader | None = None
        self._body = bytearray()

    def ran_out(self, error: BaseException) -> AttemptTimeout | None:
        """For an attempt that ``error`` ended: the limit of swerve's that an httpx timeout
        enforced (swerve hands its limits to httpx as timeouts, and clamps its sockets to
        them), so the client learns which limit ran out; None for any other error."""
        time = self.attempt.time
        if (
            self.bound is None
            or time is None
            or not isinstance(error, self.flavour.TimeoutException)
        ):
            return None
        # A unary attempt never waits for its first token.
        committed = not self.stream or (self._reader is not None and self._reader.committed)
        return _ran_out(time, committed) or self._handed(error, time, committed)

    def _handed(
        self, error: BaseException, time: CallTime, committed: bool
    ) -> AttemptTimeout | None:
        """The limit httpx was handed as the timeout of the phase that ran out, when the call's
        clock did not see it pass (an injected clock, which real sockets do not keep to);
        None when that phase's timeout was the client's own (as short as swerve's, or shorter)."""
        phase = _PHASES.get(type(error).__name__)
        given = self.asked.extensions.get("timeout")
        cut = self.request.extensions.get("timeout")
        if phase is None or not isinstance(cut, dict) or cut.get(phase) is None:
            return None
        own = given.get(phase) if isinstance(given, dict) else None
        if own is not None and own <= cut[phase]:
            return None
        # A read waits for the soonest limit; every other phase for the attempt's own end.
        ends = [e for e in time.ends(committed) if phase == "read" or e[1] in _ENDS]
        end, name, since = min(ends)
        return AttemptTimeout(name, max(end - since, 0.0))

    def arrived(self) -> None:
        """The response head is in: headers that came too late are a timeout too."""
        if self.limits is not None:
            self.limits.check_soonest(self.limits.committed)

    def at_once(self, response: Any) -> bool:
        """Whether the body may be read whole in one read: its declared, unencoded length is
        within the size limit, and no time limit wants checking between reads (none, or the
        inner transport's sockets keep to them themselves)."""
        # A body already in memory (a canned response: httpx reads one built with content=)
        # takes no time to read, so no time limit wants checking between its pieces.
        if (
            self.limits is None
            or self.clamped
            or isinstance(response.stream, self.flavour.ByteStream)
        ):
            # core.fits, written out: every healthy unary attempt asks.
            headers = response.headers
            length = headers.get("content-length")
            self.whole = (
                length is not None
                and length.isdigit()
                and int(length) <= self.core.limit
                and "content-encoding" not in headers
            )
        return self.whole

    def reads(self, response: Any) -> Any:
        """The body's reads, (async) iterable: raw where swerve inflates a gzip body itself, a
        bounded piece at a time (httpx would inflate a whole network read at once, and a small
        read of a gzip bomb is gigabytes)."""
        encoding = str(response.headers.get("content-encoding", "")).strip().lower()
        raw = encoding in ("gzip", "x-gzip")
        if raw:
            self._inflater = zlib.decompressobj(32 + zlib.MAX_WBITS)  # gzip or zlib header
        if not self.sync:  # async reads are cut by the engine
            return response.aiter_raw() if raw else response.aiter_bytes()
        reads = response.iter_raw() if raw else response.iter_bytes()
        return reads if self.bound is None else held(reads, self.bound)

    def add(self, data: bytes) -> None:
        """One read of a whole body, kept within the time and size limits."""
        for piece in self._decoded(data):
            if self.limits is not None:
                self.limits.check_soonest(True)
            self._body += piece
            if len(self._body) > self.core.limit:
                raise ResponseTooLarge(f"the upstream body exceeded {self.core.limit} bytes")

    def content(self) -> bytes:
        return bytes(self._body)

    def head(self, response: Any) -> _Head:
        """The status line and headers the client gets if this attempt's stream is served."""
        headers = _returned(response.headers)
        headers += _served_by(self.attempt)
        return _Head(response.status_code, headers)

    def streams(self, response: Any) -> bool:
        """Whether the body is an SSE stream, to read event by event (else it is read whole)."""
        if not _is_stream(response):
            return False
        self._reader = self.core.reader(self.route, response)
        return True

    def last(self, response: Any, content: bytes) -> _Event:
        """A stream request answered with a whole body: one final chunk, checked as one."""
        return self.core.whole(self.route, response, content, self.attempt)

    def events(self, data: bytes) -> Iterator[_Event]:
        """The SSE events one read of the stream completes, each within the time limits."""
        reader, limits = self._reader, self.limits
        assert reader is not None
        for piece in self._decoded(data):
            if limits is not None:
                limits.check_soonest(reader.committed)
            for event in reader.feed(piece):
                if limits is not None:
                    limits.received()  # the stall limit counts from this event
                    limits.committed = reader.committed
                yield self._reported(event)

    def end(self) -> Iterator[_Event]:
        """The event the stream's last bytes make, if they make one."""
        assert self._reader is not None
        return map(self._reported, self._reader.flush())

    def _reported(self, event: _Event) -> _Event:
        """``event``, its token usage and finish reasons (if it has any) told the attempt."""
        if event.usage is not None:
            self.attempt.report_usage(*event.usage)
        return event

    def _decoded(self, data: bytes) -> Iterator[bytes]:
        inflater = self._inflater
        if inflater is None:
            yield data
            return
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
