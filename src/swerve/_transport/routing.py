"""The transports' I/O-free core: the route a request names, the request an attempt sends."""

from __future__ import annotations

import json
import ssl
from collections.abc import AsyncIterator, Iterator, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from .._engine.config import FallbackConfig
from .._engine.failover import Failover
from .._engine.results import Attempt
from .._engine.routes import Route
from .._telemetry.redact import scrub
from .._wire.payloads import JsonRules
from .._wire.rules import prepare_for_route
from .attempt import (
    _AUTH_HEADERS,
    SWERVE_PREFIX,
    _ErrorInBody,
    _Malformed,
    _Reader,
    _redacted,
    _Replay,
    _response,
    _returned,
    _secrets,
    _served_by,
)
from .flavour import Flavour, flavour_of
from .io_bound import install
from .sse import _Event, _SSEParser, _usage
from .upstream import (
    _ENDPOINTS,
    ATTEMPTS_HEADER,
    REQUESTED_HEADER,
    ROUTE_HEADER,
    SWITCH_HEADER,
    Upstream,
    UpstreamStatusError,
    check_chains,
    claim_routes,
)

# What a client may authenticate itself with: meant for the host it addressed, so never sent to
# another one (see _Core.build).
_CLIENT_CREDENTIALS = _AUTH_HEADERS | {"cookie", "proxy-authorization", "x-goog-api-key"}
_SWERVE_PREFIX = SWERVE_PREFIX  # never sent to a provider, never taken from one
_SWERVE_RAW = SWERVE_PREFIX.encode()
_NEVER_FORWARD = frozenset({"host", "content-length"})
_DEFAULT_PORTS = {"http": 80, "https": 443}
_ERROR_BODY_LIMIT = 64 * 1024


_Target = tuple[Any, tuple[bytes, bytes], type[tuple[bytes, ...]]]
"""A route's endpoint URL, its Host header, and the type of a request body sent there."""


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
        # The names of each upstream's own headers, lowercased: they replace the client's.
        self.header_names = {
            key: frozenset(k.lower() for k in up.headers) for key, up in self.upstreams.items()
        }
        # The client's headers never sent to a route, by whether its own credentials go there.
        self._drops: dict[tuple[str, bool], frozenset[bytes]] = {}
        self.failover = failover
        self.telemetry = failover.telemetry  # a Failover's telemetry is fixed: read it once
        self.limit = max_body_bytes
        # The inner transports whose every socket operation keeps to the attempt's time: the
        # ones swerve makes, and an upstream's own httpx / httpx2 HTTPTransport.
        self.clamped: set[int] = {
            id(up.transport) for up in self.upstreams.values() if install(up.transport)
        }
        self._urls: dict[tuple[str, str], _Target] = {}
        self._check(config if config is not None else failover.config)
        # Last: a transport that was refused claims nothing.
        self.release = claim_routes(self, failover.health, self.upstreams)
        """Ends this transport's claim on its route names in the store (it closed)."""

    def _check(self, config: FallbackConfig | None) -> None:
        check_chains(config, {route: up.wire for route, up in self.upstreams.items()})

    # -- routing ------------------------------------------------------------------------------
    def plan(self, request: Any) -> _Plan | Any | None:
        """A plan, None to pass the request through, or an error response to return as is."""
        if request.method != "POST":
            return None
        options = request.extensions.get("swerve") or {}
        headers = request.headers
        # Most requests carry none of swerve's headers: one pass over the raw names says so,
        # without decoding every header as a lookup by name would.
        own = False
        for name, _ in headers.raw:
            if name[:9].lower() == _SWERVE_RAW:
                own = True
                break
        pinned = (headers.get(ROUTE_HEADER) if own else None) or options.get("route")
        off = (
            own and headers.get(SWITCH_HEADER, "").lower() in ("off", "0", "false")
        ) or options.get("failover") is False
        try:
            content = request.content
        except flavour_of(request).RequestNotRead:
            # A streamed body (multipart files=, a generator): no route reads it, and reading
            # it here would consume it. It is sent on as it comes.
            return None
        try:
            body = json.loads(content)
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
    def build(
        self, request: Any, plan: _Plan, attempt: Attempt, module: Flavour | None = None
    ) -> Any:
        """The request for ``attempt``: the route's URL, credentials and model; fixed body.
        ``module``: the request's flavour, when the caller knows it already."""
        route = attempt.route._name
        upstream = self.upstreams[route]
        body = dict(plan.body)
        body["model"] = upstream.model or attempt.route.model
        body = prepare_for_route(
            body,
            JsonRules(upstream.wire, body["model"]),
            route=route,
            moved=route != plan.route,
            telemetry=self.telemetry,
        )
        # The client's own credentials are for the host it addressed: they go to an upstream
        # only when it has no api_key of its own and is that very host, never to a fallback
        # provider elsewhere.
        own = not upstream.api_key and _origin_of(request.url) == self.targets[route][0]
        names = self.header_names[route]
        drop = self._drops.get((route, own))
        if drop is None:
            drop = self._drops[(route, own)] = _dropped(own, names)
        if module is None:
            module = flavour_of(request)
        target = self._urls.get((module.__name__, route))
        if target is None:
            target = self._target(module, route, upstream)
        url, host, stream = target
        # The Host header first, as httpx puts it; Content-Length last (see below).
        headers: list[tuple[Any, Any]] = [] if "host" in names else [host]
        chunked = False
        # As bytes, the way httpx holds them: none is decoded and encoded again.
        for k, v in request.headers.raw:
            name = k.lower()
            if name not in drop and not name.startswith(_SWERVE_RAW):
                headers.append((k, v))
                chunked = chunked or name == b"transfer-encoding"
        if upstream.api_key:
            if upstream.wire == "anthropic":
                headers.append(("x-api-key", upstream.api_key))
            else:
                headers.append(("authorization", f"Bearer {upstream.api_key}"))
        if upstream.headers:
            headers.extend(
                (k, v)
                for k, v in upstream.headers.items()
                if not k.lower().startswith(_SWERVE_PREFIX)
            )
        extensions = dict(request.extensions)
        extensions.pop("swerve", None)
        total, read = attempt.timeout, attempt.read_timeout
        if total is not None or read is not None:
            # The client's httpx timeouts, each cut to the attempt's limits.
            if read is None or (total is not None and total < read):
                read = total
            given = extensions.get("timeout")
            base = given if isinstance(given, dict) else {}
            cut: dict[str, float | None] = {}
            for phase in ("connect", "read", "write", "pool"):
                limit = read if phase == "read" else total
                mine = base.get(phase)
                cut[phase] = limit if mine is None else mine if limit is None else min(mine, limit)
            extensions["timeout"] = cut
        content = json.dumps(body).encode()
        # What Request(content=...) would add, added here: given a ready stream, httpx skips
        # a second pass over every header (half the cost of building the request).
        if not chunked and not names & _LENGTH_HEADERS:
            headers.append(("Content-Length", str(len(content))))
        built = module.Request(
            request.method,
            url,
            headers=headers,
            stream=stream((content,)),
            extensions=extensions,
        )
        built.read()  # as Request(content=...) does: .content is there for whoever reads it
        return built

    def _target(self, module: Any, route: str, upstream: Upstream) -> _Target:
        """``route``'s endpoint URL in ``module``'s type, its Host header and the type of a
        request body: made once a route (parsing a URL costs more than the rest of the
        rewrite)."""
        url = module.URL(upstream.endpoint)
        found = self._urls[(module.__name__, route)] = (url, (b"Host", url.netloc), _body(module))
        return found

    def complete(
        self, route: str, response: Any, body: bytes, whole: bool, attempt: Attempt
    ) -> Any:
        """A whole (non-stream) body: an error status, an error inside a 200, or a JSON body
        that does not decode, is a failure. ``whole``: the response itself holds the body (it
        was read at once), and can be handed on as it is. The token usage and finish reasons
        a JSON body reports are told ``attempt``."""
        if response.status_code >= 400:
            headers, content = _redacted(
                self.secrets, _returned(response.headers), body[:_ERROR_BODY_LIMIT]
            )
            scrubbed = _response(response, response.status_code, headers, content)
            raise UpstreamStatusError(route, scrubbed, content)
        content_type = response.headers.get("content-type", "")
        if "text/event-stream" in content_type:
            self._events(route, response, body, attempt)
        json_body = "json" in content_type
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
            if isinstance(data, dict) and (usage := _usage(self.upstreams[route].wire, data)):
                attempt.report_usage(*usage)
        if whole:  # already read and within the limit: hand it on as it is, with swerve's
            headers = response.headers  # headers instead of any the upstream sent by the name
            # The raw names: a scan that decodes none of them (this is every healthy call).
            for raw, _ in headers.raw:
                if raw[:9].lower() == _SWERVE_RAW:
                    for name in [k for k in headers if k.lower().startswith(SWERVE_PREFIX)]:
                        del headers[name]
                    break
            # _served_by's headers, set as text (written out: every healthy call sets them).
            served, requested = attempt.route._name, attempt.requested._name
            headers[ROUTE_HEADER] = served
            headers[ATTEMPTS_HEADER] = str(attempt.number)
            if requested != served:
                headers[REQUESTED_HEADER] = requested
            return response
        returned = _returned(response.headers)
        returned += _served_by(attempt)
        return _response(response, response.status_code, returned, body)

    def _events(self, route: str, response: Any, body: bytes, attempt: Attempt) -> None:
        """A whole body that is an SSE stream (a request that did not ask for one answered
        with one): read event by event as a stream is, so an error event is the route's
        failure, its echoed keys redacted, and never reaches the client unread."""
        reader = self.reader(route, response)
        try:
            for event in [*reader.feed(body), *reader.flush()]:
                if event.usage is not None:
                    attempt.report_usage(*event.usage)
        except (_ErrorInBody, _Malformed) as exc:
            exc.replay = self._replay(response, body)  # if swerve gives up: the whole body
            raise

    def _replay(self, response: Any, body: bytes) -> _Replay:
        headers, content = _redacted(self.secrets, _returned(response.headers), body)
        return response.status_code, headers, content

    def whole(self, route: str, response: Any, body: bytes, attempt: Attempt) -> _Event:
        """A stream request answered with a whole body (an error, or a server ignoring
        ``stream``): one final chunk, checked like a non-stream body."""
        self.complete(route, response, body, False, attempt)
        return _Event(body, part="other", finish=True)

    def reader(self, route: str, response: Any) -> _Reader:
        parser = _SSEParser(self.upstreams[route].wire, self.limit)
        return _Reader(route, response, parser, self.secrets)

    def inner(self, request: Any, route: str | None, cache: dict[Any, Any], sync: bool) -> Any:
        """The transport that sends for ``route`` (None: a request passed through).

        One pool per upstream: a provider that hangs can fill its own pool, never the one a
        healthy fallback is served from. The first routed request of a flavour builds every
        route's pool, so the first swap of an outage finds its pool ready.
        """
        upstream = self.upstreams.get(route) if route else None
        if upstream is not None and upstream.transport is not None:
            return upstream.transport
        module = flavour_of(request)
        transport = cache.get((module.__name__, route))
        if transport is not None:
            return transport
        if route is None:
            transport = cache[(module.__name__, None)] = self._pool(module, sync, None)
            return transport
        for name, up in self.upstreams.items():
            if up.transport is None and (module.__name__, name) not in cache:
                cache[(module.__name__, name)] = self._pool(module, sync, up)
        return cache[(module.__name__, route)]

    def _pool(self, module: Any, sync: bool, upstream: Upstream | None) -> Any:
        """A new inner transport of ``module``'s for ``upstream`` (None: requests passed
        through). An ``http://`` upstream never speaks TLS: it gets no CA-loaded context."""
        if upstream is not None and upstream.base_url.startswith("http://"):
            verify = _plain_context()
        else:
            verify = _tls_context(module)
        transport = (
            module.HTTPTransport(verify=verify)
            if sync
            else module.AsyncHTTPTransport(verify=verify)
        )
        if install(transport):
            self.clamped.add(id(transport))
        return transport

    def transports(self, cache: dict[Any, Any]) -> list[Any]:
        """Every inner transport to close with the transport: those it made, and the
        upstreams' own."""
        own = [u.transport for u in self.upstreams.values() if u.transport is not None]
        return [*cache.values(), *own]

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


def _error_response(request: Any, status: int, message: str) -> Any:
    """An error in the shape the SDKs read, for requests swerve cannot route (no retry storm)."""
    body = json.dumps({"error": {"message": message, "type": "invalid_request_error"}})
    return flavour_of(request).Response(
        status,
        headers=[("content-type", "application/json")],
        content=body.encode(),
        request=request,
    )


_LENGTH_HEADERS = frozenset({"content-length", "transfer-encoding"})


def _dropped(own: bool, names: frozenset[str]) -> frozenset[bytes]:
    """The client's headers (lowercased, as bytes) a route never gets: those swerve sets, the
    client's credentials unless they are for that very host, and those the upstream sets."""
    drop = _NEVER_FORWARD if own else _NEVER_FORWARD | _CLIENT_CREDENTIALS
    return frozenset(name.encode() for name in drop | names)


_BODIES: dict[str, type[tuple[bytes, ...]]] = {}


def _body(module: Any) -> type[tuple[bytes, ...]]:
    """The request body stream of ``module``'s flavour, sync and async: the body's one chunk
    in a tuple, so iterating it (httpx's ``read()``, the pool's send) runs no Python code."""
    cls = _BODIES.get(module.__name__)
    if cls is None:

        async def chunks(self: tuple[bytes, ...]) -> AsyncIterator[bytes]:
            for chunk in self:
                yield chunk

        bases = (tuple, module.SyncByteStream, module.AsyncByteStream)
        cls = _BODIES[module.__name__] = type("_Body", bases, {"__aiter__": chunks})
    return cls


_TLS: dict[str, Any] = {}
_PLAIN: list[ssl.SSLContext] = []


def _plain_context() -> ssl.SSLContext:
    """What the pool of an ``http://`` upstream holds for TLS, which it never uses: a bare
    context (no CA bundle loaded, so it could verify nothing), made once per process in
    microseconds instead of the ~20 ms of a real one."""
    if not _PLAIN:
        _PLAIN.append(ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT))
    return _PLAIN[0]


def _tls_context(module: Any) -> Any:
    """The TLS context every pool swerve makes shares, per flavour: the one ``HTTPTransport()``
    would build (certifi, ``SSL_CERT_FILE``/``SSL_CERT_DIR``), built once per process instead of
    once per route (~20 ms each: a route's first request, often the first swap of an outage)."""
    context = _TLS.get(module.__name__)
    if context is None:
        context = _TLS[module.__name__] = module.create_ssl_context()
    return context
