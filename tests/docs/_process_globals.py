"""Process-wide set-up a doc block does (a global tracer or meter provider, a metrics server),
kept to the block's own test: the providers are taken and shut down instead of installed (the
OTel globals can be set once per process, and the rest of the suite owns them), and a metrics
server binds a free port instead of a fixed one that a CI host may have taken."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import prometheus_client
import pytest
from opentelemetry import metrics, trace

__all__ = ["contained_globals"]


@contextmanager
def contained_globals(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Any]]:
    """Yields the providers the blocks set, for the checks after the document."""
    providers: list[Any] = []
    servers: list[Any] = []
    start_http_server = prometheus_client.start_http_server

    def start_on_free_port(port: int, *args: Any, **kwargs: Any) -> Any:
        started = start_http_server(0, *args, **kwargs)
        servers.append(started)
        return started

    monkeypatch.setattr(trace, "set_tracer_provider", providers.append)
    monkeypatch.setattr(metrics, "set_meter_provider", providers.append)
    monkeypatch.setattr(prometheus_client, "start_http_server", start_on_free_port)
    try:
        yield providers
    finally:
        for server, thread in servers:
            server.shutdown()
            server.server_close()
            thread.join()
        for provider in providers:
            provider.shutdown()
