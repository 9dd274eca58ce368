"""FailoverChatModel: a LangChain chat model that runs each call on swerve's engine.

Each attempt calls one route's model (``_route_model``); a live stream reaches the caller
through :func:`relay`, which announces each restart and marks the new route's first chunk
(:data:`RESET_KEY`)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator, Sequence
from functools import partial
from typing import Any, Literal, Self, TypeVar

from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.language_models.chat_models import generate_from_stream
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage
from langchain_core.outputs import ChatGenerationChunk, ChatResult
from langchain_core.runnables import Runnable, RunnableConfig
from langchain_core.utils.utils import LC_ID_PREFIX
from pydantic import ConfigDict, Field, PrivateAttr, model_validator

from swerve import Attempt, Failover, FallbackConfig, HealthStore, Result, Route, StreamReset

from ._callbacks import (
    ANotify,
    Notify,
    StreamCall,
    anotifier,
    aopened,
    awithin,
    current,
    notifier,
    opened,
    parented,
    within,
)
from ._chunks import CHAT_SPEC
from ._failover import make_failover, summary, warn_retries
from ._limits import SyncLimits, warn_no_limit
from ._route_model import RouteModel

__all__ = ["RESET_KEY", "FailoverChatModel"]

RESET_KEY = "swerve_stream_reset"
"""``response_metadata`` key on the first chunk of the route a stream restarted on."""

_Run = TypeVar("_Run", CallbackManagerForLLMRun, AsyncCallbackManagerForLLMRun)


class FailoverChatModel(BaseChatModel):
    """A chat model that fails over between routes with swerve.

    ``routes`` maps ``provider/model`` routes to LangChain chat models (or bindings of them);
    ``primary`` is the route calls ask for. ``config`` / ``health`` are those of
    :class:`swerve.Failover` (``None``: ``$SWERVE_FALLBACK_CONFIG`` and the process-wide
    health store), or pass a ready ``failover``. ``mid_stream`` decides what a live stream
    does when its route fails after output started: ``"error"`` raises
    :class:`swerve.MidStreamError`, ``"restart"`` moves on and sends the
    ``swerve.stream_reset`` custom event, marking the new route's first chunk.

    Build route models with ``max_retries=0``: their own retries hide failures from swerve.
    Give a fixed ``config`` a time limit (``attempt_timeout_s``): without one, a route model
    with no timeout of its own waits on a hung provider as long as its client does, and the
    model warns at construction (:class:`SwerveTimeoutWarning`).
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    routes: dict[str, Any]
    """Route -> chat model (or a ``RunnableBinding`` of one, e.g. with tools bound)."""
    primary: str
    """The route every call asks for."""
    mid_stream: Literal["error", "restart"] = "error"
    config: FallbackConfig | None = Field(default=None, exclude=True)
    health: Any = Field(default=None, exclude=True)
    failover: Any = Field(default=None, exclude=True)
    """A ready :class:`swerve.Failover` (its config, health, telemetry and clock are used)."""

    _failover: Failover = PrivateAttr()
    _resolved: dict[str, RouteModel] = PrivateAttr()
    _requested: Route = PrivateAttr()

    @model_validator(mode="after")
    def _setup(self) -> Self:
        health: HealthStore | None = self.health
        config = self.config
        self._failover = make_failover(self.failover, config, health)
        self.failover = self.config = self.health = None  # one source of truth: _failover
        self._resolve()
        warn_retries(self.routes, stacklevel=5)
        warn_no_limit(config, self.routes, stacklevel=5)
        return self

    def _resolve(self) -> None:
        if self.primary not in self.routes:
            raise ValueError(f"primary route {self.primary!r} is not one of the routes")
        resolved = {
            name: RouteModel.resolve(self._failover.route(name), value)
            for name, value in self.routes.items()
        }
        self._resolved = resolved
        self._requested = self._failover.route(self.primary)

    # -- LangChain plumbing ---------------------------------------------------------------------
    @property
    def _llm_type(self) -> str:
        return "swerve-failover"

    @property
    def _identifying_params(self) -> dict[str, Any]:
        return {"primary": self.primary, "routes": list(self.routes), "mid_stream": self.mid_stream}

    @property
    def engine(self) -> Failover:
        """The :class:`swerve.Failover` every call of this model (and its copies) runs on."""
        return self._failover

    def with_primary(self, route: str) -> FailoverChatModel:
        """The same model asking for another of its routes (same engine, same health)."""
        if route == self.primary:
            return self
        copy = self.model_copy(update={"primary": route})
        copy._resolve()
        return copy

    def _with_routes(self, routes: dict[str, Any]) -> FailoverChatModel:
        copy = self.model_copy(update={"routes": routes})
        copy._resolve()
        return copy

    def bind_tools(
        self,
        tools: Sequence[Any],
        *,
        tool_choice: str | None = None,
        **kwargs: Any,
    ) -> Runnable[LanguageModelInput, AIMessage]:
        """Bind ``tools`` on every route (each model formats them for its own provider)."""
        if tool_choice is not None:
            kwargs["tool_choice"] = tool_choice
        routes = {}
        for name, rm in self._resolved.items():
            bound = rm.model.bind_tools(tools, **kwargs)
            if rm.kwargs:  # keep what was bound on the route before
                bound = bound.bind(**{k: v for k, v in rm.kwargs.items() if k not in kwargs})
            routes[name] = bound
        return self._with_routes(routes)

    def with_structured_output(
        self,
        schema: Any,
        *,
        include_raw: bool = False,
        **kwargs: Any,
    ) -> Runnable[LanguageModelInput, Any]:
        """Structured output on every route, with each route's own method support
        (``method="json_schema"``, ``"function_calling"``, ``"json_mode"``... as that model
        takes them). The whole call (model and parser) is one attempt."""
        from ._runnable import RunnableFailover

        runnables = {
            name: rm.model.with_structured_output(schema, include_raw=include_raw, **kwargs)
            for name, rm in self._resolved.items()
        }
        return RunnableFailover(
            runnables=runnables,
            primary=self.primary,
            failover=self._failover,
            mid_stream=self.mid_stream,
            prepare=self._prepare_input,
            warn=False,
        )

    def _prepare_input(self, value: Any, attempt: Attempt) -> Any:
        messages = self._convert_input(value).to_messages()
        return self._messages_for(attempt, messages)

    def _should_stream(
        self,
        *,
        async_api: bool,
        run_manager: CallbackManagerForLLMRun | AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> bool:
        # invoke() with streaming callbacks comes through _generate, which streams itself:
        # tokens reach the callbacks only once an attempt has committed, and the message
        # returned holds only the attempt that completed.
        if run_manager is not None:
            return False
        return super()._should_stream(async_api=async_api, **kwargs)

    def _should_use_protocol_streaming(self, **_: Any) -> bool:
        return False  # the v2 event bridge would merge chunks of failed attempts

    def _token_run(
        self, run_manager: _Run | None, kwargs: dict[str, Any], async_api: bool
    ) -> _Run | None:
        """The run to stream tokens to, when ``invoke()`` came with streaming callbacks."""
        if run_manager is not None and BaseChatModel._should_stream(
            self, async_api=async_api, run_manager=run_manager, **kwargs
        ):
            return run_manager
        return None

    # -- per attempt (shared by every path) -----------------------------------------------------
    def _messages_for(self, attempt: Attempt, messages: list[BaseMessage]) -> list[BaseMessage]:
        rm = self._resolved[str(attempt.route)]
        return rm.messages_for(attempt, messages, self._failover.telemetry)

    def _attempt(
        self, messages: list[BaseMessage], attempt: Attempt
    ) -> tuple[RouteModel, list[BaseMessage]]:
        return self._resolved[str(attempt.route)], self._messages_for(attempt, messages)

    def _sync_limits(self, attempt: Attempt) -> SyncLimits | None:
        """The time limits a sync attempt is held to (async ones are cancelled instead)."""
        return SyncLimits.of(self._failover.config, attempt)

    def _attempt_generate(
        self, messages: list[BaseMessage], stop: list[str] | None, kwargs: dict[str, Any],
        attempt: Attempt,
    ) -> ChatResult:  # fmt: skip
        rm, msgs = self._attempt(messages, attempt)
        return rm.generate(msgs, stop, kwargs, attempt, self._sync_limits(attempt))

    async def _aattempt_generate(
        self, messages: list[BaseMessage], stop: list[str] | None, kwargs: dict[str, Any],
        attempt: Attempt,
    ) -> ChatResult:  # fmt: skip
        rm, msgs = self._attempt(messages, attempt)
        return await rm.agenerate(msgs, stop, kwargs, attempt)

    def _attempt_stream(
        self, messages: list[BaseMessage], stop: list[str] | None, kwargs: dict[str, Any],
        attempt: Attempt,
    ) -> Iterator[ChatGenerationChunk]:  # fmt: skip
        rm, msgs = self._attempt(messages, attempt)
        return rm.stream(msgs, stop, kwargs, attempt, self._sync_limits(attempt))

    def _aattempt_stream(
        self, messages: list[BaseMessage], stop: list[str] | None, kwargs: dict[str, Any],
        attempt: Attempt,
    ) -> AsyncIterator[ChatGenerationChunk]:  # fmt: skip
        rm, msgs = self._attempt(messages, attempt)
        return rm.astream(msgs, stop, kwargs, attempt)

    # -- results --------------------------------------------------------------------------------
    def _stamp(self, message: BaseMessage, served: Route, info: dict[str, Any]) -> None:
        """Name the model that answered, its provider, and what swerve did."""
        rm = self._resolved[str(served)]
        meta = dict(message.response_metadata)
        meta.setdefault("model_name", rm.target.model or served.model)
        meta.setdefault("model_provider", rm.target.provider)
        meta["swerve"] = info
        message.response_metadata = meta

    def _finish(self, result: Result[ChatResult]) -> ChatResult:
        info = summary(result)
        for generation in result.value.generations:
            self._stamp(generation.message, result.route, info)
        return result.value

    def _summary_chunk(self, result: Result[None]) -> ChatGenerationChunk:
        """The stream's last chunk: what swerve did. Marked last, so that langchain-core adds no
        empty last chunk after it and a reader of the final chunk finds the summary."""
        meta: dict[str, Any] = {"swerve": summary(result)}
        if (served := self._resolved.get(str(result.route))) is not None:
            meta["model_provider"] = served.target.provider
        message = AIMessageChunk(content="", response_metadata=meta, chunk_position="last")
        return ChatGenerationChunk(message=message)

    # -- unary ----------------------------------------------------------------------------------
    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        with parented(run_manager):  # swerve's call span under the framework's LLM span
            if (run := self._token_run(run_manager, kwargs, async_api=False)) is not None:
                return self._generate_live(messages, stop, run, kwargs)
            fn = partial(self._attempt_generate, messages, stop, kwargs)
            return self._finish(self._failover.call(self._requested, fn))

    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        with parented(run_manager):
            if (run := self._token_run(run_manager, kwargs, async_api=True)) is not None:
                return await self._agenerate_live(messages, stop, run, kwargs)
            fn = partial(self._aattempt_generate, messages, stop, kwargs)
            return self._finish(await self._failover.acall(self._requested, fn))

    def _generate_live(
        self, messages: list[BaseMessage], stop: list[str] | None,
        run_manager: CallbackManagerForLLMRun, kwargs: dict[str, Any],
    ) -> ChatResult:  # fmt: skip
        """invoke() with streaming callbacks: tokens flow once an attempt commits."""
        notify = notifier(run_manager, None, self._requested)
        chunks: list[ChatGenerationChunk] = []
        for chunk in self._live(messages, stop, kwargs, notify):
            collect(chunk, chunks, run_manager.run_id)
            run_manager.on_llm_new_token(chunk.text, chunk=chunk)
        return self._live_result(chunks)

    async def _agenerate_live(
        self, messages: list[BaseMessage], stop: list[str] | None,
        run_manager: AsyncCallbackManagerForLLMRun, kwargs: dict[str, Any],
    ) -> ChatResult:  # fmt: skip
        notify = anotifier(run_manager, None, self._requested)
        chunks: list[ChatGenerationChunk] = []
        async for chunk in self._alive(messages, stop, kwargs, notify):
            collect(chunk, chunks, run_manager.run_id)
            await run_manager.on_llm_new_token(chunk.text, chunk=chunk)
        return self._live_result(chunks)

    def _live_result(self, chunks: list[ChatGenerationChunk]) -> ChatResult:
        result = generate_from_stream(iter(chunks))
        for generation in result.generations:
            served = generation.message.response_metadata.get("swerve", {}).get("served")
            if served in self._resolved:
                rm = self._resolved[served]
                meta = generation.message.response_metadata
                meta.setdefault("model_name", rm.target.model or rm.route.model)
        return result

    # -- streams --------------------------------------------------------------------------------
    def _live(
        self, messages: list[BaseMessage], stop: list[str] | None, kwargs: dict[str, Any],
        notify: Notify,
    ) -> Iterator[ChatGenerationChunk]:  # fmt: skip
        """The chunks of a live failover stream, then the summary chunk."""
        fn = partial(self._attempt_stream, messages, stop, kwargs)
        with self._failover.stream(
            self._requested, fn, CHAT_SPEC, mid_stream=self.mid_stream
        ) as stream:
            yield from relay(stream, notify)
        yield self._summary_chunk(stream.result(None))

    async def _alive(
        self, messages: list[BaseMessage], stop: list[str] | None, kwargs: dict[str, Any],
        notify: ANotify,
    ) -> AsyncIterator[ChatGenerationChunk]:  # fmt: skip
        fn = partial(self._aattempt_stream, messages, stop, kwargs)
        async with self._failover.astream(
            self._requested, fn, CHAT_SPEC, mid_stream=self.mid_stream
        ) as stream:
            async for chunk in arelay(stream, notify):
                yield chunk
        yield self._summary_chunk(stream.result(None))

    def _stream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> Iterator[ChatGenerationChunk]:
        call = current()
        notify = notifier(run_manager, call.manager if call else None, self._requested)
        yield from within(run_manager or call, self._live(messages, stop, kwargs, notify))

    async def _astream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> AsyncIterator[ChatGenerationChunk]:
        call = current()
        notify = anotifier(run_manager, call.amanager if call else None, self._requested)
        run = run_manager or call  # stream() hands _stream no run manager
        async for chunk in awithin(run, self._alive(messages, stop, kwargs, notify)):
            yield chunk

    def stream(
        self,
        input: LanguageModelInput,
        config: RunnableConfig | None = None,
        *,
        stop: list[str] | None = None,
        **kwargs: Any,
    ) -> Iterator[AIMessageChunk]:
        config, call = StreamCall.of(self, config)
        yield from opened(call, super().stream(input, config, stop=stop, **kwargs))

    async def astream(
        self,
        input: LanguageModelInput,
        config: RunnableConfig | None = None,
        *,
        stop: list[str] | None = None,
        **kwargs: Any,
    ) -> AsyncIterator[AIMessageChunk]:
        config, call = StreamCall.of(self, config)
        async for chunk in aopened(call, super().astream(input, config, stop=stop, **kwargs)):
            yield chunk


# -- a live stream as the caller sees it: each restart announced, the new route's first chunk
# marked, and the tokens of an ``invoke()`` collected ------------------------------------------
def relay(
    stream: Iterator[ChatGenerationChunk | StreamReset], notify: Notify
) -> Iterator[ChatGenerationChunk]:
    """The chunks of ``stream``; each reset is announced and marks the next chunk."""
    marks = _Marks()
    for item in stream:
        if isinstance(item, StreamReset):
            notify(item)
        yield from marks.see(item)


async def arelay(
    stream: AsyncIterator[ChatGenerationChunk | StreamReset], notify: ANotify
) -> AsyncIterator[ChatGenerationChunk]:
    """Async :func:`relay`."""
    marks = _Marks()
    async for item in stream:
        if isinstance(item, StreamReset):
            await notify(item)
        for chunk in marks.see(item):
            yield chunk


class _Marks:
    """Marks the first chunk of the route a stream restarted on."""

    def __init__(self) -> None:
        self._reset: StreamReset | None = None

    def see(self, item: ChatGenerationChunk | StreamReset) -> tuple[ChatGenerationChunk, ...]:
        """The chunks to pass on for ``item``: none for a reset."""
        if isinstance(item, StreamReset):
            self._reset = item
            return ()
        if self._reset is not None:
            meta = dict(item.message.response_metadata)
            meta[RESET_KEY] = [
                {"route_from": str(self._reset.route), "route_to": str(self._reset.next_route)}
            ]
            item.message.response_metadata = meta
            self._reset = None
        return (item,)


def collect(chunk: ChatGenerationChunk, chunks: list[ChatGenerationChunk], run_id: Any) -> None:
    """Keep a token of a live ``invoke()`` for the message it returns."""
    if RESET_KEY in chunk.message.response_metadata:
        chunks.clear()  # the message returned holds only the route that completed
    if chunk.message.id is None:
        chunk.message.id = f"{LC_ID_PREFIX}-{run_id}"
    chunks.append(chunk)
