"""What ``stream()`` knows before LangChain opens the LLM run, handed to ``_stream``.

LangChain opens a stream's LLM run (and its callback manager) inside ``stream()`` only when
the first chunk is asked for, and ``_stream`` may need that run's callbacks before its own
``run_manager`` exists (a ``stream_reset`` event before the first chunk). The call is set in a
context variable only while the first chunk is fetched, never left set across a yield.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, TypeVar

from langchain_core.callbacks import AsyncCallbackManager, CallbackManager
from langchain_core.language_models import BaseChatModel
from langchain_core.runnables import RunnableConfig, ensure_config

__all__ = ["StreamCall", "aopened", "current", "opened"]

_Manager = TypeVar("_Manager", CallbackManager, AsyncCallbackManager)
_T = TypeVar("_T")
_END: Any = object()


@dataclass(frozen=True)
class StreamCall:
    """A stream's config and run id, and the model whose callbacks, tags and metadata join
    the config's (as LangChain configures the run)."""

    config: RunnableConfig
    run_id: uuid.UUID
    model: BaseChatModel

    @classmethod
    def of(
        cls, model: BaseChatModel, config: RunnableConfig | None
    ) -> tuple[RunnableConfig, StreamCall]:
        """The config to open the run with (a run id fixed in it), and the call."""
        config = ensure_config(config)
        run_id = config.get("run_id") or uuid.uuid4()
        config["run_id"] = run_id
        return config, cls(dict(config), run_id, model)  # type: ignore[arg-type]

    def manager(self) -> tuple[CallbackManager, uuid.UUID]:
        return self._configure(CallbackManager), self.run_id

    def amanager(self) -> tuple[AsyncCallbackManager, uuid.UUID]:
        return self._configure(AsyncCallbackManager), self.run_id

    def _configure(self, cls: type[_Manager]) -> _Manager:
        m = self.model
        return cls.configure(
            self.config.get("callbacks"),
            m.callbacks,
            m.verbose,
            self.config.get("tags"),
            m.tags,
            self.config.get("metadata"),
            m.metadata,
        )


_STREAM_CALL: ContextVar[StreamCall | None] = ContextVar("swerve_langchain_stream", default=None)


def current() -> StreamCall | None:
    """The stream call whose first chunk is being fetched, if any."""
    return _STREAM_CALL.get()


class _While:
    """``call`` is the current stream call inside the block."""

    def __init__(self, call: StreamCall) -> None:
        self._call = call

    def __enter__(self) -> None:
        self._token = _STREAM_CALL.set(self._call)

    def __exit__(self, *_: object) -> None:
        _STREAM_CALL.reset(self._token)


def opened(call: StreamCall, inner: Iterator[_T]) -> Iterator[_T]:
    """``inner``'s items, with ``call`` current while the first one is fetched."""
    try:
        with _While(call):
            first = next(inner, _END)
        if first is _END:
            return
        yield first
        yield from inner
    finally:
        inner.close()  # type: ignore[attr-defined]


async def aopened(call: StreamCall, inner: AsyncIterator[_T]) -> AsyncIterator[_T]:
    """Async :func:`opened`."""
    try:
        with _While(call):
            first = await anext(inner, _END)
        if first is _END:
            return
        yield first
        async for item in inner:
            yield item
    finally:
        await inner.aclose()  # type: ignore[attr-defined]
