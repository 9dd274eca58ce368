"""The fake provider's HTTP server: a threaded server on a random port of 127.0.0.1 that can
cut off and join every request thread when it stops."""

from __future__ import annotations

import contextlib
import socket
import socketserver
import sys
import threading
from http.server import ThreadingHTTPServer
from typing import Any

from ._handler import Handler
from ._providers import Providers

__all__ = ["Server"]

# Ports earlier servers of this process listened on. LangChain caches its default httpx clients
# by base_url, so a later server on a reused port would meet an earlier test's pooled
# connections: dead sockets, or ones bound to a closed event loop.
_HANDED_OUT: set[int] = set()
_HANDED_OUT_LOCK = threading.Lock()
_TRIES = 64


class Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 64

    def __init__(self, providers: Providers, stopping: threading.Event) -> None:
        self.providers = providers
        self.stopping = stopping  # the FakeProvider's: set by stop(), it ends slow-fault delays
        self._lock = threading.Lock()
        self._workers: set[threading.Thread] = set()
        self._connections: set[socket.socket] = set()
        super().__init__(("127.0.0.1", 0), Handler)

    def server_bind(self) -> None:
        # HTTPServer.server_bind does a reverse DNS lookup of the host; skip it.
        held: list[socket.socket] = []  # ports taken before: bound until done, so not re-offered
        try:
            for _ in range(_TRIES):
                self.server_address = ("127.0.0.1", 0)  # the last bind wrote its port here
                socketserver.TCPServer.server_bind(self)
                port = self.socket.getsockname()[1]
                with _HANDED_OUT_LOCK:
                    if port not in _HANDED_OUT:
                        _HANDED_OUT.add(port)
                        break
                held.append(self.socket)
                self.socket = socket.socket(self.address_family, self.socket_type)
            else:
                raise OSError(f"no port on 127.0.0.1 unused by this process in {_TRIES} tries")
        finally:
            for old in held:
                old.close()
        self.server_name, self.server_port = "127.0.0.1", self.server_address[1]

    def process_request(self, request: Any, client_address: Any) -> None:
        # Like ThreadingMixIn, but remember threads and sockets so stop() can end and join them.
        worker = threading.Thread(
            target=self._work,
            args=(request, client_address),
            name="swerve-fake-request",
            daemon=True,
        )
        with self._lock:
            self._workers.add(worker)
            self._connections.add(request)
        worker.start()

    def _work(self, request: Any, client_address: Any) -> None:
        try:
            self.process_request_thread(request, client_address)
        finally:
            with self._lock:
                self._workers.discard(threading.current_thread())
                self._connections.discard(request)

    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], OSError):
            return  # the client went away (or stop() cut it off): expected, stay quiet
        super().handle_error(request, client_address)

    def close_connections(self) -> None:
        """Unblock every handler (idle keep-alive reads included), then join them."""
        with self._lock:
            connections, workers = list(self._connections), list(self._workers)
        for conn in connections:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        for worker in workers:
            worker.join(timeout=5.0)
