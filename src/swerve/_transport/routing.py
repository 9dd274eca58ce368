"""One client request through a failover transport, without I/O: where it goes and what is sent.

:class:`Exchange` is one client request; :class:`Routing` (one per transport) plans it (the
route its body or headers name, or none: passed through), builds the request each attempt sends
(the route's URL, credentials, model and timeouts; the body fixed for its wire), and holds the
inner transports, one pool per upstream. What becomes of an attempt's response is
:mod:`.reading`'s.
"""

from __future__ import annotations

import json
import ssl
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from .._engine.config import FallbackConfig
from .._engine.failover import Failover
from .._engine.results import Attempt
from .._engine.routes import Route
from .._wire.payloads import JsonRules
from .._wire.rules import prepare_for_route
from .flavour import URL, Flavour, Request, Response, flavour_of
from .io_bound import install
from .reading import AUTH_HEADERS, secrets_of
from .upstream import (
    ENDPOINTS,
    ROUTE_HEADER,
    SWERVE_PREFIX,
    SWITCH_HEADER,
    Upstream,
    check_chains,
    claim_routes,
)

# What a client may authenticate itself with: meant for the host it addressed, so never sent to
# another one (see Routing.build).
_CLIENT_CREDENTIALS = AUTH_HEADERS | {"cookie", "proxy-authorization", "x-goog-api-key"}
_SWERVE_RAW = SWERVE_PREFIX.encode()
_NEVER_FORWARD = frozenset({"host", "content-length"})
_DEFAULT_PORTS = {"http": 80, "https": 443}


_Target = tuple[Any, tuple[bytes, bytes], type[tuple[bytes, ...]]]
"""A route's endpoint URL, its Host header, and the type of a request body sent there."""


@dataclass(slots=True)
class Plan:
    """What to do with one client request."""

    route: str
    body: dict[str, Any]
    stream: bool
    pin: bool
    off: bool


class Exchange:
    """One client request: its plan, and what becomes of it at either end.

    ``plan`` is what to do with a request swerve routes; ``answer`` an error response to hand
    back as it is (the request names a route swerve cannot serve); neither, a request that is
    not swerve's, passed through.
    """

    __slots__ = (
        "answer",
        "cache",
        "flavour",
        "plan",
        "request",
        "routing",
        "started",
        "sync",
        "tried",
    )

    def __init__(
        self, routing: Routing, request: Request, cache: dict[Any, Any], sync: bool
    ) -> None:
        self.routing = routing
        self.request = request
        self.flavour = flavour_of(request)  # httpx or httpx2: every attempt's, and the answer's
        self.cache = cache  # the transport's own inner transports, by flavour and route
        self.sync = sync
        planned = routing.plan(request)
        self.plan: Plan | None = None
        self.answer: Response | None = None
        if isinstance(planned, Plan):
            self.plan = planned
        else:
            self.answer = planned
        self.started = time.monotonic()
        self.tried: Attempt | None = None  # the last attempt made

    def passed_through(self) -> tuple[Any, Request]:
        """The inner transport and the request to send it, for a request that is not swerve's:
        untouched but for the headers that are swerve's (they never leave)."""
        headers = self.request.headers
        for name in [k for k in headers if k.lower().startswith(SWERVE_PREFIX)]:
            del headers[name]
        return self.routing.inner(self.request, None, self.cache, self.sync), self.request

    def direct(self) -> Attempt:
        """The one attempt of a request with failover switched off (``plan.off``)."""
        assert self.plan is not None
        route = Route.parse(self.plan.route)
        return Attempt(route, route)


class Routing:
    """What one transport knows of its routes: how a request is planned and rewritten for
    each, their secrets, and their inner transports."""

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
        found = {s for upstream in self.upstreams.values() for s in secrets_of(upstream)}
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
    def plan(self, request: Request) -> Plan | Response | None:
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
        return Plan(route, body, body.get("stream") is True, bool(pinned), off)

    def _endpoint_match(self, request: Request) -> bool:
        path = request.url.path
        return bool(path.endswith(tuple(ENDPOINTS.values())))

    def _at(self, request: Request, route: str) -> bool:
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
        self, request: Request, plan: Plan, attempt: Attempt, module: Flavour | None = None
    ) -> Request:
        """The request for ``attempt``: the route's URL, credentials and model; fixed body.
        ``module``: the request's flavour, when the caller knows it already."""
        route = attempt.route.name
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
        origin = self.targets[route][0]
        attempt.report_request(body["model"], origin[1], origin[2])  # what the spans name
        own = not upstream.api_key and _origin_of(request.url) == origin
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
                if not k.lower().startswith(SWERVE_PREFIX)
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

    def _target(self, module: Flavour, route: str, upstream: Upstream) -> _Target:
        """``route``'s endpoint URL in ``module``'s type, its Host header and the type of a
        request body: made once a route (parsing a URL costs more than the rest of the
        rewrite)."""
        url = module.URL(upstream.endpoint)
        found = self._urls[(module.__name__, route)] = (url, (b"Host", url.netloc), _body(module))
        return found

    def inner(self, request: Request, route: str | None, cache: dict[Any, Any], sync: bool) -> Any:
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

    def _pool(self, module: Flavour, sync: bool, upstream: Upstream | None) -> Any:
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


def _target(base_url: str) -> tuple[tuple[str, str, int], str]:
    """The origin (scheme, host, port) and the path (no trailing slash) of a base URL."""
    parts = urlsplit(base_url)
    scheme = parts.scheme.lower()
    origin = (scheme, (parts.hostname or "").lower(), parts.port or _DEFAULT_PORTS.get(scheme, 0))
    return origin, parts.path.rstrip("/")


def _origin_of(url: URL) -> tuple[str, str, int]:
    scheme = str(url.scheme).lower()
    return scheme, str(url.host).lower(), url.port or _DEFAULT_PORTS.get(scheme, 0)


def _error_response(request: Request, status: int, message: str) -> Response:
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


def _body(module: Flavour) -> type[tuple[bytes, ...]]:
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


def _tls_context(module: Flavour) -> Any:
    """The TLS context every pool swerve makes shares, per flavour: the one ``HTTPTransport()``
    would build (certifi, ``SSL_CERT_FILE``/``SSL_CERT_DIR``), built once per process instead of
    once per route (~20 ms each: a route's first request, often the first swap of an outage)."""
    context = _TLS.get(module.__name__)
    if context is None:
        context = _TLS[module.__name__] = module.create_ssl_context()
    return context
