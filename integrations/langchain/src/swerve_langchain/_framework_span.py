"""The span a LangChain tracing integration opened for a model run, made swerve's parent.

OpenInference's LangChain tracer and OpenLLMetry's callback handler open a span for every
chat-model run, but neither makes it current (the first never attaches a context from a
callback; the second attaches only its suppression flag): swerve's call span, which starts
under the current span, would be the LLM span's sibling. Both keep their spans by run id
on the handler, public: OpenInference as ``get_span(run_id)``, OpenLLMetry as
``spans[run_id].span``. :func:`parented` makes that span current while swerve's call runs,
on top of the current context (so OpenLLMetry's suppression of the SDK spans under its LLM
span still holds); :func:`within` and :func:`awithin` do it around each step of a stream,
never across a ``yield``, so the consumer's own context is never changed.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterator
from contextlib import AbstractContextManager
from typing import TypeVar
from uuid import UUID

from langchain_core.callbacks import (
    AsyncCallbackManagerForLLMRun,
    BaseCallbackHandler,
    CallbackManagerForLLMRun,
)
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.context import Context

from ._stream_call import StreamCall

__all__ = ["awithin", "framework_context", "parented", "within"]

T = TypeVar("T")
Run = CallbackManagerForLLMRun | AsyncCallbackManagerForLLMRun | StreamCall | None
"""The model's run: its run manager, or (``stream()`` hands ``_stream`` none) its stream call."""


def _handlers(run: Run) -> tuple[list[BaseCallbackHandler], UUID] | None:
    if run is None:
        return None
    if isinstance(run, StreamCall):
        manager, run_id = run.manager()  # the same handlers the run was opened with
        return manager.handlers, run_id
    return run.handlers, run.run_id


def _span_of(handler: object, run_id: UUID) -> object:
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
            return trace.set_span_in_context(span)
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


def within(run: Run, chunks: Iterator[T]) -> Iterator[T]:
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


async def awithin(run: Run, chunks: AsyncIterator[T]) -> AsyncIterator[T]:
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
