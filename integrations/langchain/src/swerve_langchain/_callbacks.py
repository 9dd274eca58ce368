"""A call's LangChain run, as seen through its callbacks.

* **The run before it opens.** LangChain opens a stream's LLM run (and its callback manager)
  inside ``stream()`` only when the first chunk is asked for, and ``_stream`` may need that
  run's callbacks before its own ``run_manager`` exists (a ``stream_reset`` event before the
  first chunk). ``stream()`` therefore hands ``_stream`` a :class:`StreamCall`, set in a
  context variable only while the first chunk is fetched, never left set across a yield.
* **The events swerve sends.** :data:`STREAM_RESET_EVENT` when a stream restarts on another
  route (:func:`notifier`), :data:`RESULT_EVENT` when a :func:`with_failover` call ends well
  (:func:`announce`).
* **The framework span.** OpenInference's LangChain tracer and OpenLLMetry's callback handler
  open a span for every chat-model run, but neither makes it current (the first never attaches
  a context from a callback; the second attaches only its suppression flag): swerve's call
  span, which starts under the current span, would be the LLM span's sibling. Both keep their
  spans by run id on the handler, public: OpenInference as ``get_span(run_id)``, OpenLLMetry as
  ``spans[run_id].span``. :func:`parented` makes that span current while swerve's call runs,
  on top of the current context (so OpenLLMetry's suppression of the SDK spans under its LLM
  span still holds); :func:`within` and :func:`awithin` do it around each step of a stream,
  never across a ``yield``, so the consumer's own context is never changed.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import AbstractContextManager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, TypeVar

from langchain_core.callbacks import (
    AsyncCallbackManager,
    AsyncCallbackManagerForChainRun,
    AsyncCallbackManagerForLLMRun,
    BaseCallbackHandler,
    CallbackManager,
    CallbackManagerForChainRun,
    CallbackManagerForLLMRun,
)
from langchain_core.language_models import BaseChatModel
from langchain_core.runnables import RunnableConfig, ensure_config
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.context import Context

from swerve import Route, StreamReset
from swerve.adapters import in_llm_span

__all__ = [
    "RESULT_EVENT",
    "STREAM_RESET_EVENT",
    "ANotify",
    "Notify",
    "StreamCall",
    "aannounce",
    "announce",
    "anotifier",
    "aopened",
    "awithin",
    "current",
    "framework_context",
    "notifier",
    "opened",
    "parented",
    "within",
]

STREAM_RESET_EVENT = "swerve.stream_reset"
"""Name of the LangChain custom event sent when ``mid_stream="restart"`` restarts a stream
(visible in ``astream_events`` as ``on_custom_event``): drop what the stream showed so far."""
RESULT_EVENT = "swerve.result"
"""Name of the LangChain custom event a :func:`with_failover` call sends when it ends well:
its data is the :func:`summary` (who answered), whatever the output is."""

_T = TypeVar("_T")
_Manager = TypeVar("_Manager", CallbackManager, AsyncCallbackManager)


# -- the run before it opens --------------------------------------------------------------------
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


# -- the events swerve sends --------------------------------------------------------------------
Notify = Callable[[StreamReset], None]
ANotify = Callable[[StreamReset], Awaitable[None]]


def _of_run(cls: type[_Manager], run: Any) -> _Manager:
    """A manager whose events reach the handlers of ``run`` (an LLM run has no children)."""
    return cls(
        handlers=run.handlers,
        inheritable_handlers=run.inheritable_handlers,
        parent_run_id=run.parent_run_id,
        tags=run.tags,
        inheritable_tags=run.inheritable_tags,
        metadata=run.metadata,
        inheritable_metadata=run.inheritable_metadata,
    )


def _run_of(
    run_manager: Any,
    fallback: Callable[[], tuple[_Manager, Any] | None] | None,
    cls: type[_Manager],
) -> tuple[_Manager, Any] | None:
    """Where a reset event goes: the run's own manager, else the one ``fallback`` finds."""
    if run_manager is not None:
        return _of_run(cls, run_manager), run_manager.run_id
    return fallback() if fallback is not None else None


def _reset_data(reset: StreamReset, requested: Route) -> dict[str, str]:
    return {
        "route_from": str(reset.route),
        "route_to": str(reset.next_route),
        "requested": str(requested),
    }


def notifier(
    run_manager: CallbackManagerForLLMRun | CallbackManagerForChainRun | None,
    fallback: Callable[[], tuple[CallbackManager, Any] | None] | None,
    requested: Route,
) -> Notify:
    """A function that sends :data:`STREAM_RESET_EVENT` to the run's callbacks (``fallback``:
    where they are when there is no run manager yet, e.g. :meth:`StreamCall.manager`)."""

    def notify(reset: StreamReset) -> None:
        found = _run_of(run_manager, fallback, CallbackManager)
        if found is not None:
            manager, run_id = found
            data = _reset_data(reset, requested)
            manager.on_custom_event(STREAM_RESET_EVENT, data, run_id=run_id)

    return notify


def anotifier(
    run_manager: AsyncCallbackManagerForLLMRun | AsyncCallbackManagerForChainRun | None,
    fallback: Callable[[], tuple[AsyncCallbackManager, Any] | None] | None,
    requested: Route,
) -> ANotify:
    """Async :func:`notifier`."""

    async def notify(reset: StreamReset) -> None:
        found = _run_of(run_manager, fallback, AsyncCallbackManager)
        if found is not None:
            manager, run_id = found
            data = _reset_data(reset, requested)
            await manager.on_custom_event(STREAM_RESET_EVENT, data, run_id=run_id)

    return notify


def announce(run_manager: CallbackManagerForChainRun, info: dict[str, Any]) -> None:
    """Send :data:`RESULT_EVENT` with ``info`` to the run's callbacks."""
    manager = _of_run(CallbackManager, run_manager)
    manager.on_custom_event(RESULT_EVENT, info, run_id=run_manager.run_id)


async def aannounce(run_manager: AsyncCallbackManagerForChainRun, info: dict[str, Any]) -> None:
    """Async :func:`announce`."""
    manager = _of_run(AsyncCallbackManager, run_manager)
    await manager.on_custom_event(RESULT_EVENT, info, run_id=run_manager.run_id)


# -- the framework span -------------------------------------------------------------------------
Run = CallbackManagerForLLMRun | AsyncCallbackManagerForLLMRun | StreamCall | None
"""The model's run: its run manager, or (``stream()`` hands ``_stream`` none) its stream call."""


def _handlers(run: Run) -> tuple[list[BaseCallbackHandler], uuid.UUID] | None:
    if run is None:
        return None
    if isinstance(run, StreamCall):
        manager, run_id = run.manager()  # the same handlers the run was opened with
        return manager.handlers, run_id
    return run.handlers, run.run_id


def _span_of(handler: object, run_id: uuid.UUID) -> object:
    """The span ``handler`` opened for ``run_id``, if it is a tracer that keeps them."""
    get_span = getattr(handler, "get_span", None)  # OpenInference's OpenInferenceTracer
    if callable(get_span):
        return get_span(run_id)
    spans = getattr(handler, "spans", None)  # OpenLLMetry's TraceloopCallbackHandler
    if isinstance(spans, dict):
        return getattr(spans.get(run_id), "span", None)
    return None


def framework_context(run: Run) -> Context | None:
    """The current context with the run's framework span as its span; None when no tracing
    handler opened one (or it is not recording): then nothing changes."""
    found = _handlers(run)
    if found is None:
        return None
    handlers, run_id = found
    for handler in handlers:
        try:
            span = _span_of(handler, run_id)
        except Exception:  # a handler's internals are not ours: never break a call over them
            continue
        if isinstance(span, trace.Span) and span.is_recording():
            # An LLM span (its attributes may come only at its end): it counts the tokens.
            return in_llm_span(trace.set_span_in_context(span))
    return None


@contextlib.contextmanager
def _attached(ctx: Context) -> Iterator[None]:
    token = otel_context.attach(ctx)
    try:
        yield
    finally:
        otel_context.detach(token)


def parented(run: Run) -> AbstractContextManager[None]:
    """Make the run's framework span current for the block (a unary call)."""
    ctx = framework_context(run)
    return contextlib.nullcontext() if ctx is None else _attached(ctx)


def within(run: Run, chunks: Iterator[_T]) -> Iterator[_T]:
    """``chunks``, each one pulled with the run's framework span current."""
    ctx = framework_context(run)
    if ctx is None:
        yield from chunks
        return
    try:
        while True:
            with _attached(ctx):
                try:
                    chunk = next(chunks)
                except StopIteration:
                    return
            yield chunk
    finally:  # a consumer that stops early stops the stream (as ``yield from`` would)
        close = getattr(chunks, "close", None)
        if close is not None:
            close()


async def awithin(run: Run, chunks: AsyncIterator[_T]) -> AsyncIterator[_T]:
    """Async :func:`within`."""
    ctx = framework_context(run)
    if ctx is None:
        async for chunk in chunks:
            yield chunk
        return
    try:
        while True:
            with _attached(ctx):
                try:
                    chunk = await anext(chunks)
                except StopAsyncIteration:
                    return
            yield chunk
    finally:
        aclose = getattr(chunks, "aclose", None)
        if aclose is not None:
            await aclose()
