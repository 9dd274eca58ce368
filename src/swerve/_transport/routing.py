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
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from itertools import compress
from operator import itemgetter, not_
from typing import Any
from urllib.parse import urlsplit

from .._engine.config import FallbackConfig
from .._engine.failover import Failover
from .._engine.results import Attempt
from .._engine.routes import Route
from .._wire.payloads import JsonRules
from .._wire.rules import Wire, prepare_for_route, speaks_to_claude
from .flavour import URL, Flavour, Request, Response, flavour_of
from .io_bound import cut_safe, install
from .reading import AUTH_HEADERS, SCAN_JSON, secrets_of
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
_NAME = itemgetter(0)  # a header's name, of its (name, value)


def _chunks_encoder() -> Callable[[Any, int], list[str]]:
    """json.dumps of a body, in chunks to join (the same text): json's C encoder, made once and
    called without the Python wrapper that makes a new one per call. No circular check: a body
    came from json.loads (then the wire rules), which makes no cycle; one would still end, in a
    RecursionError. Where json has no C encoder, json's own ``encode``, in one chunk."""
    plain = json.JSONEncoder()
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:
        return lambda body, _: [plain.encode(body)]
    chunks: Callable[[Any, int], list[str]] = make(
        None, plain.default, json.encoder.encode_basestring_ascii, None, ": ", ", ", False,
        False, True,
    )  # fmt: skip
    return chunks


_ENCODE_CHUNKS = _chunks_encoder()


@dataclass(slots=True)
class Plan:
    """What to do with one client request."""

    route: str
    body: dict[str, Any]
    stream: bool
    pin: bool
    off: bool
    raw: list[tuple[bytes, bytes]]
    """The client's headers, as bytes (read once: every attempt filters them)."""
    names: list[bytes]
    """Their names, lowercased, in the same order."""
    marked: bool
    """Whether a header name may be one of swerve's (then each is checked by name)."""


class _Way:
    """What every request sent to one route, from clients of one flavour, shares: the rewrite
    of a request is then one filter of the client's headers and one new body."""

    __slots__ = (
        "drop",
        "drop_own",
        "fixes",
        "keyless",
        "last",
        "lead",
        "make",
        "model",
        "origin",
        "sized",
        "tail",
        "url",
        "wire",
    )

    def __init__(
        self, module: Flavour, route: str, upstream: Upstream, origin: tuple[str, str, int]
    ) -> None:
        self.url = module.URL(upstream.endpoint)
        self.origin = origin
        self.wire: Wire = upstream.wire
        self.model = upstream.model or Route.parse(route).model
        # Whether the empty-text fix may change a body sent here (it looks at nothing else).
        self.fixes = speaks_to_claude(self.wire, self.model)
        self.keyless = not upstream.api_key
        # The names of the upstream's own headers, lowercased: they replace the client's.
        names = frozenset(k.lower() for k in upstream.headers)
        # The client's headers never sent here, by whether its own credentials go here.
        self.drop = _dropped(False, names)
        self.drop_own = _dropped(True, names)
        # Bytes and text alike, as httpx takes them (an upstream's own are text).
        self.lead: list[tuple[Any, Any]] = [] if "host" in names else [(b"Host", self.url.netloc)]
        tail: list[tuple[Any, Any]] = []
        if upstream.api_key:
            if upstream.wire == "anthropic":
                tail.append(("x-api-key", upstream.api_key))
            else:
                tail.append(("authorization", f"Bearer {upstream.api_key}"))
        tail += [
            (k, v) for k, v in upstream.headers.items() if not k.lower().startswith(SWERVE_PREFIX)
        ]
        self.tail = tail
        self.sized = not names & _LENGTH_HEADERS  # else the upstream's own length or chunking
        # The client's headers the last request sent here kept, its Content-Length (None:
        # none), and the Headers made of them once a second request repeated them (see
        # Routing.build). One a way: the memory is bounded.
        self.last: tuple[list[tuple[Any, Any]] | None, str | None, Any] = (None, None, None)
        self.make = module.Headers


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
        self.failover = failover
        self.telemetry = failover.telemetry  # a Failover's telemetry is fixed: read it once
        self.limit = max_body_bytes
        # The inner transports whose every socket operation keeps to the attempt's time: the
        # ones swerve makes, and an upstream's own httpx / httpx2 HTTPTransport.
        self.clamped: set[int] = set()
        # The inner transports whose sends an async attempt may cancel when it runs out of time
        # (the rest are left to end by themselves: see AsyncFailoverTransport).
        self.cut_safe: set[int] = set()
        for up in self.upstreams.values():
            if up.transport is not None:
                self._bound(up.transport)
        self._ways: dict[tuple[str, str], _Way] = {}  # by flavour and route
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
        raw = headers.raw
        # Every name lowered at once, none decoded: what each attempt filters the headers by.
        # Split apart, the names line up with the headers unless one holds a line break
        # (then the count says so, and each is lowered by itself).
        joined = b"\n".join(map(_NAME, raw)).lower()
        names = joined.split(b"\n")
        if len(names) != len(raw):
            names = [name.lower() for name, _ in raw]
        # Most requests carry none of swerve's headers: the joined names say so at once (a
        # name that only contains the prefix costs a lookup by name, never a wrong answer).
        own = _SWERVE_RAW in joined
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
        # A UTF-8 body that is one JSON value, nothing around it, is read as json.loads would
        # read it, in C; any other (whitespace, another encoding, an error) is json.loads's own,
        # with its own error.
        try:
            text = content.decode()
            body, end = SCAN_JSON(text, 0)
            read = end == len(text)
        except Exception:
            read = False
        if not read:
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
        return Plan(route, body, body.get("stream") is True, bool(pinned), off, raw, names, own)

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
        if module is None:
            module = flavour_of(request)
        way = self._ways.get((module.__name__, route))
        if way is None:
            way = self._way(module, route)
        body = dict(plan.body)
        body["model"] = model = way.model
        moved = route != plan.route
        if moved or way.fixes:  # else no rule could change the body: none is run
            body = prepare_for_route(
                body,
                JsonRules(way.wire, model),
                route=route,
                moved=moved,
                telemetry=self.telemetry,
            )
        origin = way.origin
        attempt.report_request(model, origin[1], origin[2])  # what the spans name
        # The client's own credentials are for the host it addressed: they go to an upstream
        # only when it has no api_key of its own and is that very host, never to a fallback
        # provider elsewhere.
        drop = way.drop_own if way.keyless and _origin_of(request.url) == origin else way.drop
        if plan.marked:  # swerve's own headers never leave
            kept = [
                header
                for header, name in zip(plan.raw, plan.names, strict=True)
                if name not in drop and not name.startswith(_SWERVE_RAW)
            ]
        else:  # the filter in C: no Python code runs per header
            kept = list(compress(plan.raw, map(not_, map(drop.__contains__, plan.names))))
        extensions = dict(request.extensions)
        extensions.pop("swerve", None)
        total, read = attempt.timeout, attempt.read_timeout
        if total is not None or read is not None:
            # The client's httpx timeouts, each cut to the attempt's limits (written out:
            # every attempt with limits comes here).
            if read is None or (total is not None and total < read):
                read = total
            given = extensions.get("timeout")
            if not isinstance(given, dict):
                given = {}
            c, r, w, p = (
                given.get("connect"),
                given.get("read"),
                given.get("write"),
                given.get("pool"),
            )
            extensions["timeout"] = {
                "connect": total if c is None else c if total is None or c <= total else total,
                "read": read if r is None else r if read is None or r <= read else read,
                "write": total if w is None else w if total is None or w <= total else total,
                "pool": total if p is None else p if total is None or p <= total else total,
            }
        content = "".join(_ENCODE_CHUNKS(body, 0)).encode()
        # What Request(content=...) would add, added here: the body's length, last (given a
        # ready stream, httpx adds nothing). A client's Transfer-Encoding is kept (it is no
        # credential): then no length either.
        size = str(len(content)) if way.sized and b"transfer-encoding" not in plan.names else None
        # The Host header first, as httpx puts it, then the client's, the upstream's, the
        # length. A client sends the same headers request after request: from the second on,
        # Headers made ready serve (Request copies them, normalizing none again; the copy is
        # the one sent), with this body's length in the place of theirs. Headers that never
        # repeat are sent as they come, at the cost of one comparison.
        last = way.last
        seen = last[0] == kept and (last[1] is None) == (size is None)
        if seen and last[2] is not None:
            headers: Any = last[2]
        else:
            headers = [*way.lead, *kept, *way.tail]
            if size is not None:
                headers.append((b"Content-Length", size))
            if seen:
                headers = way.make(headers)
            last = way.last = (kept, size, headers if seen else None)
        built = module.Request(
            request.method,
            way.url,
            headers=headers,
            stream=module.ByteStream(content),  # what read() leaves any other stream as
            extensions=extensions,
        )
        if size is not None and size != last[1]:
            built.headers["Content-Length"] = size
        built.read()  # as Request(content=...) does: .content is there for whoever reads it
        return built

    def _way(self, module: Flavour, route: str) -> _Way:
        """What every request to ``route`` from a client of ``module``'s shares: worked out on
        the first one (parsing a URL costs more than the rest of the rewrite)."""
        way = self._ways[(module.__name__, route)] = _Way(
            module, route, self.upstreams[route], self.targets[route][0]
        )
        return way

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
        self._bound(transport)
        return transport

    def _bound(self, transport: object) -> None:
        """Clamp ``transport``'s sockets to the attempts' time where it can be, and note what
        its pool allows (``clamped``, ``cut_safe``)."""
        if install(transport):
            self.clamped.add(id(transport))
        if cut_safe(transport):
            self.cut_safe.add(id(transport))

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
