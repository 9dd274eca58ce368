"""What a client gets from the transports: errors in its flavour, the stream as its body."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx

from .._engine.results import MidStreamError
from .._engine.streams import AsyncFailoverStream, FailoverStream
from .._failures import (
    AttemptTimeout,
    CircuitOpenError,
    IncompleteStreamError,
    InStreamError,
    MalformedStreamError,
)
from .attempt import _Chunk, _ErrorInBody, _Malformed, _redacted, _response, _returned
from .flavour import Flavour, flavour_of
from .routing import _Core
from .sse import _Event
from .upstream import ResponseTooLarge, UpstreamStatusError


def _given_up(
    request: Any,
    error: Exception,
    core: _Core,
    started: float,
    served: list[tuple[bytes, bytes]],
) -> Any:
    """After swerve gave up: what the client would have received without it, less the keys
    swerve added, plus swerve's ``served`` headers (the route it came from, the attempts);
    or the error its own stack would have raised."""
    secrets = core.secrets
    if isinstance(error, UpstreamStatusError):
        headers, content = _redacted(secrets, _returned(error.response.headers), error.content)
        return _response(request, error.status_code, headers + served, content)
    if isinstance(error, _ErrorInBody | _Malformed):
        status, headers, content = error.replay
        headers, content = _redacted(secrets, headers, content)
        return flavour_of(request).Response(status, headers=headers + served, content=content)
    module = flavour_of(request)
    if isinstance(error, IncompleteStreamError):
        raise module.RemoteProtocolError(
            f"swerve: the upstream stream ended without its finish event ({error})", request=request
        ) from error
    client_error = _client_error(core.scrubbed(error), module, request, started)
    if client_error is error:
        raise error
    raise client_error from error


def _client_error(
    error: BaseException, module: Flavour, request: Any, started: float
) -> BaseException:
    """What the client's own stack raises for ``error``: swerve's time limits as its flavour's
    ``ReadTimeout``, an open breaker as its ``ConnectError`` (no request was sent), an
    over-large body as its ``DecodingError``, httpx errors re-made in its flavour. So
    ``except httpx.HTTPError`` (or ``httpx2``'s) and the SDKs' ``APITimeoutError`` /
    ``APIConnectionError`` handling catch them. swerve's own words stay in the message and the
    notes; the original is the new error's ``__cause__``."""
    out: BaseException
    if isinstance(error, AttemptTimeout):
        # The transport's own clock: the engine's figure for a deadline is the wait it granted.
        elapsed = max(time.monotonic() - started, 0.0)
        out = module.ReadTimeout(
            f"swerve: the {error.limit.replace('_', ' ')} time limit ran out "
            f"({elapsed:.3g}s into the request)",
            request=request,
        )
    elif isinstance(error, CircuitOpenError):
        out = module.ConnectError(f"swerve: {error}; no request was sent", request=request)
    elif isinstance(error, ResponseTooLarge):
        out = _too_large_class(module)(str(error), request=request)
    else:
        return _flavoured(error, module)
    for note in getattr(error, "__notes__", ()):
        out.add_note(note)
    return out


_TOO_LARGE: dict[str, type] = {}


def _too_large_class(module: Flavour) -> type:
    """:class:`ResponseTooLarge` that is also ``module.DecodingError``."""
    cls = _TOO_LARGE.get(module.__name__)
    if cls is None:
        cls = _TOO_LARGE[module.__name__] = type(
            "ResponseTooLarge", (ResponseTooLarge, module.DecodingError), {}
        )
        cls.__module__ = ResponseTooLarge.__module__  # swerve.httpx, where it is documented
    return cls


def _ending(error: MidStreamError, module: Flavour, core: _Core, started: float) -> bytes:
    """When a stream fails after its output began: the last bytes the client gets, or (raised)
    the error it gets, in its flavour.

    An error event: passed on, less swerve's keys, and the stream ends (the SDK raises its own
    error from it, as it would). A truncated or undecodable stream is never a silent success:
    a protocol error. A transport error, or one of swerve's time limits: as its stack raises it.
    """
    cause = error.__cause__ or error
    route = str(error.route)
    if isinstance(cause, _ErrorInBody):
        return _redacted(core.secrets, [], cause.raw)[1]
    if isinstance(cause, InStreamError):
        return b""
    surfaced: BaseException = core.scrubbed(cause)
    if isinstance(cause, IncompleteStreamError):
        surfaced = httpx.RemoteProtocolError(
            f"swerve: the stream from {route} ended without its finish event"
        )
    elif isinstance(cause, MalformedStreamError):
        surfaced = httpx.RemoteProtocolError(
            f"swerve: the stream from {route} sent an event that is not JSON"
        )
    raise _client_error(surfaced, module, None, started) from error


_STREAM_CLASSES: dict[tuple[str, bool], type] = {}


def _byte_stream(module: Flavour, sync: bool, source: Any, core: _Core, started: float) -> Any:
    """A response body of the client's flavour (httpx or httpx2) fed by the failover stream."""
    key = (module.__name__, sync)
    cls = _STREAM_CLASSES.get(key)
    if cls is None:
        cls = _STREAM_CLASSES[key] = (
            type("SwerveStream", (_SyncBody, module.SyncByteStream), {})
            if sync
            else type("SwerveAsyncStream", (_AsyncBody, module.AsyncByteStream), {})
        )
    return cls(source, core, module, started)


class _Body:
    """A response body fed by a failover stream; how it ends after its output began."""

    def __init__(self, source: Any, core: _Core, module: Flavour, started: float) -> None:
        self.source = source
        self.core = core
        self.module = module
        self.started = started

    def _ending(self, error: MidStreamError) -> bytes:
        return _ending(error, self.module, self.core, self.started)


class _SyncBody(_Body):
    source: FailoverStream[_Chunk]

    def __iter__(self) -> Iterator[bytes]:
        try:
            for chunk in self.source:
                if isinstance(chunk, _Event):
                    yield chunk.raw
        except MidStreamError as exc:
            yield self._ending(exc)

    def close(self) -> None:
        self.source.close()


class _AsyncBody(_Body):
    source: AsyncFailoverStream[_Chunk]

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self.source:
                if isinstance(chunk, _Event):
                    yield chunk.raw
        except MidStreamError as exc:
            yield self._ending(exc)

    async def aclose(self) -> None:
        await self.source.aclose()


def _flavoured(error: BaseException, module: Flavour) -> BaseException:
    """httpx errors re-made in the client's flavour, so an httpx2 client sees httpx2 errors."""
    if isinstance(error, httpx.HTTPError) and module.__name__ != "httpx":
        cls = getattr(module, type(error).__name__, None)
        if isinstance(cls, type) and issubclass(cls, Exception):
            return cls(str(error))
    return error
