"""Sync or async behind one set of blocking calls, so a transport test is written once.

The pattern of opentelemetry-instrumentation-httpx's ``BaseTestCases``, as a fixture: a test
body talks to a :class:`Mode` (and the :class:`Client`, :class:`OpenAI` and
:class:`Anthropic` it makes), and runs unchanged over ``FailoverTransport`` under
``httpx.Client`` / ``openai.OpenAI`` / ``anthropic.Anthropic``, or over
``AsyncFailoverTransport`` under ``httpx.AsyncClient`` / ``openai.AsyncOpenAI`` /
``anthropic.AsyncAnthropic``, each call awaited to its end on one event loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Iterator
from contextlib import contextmanager
from typing import Any

import anthropic
import httpx
import openai

from swerve.httpx import AsyncFailoverTransport, FailoverTransport

SWERVE = "http://swerve.invalid"


class Mode:
    """Sync or async: the transports, clients and SDKs of one flavour, closed together."""

    def __init__(self, sync: bool) -> None:
        self.sync = sync
        self.runner = None if sync else asyncio.Runner()
        self.open: list[Any] = []  # clients to close at the end

    def __repr__(self) -> str:
        return "sync" if self.sync else "async"

    def run(self, call: Any) -> Any:
        """An async call (a coroutine) awaited to its end; a sync call's value as it is."""
        if self.runner is None:
            return call
        assert isinstance(call, Coroutine)
        return self.runner.run(call)

    def transport(self, upstreams: Any, **kwargs: Any) -> Any:
        cls = FailoverTransport if self.sync else AsyncFailoverTransport
        return cls(upstreams, **kwargs)

    def client(
        self, upstreams: Any = None, *, module: Any = httpx, transport: Any = None, **kwargs: Any
    ) -> Client:
        """A client of ``module`` (httpx or httpx2) over a failover transport for
        ``upstreams`` (or over ``transport``; with neither, a plain client)."""
        if transport is None and upstreams is not None:
            transport = self.transport(upstreams, **kwargs)
        cls = module.Client if self.sync else module.AsyncClient
        client = Client(self, cls(transport=transport), module)
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


async def _read_whole(raw: Any, method: str, url: str, kwargs: dict[str, Any]) -> Any:
    async with raw.stream(method, url, **kwargs) as response:
        await response.aread()  # the body stays on the response: iter_lines() and read() work
    return response


class Client:
    """An httpx (or httpx2) client, sync or async, with blocking calls."""

    def __init__(self, mode: Mode, raw: Any, module: Any) -> None:
        self.mode = mode
        self.raw = raw
        self.module = module
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

    def _call(self, method: Any, kwargs: dict[str, Any]) -> Any:
        """``method(**kwargs)``'s answer; a stream's items, all read."""
        if self.mode.sync:
            answer = method(**kwargs)
            return list(answer) if kwargs.get("stream") else answer

        async def call() -> Any:
            answer = await method(**kwargs)
            return [item async for item in answer] if kwargs.get("stream") else answer

        return self.mode.run(call())


class OpenAI(_SDK):
    """``openai.OpenAI`` or ``openai.AsyncOpenAI``."""

    classes = (openai.OpenAI, openai.AsyncOpenAI)

    def create(self, **kwargs: Any) -> Any:
        """``chat.completions.create``: the completion, or a stream's chunks."""
        return self._call(self.sdk.chat.completions.create, kwargs)


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
