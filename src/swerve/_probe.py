"""``swerve health``: probe every configured route through the failover transport."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import urlsplit

import httpx
from pydantic import BaseModel, ConfigDict, ValidationError

from ._config import ConfigError, FallbackConfig
from ._routes import Route
from .health import MemoryHealth
from .httpx import ROUTE_HEADER, SWITCH_HEADER, FailoverTransport, Upstream

__all__ = ["Probe", "UpstreamSpec", "load_file", "probe"]

SKIP_ENV = "SWERVE_HEALTH_SKIP_PROBES"


class UpstreamSpec(BaseModel):
    """An upstream as written in a config file: the key is named, never written."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    base_url: str
    wire: Literal["openai", "anthropic"] = "openai"
    api_key_env: str | None = None
    model: str | None = None
    headers: dict[str, str] = {}


def load_file(data: object, source: str) -> tuple[FallbackConfig, dict[str, Upstream]]:
    """Split a config file into its FallbackConfig and its upstreams (keys read from the env)."""
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: expected a JSON object, got {type(data).__name__}")
    data = dict(data)
    raw = data.pop("upstreams", {})
    config = FallbackConfig.from_mapping(data, source=source)
    if not isinstance(raw, dict):
        raise ConfigError(f"{source}: upstreams: expected an object of route -> upstream")
    upstreams: dict[str, Upstream] = {}
    for route, spec in raw.items():
        where = f"{source}: upstreams[{route!r}]"
        if isinstance(spec, dict) and "api_key" in spec:
            raise ConfigError(
                f"{where}: api_key does not belong in a file; put the key in an environment "
                "variable and name it in api_key_env"
            )
        try:
            Route.parse(route)
            parsed = UpstreamSpec.model_validate(spec)
            key = os.environ.get(parsed.api_key_env) if parsed.api_key_env else None
            if parsed.api_key_env and not key:
                raise ConfigError(f"{where}: ${parsed.api_key_env} is not set")
            upstreams[route] = Upstream(
                parsed.base_url, parsed.wire, key, parsed.model, parsed.headers
            )
        except ValidationError as exc:
            first = exc.errors(include_url=False)[0]
            field = ".".join(str(p) for p in first["loc"])
            raise ConfigError(f"{where}.{field}: {first['msg']}") from None
        except ValueError as exc:
            if isinstance(exc, ConfigError):
                raise
            raise ConfigError(f"{where}: {exc}") from None
    return config, upstreams


@dataclass(frozen=True, slots=True)
class Probe:
    route: str
    ok: bool
    status: str
    latency_s: float | None
    error: str = ""


def probe(
    upstreams: Mapping[str, Upstream],
    config: FallbackConfig,
    *,
    timeout: float = 20.0,
    skip_probes: bool | None = None,
    on_done: Any = None,
) -> list[Probe]:
    """Probe each route in parallel; ``skip_probes`` (or $SWERVE_HEALTH_SKIP_PROBES=1) only
    checks that each upstream's host accepts a connection."""
    if skip_probes is None:
        skip_probes = os.environ.get(SKIP_ENV, "") not in ("", "0", "false")
    check = _reachable if skip_probes else _complete
    # Each probe is pinned to its route, so the map plays no part (and may cross wires, which
    # a LangChain user's config can); a private health store keeps probes out of real state.
    probing = config.model_copy(update={"fallbacks": {}})
    transport = FailoverTransport(upstreams, probing, health=MemoryHealth())
    with httpx.Client(transport=transport, timeout=timeout) as client:

        def run(route: str) -> Probe:
            result = check(client, route, upstreams[route], timeout)
            if on_done is not None:
                on_done(result)
            return result

        with ThreadPoolExecutor(max_workers=min(16, max(len(upstreams), 1))) as pool:
            return list(pool.map(run, sorted(upstreams)))


def _complete(client: httpx.Client, route: str, upstream: Upstream, timeout: float) -> Probe:
    """A minimal real completion on exactly this route (pinned, no swerve retries)."""
    body: dict[str, Any] = {
        "model": route,
        "max_tokens": 1,
        "messages": [{"role": "user", "content": "ping"}],
    }
    headers = {ROUTE_HEADER: route, SWITCH_HEADER: "off"}
    if upstream.wire == "anthropic":
        headers["anthropic-version"] = "2023-06-01"
    url = upstream.endpoint
    start = time.monotonic()
    try:
        response = client.post(url, json=body, headers=headers)
    except Exception as exc:  # every failure is a row in the table, not a crash
        return Probe(route, False, "error", None, _short(exc))
    latency = time.monotonic() - start
    if response.status_code >= 400:
        return Probe(route, False, str(response.status_code), latency, _short_body(response))
    return Probe(route, True, str(response.status_code), latency)


def _reachable(client: httpx.Client, route: str, upstream: Upstream, timeout: float) -> Probe:
    parts = urlsplit(upstream.base_url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    start = time.monotonic()
    try:
        with socket.create_connection((parts.hostname or "", port), timeout=min(timeout, 5.0)):
            pass
    except OSError as exc:
        return Probe(route, False, "unreachable", None, _short(exc))
    return Probe(route, True, "reachable", time.monotonic() - start)


def _short(exc: BaseException) -> str:
    from ._redact import redact

    return redact(f"{type(exc).__name__}: {exc}", 120)


def _short_body(response: httpx.Response) -> str:
    from ._redact import redact

    try:
        data = response.json()
        error = data.get("error") if isinstance(data, dict) else None
        message = error.get("message") if isinstance(error, dict) else error
        text = str(message or data)
    except ValueError:
        text = response.text
    return redact(text, 120)
