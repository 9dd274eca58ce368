"""The fake provider: a threaded HTTP server on 127.0.0.1 with per-provider replies and faults.

This module is its control surface; the state lives in ``_providers``, the server in
``_http_server`` and the request handling in ``_handler``."""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from types import TracebackType
from typing import TYPE_CHECKING, Self

from ._http_server import Server
from ._model import Fault, Reply, describe
from ._providers import Providers, check_name
from ._wires import Body

if TYPE_CHECKING:
    import httpx

__all__ = ["FakeProvider"]


class FakeProvider:
    """A fake LLM provider server with fault injection, for testing failover.

    Serves any number of named providers (created on first use) on one random port of
    127.0.0.1. Each provider speaks both wires: OpenAI chat completions at
    ``POST /<provider>/v1/chat/completions`` (SDK ``base_url=f"{fake.url(p)}/v1"``) and
    Anthropic messages at ``POST /<provider>/v1/messages`` (SDK ``base_url=fake.url(p)``),
    JSON or SSE, plus ``GET /<provider>/v1/models`` for health probes.

    Each completion request takes the next step (a :class:`Fault` or a :class:`Reply`) of its
    model's :meth:`script` on the provider, else of the provider's script, else the standing
    fault (:meth:`set_fault`, default ok) and reply (:meth:`set_reply`). Requests the real
    API would reject (body not JSON, no ``model`` / ``messages``, empty text blocks) get a
    400 before any fault applies and consume no step. ``/v1/models`` obeys only a standing
    status, reset or hang fault.

    Use it as a context manager (``with FakeProvider() as fake:``) or call :meth:`start`
    and :meth:`stop`; the pytest fixture ``fake_provider`` does it for you. Or serve nothing:
    :meth:`transport` and :meth:`async_transport` answer httpx clients in this process.
    """

    def __init__(self) -> None:
        self._providers = Providers()
        self._server: Server | None = None
        self._thread: threading.Thread | None = None
        # Set by stop(): ends the pauses of slow faults, served or in-process.
        self._stopping = threading.Event()

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def start(self) -> None:
        """Bind a random port on 127.0.0.1 and serve in a background thread."""
        if self._server is not None:
            raise RuntimeError("FakeProvider is already running")
        self._stopping.clear()
        self._server = Server(self._providers, self._stopping)
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.01},  # stop() waits up to one poll interval: keep it short
            name="swerve-fake-provider",
            daemon=True,
        )
        self._thread.start()

    def stop(self) -> None:
        """Stop serving, release hung and slow requests (in-process ones too), and join every
        server thread."""
        self._stopping.set()
        self._providers.release_all()
        server, thread = self._server, self._thread
        if server is None or thread is None:
            return
        self._server = self._thread = None
        server.shutdown()
        server.close_connections()
        server.server_close()
        thread.join()

    def transport(self) -> httpx.BaseTransport:
        """An httpx transport that answers in this process, with no server and no socket, as
        ``httpx.MockTransport`` does: ``httpx.Client(transport=fake.transport())``.

        It routes on the URL's path alone (``/<provider>/v1/chat/completions``,
        ``/<provider>/v1/messages``, ``GET /<provider>/v1/models``), so any host will do, and
        serves the same replies, faults and scripts as the server, recording what arrives
        alike. A hang or a pause longer than the request's read timeout raises
        ``httpx.ReadTimeout``; a dropped stream, ``httpx.RemoteProtocolError``; :meth:`stop`
        releases both. The faults about the connection, its bytes or its headers need the
        served fake and raise NotImplementedError: ``reset``, ``reset_after``,
        ``cut_after_bytes``, ``bad_chunking``, ``wrong_content_type``, ``gzip``, ``dribble``
        and ``echo_headers``. It works whether or not the server is started.
        """
        from ._in_process import InProcessTransport  # httpx only for those who ask

        return InProcessTransport(self._providers, self._stopping)

    def async_transport(self) -> httpx.AsyncBaseTransport:
        """:meth:`transport` for an ``httpx.AsyncClient``: the same answers, on the event loop.
        Its waits are ``asyncio.sleep``: a task cancelled mid-wait ends at once, a hang ends
        when :meth:`set_fault` or :meth:`stop` releases it, and a slow fault's pauses run out."""
        from ._in_process import AsyncInProcessTransport

        return AsyncInProcessTransport(self._providers)

    @property
    def port(self) -> int:
        """The port the server listens on (only while running)."""
        if self._server is None:
            raise RuntimeError(
                "FakeProvider is not running; call start() first "
                "(its in-process transport() needs no server: any host will do)"
            )
        return self._server.server_port

    def url(self, provider: str) -> str:
        """``http://127.0.0.1:PORT/<provider>``: the Anthropic base URL; add ``/v1`` for OpenAI."""
        check_name(provider)
        return f"http://127.0.0.1:{self.port}/{provider}"

    # The request handlers read what these store on the server's threads: a wrong type is
    # refused here, at the call, where a traceback points at the test that made it.

    def set_reply(self, provider: str, reply: Reply) -> None:
        """What ``provider`` answers from now on when no fault and no scripted reply applies."""
        _expect("set_reply", "reply", reply, Reply, "Reply(text='hi')")
        self._providers.set_reply(provider, reply)

    def set_fault(self, provider: str, fault: Fault) -> None:
        """The standing fault of ``provider``; also releases its hung requests."""
        _expect("set_fault", "fault", fault, Fault, "Fault.status(503)")
        self._providers.set_fault(provider, fault)

    def script(
        self, provider: str, steps: Iterable[Fault | Reply], *, model: str | None = None
    ) -> None:
        """Replace ``provider``'s script: completion request k takes ``steps[k]``, then the
        standing fault and reply apply again (:meth:`set_fault`, :meth:`set_reply`).

        A :class:`Fault` step fails that request on the standing reply; a :class:`Reply` step
        answers it with that reply and no fault (whatever the standing fault is). With
        ``model``, the script is only for requests whose body names that ``model``, and is
        consumed before the provider-wide one; each model's script is replaced on its own.
        ``[]`` clears the script. Also releases ``provider``'s hung requests.
        """
        if isinstance(steps, Fault | Reply | str | bytes | Mapping) or not isinstance(
            steps, Iterable
        ):
            raise TypeError(
                "script(): steps must be a list of Fault or Reply, e.g. "
                f"[Fault.status(503), Reply(text='hi')], got {describe(steps)}"
            )
        _check_model("script", model)
        queue = list(steps)
        for i, step in enumerate(queue):
            if not isinstance(step, Fault | Reply):
                raise TypeError(
                    f"script(): steps[{i}] must be a Fault or a Reply, e.g. Fault.status(503) "
                    f"or Reply(text='hi'), got {describe(step)}"
                )
        self._providers.script(provider, queue, model)

    def remaining(self, provider: str, *, model: str | None = None) -> int:
        """How many steps of ``provider``'s script (or of ``model``'s script on it) are left."""
        _check_model("remaining", model)
        return self._providers.remaining(provider, model)

    def requests(self, provider: str) -> int:
        """How many completion requests ``provider`` received, failed and invalid ones included."""
        return len(self._providers.received(provider))

    def received(self, provider: str) -> list[Body]:
        """The JSON bodies ``provider`` received, in order (``{"_raw": text}`` if not JSON)."""
        return self._providers.received(provider)

    def received_headers(self, provider: str) -> list[dict[str, str]]:
        """The request headers (lower-case names), parallel to :meth:`received`."""
        return self._providers.received_headers(provider)

    def reset_counts(self) -> None:
        """Forget every received request (replies, faults and scripts stay)."""
        self._providers.reset_counts()

    def wait_for_requests(self, provider: str, n: int, timeout: float = 5.0) -> bool:
        """Block until ``provider`` has received at least ``n`` requests; False on timeout."""
        return self._providers.wait_for_requests(provider, n, timeout)


def _expect(method: str, name: str, value: object, kind: type, example: str) -> None:
    if not isinstance(value, kind):
        raise TypeError(
            f"{method}(): {name} must be a {kind.__name__}, e.g. {example}, got {describe(value)}"
        )


def _check_model(method: str, model: object) -> None:
    if model is None:
        return
    if not isinstance(model, str):
        raise TypeError(
            f"{method}(): model must be a str (the request body's model) or None, "
            f"got {describe(model)}"
        )
    if not model:
        raise ValueError(f"{method}(): model must not be empty; pass None for every model")
