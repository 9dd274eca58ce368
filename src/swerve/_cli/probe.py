"""``swerve health``: probe every configured route through the failover transport."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httpx

from .._engine.config import FallbackConfig
from .._health.store import MemoryHealth
from ..httpx import ROUTE_HEADER, SWITCH_HEADER, FailoverTransport, Upstream

__all__ = ["Probe", "probe"]

SKIP_ENV = "SWERVE_HEALTH_SKIP_PROBES"


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
    from .._telemetry.redact import redact

    return redact(f"{type(exc).__name__}: {exc}", 120)


def _short_body(response: httpx.Response) -> str:
    from .._telemetry.redact import redact

    try:
        data = response.json()
        error = data.get("error") if isinstance(data, dict) else None
        message = error.get("message") if isinstance(error, dict) else error
        text = str(message or data)
    except ValueError:
        text = response.text
    return redact(text, 120)
