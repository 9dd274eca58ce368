"""with_failover: swerve around any runnable (a chain, a subgraph, an agent step).

Each attempt is a child run that an :class:`EffectWatcher` watches (a tool that ran there is an
effect: the step is not run again on another route); a call that ends well is stamped with
who answered (:func:`stamped`) and announced (``RESULT_EVENT``)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from functools import partial
from typing import Any, Literal, Self

from langchain_core.callbacks import (
    AsyncCallbackManagerForChainRun,
    BaseCallbackHandler,
    CallbackManagerForChainRun,
)
from langchain_core.messages import AIMessageChunk, BaseMessage, BaseMessageChunk
from langchain_core.outputs import ChatGenerationChunk, LLMResult
from langchain_core.runnables import Runnable, RunnableConfig, RunnableSerializable, patch_config
from pydantic import ConfigDict, Field, PrivateAttr, model_validator

from swerve import (
    Attempt,
    Failover,
    FallbackConfig,
    HealthStore,
    PartKind,
    Route,
    StreamReset,
    StreamSpec,
)

from ._callbacks import aannounce, announce, anotifier, notifier
from ._chunks import Tally, part_of, report_response
from ._failover import make_failover, summary, warn_retries
from ._limits import SyncLimits, bounded_call, bounded_stream, warn_no_limit
from ._route_model import WireTarget

__all__ = ["RunnableFailover", "with_failover"]

Prepare = Callable[[Any, Attempt], Any]


def _part(chunk: object) -> PartKind | None:
    """What a runnable's chunk carries: chat chunks as the chat model reads them; any other
    non-empty chunk is content."""
    if isinstance(chunk, ChatGenerationChunk):
        return part_of(chunk)
    if isinstance(chunk, BaseMessage):
        return part_of(ChatGenerationChunk(message=chunk))  # type: ignore[arg-type]
    if chunk is None or chunk == "" or (isinstance(chunk, Mapping | list) and not chunk):
        return None
    return "other"


_SPEC: StreamSpec[Any] = StreamSpec(part=_part)


class RunnableFailover(RunnableSerializable[Any, Any]):
    """Runs ``runnables[route]`` for the route each attempt is on; see :func:`with_failover`."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    runnables: dict[str, Any]
    primary: str
    mid_stream: Literal["error", "restart"] = "error"
    prepare: Any = Field(default=None, exclude=True)
    """``prepare(input, attempt)``: the input as the attempt's route should get it."""
    config: FallbackConfig | None = Field(default=None, exclude=True)
    health: Any = Field(default=None, exclude=True)
    failover: Any = Field(default=None, exclude=True)
    warn: bool = Field(default=True, exclude=True)

    _failover: Failover = PrivateAttr()
    _requested: Route = PrivateAttr()
    _wire: dict[str, WireTarget] = PrivateAttr()

    @model_validator(mode="after")
    def _setup(self) -> Self:
        if self.primary not in self.runnables:
            raise ValueError(f"primary route {self.primary!r} is not one of the runnables")
        for name, value in self.runnables.items():
            if not isinstance(value, Runnable):
                raise TypeError(f"runnables[{name!r}] is a {type(value).__name__}, not a Runnable")
        health: HealthStore | None = self.health
        config = self.config
        self._failover = make_failover(self.failover, config, health)
        self.failover = self.config = self.health = None
        for name in self.runnables:
            self._failover.route(name)
        self._requested = self._failover.route(self.primary)
        self._wire = {name: WireTarget.find(value) for name, value in self.runnables.items()}
        if self.warn:
            warn_retries(self.runnables, stacklevel=6)
            warn_no_limit(config, self.runnables, stacklevel=6)
        return self

    @property
    def engine(self) -> Failover:
        return self._failover

    # -- per attempt ----------------------------------------------------------------------------
    def _attempt_args(
        self,
        value: Any,
        attempt: Attempt,
        config: RunnableConfig,
        run_manager: CallbackManagerForChainRun | AsyncCallbackManagerForChainRun,
    ) -> tuple[Runnable[Any, Any], Any, RunnableConfig, EffectWatcher]:
        runnable = self.runnables[str(attempt.route)]
        self._wire[str(attempt.route)].tell(attempt)
        child = run_manager.get_child(f"swerve:attempt:{attempt.number}")
        watcher = EffectWatcher(attempt)
        child.add_handler(watcher, inherit=True)
        if self.prepare is not None:
            value = self.prepare(value, attempt)
        return runnable, value, patch_config(config, callbacks=child), watcher

    def _what(self, attempt: Attempt) -> str:
        return f"the runnable of route {attempt.route}"

    def _run(
        self, value: Any, run_manager: CallbackManagerForChainRun, config: RunnableConfig,
        kwargs: dict[str, Any], attempt: Attempt,
    ) -> Any:  # fmt: skip
        runnable, value, cfg, watcher = self._attempt_args(value, attempt, config, run_manager)
        limits = SyncLimits.of(self._failover.config, attempt)
        bound = limits.unary() if limits is not None else None
        if bound is None:
            return runnable.invoke(value, cfg, **kwargs)
        # A runnable has no timeout swerve can set: it runs in a worker thread, abandoned at
        # the limit (a tool it was running then counts as an effect: never run it twice).
        run = partial(runnable.invoke, value, cfg, **kwargs)
        return bounded_call(run, bound, self._what(attempt), watcher.abandoned)

    async def _arun(
        self, value: Any, run_manager: AsyncCallbackManagerForChainRun, config: RunnableConfig,
        kwargs: dict[str, Any], attempt: Attempt,
    ) -> Any:  # fmt: skip
        runnable, value, cfg, _ = self._attempt_args(value, attempt, config, run_manager)
        return await runnable.ainvoke(value, cfg, **kwargs)

    def _run_stream(
        self, value: Any, run_manager: CallbackManagerForChainRun, config: RunnableConfig,
        kwargs: dict[str, Any], attempt: Attempt,
    ) -> Iterator[Any]:  # fmt: skip
        runnable, value, cfg, watcher = self._attempt_args(value, attempt, config, run_manager)
        limits = SyncLimits.of(self._failover.config, attempt)
        if limits is None:
            return runnable.stream(value, cfg, **kwargs)
        source = partial(runnable.stream, value, cfg, **kwargs)
        return bounded_stream(source, limits, _part, self._what(attempt), watcher.abandoned)

    async def _arun_stream(
        self, value: Any, run_manager: AsyncCallbackManagerForChainRun, config: RunnableConfig,
        kwargs: dict[str, Any], attempt: Attempt,
    ) -> AsyncIterator[Any]:  # fmt: skip
        runnable, value, cfg, _ = self._attempt_args(value, attempt, config, run_manager)
        async for chunk in runnable.astream(value, cfg, **kwargs):
            yield chunk

    # -- Runnable -------------------------------------------------------------------------------
    def invoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        def call(
            value: Any, run_manager: CallbackManagerForChainRun, config: RunnableConfig
        ) -> Any:
            def fn(attempt: Attempt) -> Any:
                return self._run(value, run_manager, config, kwargs, attempt)

            result = self._failover.call(self._requested, fn)
            info = summary(result)
            announce(run_manager, info)
            return stamped(result.value, info)

        return self._call_with_config(call, input, config)

    async def ainvoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        async def call(
            value: Any, run_manager: AsyncCallbackManagerForChainRun, config: RunnableConfig
        ) -> Any:
            async def fn(attempt: Attempt) -> Any:
                return await self._arun(value, run_manager, config, kwargs, attempt)

            result = await self._failover.acall(self._requested, fn)
            info = summary(result)
            await aannounce(run_manager, info)
            return stamped(result.value, info)

        return await self._acall_with_config(call, input, config)

    def stream(
        self, input: Any, config: RunnableConfig | None = None, **kwargs: Any | None
    ) -> Iterator[Any]:
        def transform(
            inputs: Iterator[Any], run_manager: CallbackManagerForChainRun, config: RunnableConfig
        ) -> Iterator[Any]:
            value = _single(inputs)
            notify = notifier(run_manager, None, self._requested)

            def fn(attempt: Attempt) -> Iterator[Any]:
                return self._run_stream(value, run_manager, config, kwargs, attempt)

            stream = self._failover.stream(self._requested, fn, _SPEC, mid_stream=self.mid_stream)
            messages = False  # whether the chunks are messages: then a summary chunk ends them
            with stream:
                for item in stream:
                    if isinstance(item, StreamReset):
                        notify(item)
                        continue
                    messages = isinstance(item, BaseMessageChunk)
                    yield item
            info = summary(stream.result(None))
            announce(run_manager, info)
            if messages:
                yield summary_chunk(info)

        yield from self._transform_stream_with_config(iter([input]), transform, config)

    async def astream(
        self, input: Any, config: RunnableConfig | None = None, **kwargs: Any | None
    ) -> AsyncIterator[Any]:
        async def transform(
            inputs: AsyncIterator[Any],
            run_manager: AsyncCallbackManagerForChainRun,
            config: RunnableConfig,
        ) -> AsyncIterator[Any]:
            value = await _asingle(inputs)
            notify = anotifier(run_manager, None, self._requested)

            def fn(attempt: Attempt) -> AsyncIterator[Any]:
                return self._arun_stream(value, run_manager, config, kwargs, attempt)

            stream = self._failover.astream(self._requested, fn, _SPEC, mid_stream=self.mid_stream)
            messages = False
            async with stream:
                async for item in stream:
                    if isinstance(item, StreamReset):
                        await notify(item)
                        continue
                    messages = isinstance(item, BaseMessageChunk)
                    yield item
            info = summary(stream.result(None))
            await aannounce(run_manager, info)
            if messages:
                yield summary_chunk(info)

        async def one() -> AsyncIterator[Any]:
            yield input

        async for chunk in self._atransform_stream_with_config(one(), transform, config):
            yield chunk


# -- the attempt's run tree and the call's result --------------------------------------------
class EffectWatcher(BaseCallbackHandler):
    """Watches one attempt's run tree: a tool that ran there is an effect, so the attempt's
    failure must surface rather than run the tool again on another route; the chat models
    that ran there report their token usage, finish reasons, model and response id on the
    attempt."""

    run_inline = True  # in async runs too, so the effect is recorded before the failure

    def __init__(self, attempt: Attempt) -> None:
        self.attempt = attempt
        self._names: dict[Any, str] = {}
        self._usage = Tally()  # summed over the attempt's model runs

    def on_llm_end(self, response: LLMResult, **kwargs: Any) -> None:
        for generation in (g for gs in response.generations for g in gs):
            message = getattr(generation, "message", None)
            usage = getattr(message, "usage_metadata", None) or {}
            self._usage.add(usage)
            info = {**(generation.generation_info or {}), **(response.llm_output or {})}
            meta = getattr(message, "response_metadata", None) or {}
            finish = meta.get("finish_reason") or meta.get("stop_reason")
            finish = finish or info.get("finish_reason") or info.get("stop_reason")
            self._usage.report(self.attempt, (finish,) if isinstance(finish, str) else ())
            if isinstance(message, BaseMessage):
                report_response(self.attempt, message, info)

    def abandoned(self) -> None:
        """The attempt was given up at a time limit while its thread runs on: a tool still
        running there may yet have its effect, so the failure must surface."""
        for name in list(self._names.values()):
            self.attempt.record_effect(f"tool:{name}")

    def on_tool_start(
        self, serialized: dict[str, Any], input_str: str, *, run_id: Any, **kwargs: Any
    ) -> None:
        name = kwargs.get("name") or (serialized or {}).get("name") or "tool"
        self._names[run_id] = str(name)

    def on_tool_end(self, output: Any, *, run_id: Any, **kwargs: Any) -> None:
        self.attempt.record_effect(f"tool:{self._names.pop(run_id, 'tool')}")

    def on_tool_error(self, error: BaseException, *, run_id: Any, **kwargs: Any) -> None:
        # A tool that failed may still have done part of its work: never run it twice.
        self.attempt.record_effect(f"tool:{self._names.pop(run_id, 'tool')}")


def stamped(value: Any, info: dict[str, Any]) -> Any:
    """``value`` with ``info`` as ``response_metadata["swerve"]`` of its message: the value
    itself when it is a message, its ``"raw"`` message when it is the dict of
    ``with_structured_output(include_raw=True)``. Any other value is returned unchanged."""
    message = value.get("raw") if isinstance(value, Mapping) else value
    if isinstance(message, BaseMessage):
        message.response_metadata = {**message.response_metadata, "swerve": info}
    return value


def summary_chunk(info: dict[str, Any]) -> AIMessageChunk:
    """A message stream's last chunk: no content, the ``swerve`` summary in its metadata."""
    return AIMessageChunk(content="", response_metadata={"swerve": info}, chunk_position="last")


def _single(inputs: Iterator[Any]) -> Any:
    value = _NONE = object()
    for item in inputs:
        value = item if value is _NONE else value + item
    return value


async def _asingle(inputs: AsyncIterator[Any]) -> Any:
    value = _NONE = object()
    async for item in inputs:
        value = item if value is _NONE else value + item
    return value


def with_failover(
    runnables: Mapping[str, Runnable[Any, Any]],
    primary: str,
    config: FallbackConfig | None = None,
    health: HealthStore | None = None,
    *,
    failover: Failover | None = None,
    mid_stream: Literal["error", "restart"] = "error",
    prepare: Prepare | None = None,
) -> RunnableFailover:
    """Fail over between runnables, one per route.

    Each attempt runs ``runnables[route]`` with the call's input (through ``prepare`` when
    given) as a child run. If a tool ran inside a failed attempt (LangChain's callbacks saw a
    tool run end in its run tree), the attempt recorded an effect: swerve does not retry or
    swap, and the error surfaces, because running the step again would repeat the tool.
    Tool calls that were only streamed are no effect.
    """
    return RunnableFailover(
        runnables=dict(runnables),
        primary=primary,
        config=config,
        health=health,
        failover=failover,
        mid_stream=mid_stream,
        prepare=prepare,
    )
