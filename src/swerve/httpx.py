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

import importlib
import json
import re
from collections.abc import AsyncIterator, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import httpx

from . import payloads
from ._config import FallbackConfig
from ._engine import (
    AsyncFailoverStream,
    Attempt,
    Failover,
    FailoverStream,
    MidStreamError,
    PartKind,
    StreamSpec,
)
from ._redact import REDACTED
from ._routes import Route
from .failures import IncompleteStreamError, InStreamError, MalformedStreamError
from .health import HealthStore
from .policy import next_route

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

Wire = Literal["openai", "anthropic"]
ROUTE_HEADER = "x-swerve-route"
"""Pin one request to a route: no swaps, no walking past a cooling route."""
SWITCH_HEADER = "x-swerve-failover"
"""``off`` sends one request to its route once, without swerve's retries or swaps."""

_ENDPOINTS: dict[str, str] = {"openai": "/chat/completions", "anthropic": "/v1/messages"}
_AUTH_HEADERS = frozenset({"authorization", "x-api-key", "api-key"})
_NEVER_FORWARD = frozenset({"host", "content-length", ROUTE_HEADER, SWITCH_HEADER})
# The body is decoded before the client sees it, so these would describe it wrongly.
_NOT_RETURNED = frozenset({"content-encoding", "content-length", "transfer-encoding"})
_ERROR_BODY_LIMIT = 64 * 1024
# Shorter "keys" (a placeholder such as "test" for a local server) are no secret, and replacing
# them everywhere would mangle the body they are scrubbed from.
_MIN_SECRET = 8
_REDACTED_BYTES = REDACTED.encode()


@dataclass(frozen=True, slots=True)
class Upstream:
    """Where one route is served.

    ``base_url`` follows the SDK convention of its wire: for ``openai`` the URL that
    ``/chat/completions`` is appended to (``https://openrouter.ai/api/v1``), for ``anthropic``
    the one ``/v1/messages`` is appended to (``https://api.anthropic.com``). ``api_key``, when
    set, replaces the client's credentials on requests to this upstream (never logged, never
    in a span). ``model`` is the model's name on this upstream (default: the route's model).
    ``transport`` is the inner transport for this upstream (default: httpx's own, of the
    client's flavour, httpx or httpx2).
    """

    base_url: str
    wire: Wire = "openai"
    api_key: str | None = field(default=None, repr=False)
    model: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict, repr=False)
    transport: Any = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.wire not in _ENDPOINTS:
            raise ValueError(f"Upstream.wire must be 'openai' or 'anthropic', got {self.wire!r}")
        if not self.base_url.startswith(("http://", "https://")):
            raise ValueError(f"Upstream.base_url must be an http(s) URL, got {self.base_url!r}")
        object.__setattr__(self, "base_url", self.base_url.rstrip("/"))

    @property
    def endpoint(self) -> str:
        return self.base_url + _ENDPOINTS[self.wire]


class UpstreamStatusError(Exception):
    """An upstream answered with an error status. Carries the (fully read) response.

    Raised between attempts only; when swerve gives up, the client receives the upstream's
    error response itself, as it would have without swerve.
    """

    def __init__(self, route: str, response: Any, body: bytes) -> None:
        self.route = route
        self.response = response
        self.status_code: int = response.status_code
        self.content = body
        try:
            self.body: object = json.loads(body) if body else None
        except ValueError:
            self.body = None
        super().__init__(f"{route} answered HTTP {self.status_code}")


class ResponseTooLarge(Exception):
    """An upstream body or SSE event exceeded the transport's size limit."""


@dataclass(slots=True)
class _Head:
    """The status line and headers of the attempt whose body follows."""

    status: int
    headers: list[tuple[str, str]]


@dataclass(slots=True)
class _Event:
    """One server-sent event: its raw bytes (passed on untouched) and what it means."""

    raw: bytes
    part: PartKind | None = None
    finish: bool = False
    error: Mapping[str, object] | None = None
    malformed: bool = False


_Chunk = _Head | _Event


def _part_of(chunk: _Chunk) -> PartKind | None:
    return chunk.part if isinstance(chunk, _Event) else None


def _finish_of(chunk: _Chunk) -> bool:
    return isinstance(chunk, _Event) and chunk.finish


_SPEC: StreamSpec[_Chunk] = StreamSpec(part=_part_of, is_finish=_finish_of)


_Replay = tuple[int, list[tuple[str, str]], bytes]
"""Status, headers and body: a response as the upstream sent it, for handing on unchanged."""
_Secrets = Mapping[str, tuple[str, ...]]
"""Per route, the credentials swerve adds to its requests (see :func:`_secrets`)."""


class _ErrorInBody(InStreamError):
    """An error inside a 200 body or stream, with what is needed to hand it on unchanged:
    ``replay`` (status, headers, the body up to the error) if swerve gives up before output
    began, ``raw`` (the error event) if it comes after."""

    def __init__(
        self, payload: Mapping[str, object], route: str, replay: _Replay, raw: bytes = b""
    ) -> None:
        super().__init__(payload, route=route)
        self.replay = replay
        self.raw = raw


class _Malformed(MalformedStreamError):
    """A 200 body, or an SSE event's data, that is not JSON; ``replay`` as for
    :class:`_ErrorInBody`, so a client swerve gives up for fails as it would without it."""

    def __init__(self, route: str, replay: _Replay) -> None:
        super().__init__(f"{route} sent data that is not JSON")
        self.route = route
        self.replay = replay


class _Reader:
    """An attempt's SSE events, kept so that, if swerve gives up on the attempt, the client
    gets the stream exactly as the upstream sent it (up to and including its error event)."""

    def __init__(self, route: str, response: Any, parser: _SSEParser) -> None:
        self.route = route
        self.parser = parser
        self.status = response.status_code
        self.headers = _returned(response.headers)
        self.raw: list[bytes] = []
        self.committed = False

    def feed(self, data: bytes) -> Iterator[_Event]:
        # One at a time: events before an error event in the same read still go out first.
        for event in self.parser.feed(data):
            yield self._checked(event)

    def flush(self) -> Iterator[_Event]:
        for event in self.parser.flush():
            yield self._checked(event)

    def _checked(self, event: _Event) -> _Event:
        if not self.committed:  # after content nothing is replayed: keep no copy of it
            self.raw.append(event.raw)
            if event.part is not None:
                self.committed = True
                self.raw.clear()
        if event.error is None and not event.malformed:
            return event
        replay = (self.status, self.headers, b"".join(self.raw))
        if event.error is None:
            raise _Malformed(self.route, replay)
        raise _ErrorInBody(event.error, self.route, replay, event.raw)


_LINE_END = re.compile(rb"\r\n|\r|\n")


class _SSEParser:
    """Splits a byte stream into events at blank lines, bounded in size, in one pass.

    Lines end in CRLF, LF or a lone CR, as the SSE format allows. Each read is scanned once,
    so a stream costs time in proportion to its length, however it is cut into reads.
    """

    def __init__(self, wire: Wire, limit: int) -> None:
        self.wire = wire
        self.limit = limit
        self._buf = bytearray()  # bytes not yet split into lines
        self._event = bytearray()  # the lines of the event being read, as received

    def feed(self, data: bytes) -> list[_Event]:
        buf = self._buf
        buf += data
        events = []
        start = 0
        for match in _LINE_END.finditer(buf):
            end = match.end()
            if match.group() == b"\r" and end == len(buf):
                break  # a CR at the end of a read may be the first half of a CRLF
            line = buf[start : match.start()]
            self._event += buf[start:end]
            start = end
            if not line and self._event.strip():  # a blank line dispatches the event
                events.append(_interpret(self.wire, bytes(self._event)))
                self._event.clear()
            elif not line:
                self._event.clear()  # blank lines between events: nothing to dispatch
        del buf[:start]
        if len(self._event) + len(buf) > self.limit:
            raise ResponseTooLarge(f"an SSE event exceeded {self.limit} bytes")
        return events

    def flush(self) -> list[_Event]:
        raw = bytes(self._event + self._buf)
        self._event.clear()
        self._buf.clear()
        return [_interpret(self.wire, raw)] if raw.strip() else []


def _interpret(wire: Wire, raw: bytes) -> _Event:
    """What an event means on its wire: content (of which kind), the finish, an error, or
    data that is not JSON (the upstream broke the protocol: the attempt fails)."""
    name = None
    data_lines = []
    for line in raw.decode("utf-8", "replace").splitlines():
        if line.startswith("event:"):
            name = line[6:].strip()
        elif line.startswith("data:"):
            data_lines.append(line[5:].lstrip())
    data = "\n".join(data_lines)
    event = _Event(raw)
    if wire == "openai" and data.strip() == "[DONE]":
        event.finish = True
        return event
    try:
        payload = json.loads(data) if data else None
    except ValueError:
        event.malformed = True
        return event
    if not isinstance(payload, dict):
        return event
    if name == "error" or "error" in payload:
        event.error = payload
        return event
    if wire == "anthropic":
        kind = payload.get("type")
        # message_delta carries the stop reason: the answer is complete, message_stop or not.
        if kind == "message_stop" or (
            kind == "message_delta" and (payload.get("delta") or {}).get("stop_reason")
        ):
            event.finish = True
        elif kind == "content_block_delta":
            delta = payload.get("delta") or {}
            dtype = delta.get("type")
            if dtype == "text_delta" and delta.get("text"):
                event.part = "text"
            elif dtype in ("thinking_delta", "signature_delta"):
                event.part = "reasoning"
            elif dtype == "input_json_delta":
                event.part = "tool_call"
        elif kind == "content_block_start":
            block = payload.get("content_block") or {}
            if block.get("type") == "tool_use":
                event.part = "tool_call"
        return event
    for choice in payload.get("choices") or ():
        # A finish_reason ends the answer; several compatible servers never send [DONE].
        # (The usage chunk that may follow still reaches the client: the stream goes on.)
        if choice.get("finish_reason") not in (None, "error"):
            event.finish = True
        delta = choice.get("delta") or {}
        if delta.get("content"):
            event.part = "text"
        elif delta.get("tool_calls"):
            event.part = "tool_call"
        elif (
            delta.get("reasoning")
            or delta.get("reasoning_content")
            or delta.get("reasoning_details")
        ):
            event.part = "reasoning"
    return event


@dataclass(slots=True)
class _Plan:
    """What to do with one client request."""

    route: str
    body: dict[str, Any]
    stream: bool
    pin: bool
    off: bool


class _Core:
    """Everything both transports share: routing, rewriting, reading, error mapping."""

    def __init__(
        self,
        upstreams: Mapping[str, Upstream],
        failover: Failover,
        max_body_bytes: int,
        config: FallbackConfig | None,
    ) -> None:
        self.upstreams: dict[str, Upstream] = {}
        for key, upstream in upstreams.items():
            try:
                Route.parse(key)
            except ValueError as exc:
                raise ValueError(f"upstreams: {exc}") from None
            if not isinstance(upstream, Upstream):
                raise TypeError(f"upstreams[{key!r}] must be an Upstream")
            self.upstreams[key] = upstream
        self.secrets = {key: _secrets(upstream) for key, upstream in self.upstreams.items()}
        self.failover = failover
        self.limit = max_body_bytes
        self._urls: dict[tuple[str, str], Any] = {}
        self._check(config if config is not None else failover.config)

    def _check(self, config: FallbackConfig | None) -> None:
        """Refuse, now, every swap the config could make that this transport cannot serve."""
        if config is None:
            return
        kinds = [None, *config.fallbacks_by_failure]  # the plain map, then each kind's map
        for kind, requested in ((k, r) for k in kinds for r in self.upstreams):
            seen, current = {requested}, requested
            for _ in range(config.max_swaps):
                target = next_route(config, requested, current, kind)
                if target is None or target in seen:
                    break
                source = self.upstreams[current]
                if target not in self.upstreams:
                    raise ValueError(
                        f"route {current} falls back to {target}, which has no Upstream"
                    )
                if self.upstreams[target].wire != source.wire:
                    raise ValueError(
                        f"route {current} ({source.wire} wire) falls back to {target} "
                        f"({self.upstreams[target].wire} wire): swerve does not translate "
                        "between wires; map routes of the same wire to each other"
                    )
                seen.add(target)
                current = target

    # -- routing ------------------------------------------------------------------------------
    def plan(self, request: Any) -> _Plan | Any | None:
        """A plan, None to pass the request through, or an error response to return as is."""
        if request.method != "POST":
            return None
        options = request.extensions.get("swerve") or {}
        pinned = request.headers.get(ROUTE_HEADER) or options.get("route")
        off = (request.headers.get(SWITCH_HEADER, "").lower() in ("off", "0", "false")) or (
            options.get("failover") is False
        )
        try:
            body = json.loads(request.content)
        except ValueError as exc:
            if not pinned and not self._endpoint_match(request):
                return None
            return _error_response(
                request,
                400,
                f"swerve: the request body is not JSON ({exc}); routes are named by its 'model'",
            )
        if not isinstance(body, dict):
            return None
        model = body.get("model")
        if pinned:
            if pinned not in self.upstreams:
                return _error_response(
                    request, 400, f"swerve: pinned route {pinned!r} has no Upstream"
                )
            route = pinned
        elif isinstance(model, str) and model in self.upstreams:
            route = model
        else:
            url = str(request.url)
            route = next(
                (
                    name
                    for name, up in self.upstreams.items()
                    if url.startswith(up.base_url)
                    and model == (up.model or Route.parse(name).model)
                ),
                "",
            )
            if not route:
                return None
        return _Plan(route, body, body.get("stream") is True, bool(pinned), off)

    def _endpoint_match(self, request: Any) -> bool:
        path = request.url.path
        return bool(path.endswith(tuple(_ENDPOINTS.values())))

    # -- one attempt --------------------------------------------------------------------------
    def build(self, request: Any, plan: _Plan, attempt: Attempt) -> Any:
        """The request for ``attempt``: the route's URL, credentials and model; fixed body."""
        route = str(attempt.route)
        upstream = self.upstreams[route]
        body = dict(plan.body)
        body["model"] = upstream.model or attempt.route.model
        target = body["model"]
        if route != plan.route:
            body, downgrade = payloads.adapt_for_target(body, upstream.wire, target_model=target)
            if downgrade is not None:
                self.failover.telemetry.downgrade(route, downgrade.removed)
        body, fix = payloads.fix_empty_text_cache(body, upstream.wire)
        if fix is not None:
            self.failover.telemetry.cache_fix(route, fix.blocks, fix.moved_to)
        drop = _NEVER_FORWARD | (_AUTH_HEADERS if upstream.api_key else frozenset())
        headers = [(k, v) for k, v in request.headers.multi_items() if k.lower() not in drop]
        if upstream.api_key:
            if upstream.wire == "anthropic":
                headers.append(("x-api-key", upstream.api_key))
            else:
                headers.append(("authorization", f"Bearer {upstream.api_key}"))
        headers.extend(upstream.headers.items())
        extensions = {k: v for k, v in request.extensions.items() if k != "swerve"}
        if attempt.timeout is not None or attempt.read_timeout is not None:
            extensions["timeout"] = _timeouts(extensions.get("timeout"), attempt)
        module = _module_of(request)
        url = self._urls.get((module.__name__, route))
        if url is None:  # parsing a URL costs more than the rest of the rewrite: once a route
            url = self._urls[(module.__name__, route)] = module.URL(upstream.endpoint)
        return module.Request(
            request.method,
            url,
            headers=headers,
            content=json.dumps(body).encode(),
            extensions=extensions,
        )

    def complete(self, route: str, response: Any, body: bytes) -> Any:
        """A whole (non-stream) body: an error status, an error inside a 200, or a JSON body
        that does not decode, is a failure."""
        if response.status_code >= 400:
            raise UpstreamStatusError(route, response, body[:_ERROR_BODY_LIMIT])
        json_body = "json" in response.headers.get("content-type", "")
        if json_body or b'"error"' in body:
            try:
                data = json.loads(body)
            except ValueError:
                if json_body:
                    replay = (response.status_code, _returned(response.headers), body)
                    raise _Malformed(route, replay) from None
                data = None
            if isinstance(data, dict) and data.get("error") and not data.get("choices"):
                replay = (response.status_code, _returned(response.headers), body)
                raise _ErrorInBody(data, route, replay)
        if self.fits(response):
            return response  # already read and within the limit: hand it on as it is
        return _response(response, response.status_code, _returned(response.headers), body)

    def fits(self, response: Any) -> bool:
        """A body whose declared, unencoded length is within the limit can be read at once."""
        length = response.headers.get("content-length")
        return (
            length is not None
            and length.isdigit()
            and int(length) <= self.limit
            and "content-encoding" not in response.headers
        )

    def whole(self, route: str, response: Any, body: bytes) -> _Event:
        """A stream request answered with a whole body (an error, or a server ignoring
        ``stream``): one final chunk, checked like a non-stream body."""
        self.complete(route, response, body)
        return _Event(body, part="other", finish=True)

    def reader(self, route: str, response: Any) -> _Reader:
        return _Reader(route, response, _SSEParser(self.upstreams[route].wire, self.limit))

    def inner(self, request: Any, route: str | None, cache: dict[str, Any], sync: bool) -> Any:
        upstream = self.upstreams.get(route) if route else None
        if upstream is not None and upstream.transport is not None:
            return upstream.transport
        name = type(request).__module__.partition(".")[0]
        transport = cache.get(name)
        if transport is None:
            module = importlib.import_module(name)
            transport = cache[name] = (
                module.HTTPTransport() if sync else module.AsyncHTTPTransport()
            )
        return transport


_MODULES: dict[type, Any] = {}


def _module_of(obj: Any) -> Any:
    """httpx or httpx2: whichever the client's request (or response) comes from."""
    cls = type(obj)
    module = _MODULES.get(cls)
    if module is None:
        module = _MODULES[cls] = importlib.import_module(cls.__module__.partition(".")[0])
    return module


def _timeouts(current: Any, attempt: Attempt) -> dict[str, float | None]:
    base = dict(current) if isinstance(current, dict) else {}

    def smaller(a: float | None, b: float | None) -> float | None:
        return b if a is None else a if b is None else min(a, b)

    total = attempt.timeout
    read = smaller(attempt.read_timeout, total)
    return {
        "connect": smaller(base.get("connect"), total),
        "read": smaller(base.get("read"), read),
        "write": smaller(base.get("write"), total),
        "pool": smaller(base.get("pool"), total),
    }


def _returned(headers: Any) -> list[tuple[str, str]]:
    return [(k, v) for k, v in headers.multi_items() if k.lower() not in _NOT_RETURNED]


def _response(like: Any, status: int, headers: list[tuple[str, str]], content: bytes) -> Any:
    module = _module_of(like)
    return module.Response(status, headers=headers, content=content)


def _error_response(request: Any, status: int, message: str) -> Any:
    """An error in the shape the SDKs read, for requests swerve cannot route (no retry storm)."""
    body = json.dumps({"error": {"message": message, "type": "invalid_request_error"}})
    module = _module_of(request)
    return module.Response(
        status,
        headers=[("content-type", "application/json")],
        content=body.encode(),
        request=request,
    )


def _read_limited(chunks: Iterator[bytes], limit: int) -> bytes:
    out = bytearray()
    for chunk in chunks:
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


def _secrets(upstream: Upstream) -> tuple[str, ...]:
    """The credentials swerve itself sends to ``upstream``, longest first (so a header value
    that contains the key goes whole), each also as it reads inside a JSON string."""
    key = upstream.api_key or ""
    found = {key}
    for name, value in upstream.headers.items():
        if name.lower() in _AUTH_HEADERS or (key and key in value):
            found.add(value)
            found.add(value.partition(" ")[2])  # the token after "Bearer ", "Basic "...
    found |= {json.dumps(s)[1:-1] for s in found}
    return tuple(sorted((s for s in found if len(s) >= _MIN_SECRET), key=len, reverse=True))


def _redacted(
    secrets: tuple[str, ...], headers: list[tuple[str, str]], content: bytes
) -> tuple[list[tuple[str, str]], bytes]:
    """``headers`` and ``content`` with every one of ``secrets`` replaced by ``[REDACTED]``,
    and nothing else changed: an upstream that echoes the request (credentials and all) in
    its error must not hand the client, and its logs, the keys swerve added."""
    for secret in secrets:
        content = content.replace(secret.encode(), _REDACTED_BYTES)
        headers = [(k, v.replace(secret, REDACTED)) for k, v in headers]
    return headers, content


def _given_up(request: Any, error: Exception, secrets: _Secrets) -> Any:
    """After swerve gave up: what the client would have received without it, less the keys
    swerve added."""
    if isinstance(error, UpstreamStatusError):
        headers, content = _redacted(
            secrets.get(error.route, ()), _returned(error.response.headers), error.content
        )
        return _response(request, error.status_code, headers, content)
    if isinstance(error, _ErrorInBody | _Malformed):
        status, headers, content = error.replay
        headers, content = _redacted(secrets.get(error.route or "", ()), headers, content)
        return _module_of(request).Response(status, headers=headers, content=content)
    if isinstance(error, IncompleteStreamError):
        flavour = _module_of(request)
        raise flavour.RemoteProtocolError(
            f"swerve: the upstream stream ended without its finish event ({error})", request=request
        ) from error
    raise error


def _is_stream(response: Any) -> bool:
    """An SSE body to read event by event (an error status is read whole)."""
    return response.status_code < 400 and "text/event-stream" in response.headers.get(
        "content-type", ""
    )


def _ending(error: MidStreamError, module: Any, secrets: _Secrets) -> bytes:
    """When a stream fails after its output began: the last bytes the client gets, or (raised)
    the error it gets, in its flavour.

    An error event: passed on, less swerve's keys, and the stream ends (the SDK raises its own
    error from it, as it would). A truncated or undecodable stream is never a silent success:
    a protocol error. A transport error: itself.
    """
    cause = error.__cause__ or error
    route = str(error.route)
    if isinstance(cause, _ErrorInBody):
        return _redacted(secrets.get(route, ()), [], cause.raw)[1]
    if isinstance(cause, InStreamError):
        return b""
    surfaced: BaseException = cause
    if isinstance(cause, IncompleteStreamError):
        surfaced = httpx.RemoteProtocolError(
            f"swerve: the stream from {route} ended without its finish event"
        )
    elif isinstance(cause, MalformedStreamError):
        surfaced = httpx.RemoteProtocolError(
            f"swerve: the stream from {route} sent an event that is not JSON"
        )
    raise _flavoured(surfaced, module) from error


_STREAM_CLASSES: dict[tuple[str, bool], type] = {}


def _byte_stream(module: Any, sync: bool, source: Any, secrets: _Secrets) -> Any:
    """A response body of the client's flavour (httpx or httpx2) fed by the failover stream."""
    key = (module.__name__, sync)
    cls = _STREAM_CLASSES.get(key)
    if cls is None:
        cls = _STREAM_CLASSES[key] = (
            type("SwerveStream", (_SyncBody, module.SyncByteStream), {})
            if sync
            else type("SwerveAsyncStream", (_AsyncBody, module.AsyncByteStream), {})
        )
    return cls(source, secrets, module)


class _SyncBody:
    def __init__(self, source: FailoverStream[_Chunk], secrets: _Secrets, module: Any) -> None:
        self.source = source
        self.secrets = secrets
        self.module = module

    def __iter__(self) -> Iterator[bytes]:
        try:
            for chunk in self.source:
                if isinstance(chunk, _Event):
                    yield chunk.raw
        except MidStreamError as exc:
            yield _ending(exc, self.module, self.secrets)

    def close(self) -> None:
        self.source.close()


class _AsyncBody:
    def __init__(self, source: AsyncFailoverStream[_Chunk], secrets: _Secrets, module: Any) -> None:
        self.source = source
        self.secrets = secrets
        self.module = module

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self.source:
                if isinstance(chunk, _Event):
                    yield chunk.raw
        except MidStreamError as exc:
            yield _ending(exc, self.module, self.secrets)

    async def aclose(self) -> None:
        await self.source.aclose()


def _flavoured(error: BaseException, module: Any) -> BaseException:
    """httpx errors re-made in the client's flavour, so an httpx2 client sees httpx2 errors."""
    if isinstance(error, httpx.HTTPError) and module.__name__ != "httpx":
        cls = getattr(module, type(error).__name__, None)
        if isinstance(cls, type) and issubclass(cls, Exception):
            return cls(str(error))
    return error


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
        self._inner: dict[str, Any] = {}

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
            return core.inner(request, None, self._inner, True).handle_request(request)
        if not isinstance(plan, _Plan):
            return plan  # an error response naming what was wrong
        route = plan.route

        def send(attempt: Attempt) -> Any:
            upstream_request = core.build(request, plan, attempt)
            inner = core.inner(request, str(attempt.route), self._inner, True)
            return inner.handle_request(upstream_request)

        def body(response: Any) -> bytes:
            try:
                if core.fits(response):
                    return bytes(response.read())  # cached on the response, which is reused
                return _read_limited(response.iter_bytes(), core.limit)
            finally:
                response.close()

        def once(attempt: Attempt) -> Any:
            response = send(attempt)
            return core.complete(str(attempt.route), response, body(response))

        def chunks(attempt: Attempt) -> Iterator[_Chunk]:
            response = send(attempt)
            try:
                yield _Head(response.status_code, _returned(response.headers))
                if not _is_stream(response):
                    yield core.whole(str(attempt.route), response, body(response))
                    return
                reader = core.reader(str(attempt.route), response)
                for data in response.iter_bytes():
                    yield from reader.feed(data)
                yield from reader.flush()
            finally:
                response.close()

        fo = core.failover
        try:
            if plan.off:
                return once(Attempt(Route.parse(route), Route.parse(route)))
            if not plan.stream:
                return fo.call(route, once, pin=plan.pin).value
            stream = fo.stream(route, chunks, _SPEC, pin=plan.pin)
            head = next(stream)
        except Exception as exc:
            return _given_up(request, exc, core.secrets)
        assert isinstance(head, _Head)
        module = _module_of(request)
        return module.Response(
            head.status,
            headers=head.headers,
            stream=_byte_stream(module, True, stream, core.secrets),
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
    """

    async def handle_async_request(self, request: Any) -> Any:
        core = self._core
        plan = core.plan(request)
        if plan is None:
            inner = core.inner(request, None, self._inner, False)
            return await inner.handle_async_request(request)
        if not isinstance(plan, _Plan):
            return plan
        route = plan.route

        async def send(attempt: Attempt) -> Any:
            upstream_request = core.build(request, plan, attempt)
            inner = core.inner(request, str(attempt.route), self._inner, False)
            return await inner.handle_async_request(upstream_request)

        async def body(response: Any) -> bytes:
            try:
                if core.fits(response):
                    return bytes(await response.aread())
                return await _aread_limited(response.aiter_bytes(), core.limit)
            finally:
                await response.aclose()

        async def once(attempt: Attempt) -> Any:
            response = await send(attempt)
            return core.complete(str(attempt.route), response, await body(response))

        async def chunks(attempt: Attempt) -> AsyncIterator[_Chunk]:
            response = await send(attempt)
            try:
                yield _Head(response.status_code, _returned(response.headers))
                if not _is_stream(response):
                    yield core.whole(str(attempt.route), response, await body(response))
                    return
                reader = core.reader(str(attempt.route), response)
                async for data in response.aiter_bytes():
                    for event in reader.feed(data):
                        yield event
                for event in reader.flush():
                    yield event
            finally:
                await response.aclose()

        fo = core.failover
        try:
            if plan.off:
                return await once(Attempt(Route.parse(route), Route.parse(route)))
            if not plan.stream:
                return (await fo.acall(route, once, pin=plan.pin)).value
            stream = fo.astream(route, chunks, _SPEC, pin=plan.pin)
            head = await anext(stream)
        except Exception as exc:
            return _given_up(request, exc, core.secrets)
        assert isinstance(head, _Head)
        module = _module_of(request)
        return module.Response(
            head.status,
            headers=head.headers,
            stream=_byte_stream(module, False, stream, core.secrets),
        )

    async def aclose(self) -> None:
        for transport in self._inner.values():
            await transport.aclose()
        for upstream in self._core.upstreams.values():
            if upstream.transport is not None:
                await upstream.transport.aclose()
