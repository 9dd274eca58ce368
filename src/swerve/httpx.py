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
import importlib
import json
import math
import re
import time
import zlib
from collections.abc import AsyncIterator, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import urlsplit

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
from ._redact import REDACTED, scrub
from ._routes import Route
from .failures import (
    AttemptTimeout,
    CircuitOpenError,
    IncompleteStreamError,
    InStreamError,
    MalformedStreamError,
)
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
# What a client may authenticate itself with: meant for the host it addressed, so never sent to
# another one (see _Core.build).
_CLIENT_CREDENTIALS = _AUTH_HEADERS | {"cookie", "proxy-authorization", "x-goog-api-key"}
# Upstream.headers whose values are secrets (redacted wherever an upstream echoes them).
_SECRET_NAME = re.compile(r"auth|key|token|secret|passw|cookie|session|signature", re.IGNORECASE)
_SWERVE_PREFIX = "x-swerve-"  # every header of this prefix is for swerve, never for a provider
_NEVER_FORWARD = frozenset({"host", "content-length"})
_DEFAULT_PORTS = {"http": 80, "https": 443}
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
        except (ValueError, RecursionError):
            self.body = None
        super().__init__(f"{route} answered HTTP {self.status_code}")


class ResponseTooLarge(Exception):
    """An upstream body or SSE event exceeded the transport's size limit.

    The client receives it as a subclass that is also its flavour's ``DecodingError``
    (``httpx.DecodingError`` or ``httpx2.DecodingError``), so ``except httpx.HTTPError`` and the
    SDKs' connection-error handling catch it too.
    """


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


# The transport hands every chunk on as it comes and never reads partial output back: keeping
# none of it is what lets a long stream pass through in constant memory.
_SPEC: StreamSpec[_Chunk] = StreamSpec(part=_part_of, is_finish=_finish_of, keep_partial=False)


_Replay = tuple[int, list[tuple[str, str]], bytes]
"""Status, headers and body: a response as the upstream sent it, for handing on unchanged."""


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

    def __init__(
        self, route: str, response: Any, parser: _SSEParser, secrets: tuple[str, ...]
    ) -> None:
        self.route = route
        self.parser = parser
        self.secrets = secrets
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
        # What the upstream echoed must reach neither the client nor the engine (whose failure
        # ends up in spans and logs): the payload is read again from the redacted event.
        headers, content = _redacted(self.secrets, self.headers, b"".join(self.raw))
        replay = (self.status, headers, content)
        if event.error is None:
            raise _Malformed(self.route, replay)
        payload, raw = event.error, _redacted(self.secrets, [], event.raw)[1]
        if raw != event.raw:
            payload = _interpret(self.parser.wire, raw).error or {}
        raise _ErrorInBody(payload, self.route, replay, raw)


_LINE_END = re.compile(rb"\r\n|\r|\n")
_TEXT_LINE_END = re.compile(r"\r\n|\r|\n")  # SSE's only line ends (not str.splitlines's)
_BOM = b"\xef\xbb\xbf"


class _SSEParser:
    """Splits a byte stream into events at blank lines, bounded in size, in one pass.

    Lines end in CRLF, LF or a lone CR, as the SSE format allows. Each read is scanned once,
    so a stream costs time in proportion to its length, however it is cut into reads.
    """

    def __init__(self, wire: Wire, limit: int) -> None:
        self.wire = wire
        self.limit = limit
        self._buf = bytearray()  # bytes not yet split into lines
        self._scanned = 0  # how much of _buf is known to hold no line end: never rescanned
        self._event = bytearray()  # the lines of the event being read, as received
        self._started = False  # a BOM may open the stream, and only the stream

    def feed(self, data: bytes) -> list[_Event]:
        buf = self._buf
        buf += data
        if not self._started:
            if len(buf) < len(_BOM) and _BOM.startswith(bytes(buf)):
                return []  # too little to tell a BOM from data yet
            self._started = True
            if buf.startswith(_BOM):
                del buf[: len(_BOM)]
        events = []
        start = 0
        for match in _LINE_END.finditer(buf, self._scanned):
            end = match.end()
            if match.group() == b"\r" and end == len(buf):
                break  # a CR at the end of a read may be the first half of a CRLF
            line = buf[start : match.start()]
            self._event += buf[start:end]
            start = end
            # Checked per event, so whether an event is too large never depends on the reads.
            if len(self._event) > self.limit:
                raise ResponseTooLarge(f"an SSE event exceeded {self.limit} bytes")
            if not line and self._event.strip():  # a blank line dispatches the event
                events.append(_interpret(self.wire, bytes(self._event)))
                self._event.clear()
            elif not line:
                self._event.clear()  # blank lines between events: nothing to dispatch
        del buf[:start]
        self._scanned = len(buf) - 1 if buf.endswith(b"\r") else len(buf)
        if len(self._event) + len(buf) > self.limit:
            raise ResponseTooLarge(f"an SSE event exceeded {self.limit} bytes")
        return events

    def flush(self) -> list[_Event]:
        raw = bytes(self._event + self._buf)
        self._event.clear()
        self._buf.clear()
        self._scanned = 0
        return [_interpret(self.wire, raw)] if raw.strip() else []


def _obj(value: object) -> Mapping[str, Any]:
    """``value`` if it is a JSON object, else an empty one: a part of a chunk in an unexpected
    shape means nothing to swerve (the client, which reads it too, decides what it is)."""
    return value if isinstance(value, dict) else {}


def _interpret(wire: Wire, raw: bytes) -> _Event:
    """What an event means on its wire: content (of which kind), the finish, an error, or
    data that is not JSON (the upstream broke the protocol: the attempt fails)."""
    name = None
    data_lines = []
    for line in _TEXT_LINE_END.split(raw.decode("utf-8", "replace")):
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
    except (ValueError, RecursionError):  # nested too deeply to read is not JSON to swerve
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
            kind == "message_delta" and _obj(payload.get("delta")).get("stop_reason")
        ):
            event.finish = True
        elif kind == "content_block_delta":
            delta = _obj(payload.get("delta"))
            dtype = delta.get("type")
            if dtype == "text_delta" and delta.get("text"):
                event.part = "text"
            elif dtype in ("thinking_delta", "signature_delta"):
                event.part = "reasoning"
            elif dtype == "input_json_delta":
                event.part = "tool_call"
        elif (
            kind == "content_block_start"
            and _obj(payload.get("content_block")).get("type") == "tool_use"
        ):
            event.part = "tool_call"
        return event
    choices = payload.get("choices")
    for choice in choices if isinstance(choices, list) else ():
        choice = _obj(choice)
        # A finish_reason ends the answer; several compatible servers never send [DONE].
        # (The usage chunk that may follow still reaches the client: the stream goes on.)
        if choice.get("finish_reason") not in (None, "error"):
            event.finish = True
        delta = _obj(choice.get("delta"))
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
        # Every configured secret, whichever upstream it belongs to: an echo is scrubbed of all.
        found = {s for upstream in self.upstreams.values() for s in _secrets(upstream)}
        self.secrets: tuple[str, ...] = tuple(sorted(found, key=len, reverse=True))
        self.targets = {key: _target(up.base_url) for key, up in self.upstreams.items()}
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
        except (ValueError, RecursionError) as exc:
            if not pinned and not self._endpoint_match(request):
                return None
            problem = (
                "is nested too deeply to read"
                if isinstance(exc, RecursionError)
                else f"is not JSON ({exc})"
            )
            return _error_response(
                request,
                400,
                f"swerve: the request body {problem}; routes are named by its 'model'",
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
            route = next(
                (
                    name
                    for name, up in self.upstreams.items()
                    if model == (up.model or Route.parse(name).model) and self._at(request, name)
                ),
                "",
            )
            if not route:
                return None
        return _Plan(route, body, body.get("stream") is True, bool(pinned), off)

    def _endpoint_match(self, request: Any) -> bool:
        path = request.url.path
        return bool(path.endswith(tuple(_ENDPOINTS.values())))

    def _at(self, request: Any, route: str) -> bool:
        """Whether the request's URL is within ``route``'s base URL: the same origin, and its
        path segments (``/v1`` holds ``/v1/chat/completions``, not ``/v1-other/...``)."""
        origin, base = self.targets[route]
        url = request.url
        if _origin_of(url) != origin:
            return False
        path = str(url.path).rstrip("/")
        return path == base or path.startswith(base + "/")

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
        # The client's own credentials are for the host it addressed: they go to an upstream
        # only when it has no api_key of its own and is that very host, never to a fallback
        # provider elsewhere.
        own = not upstream.api_key and _origin_of(request.url) == self.targets[route][0]
        drop = _NEVER_FORWARD if own else _NEVER_FORWARD | _CLIENT_CREDENTIALS
        if upstream.headers:
            drop = drop | {k.lower() for k in upstream.headers}
        headers = [
            (k, v)
            for k, v in request.headers.multi_items()
            if (name := k.lower()) not in drop and not name.startswith(_SWERVE_PREFIX)
        ]
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

    def limits(self, attempt: Attempt, stream: bool) -> _Limits | None:
        """The time limits a sync attempt checks as it reads (None when it has none)."""
        if attempt.timeout is None and attempt.read_timeout is None:
            return None
        return _Limits(attempt, self.failover.config, stream)

    def complete(self, route: str, response: Any, body: bytes, whole: bool) -> Any:
        """A whole (non-stream) body: an error status, an error inside a 200, or a JSON body
        that does not decode, is a failure. ``whole``: the response itself holds the body (it
        was read at once), and can be handed on as it is."""
        if response.status_code >= 400:
            headers, content = _redacted(
                self.secrets, _returned(response.headers), body[:_ERROR_BODY_LIMIT]
            )
            scrubbed = _response(response, response.status_code, headers, content)
            raise UpstreamStatusError(route, scrubbed, content)
        json_body = "json" in response.headers.get("content-type", "")
        if json_body or b'"error"' in body:
            try:
                data = json.loads(body)
            except (ValueError, RecursionError):
                if json_body:
                    raise _Malformed(route, self._replay(response, body)) from None
                data = None
            if isinstance(data, dict) and data.get("error") and not data.get("choices"):
                replay = self._replay(response, body)
                if replay[2] != body:  # an echoed secret: the engine reads the redacted error
                    data = json.loads(replay[2])
                raise _ErrorInBody(data, route, replay)
        if whole:
            return response  # already read and within the limit: hand it on as it is
        return _response(response, response.status_code, _returned(response.headers), body)

    def _replay(self, response: Any, body: bytes) -> _Replay:
        headers, content = _redacted(self.secrets, _returned(response.headers), body)
        return response.status_code, headers, content

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
        self.complete(route, response, body, False)
        return _Event(body, part="other", finish=True)

    def reader(self, route: str, response: Any) -> _Reader:
        parser = _SSEParser(self.upstreams[route].wire, self.limit)
        return _Reader(route, response, parser, self.secrets)

    def inner(self, request: Any, route: str | None, cache: dict[Any, Any], sync: bool) -> Any:
        """The transport that sends for ``route`` (None: a request passed through).

        One pool per upstream: a provider that hangs can fill its own pool, never the one a
        healthy fallback is served from.
        """
        upstream = self.upstreams.get(route) if route else None
        if upstream is not None and upstream.transport is not None:
            return upstream.transport
        name = type(request).__module__.partition(".")[0]
        transport = cache.get((name, route))
        if transport is None:
            module = importlib.import_module(name)
            transport = cache[(name, route)] = (
                module.HTTPTransport() if sync else module.AsyncHTTPTransport()
            )
        return transport

    def scrubbed(self, exc: BaseException) -> BaseException:
        """``exc`` with every configured secret taken out of its message and notes (in place:
        it keeps its type and traceback), before the engine, the spans or the client see it."""
        if not self.secrets:
            return exc
        for error in _causes(exc):
            if any(isinstance(a, str) and _has_secret(a, self.secrets) for a in error.args):
                error.args = tuple(
                    scrub(a, self.secrets) if isinstance(a, str) else a for a in error.args
                )
            notes = getattr(error, "__notes__", None)
            if isinstance(notes, list):
                notes[:] = [scrub(n, self.secrets) if isinstance(n, str) else n for n in notes]
        return exc


def _causes(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and what it was raised from or during, bounded and cycle-safe."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen and len(seen) < 16:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def _has_secret(text: str, secrets: tuple[str, ...]) -> bool:
    return any(s in text for s in secrets)


def _target(base_url: str) -> tuple[tuple[str, str, int], str]:
    """The origin (scheme, host, port) and the path (no trailing slash) of a base URL."""
    parts = urlsplit(base_url)
    scheme = parts.scheme.lower()
    origin = (scheme, (parts.hostname or "").lower(), parts.port or _DEFAULT_PORTS.get(scheme, 0))
    return origin, parts.path.rstrip("/")


def _origin_of(url: Any) -> tuple[str, str, int]:
    scheme = str(url.scheme).lower()
    return scheme, str(url.host).lower(), url.port or _DEFAULT_PORTS.get(scheme, 0)


class _Limits:
    """The time limits of one sync attempt, checked after every read of its body.

    A blocking read cannot be pre-empted, and httpx's read timeout is per read: an upstream that
    dribbles a byte at a time never trips it. So every read is checked against the attempt's
    end (its own limit or the call's deadline, whichever is sooner), the first-token limit
    until content began (streams), and the stall limit: the gap since the last event (for a
    whole body, since the attempt began, as the async engine bounds it). A read that came too
    late counts as a timeout, as the engine counts a late chunk.
    """

    __slots__ = ("end", "end_name", "first", "last", "stall", "t0")

    def __init__(self, attempt: Attempt, config: FallbackConfig | None, stream: bool) -> None:
        self.t0 = self.last = time.monotonic()
        self.end, self.end_name = math.inf, "attempt"
        if attempt.timeout is not None:
            self.end = self.t0 + attempt.timeout
            own = config.attempt_timeout_s if config is not None else None
            if own is None or attempt.timeout < own - 1e-6:  # the call's deadline comes first
                self.end_name = "deadline"
        first = config.first_token_timeout_s if config is not None and stream else None
        self.first = self.t0 + first if first is not None else math.inf
        stall = config.stall_timeout_s if config is not None else None
        self.stall = stall if stall is not None else math.inf

    def check(self, committed: bool) -> None:
        now = time.monotonic()
        if now > self.end:
            raise AttemptTimeout(self.end_name, now - self.t0)
        if not committed and now > self.first:
            raise AttemptTimeout("first_token", now - self.t0)
        if now > self.last + self.stall:
            raise AttemptTimeout("stall", now - self.last)


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


def _secrets(upstream: Upstream) -> tuple[str, ...]:
    """The credentials swerve itself sends to ``upstream``, longest first (so a header value
    that contains the key goes whole), each also as it reads inside a JSON string."""
    key = upstream.api_key or ""
    found = {key}
    for name, value in upstream.headers.items():
        if name.lower() in _AUTH_HEADERS or _SECRET_NAME.search(name) or (key and key in value):
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
        encoded = secret.encode()
        if encoded in content:
            content = content.replace(encoded, _REDACTED_BYTES)
        headers = [(k, v.replace(secret, REDACTED)) for k, v in headers]
    return headers, content


def _given_up(request: Any, error: Exception, core: _Core, started: float) -> Any:
    """After swerve gave up: what the client would have received without it, less the keys
    swerve added; or the error its own stack would have raised."""
    secrets = core.secrets
    if isinstance(error, UpstreamStatusError):
        headers, content = _redacted(secrets, _returned(error.response.headers), error.content)
        return _response(request, error.status_code, headers, content)
    if isinstance(error, _ErrorInBody | _Malformed):
        status, headers, content = error.replay
        headers, content = _redacted(secrets, headers, content)
        return _module_of(request).Response(status, headers=headers, content=content)
    module = _module_of(request)
    if isinstance(error, IncompleteStreamError):
        raise module.RemoteProtocolError(
            f"swerve: the upstream stream ended without its finish event ({error})", request=request
        ) from error
    client_error = _client_error(core.scrubbed(error), module, request, started)
    if client_error is error:
        raise error
    raise client_error from error


def _client_error(error: BaseException, module: Any, request: Any, started: float) -> BaseException:
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


def _too_large_class(module: Any) -> type:
    """:class:`ResponseTooLarge` that is also ``module.DecodingError``."""
    cls = _TOO_LARGE.get(module.__name__)
    if cls is None:
        cls = _TOO_LARGE[module.__name__] = type(
            "ResponseTooLarge", (ResponseTooLarge, module.DecodingError), {}
        )
        cls.__module__ = __name__
    return cls


def _is_stream(response: Any) -> bool:
    """An SSE body to read event by event (an error status is read whole)."""
    return response.status_code < 400 and "text/event-stream" in response.headers.get(
        "content-type", ""
    )


def _ending(error: MidStreamError, module: Any, core: _Core, started: float) -> bytes:
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


def _byte_stream(module: Any, sync: bool, source: Any, core: _Core, started: float) -> Any:
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


class _SyncBody:
    def __init__(
        self, source: FailoverStream[_Chunk], core: _Core, module: Any, started: float
    ) -> None:
        self.source = source
        self.core = core
        self.module = module
        self.started = started

    def __iter__(self) -> Iterator[bytes]:
        try:
            for chunk in self.source:
                if isinstance(chunk, _Event):
                    yield chunk.raw
        except MidStreamError as exc:
            yield _ending(exc, self.module, self.core, self.started)

    def close(self) -> None:
        self.source.close()


class _AsyncBody:
    def __init__(
        self, source: AsyncFailoverStream[_Chunk], core: _Core, module: Any, started: float
    ) -> None:
        self.source = source
        self.core = core
        self.module = module
        self.started = started

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self.source:
                if isinstance(chunk, _Event):
                    yield chunk.raw
        except MidStreamError as exc:
            yield _ending(exc, self.module, self.core, self.started)

    async def aclose(self) -> None:
        await self.source.aclose()


def _flavoured(error: BaseException, module: Any) -> BaseException:
    """httpx errors re-made in the client's flavour, so an httpx2 client sees httpx2 errors."""
    if isinstance(error, httpx.HTTPError) and module.__name__ != "httpx":
        cls = getattr(module, type(error).__name__, None)
        if isinstance(cls, type) and issubclass(cls, Exception):
            return cls(str(error))
    return error


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
