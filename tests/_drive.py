"""Sync or async behind one set of blocking calls: the suite's one sync/async harness.

The pattern of opentelemetry-instrumentation-httpx's ``BaseTestCases``, as a fixture (``mode``,
tests/conftest.py): a test body talks to a :class:`Mode` and runs unchanged both ways.

- The transport: over ``FailoverTransport`` under ``httpx.Client`` / ``openai.OpenAI`` /
  ``anthropic.Anthropic``, or over ``AsyncFailoverTransport`` under their async twins
  (:meth:`Mode.client`, :meth:`Mode.openai`, :meth:`Mode.anthropic`), against the served
  :class:`~swerve.testing.FakeProvider`: there HTTP is the subject.
- The engine: ``Failover.call`` / ``stream`` / ``collect`` or ``acall`` / ``astream``
  (:meth:`Mode.call`, :meth:`Mode.stream`, ...), once :meth:`Mode.over` gives it an
  :class:`InProcessProvider`: the fake's replies and faults with no server, since the
  engine's decisions do not depend on a socket.

Async calls are each awaited to their end on the mode's one event loop.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import anthropic
import httpx
import openai
import pytest

from swerve import Attempt, Failover, FallbackConfig, Result, StreamReset, StreamSpec
from swerve.adapters import InStreamError
from swerve.httpx import AsyncFailoverTransport, FailoverTransport
from swerve.testing import FakeProvider, Reply

from . import _wire

SWERVE = "http://swerve.invalid"
P = "primary/model-a"  # the engine's requested route, unless a test names another
Chunks = Callable[[Attempt], Iterator[Any]]

# The transport tests' routes, on both wires, and their config.
OR, BK = "openrouter/anthropic/claude-sonnet-5", "backup/claude-sonnet-5"  # OpenAI wire
AN, AB = "anthropic/claude-sonnet-5", "anthropic-backup/claude-sonnet-5"  # Anthropic wire
MESSAGES = [{"role": "user", "content": "hi"}]
# A real-time limit that also bounds a healthy fallback (its whole answer, its first token, the
# gaps in its stream): one second. A loaded 2-CPU CI box has cut a fallback's ordinary answer
# at 0.5 s. The hanging side still waits its limit out; a limit where every route hangs, and
# no answer is due, may be shorter.
ANSWERING_LIMIT_S = 1.0
TRANSPORT_CONFIG = FallbackConfig(
    fallbacks={OR: BK, AN: AB}, max_retries=1, max_swaps=1, jitter=False, cooldown_s=30
)


class Mode:
    """Sync or async: the transports, clients and SDKs of one flavour, closed together."""

    def __init__(self, sync: bool) -> None:
        self.sync = sync
        self.runner = None if sync else asyncio.Runner()
        self.open: list[Any] = []  # clients to close at the end
        self.fake: InProcessProvider | None = None  # what the engine calls, once given

    def __repr__(self) -> str:
        return "sync" if self.sync else "async"

    def run(self, call: Any) -> Any:
        """An async call (a coroutine) awaited to its end; a sync call's value as it is."""
        if self.runner is None:
            return call
        assert isinstance(call, Coroutine)
        return self.runner.run(call)

    def at_once(self, n: int, make: Callable[[], Any], *, at_most: int | None = None) -> list[Any]:
        """``make()`` ``n`` times at once: sync, each in a thread (released together); async,
        ``make()`` returns a coroutine and they are gathered. Their values, in order.

        With ``at_most``, no more than that many run at a time (a pool of that many threads, or
        a semaphore around each coroutine), for counts too large for a thread each."""
        if self.runner is None:
            if n == 1:
                return [make()]
            if at_most is not None:
                with ThreadPoolExecutor(at_most) as pool:
                    return list(pool.map(lambda _: make(), range(n)))
            start = threading.Barrier(n)

            def one() -> Any:
                start.wait(timeout=30)
                return make()

            with ThreadPoolExecutor(n) as pool:
                futures = [pool.submit(one) for _ in range(n)]
                return [future.result(timeout=60) for future in futures]

        async def gather() -> list[Any]:
            gate = asyncio.Semaphore(at_most or n)

            async def gated() -> Any:
                async with gate:
                    return await make()  # made inside the gate: its own timing starts here

            return list(await asyncio.gather(*(gated() for _ in range(n))))

        return self.runner.run(gather())

    def transport(self, upstreams: Any, **kwargs: Any) -> Any:
        cls = FailoverTransport if self.sync else AsyncFailoverTransport
        return cls(upstreams, **kwargs)

    def client(
        self,
        upstreams: Any = None,
        *,
        module: Any = httpx,
        transport: Any = None,
        timeout: Any = None,
        **kwargs: Any,
    ) -> Client:
        """A client of ``module`` (httpx or httpx2) over a failover transport for
        ``upstreams`` (or over ``transport``; with neither, a plain client), with the
        client's own ``timeout`` when one is given."""
        if transport is None and upstreams is not None:
            transport = self.transport(upstreams, **kwargs)
        cls = module.Client if self.sync else module.AsyncClient
        options = {} if timeout is None else {"timeout": timeout}
        client = Client(self, cls(transport=transport, **options), module, transport)
        self.open.append(client)
        return client

    def openai(self, http: Client, base_url: str = f"{SWERVE}/v1", api_key: str = "x") -> OpenAI:
        return OpenAI(self, http, base_url, api_key)

    def anthropic(self, http: Client, base_url: str = SWERVE, api_key: str = "x") -> Anthropic:
        return Anthropic(self, http, base_url, api_key)

    def close(self) -> None:
        for client in reversed(self.open):
            client.close()
        if self.runner is not None:
            self.runner.close()

    # -- the engine, in-process ---------------------------------------------------------------

    def over(self, fake: InProcessProvider) -> Mode:
        """This mode, its engine calls served by ``fake``."""
        self.fake = fake
        return self

    @property
    def _fake(self) -> InProcessProvider:
        assert self.fake is not None, "the engine needs a fake: mode.over(fake)"
        return self.fake

    def call(
        self,
        fo: Failover,
        route: str = P,
        *,
        before: Callable[[Attempt], None] | None = None,
        pin: bool = False,
        on_client: Callable[[Any], None] | None = None,
    ) -> Result[str]:
        """One unary call; ``before(attempt)`` runs first on every attempt, ``on_client`` on
        the httpx client made for this call."""
        fake = self._fake

        def step(attempt: Attempt) -> None:
            if before is not None:
                before(attempt)

        if self.runner is None:
            with fake.client() as c:
                if on_client is not None:
                    on_client(c)

                def fn(attempt: Attempt) -> str:
                    step(attempt)
                    return _wire.complete(c, fake, attempt)

                return fo.call(route, fn, pin=pin)

        async def go() -> Result[str]:
            async with fake.async_client() as ac:
                if on_client is not None:
                    on_client(ac)

                async def afn(attempt: Attempt) -> str:
                    step(attempt)
                    return await acomplete(ac, fake, attempt)

                return await fo.acall(route, afn, pin=pin)

        result: Result[str] = self.runner.run(go())
        return result

    def calls(self, fo: Failover, n: int, route: str = P) -> list[Result[str]]:
        """``n`` calls at once (threads released together, or tasks gathered), on one client."""
        fake = self._fake
        if self.runner is None:
            with fake.client() as c:
                return self.at_once(n, lambda: fo.call(route, lambda a: _wire.complete(c, fake, a)))

        async def go() -> list[Result[str]]:
            async with fake.async_client() as ac:
                calls = (fo.acall(route, lambda a: acomplete(ac, fake, a)) for _ in range(n))
                return list(await asyncio.gather(*calls))

        results: list[Result[str]] = self.runner.run(go())
        return results

    def stream(
        self,
        fo: Failover,
        route: str = P,
        *,
        fn: Chunks | None = None,
        spec: StreamSpec[Any] | None = _wire.SPEC,
        mid_stream: Any = "error",
        out: list[Any] | None = None,
        take: int | None = None,
        seen: Callable[[Any], None] | None = None,
    ) -> Any:
        """Consume a stream (from the fake unless ``fn`` makes the chunks; async, ``fn`` is
        turned into an async function that yields to the loop between chunks). Each chunk is
        passed to ``seen`` as the consumer gets it, before it asks for the next, and goes to
        ``out``; ``take``: close the stream after that many. Returns the stream."""
        got: list[Any] = [] if out is None else out
        fake = self._fake
        if self.runner is None:
            with fake.client() as c:
                stream = fo.stream(
                    route, fn or (lambda a: _wire.chunks(c, fake, a)), spec, mid_stream=mid_stream
                )
                for chunk in stream:
                    if seen is not None:
                        seen(chunk)
                    got.append(chunk)
                    if len(got) == take:
                        stream.close()
                        break
            return stream

        async def go() -> Any:
            async with fake.async_client() as ac:
                afn = _async_chunks(fn) if fn else (lambda a: _wire.achunks(ac, fake, a))
                astream = fo.astream(route, afn, spec, mid_stream=mid_stream)
                async for chunk in astream:
                    if seen is not None:
                        seen(chunk)
                    got.append(chunk)
                    if len(got) == take:
                        await astream.aclose()
                        break
            return astream

        return self.runner.run(go())

    def collect(self, fo: Failover, *, fn: Chunks | None = None) -> Result[list[Any]]:
        """The chunks of the attempt that completed. Sync: :meth:`Failover.collect`. Async has
        no collect: an ``astream`` in restart mode, keeping what follows the last
        :class:`StreamReset`, which is what a consumer that honours resets is left with."""
        fake = self._fake
        if self.runner is None:
            with fake.client() as c:
                return fo.collect(P, fn or (lambda a: _wire.chunks(c, fake, a)), _wire.SPEC)
        chunks: list[Any] = []
        stream = self.stream(fo, fn=fn, mid_stream="restart", out=chunks)
        resets = [i for i, c in enumerate(chunks) if isinstance(c, StreamReset)]
        result: Result[list[Any]] = stream.result(chunks[resets[-1] + 1 :] if resets else chunks)
        return result

    def abort(self, fo: Failover) -> None:
        """The caller gives up on a call, then on a stream, while the primary hangs. Async
        cancels the task once its request is in (and checks no task outlives it); sync code
        is interrupted as Ctrl-C does, by a KeyboardInterrupt inside the attempt."""
        fake = self._fake
        if self.runner is None:

            def interrupt(attempt: Attempt) -> str:
                raise KeyboardInterrupt

            def interrupted(attempt: Attempt) -> Iterator[dict[str, Any]]:
                raise KeyboardInterrupt
                yield {}  # a generator function: the interrupt comes at the first chunk

            with pytest.raises(KeyboardInterrupt):
                fo.call(P, interrupt)
            stream = fo.stream(P, interrupted, _wire.SPEC)
            with pytest.raises(KeyboardInterrupt):
                next(stream)
            return

        async def go() -> None:
            before = asyncio.all_tasks()
            async with fake.async_client() as ac:
                task = asyncio.create_task(fo.acall(P, lambda a: acomplete(ac, fake, a)))
                assert await asyncio.to_thread(fake.wait_for_requests, "primary", 1, 5.0)
                task.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await task
                stream = fo.astream(P, lambda a: _wire.achunks(ac, fake, a), _wire.SPEC)
                task = asyncio.create_task(anext(stream))  # type: ignore[arg-type]
                assert await asyncio.to_thread(fake.wait_for_requests, "primary", 2, 5.0)
                task.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await task
            assert not [t for t in asyncio.all_tasks() - before if not t.done()]

        self.runner.run(go())


async def acomplete(client: httpx.AsyncClient, fake: FakeProvider, attempt: Attempt) -> str:
    """:func:`_wire.complete`, async: an error in a 200 body is an in-stream error too."""
    response = await client.post(_wire.url(fake, attempt), json=_wire.body(attempt))
    response.raise_for_status()
    data = response.json()
    if "error" in data:
        raise InStreamError(data)
    return str(data["choices"][0]["message"]["content"])


def _async_chunks(fn: Chunks) -> Callable[[Attempt], AsyncIterator[Any]]:
    async def achunks(attempt: Attempt) -> AsyncIterator[Any]:
        for chunk in fn(attempt):
            await asyncio.sleep(0)
            yield chunk

    return achunks


async def _read_whole(raw: Any, method: str, url: str, kwargs: dict[str, Any]) -> Any:
    async with raw.stream(method, url, **kwargs) as response:
        await response.aread()  # the body stays on the response: iter_lines() and read() work
    return response


@dataclass(frozen=True)
class Read:
    """A streamed response read piece by piece: its status (None when the read failed), the
    bytes received (up to the error, if any), the error and how long it all took."""

    status: int | None
    body: bytes
    error: BaseException | None
    elapsed: float


def _read_pieces(raw: Any, method: str, url: str, kwargs: dict[str, Any]) -> Read:
    t0, got = time.monotonic(), bytearray()
    try:
        with raw.stream(method, url, **kwargs) as response:
            for piece in response.iter_bytes():
                got += piece
    except Exception as exc:  # any error is the outcome under test: it is returned, not raised
        return Read(None, bytes(got), exc, time.monotonic() - t0)
    return Read(response.status_code, bytes(got), None, time.monotonic() - t0)


async def _aread_pieces(raw: Any, method: str, url: str, kwargs: dict[str, Any]) -> Read:
    t0, got = time.monotonic(), bytearray()
    try:
        async with raw.stream(method, url, **kwargs) as response:
            async for piece in response.aiter_bytes():
                got += piece
    except Exception as exc:
        return Read(None, bytes(got), exc, time.monotonic() - t0)
    return Read(response.status_code, bytes(got), None, time.monotonic() - t0)


class Client:
    """An httpx (or httpx2) client, sync or async, with blocking calls; ``transport`` is the
    one it was made over, if :meth:`Mode.client` made it."""

    def __init__(self, mode: Mode, raw: Any, module: Any, transport: Any = None) -> None:
        self.mode = mode
        self.raw = raw
        self.module = module
        self.transport = transport
        self.closed = False

    def post(self, url: str, **kwargs: Any) -> Any:
        return self.mode.run(self.raw.post(url, **kwargs))

    def get(self, url: str, **kwargs: Any) -> Any:
        return self.mode.run(self.raw.get(url, **kwargs))

    @contextmanager
    def stream(self, method: str, url: str, **kwargs: Any) -> Iterator[Any]:
        """A streamed response. Async, it is read to its end (or its error) on entry: a stream
        is one task's, so it cannot be read piecemeal across blocking calls."""
        if self.mode.sync:
            with self.raw.stream(method, url, **kwargs) as response:
                yield response
        else:
            yield self.mode.run(_read_whole(self.raw, method, url, kwargs))

    def read(self, method: str, url: str, **kwargs: Any) -> Read:
        """A streamed response read piece by piece, sync or async alike: what arrived before
        an error is kept (a stream read whole on entry, as :meth:`stream` does, would lose it)."""
        read: Read = self.mode.run(self.reading(method, url, **kwargs))
        return read

    def reading(self, method: str, url: str, **kwargs: Any) -> Any:
        """:meth:`read`, pending: sync, the :class:`Read`; async, a coroutine for it (to run
        many with :meth:`Mode.at_once`)."""
        if self.mode.sync:
            return _read_pieces(self.raw, method, url, kwargs)
        return _aread_pieces(self.raw, method, url, kwargs)

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.mode.run(self.raw.close() if self.mode.sync else self.raw.aclose())

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


class _SDK:
    """An SDK client, sync or async, over ``http``, with blocking calls."""

    classes: tuple[Any, Any]  # the sync class, the async one

    def __init__(self, mode: Mode, http: Client, base_url: str, api_key: str) -> None:
        cls = self.classes[0] if mode.sync else self.classes[1]
        self.mode = mode
        self.sdk = cls(base_url=base_url, api_key=api_key, max_retries=0, http_client=http.raw)

    def _pending(self, method: Any, kwargs: dict[str, Any]) -> Any:
        """``method(**kwargs)``'s answer, a stream's items all read: sync, the value; async, a
        coroutine for it."""
        if self.mode.sync:
            answer = method(**kwargs)
            return list(answer) if kwargs.get("stream") else answer

        async def call() -> Any:
            answer = await method(**kwargs)
            return [item async for item in answer] if kwargs.get("stream") else answer

        return call()

    def _call(self, method: Any, kwargs: dict[str, Any]) -> Any:
        return self.mode.run(self._pending(method, kwargs))


class OpenAI(_SDK):
    """``openai.OpenAI`` or ``openai.AsyncOpenAI``."""

    classes = (openai.OpenAI, openai.AsyncOpenAI)

    def create(self, **kwargs: Any) -> Any:
        """``chat.completions.create``: the completion, or a stream's chunks."""
        return self._call(self.sdk.chat.completions.create, kwargs)

    def create_many(self, n: int, **kwargs: Any) -> list[Any]:
        """:meth:`create`, ``n`` at once (:meth:`Mode.at_once`)."""
        create = self.sdk.chat.completions.create
        return self.mode.at_once(n, lambda: self._pending(create, kwargs))


class Anthropic(_SDK):
    """``anthropic.Anthropic`` or ``anthropic.AsyncAnthropic``."""

    classes = (anthropic.Anthropic, anthropic.AsyncAnthropic)

    def create(self, **kwargs: Any) -> Any:
        """``messages.create``: the message, or a stream's events."""
        return self._call(self.sdk.messages.create, kwargs)

    def stream_text(self, **kwargs: Any) -> Any:
        """The text of ``messages.stream(...)``'s ``text_stream``."""
        if self.mode.sync:
            with self.sdk.messages.stream(**kwargs) as stream:
                return "".join(stream.text_stream)

        async def text() -> str:
            async with self.sdk.messages.stream(**kwargs) as stream:
                return "".join([t async for t in stream.text_stream])

        return self.mode.run(text())

    def final_message(self, **kwargs: Any) -> Any:
        """``messages.stream(...).get_final_message()``."""
        if self.mode.sync:
            with self.sdk.messages.stream(**kwargs) as stream:
                return stream.get_final_message()

        async def final() -> Any:
            async with self.sdk.messages.stream(**kwargs) as stream:
                return await stream.get_final_message()

        return self.mode.run(final())


# --- the fake provider in-process: its faults without a socket ---------------------------------
# Engine tests are about decisions, not HTTP: they talk to the fake provider through its
# in-process httpx transports (FakeProvider.transport), as pydantic-ai tests its FallbackModel
# on a FunctionModel. Only what a socket adds (resets, byte-level breakage) is left to the
# served FakeProvider.
IN_PROCESS = "http://fake.invalid"  # the transports route on the path: the host is never used


class InProcessProvider(FakeProvider):
    """A :class:`FakeProvider` never served: URLs on :data:`IN_PROCESS`, and httpx clients
    over its in-process transports."""

    def url(self, provider: str) -> str:
        return f"{IN_PROCESS}/{provider}"

    def client(self) -> httpx.Client:
        return httpx.Client(transport=self.transport())

    def async_client(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(transport=self.async_transport())


@contextmanager
def in_process(*names: str) -> Iterator[InProcessProvider]:
    """An in-process fake whose providers ``names`` each answer "from <name>"; stopped at the
    end, which releases its hung and slow requests."""
    fake = InProcessProvider()
    try:
        for name in names:
            fake.set_reply(name, Reply(text=f"from {name}"))
        yield fake
    finally:
        fake.stop()


# Fixtures for test modules whose subject is the engine, not HTTP: importing both into a module
# runs its `fake` and `mode` in-process (the engine's decisions do not depend on a socket).
@pytest.fixture(name="fake")
def in_process_fake() -> Iterator[InProcessProvider]:
    """The fake provider in-process, answering as "primary" and "fallback"."""
    with in_process("primary", "fallback") as provider:
        yield provider


@pytest.fixture(name="mode")
def in_process_mode(mode: Mode, fake: InProcessProvider) -> Mode:
    """The suite's sync/async mode over the in-process fake."""
    return mode.over(fake)
