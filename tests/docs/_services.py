"""The real services the docs name, for the blocks that name them: a ``redis-server`` for the
fleet page's ``redis://localhost:6379/0`` and an OTLP/HTTP receiver for the observability
page's ``OTLPSpanExporter()``.

Like :mod:`._redirect`, the docs' text is left as written: a redis-py connection to
``localhost:6379`` is sent to the test's server at the innermost layer (the connection's host
and port), and the exporter finds the receiver through ``OTEL_EXPORTER_OTLP_ENDPOINT``, the
variable the page says it reads. After the page, the test asserts that what the blocks built
reached the real thing.
"""

from __future__ import annotations

import gzip
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import redis.connection
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from swerve import RedisHealth

from .._local import wait_for
from ..fleet._servers import RedisServer

__all__ = ["DOCS_ROUTE", "DocsRedis", "OtlpReceiver", "docs_redis"]

# What the harness writes through each store a block built, just before the block closes it:
# the blocks build and close stores without a call, and a store that wrote proves the URL
# and prefix of the text reach the server.
DOCS_ROUTE = "docs/written"
_LOCAL = {"localhost", "127.0.0.1"}


class DocsRedis:
    """A real redis-server on a free port, and the stores the blocks built against it."""

    def __init__(self, home: Path) -> None:
        self.server = RedisServer(home)
        self.closed: list[str] = []  # the prefix of each store that was shared, wrote, closed

    def prefixes(self) -> set[str]:
        """The prefixes swerve's keys in the server are under (``{prefix:route}:kind``)."""
        keys = [key.decode() for key in self.server.client().scan_iter(match="{*}:*")]
        return {key[1 : key.index("}")].rpartition(":")[0] for key in keys}


@contextmanager
def docs_redis(monkeypatch: pytest.MonkeyPatch) -> Iterator[DocsRedis]:
    with tempfile.TemporaryDirectory(prefix="swerve-docs-redis-") as home:
        docs = DocsRedis(Path(home))
        try:
            _redirect_redis(monkeypatch, docs)
            yield docs
        finally:
            docs.server.stop()


def _redirect_redis(monkeypatch: pytest.MonkeyPatch, docs: DocsRedis) -> None:
    init: Any = redis.connection.Connection.__init__
    port = docs.server.port

    def connect_to_the_test_server(self: Any, *args: Any, **kwargs: Any) -> None:
        host, wanted = kwargs.get("host", "localhost"), int(kwargs.get("port", 6379))
        # The docs' tests never leave the machine: a block naming another Redis fails.
        if host not in _LOCAL:
            raise AssertionError(f"a doc block connects to Redis at {host}: not the test's")
        if wanted == 6379:
            kwargs.update(host="127.0.0.1", port=port)
        init(self, *args, **kwargs)

    close = RedisHealth.close

    def close_after_a_write(self: RedisHealth) -> None:
        if not self.wait_until_shared(10):
            raise AssertionError(f"a doc block's RedisHealth on {self.description} never shared")
        now = time.time()
        self.drain(DOCS_ROUTE, until=now + 3600, now=now)
        docs.closed.append(self._wire._prefix)
        close(self)

    monkeypatch.setattr(redis.connection.Connection, "__init__", connect_to_the_test_server)
    monkeypatch.setattr(RedisHealth, "close", close_after_a_write)


class OtlpReceiver:
    """An OTLP/HTTP trace receiver on 127.0.0.1: it decodes each ``ExportTraceServiceRequest``
    (protobuf, as the HTTP exporter sends it) and keeps its resource spans."""

    def __init__(self) -> None:
        self.requests: list[ExportTraceServiceRequest] = []
        received = self.requests

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                ok = self.path == "/v1/traces"
                if ok:
                    received.append(ExportTraceServiceRequest.FromString(body))
                self.send_response(200 if ok else 404)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                return None

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def spans(self) -> list[tuple[dict[str, Any], str, str]]:
        """(resource attributes, instrumentation scope, span name) of every span received."""
        out = []
        for request in list(self.requests):
            for resource_spans in request.resource_spans:
                resource = {a.key: a.value.string_value for a in resource_spans.resource.attributes}
                for scope_spans in resource_spans.scope_spans:
                    scope = scope_spans.scope.name
                    out += [(resource, scope, span.name) for span in scope_spans.spans]
        return out

    def wait_for_spans(self, timeout: float = 10) -> list[tuple[dict[str, Any], str, str]]:
        return wait_for("spans at the OTLP receiver", self.spans, timeout=timeout)

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()
