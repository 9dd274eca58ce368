"""The public types of swerve.httpx: the Upstream, its wire, its errors, swerve's headers; and
which upstream each live transport serves a route name with, per health store."""

from __future__ import annotations

import gc
import hashlib
import itertools
import json
import threading
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from .._engine.config import FallbackConfig
from .._engine.policy import walk

Wire = Literal["openai", "anthropic"]
ROUTE_HEADER = "x-swerve-route"
"""On a request: pin it to a route (no swaps, no walking past a cooling route). On a response
the transport served: the route that answered, the one to pin to get it again."""
SWITCH_HEADER = "x-swerve-failover"
"""``off`` sends one request to its route once, without swerve's retries or swaps."""
ATTEMPTS_HEADER = "x-swerve-attempts"
"""On a response the transport served: how many attempts the call made (for a stream, by the
time its response was handed over)."""
REQUESTED_HEADER = "x-swerve-requested"
"""On a response the transport served from another route than the one requested: that one."""
SWERVE_PREFIX = "x-swerve-"
"""Every header of this prefix is swerve's: never sent to a provider, never taken from one."""


def check_chains(config: FallbackConfig | None, wires: Mapping[str, str]) -> None:
    """Refuse every route a call could start on or swap to that ``wires`` (route -> wire)
    cannot serve: no upstream, or another wire (swerve does not translate between wires)."""
    if config is None or not config.enabled:
        return
    kinds = [None, *config.fallbacks_by_failure]  # the plain map, then each kind's map
    for kind, requested in ((k, r) for k in kinds for r in wires):
        # The whole walk, not max_swaps steps of it: a call starts on, or swaps to, the
        # first route of the walk that is not degraded, however far along it is.
        for current, target in itertools.pairwise(walk(config, requested, requested, kind)):
            if target not in wires:
                raise ValueError(f"route {current} falls back to {target}, which has no Upstream")
            if wires[target] != wires[current]:
                raise ValueError(
                    f"route {current} ({wires[current]} wire) falls back to {target} "
                    f"({wires[target]} wire): swerve does not translate "
                    "between wires; map routes of the same wire to each other"
                )


ENDPOINTS: dict[str, str] = {"openai": "/chat/completions", "anthropic": "/v1/messages"}


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
        if self.wire not in ENDPOINTS:
            raise ValueError(f"Upstream.wire must be 'openai' or 'anthropic', got {self.wire!r}")
        if not self.base_url.startswith(("http://", "https://")):
            raise ValueError(f"Upstream.base_url must be an http(s) URL, got {self.base_url!r}")
        object.__setattr__(self, "base_url", self.base_url.rstrip("/"))
        for name in self.headers:
            if str(name).lower().startswith(SWERVE_PREFIX):
                raise ValueError(
                    f"Upstream.headers: {name!r} is one of swerve's own headers (every "
                    "x-swerve-* header is swerve's): it is never sent to a provider"
                )

    @property
    def endpoint(self) -> str:
        return self.base_url + ENDPOINTS[self.wire]


# Which upstream each live transport serves a route name with, per health store: cooldowns are
# keyed by route name, so two upstreams under one name in one store would cool each other.
_Identity = tuple[str, str | None]
_SERVED: dict[tuple[int, str], dict[int, _Identity]] = {}
_SERVED_LOCK = threading.Lock()
_TOKENS = itertools.count()


def claim_routes(
    owner: object, store: object, upstreams: Mapping[str, Upstream]
) -> Callable[[], Any]:
    """Record that ``owner`` serves each route of ``upstreams`` from ``store``, or raise
    ValueError when another live owner on the same store serves one of those route names with
    another base URL or API key. The claim ends when the returned function is called (the
    transport is closed) or ``owner`` is garbage-collected."""
    keys = [(id(store), route) for route in upstreams]
    claimed = _claim(owner, keys, upstreams)
    if isinstance(claimed, tuple):
        gc.collect()  # an owner nobody can reach any more serves nothing: let it go first
        claimed = _claim(owner, keys, upstreams)
    if not isinstance(claimed, tuple):
        return claimed
    route, mine, theirs = claimed
    also = " with another API key" if mine == theirs else ""
    raise ValueError(
        f"route {route} is served by {mine}{also} here, and by {theirs} in another live "
        "transport that shares this health store: a cooldown learned on one would send the "
        "other's calls elsewhere. Close the other transport first, give each its own store "
        "(health=MemoryHealth()), or name the routes apart"
    )


def _claim(
    owner: object, keys: list[tuple[int, str]], upstreams: Mapping[str, Upstream]
) -> weakref.finalize[Any, Any] | tuple[str, str, str]:
    """The claim, or the conflict that refuses it (checked and claimed under one lock: two
    transports built at once on two threads)."""
    with _SERVED_LOCK:
        conflict = _conflict(keys, upstreams)
        if conflict is not None:
            return conflict
        token = next(_TOKENS)
        for key, upstream in zip(keys, upstreams.values(), strict=True):
            _SERVED.setdefault(key, {})[token] = _identity(upstream)
    return weakref.finalize(owner, _release, keys, token)


def _identity(upstream: Upstream) -> _Identity:
    """Where it sends and as whom: the base URL, and a hash of the key (never the key)."""
    key = upstream.api_key
    return upstream.base_url, hashlib.sha256(key.encode()).hexdigest() if key else None


def _conflict(
    keys: list[tuple[int, str]], upstreams: Mapping[str, Upstream]
) -> tuple[str, str, str] | None:
    """A route of ``upstreams`` another owner serves from the same store with another upstream:
    the route, the base URL given here, the other's."""
    for key, upstream in zip(keys, upstreams.values(), strict=True):
        mine = _identity(upstream)
        for other in _SERVED.get(key, {}).values():
            if other != mine:
                return key[1], mine[0], other[0]
    return None


def _release(keys: list[tuple[int, str]], token: int) -> None:
    with _SERVED_LOCK:
        for key in keys:
            claims = _SERVED.get(key, {})
            claims.pop(token, None)
            if not claims:
                _SERVED.pop(key, None)


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


# Public under swerve.httpx, where they are documented, pickled from, and named in error.type.
for _cls in (Upstream, UpstreamStatusError, ResponseTooLarge):
    _cls.__module__ = "swerve.httpx"
