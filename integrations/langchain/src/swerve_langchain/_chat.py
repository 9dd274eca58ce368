"""FailoverChatModel: a LangChain chat model that runs each call on swerve's engine."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator, Iterator, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Literal, Self, TypeVar

from langchain_core.callbacks import (
    AsyncCallbackManager,
    AsyncCallbackManagerForLLMRun,
    CallbackManager,
    CallbackManagerForLLMRun,
)
from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.language_models.chat_models import generate_from_stream
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage
from langchain_core.messages.tool import tool_call_chunk
from langchain_core.outputs import ChatGenerationChunk, ChatResult
from langchain_core.runnables import Runnable, RunnableConfig, ensure_config
from langchain_core.utils.utils import LC_ID_PREFIX
from pydantic import ConfigDict, Field, PrivateAttr, model_validator

from swerve import (
    Attempt,
    AttemptRecord,
    Failover,
    FallbackConfig,
    HealthStore,
    Result,
    Route,
    StreamReset,
)

from . import _history
from ._chunks import CHAT_SPEC, achecked, check_result, checked, strict_finish
from ._common import (
    RESET_KEY,
    ANotify,
    Notify,
    anotifier,
    make_failover,
    notifier,
    resolve_chat_model,
    summary,
    surface,
    warn_retries,
)
from ._errors import classifiable

__all__ = ["FailoverChatModel"]


_Manager = TypeVar("_Manager", CallbackManager, AsyncCallbackManager)


@dataclass(frozen=True)
class _StreamCall:
    """What ``stream()`` knows before LangChain opens the LLM run: its config and run id."""

    config: RunnableConfig
    run_id: uuid.UUID
    model: FailoverChatModel

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


# Set by stream()/astream() only while LangChain opens the run and asks _stream for its first
# chunk, so _stream can send the reset event to the right run; never left set across a yield.
_STREAM_CALL: ContextVar[_StreamCall | None] = ContextVar("swerve_langchain_stream", default=None)
_END: Any = object()


@dataclass
class _RouteModel:
    """One route's model, resolved once: the chat model, its bound kwargs, what it is."""

    route: Route
    model: BaseChatModel
    kwargs: dict[str, Any]
    target: _history.Target
    strict: bool
    streams: bool
    extra: dict[str, Any] = field(default_factory=dict)


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
    _resolved: dict[str, _RouteModel] = PrivateAttr()
    _requested: Route = PrivateAttr()

    @model_validator(mode="after")
    def _setup(self) -> Self:
        health: HealthStore | None = self.health
        self._failover = make_failover(self.failover, self.config, health)
        self.failover = self.config = self.health = None  # one source of truth: _failover
        self._resolve()
        warn_retries(self.routes, stacklevel=5)
        return self

    def _resolve(self) -> None:
        if self.primary not in self.routes:
            raise ValueError(f"primary route {self.primary!r} is not one of the routes")
        resolved = {}
        for name, value in self.routes.items():
            route = self._failover.route(name)
            model, kwargs = resolve_chat_model(value, name)
            llm_type = getattr(model, "_llm_type", "")
            streams = type(model)._stream is not BaseChatModel._stream and (
                model.disable_streaming is not True
            )
            resolved[name] = _RouteModel(
                route,
                model,
                kwargs,
                _history.target_of(model),
                strict_finish(llm_type),
                streams,
                _own_retries_off(model),
            )
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

    def _wants_tokens(
        self, run_manager: CallbackManagerForLLMRun | AsyncCallbackManagerForLLMRun | None,
        kwargs: dict[str, Any], async_api: bool,
    ) -> bool:  # fmt: skip
        return run_manager is not None and BaseChatModel._should_stream(
            self, async_api=async_api, run_manager=run_manager, **kwargs
        )

    # -- per attempt (shared by every path) -----------------------------------------------------
    def _messages_for(self, attempt: Attempt, messages: list[BaseMessage]) -> list[BaseMessage]:
        rm = self._resolved[str(attempt.route)]
        telemetry = self._failover.telemetry
        if attempt.route != attempt.requested:  # the call moved: rebuild history for the target
            messages, removed = _history.adapt_for_target(messages, rm.target)
            if removed:
                telemetry.downgrade(str(attempt.route), removed)
        messages, fix = _history.fix_empty_text_cache(messages, rm.target)
        if fix is not None:
            telemetry.cache_fix(str(attempt.route), fix.blocks, fix.moved_to)
        return messages

    def _prepare(
        self, attempt: Attempt, messages: list[BaseMessage], kwargs: dict[str, Any]
    ) -> tuple[_RouteModel, list[BaseMessage], dict[str, Any]]:
        rm = self._resolved[str(attempt.route)]
        call = {**rm.kwargs, **kwargs, **rm.extra}
        call.pop("stream", None)
        if not rm.target.claude:
            call.pop("cache_control", None)  # Anthropic's top-level caching kwarg
        return rm, self._messages_for(attempt, messages), call

    def _attempt_generate(
        self, messages: list[BaseMessage], stop: list[str] | None, kwargs: dict[str, Any],
        attempt: Attempt,
    ) -> ChatResult:  # fmt: skip
        rm, msgs, call = self._prepare(attempt, messages, kwargs)
        with classifiable():
            return check_result(
                rm.model._generate(msgs, stop=stop, **call), str(rm.route), rm.strict
            )

    async def _aattempt_generate(
        self, messages: list[BaseMessage], stop: list[str] | None, kwargs: dict[str, Any],
        attempt: Attempt,
    ) -> ChatResult:  # fmt: skip
        rm, msgs, call = self._prepare(attempt, messages, kwargs)
        with classifiable():
            result = await rm.model._agenerate(msgs, stop=stop, **call)
            return check_result(result, str(rm.route), rm.strict)

    def _attempt_stream(
        self, messages: list[BaseMessage], stop: list[str] | None, kwargs: dict[str, Any],
        attempt: Attempt,
    ) -> Iterator[ChatGenerationChunk]:  # fmt: skip
        rm, msgs, call = self._prepare(attempt, messages, kwargs)
        if rm.streams:
            chunks = rm.model._stream(msgs, stop=stop, **call)
        else:
            chunks = _sync_chunks(rm.model, msgs, stop, call)
        return checked(chunks, str(rm.route), rm.strict)

    def _aattempt_stream(
        self, messages: list[BaseMessage], stop: list[str] | None, kwargs: dict[str, Any],
        attempt: Attempt,
    ) -> AsyncIterator[ChatGenerationChunk]:  # fmt: skip
        rm, msgs, call = self._prepare(attempt, messages, kwargs)
        if rm.streams:
            chunks = rm.model._astream(msgs, stop=stop, **call)
        else:
            chunks = _aas_chunks(rm.model._agenerate(msgs, stop=stop, **call))
        return achecked(chunks, str(rm.route), rm.strict)

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
        info = summary(result.requested, result.route, result.attempts)
        for generation in result.value.generations:
            self._stamp(generation.message, result.route, info)
        return result.value

    def _summary_chunk(
        self, requested: Route, served: Route | None, attempts: tuple[AttemptRecord, ...]
    ) -> ChatGenerationChunk:
        meta: dict[str, Any] = {"swerve": summary(requested, served, attempts)}
        if served is not None:
            meta["model_provider"] = self._resolved[str(served)].target.provider
        return ChatGenerationChunk(message=AIMessageChunk(content="", response_metadata=meta))

    # -- unary ----------------------------------------------------------------------------------
    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        if self._wants_tokens(run_manager, kwargs, async_api=False):
            assert run_manager is not None
            return self._generate_live(messages, stop, run_manager, kwargs)
        fn = partial(self._attempt_generate, messages, stop, kwargs)
        try:
            result = self._failover.call(self._requested, fn)
        except BaseException as exc:
            surface(exc)
        return self._finish(result)

    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        if self._wants_tokens(run_manager, kwargs, async_api=True):
            assert run_manager is not None
            return await self._agenerate_live(messages, stop, run_manager, kwargs)
        fn = partial(self._aattempt_generate, messages, stop, kwargs)
        try:
            result = await self._failover.acall(self._requested, fn)
        except BaseException as exc:
            surface(exc)
        return self._finish(result)

    def _generate_live(
        self, messages: list[BaseMessage], stop: list[str] | None,
        run_manager: CallbackManagerForLLMRun, kwargs: dict[str, Any],
    ) -> ChatResult:  # fmt: skip
        """invoke() with streaming callbacks: tokens flow once an attempt commits."""
        notify = notifier(run_manager, None, self._requested)
        chunks: list[ChatGenerationChunk] = []
        for chunk in self._live(messages, stop, kwargs, notify):
            _token(chunk, chunks, run_manager.run_id)
            run_manager.on_llm_new_token(chunk.text, chunk=chunk)
        return self._live_result(chunks)

    async def _agenerate_live(
        self, messages: list[BaseMessage], stop: list[str] | None,
        run_manager: AsyncCallbackManagerForLLMRun, kwargs: dict[str, Any],
    ) -> ChatResult:  # fmt: skip
        notify = anotifier(run_manager, None, self._requested)
        chunks: list[ChatGenerationChunk] = []
        async for chunk in self._alive(messages, stop, kwargs, notify):
            _token(chunk, chunks, run_manager.run_id)
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
        """The chunks of a live failover stream; resets are announced and marked."""
        fn = partial(self._attempt_stream, messages, stop, kwargs)
        stream = self._failover.stream(self._requested, fn, CHAT_SPEC, mid_stream=self.mid_stream)
        reset: StreamReset | None = None
        with stream:
            try:
                for item in stream:
                    if isinstance(item, StreamReset):
                        notify(item)
                        reset = item
                        continue
                    if reset is not None:
                        _mark(item, reset)
                        reset = None
                    yield item
            except Exception as exc:
                surface(exc)
        yield self._summary_chunk(stream.requested, stream.route, stream.attempts)

    async def _alive(
        self, messages: list[BaseMessage], stop: list[str] | None, kwargs: dict[str, Any],
        notify: ANotify,
    ) -> AsyncIterator[ChatGenerationChunk]:  # fmt: skip
        fn = partial(self._aattempt_stream, messages, stop, kwargs)
        stream = self._failover.astream(self._requested, fn, CHAT_SPEC, mid_stream=self.mid_stream)
        reset: StreamReset | None = None
        async with stream:
            try:
                async for item in stream:
                    if isinstance(item, StreamReset):
                        await notify(item)
                        reset = item
                        continue
                    if reset is not None:
                        _mark(item, reset)
                        reset = None
                    yield item
            except Exception as exc:
                surface(exc)
        yield self._summary_chunk(stream.requested, stream.route, stream.attempts)

    def _stream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> Iterator[ChatGenerationChunk]:
        call = _STREAM_CALL.get()
        notify = notifier(run_manager, call.manager if call else None, self._requested)
        yield from self._live(messages, stop, kwargs, notify)

    async def _astream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> AsyncIterator[ChatGenerationChunk]:
        call = _STREAM_CALL.get()
        notify = anotifier(run_manager, call.amanager if call else None, self._requested)
        async for chunk in self._alive(messages, stop, kwargs, notify):
            yield chunk

    def _stream_call(self, config: RunnableConfig | None) -> tuple[RunnableConfig, _StreamCall]:
        config = ensure_config(config)
        run_id = config.get("run_id") or uuid.uuid4()
        config["run_id"] = run_id
        return config, _StreamCall(dict(config), run_id, self)  # type: ignore[arg-type]

    def stream(
        self,
        input: LanguageModelInput,
        config: RunnableConfig | None = None,
        *,
        stop: list[str] | None = None,
        **kwargs: Any,
    ) -> Iterator[AIMessageChunk]:
        config, call = self._stream_call(config)
        inner = super().stream(input, config, stop=stop, **kwargs)
        try:
            token = _STREAM_CALL.set(call)
            try:
                first = next(inner, _END)
            finally:
                _STREAM_CALL.reset(token)
            if first is _END:
                return
            yield first
            yield from inner
        finally:
            inner.close()  # type: ignore[attr-defined]

    async def astream(
        self,
        input: LanguageModelInput,
        config: RunnableConfig | None = None,
        *,
        stop: list[str] | None = None,
        **kwargs: Any,
    ) -> AsyncIterator[AIMessageChunk]:
        config, call = self._stream_call(config)
        inner = super().astream(input, config, stop=stop, **kwargs)
        try:
            token = _STREAM_CALL.set(call)
            try:
                first = await anext(inner, _END)
            finally:
                _STREAM_CALL.reset(token)
            if first is _END:
                return
            yield first
            async for chunk in inner:
                yield chunk
        finally:
            await inner.aclose()  # type: ignore[attr-defined]


def _mark(chunk: ChatGenerationChunk, reset: StreamReset) -> None:
    """Mark the first chunk of the route a stream restarted on."""
    meta = dict(chunk.message.response_metadata)
    meta[RESET_KEY] = [{"route_from": str(reset.route), "route_to": str(reset.next_route)}]
    chunk.message.response_metadata = meta


def _token(chunk: ChatGenerationChunk, chunks: list[ChatGenerationChunk], run_id: Any) -> None:
    if RESET_KEY in chunk.message.response_metadata:
        chunks.clear()  # the message returned holds only the route that completed
    if chunk.message.id is None:
        chunk.message.id = f"{LC_ID_PREFIX}-{run_id}"
    chunks.append(chunk)


def _as_chunks(result: ChatResult) -> list[ChatGenerationChunk]:
    """A non-streaming route's result as one chunk per generation."""
    out = []
    for generation in result.generations:
        message = generation.message
        ai = message if isinstance(message, AIMessage) else None
        chunk = AIMessageChunk(
            content=message.content,
            additional_kwargs=message.additional_kwargs,
            response_metadata=message.response_metadata,
            usage_metadata=ai.usage_metadata if ai else None,
            id=message.id,
            tool_call_chunks=[
                tool_call_chunk(
                    name=call["name"], args=json.dumps(call["args"]), id=call["id"], index=i
                )
                for i, call in enumerate(ai.tool_calls if ai else [])
            ],
        )
        out.append(ChatGenerationChunk(message=chunk, generation_info=generation.generation_info))
    return out


def _sync_chunks(
    model: BaseChatModel, messages: list[BaseMessage], stop: list[str] | None, call: dict[str, Any]
) -> Iterator[ChatGenerationChunk]:
    """A route that does not stream, called when the engine first reads it."""
    yield from _as_chunks(model._generate(messages, stop=stop, **call))


async def _aas_chunks(result: Any) -> AsyncIterator[ChatGenerationChunk]:
    for chunk in _as_chunks(await result):
        yield chunk


def _own_retries_off(model: BaseChatModel) -> dict[str, Any]:
    """Call kwargs that make a route model's ``max_retries=0`` mean what it says.

    langchain-openrouter leaves the openrouter SDK's default retry policy (5xx retried with
    backoff for up to an hour) in force when ``max_retries=0``; this turns it off per call.
    """
    if getattr(model, "_llm_type", "") != "openrouter-chat" or model.max_retries != 0:  # type: ignore[attr-defined]
        return {}
    try:
        from openrouter.utils import RetryConfig
    except ImportError:  # pragma: no cover - langchain-openrouter depends on it
        return {}
    return {"retries": RetryConfig("none", None, False)}  # type: ignore[arg-type]
