"""The public types of swerve.httpx: the Upstream, its wire, its errors, swerve's headers."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

Wire = Literal["openai", "anthropic"]
ROUTE_HEADER = "x-swerve-route"
"""Pin one request to a route: no swaps, no walking past a cooling route."""
SWITCH_HEADER = "x-swerve-failover"
"""``off`` sends one request to its route once, without swerve's retries or swaps."""

_ENDPOINTS: dict[str, str] = {"openai": "/chat/completions", "anthropic": "/v1/messages"}


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


# Public under swerve.httpx, where they are documented, pickled from, and named in error.type.
for _cls in (Upstream, UpstreamStatusError, ResponseTooLarge):
    _cls.__module__ = "swerve.httpx"
