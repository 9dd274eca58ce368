"""Pieces the chat model, the runnable wrapper and the middleware share."""

from __future__ import annotations

import warnings
from collections.abc import Awaitable, Callable, Mapping
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
from langchain_core.messages import AIMessageChunk, BaseMessage
from langchain_core.outputs import LLMResult
from langchain_core.runnables import Runnable, RunnableBinding

from swerve import Attempt, Failover, FallbackConfig, HealthStore, Result, Route, StreamReset

from ._errors import classify_langchain_error

__all__ = [
    "RESULT_EVENT",
    "STREAM_RESET_EVENT",
    "EffectWatcher",
    "SwerveRetryWarning",
    "make_failover",
    "reset_data",
    "summary",
]

STREAM_RESET_EVENT = "swerve.stream_reset"
"""Name of the LangChain custom event sent when ``mid_stream="restart"`` restarts a stream
(visible in ``astream_events`` as ``on_custom_event``): drop what the stream showed so far."""
RESET_KEY = "swerve_stream_reset"
"""``response_metadata`` key on the first chunk of the route a stream restarted on."""
RESULT_EVENT = "swerve.result"
"""Name of the LangChain custom event a :func:`with_failover` call sends when it ends well:
its data is the :func:`summary` (who answered), whatever the output is."""

Notify = Callable[[StreamReset], None]
ANotify = Callable[[StreamReset], Awaitable[None]]


class SwerveRetryWarning(UserWarning):
    """A route model retries by itself (its SDK's ``max_retries`` is not 0), which hides
    failures from swerve and delays failover."""


def make_failover(
    failover: Failover | None, config: FallbackConfig | None, health: HealthStore | None
) -> Failover:
    """The engine a wrapper runs on: ``failover`` as given, or one built on ``config`` and
    ``health``; either way it reads LangChain's errors (:func:`classify_langchain_error`,
    tried before any rules the Failover already has)."""
    if failover is not None:
        if config is not None or health is not None:
            raise ValueError("pass either failover or config/health, not both")
        return failover.with_classifiers(classify_langchain_error)
    return Failover(config, health, classifiers=[classify_langchain_error])


def reset_data(reset: StreamReset, requested: Route) -> dict[str, str]:
    return {
        "route_from": str(reset.route),
        "route_to": str(reset.next_route),
        "requested": str(requested),
    }


def summary(result: Result[Any]) -> dict[str, Any]:
    """The ``swerve`` entry of ``response_metadata``: the routes asked for and served, the
    retries and swaps, and (when there were any) the degraded routes the call walked past,
    each with who learned its cooldown: ``this_failover``, or ``elsewhere`` (another wrapper
    on the same health store, another process through Redis, an operator)."""
    info: dict[str, Any] = {
        "requested": str(result.requested),
        "served": str(result.route),
        "retries": result.retries,
        "swaps": result.swaps,
    }
    if result.skipped:
        info["skipped"] = [{"route": str(s.route), "learned": s.learned} for s in result.skipped]
    return info


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


_M = TypeVar("_M", CallbackManager, AsyncCallbackManager)


def _of_run(cls: type[_M], run: Any) -> _M:
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
    run_manager: Any, fallback: Callable[[], tuple[_M, Any] | None] | None, cls: type[_M]
) -> tuple[_M, Any] | None:
    """Where a reset event goes: the run's own manager, else the one ``fallback`` finds."""
    if run_manager is not None:
        return _of_run(cls, run_manager), run_manager.run_id
    return fallback() if fallback is not None else None


def notifier(
    run_manager: CallbackManagerForLLMRun | CallbackManagerForChainRun | None,
    fallback: Callable[[], tuple[CallbackManager, Any] | None] | None,
    requested: Route,
) -> Notify:
    """A function that sends :data:`STREAM_RESET_EVENT` to the run's callbacks."""

    def notify(reset: StreamReset) -> None:
        found = _run_of(run_manager, fallback, CallbackManager)
        if found is not None:
            manager, run_id = found
            manager.on_custom_event(STREAM_RESET_EVENT, reset_data(reset, requested), run_id=run_id)

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
            await manager.on_custom_event(
                STREAM_RESET_EVENT, reset_data(reset, requested), run_id=run_id
            )

    return notify


def announce(run_manager: CallbackManagerForChainRun, info: dict[str, Any]) -> None:
    """Send :data:`RESULT_EVENT` with ``info`` to the run's callbacks."""
    manager = _of_run(CallbackManager, run_manager)
    manager.on_custom_event(RESULT_EVENT, info, run_id=run_manager.run_id)


async def aannounce(run_manager: AsyncCallbackManagerForChainRun, info: dict[str, Any]) -> None:
    """Async :func:`announce`."""
    manager = _of_run(AsyncCallbackManager, run_manager)
    await manager.on_custom_event(RESULT_EVENT, info, run_id=run_manager.run_id)


class EffectWatcher(BaseCallbackHandler):
    """Watches one attempt's run tree: a tool that ran there is an effect, so the attempt's
    failure must surface rather than run the tool again on another route; the chat models
    that ran there report their token usage and finish reasons on the attempt."""

    run_inline = True  # in async runs too, so the effect is recorded before the failure

    def __init__(self, attempt: Attempt) -> None:
        self.attempt = attempt
        self._names: dict[Any, str] = {}
        self._tokens = [0, 0]  # input, output: summed over the attempt's model runs

    def on_llm_end(self, response: LLMResult, **kwargs: Any) -> None:
        for generation in (g for gs in response.generations for g in gs):
            message = getattr(generation, "message", None)
            usage = getattr(message, "usage_metadata", None) or {}
            self._tokens[0] += usage.get("input_tokens", 0)
            self._tokens[1] += usage.get("output_tokens", 0)
            info = {**(generation.generation_info or {}), **(response.llm_output or {})}
            meta = getattr(message, "response_metadata", None) or {}
            finish = meta.get("finish_reason") or meta.get("stop_reason")
            finish = finish or info.get("finish_reason") or info.get("stop_reason")
            inputs, outputs = self._tokens if usage else (None, None)
            reasons = (finish,) if isinstance(finish, str) else ()
            self.attempt.report_usage(inputs, outputs, reasons)

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


def resolve_chat_model(value: object, route: str) -> tuple[BaseChatModel, dict[str, Any]]:
    """The chat model behind a route value and the call kwargs bound on it."""
    kwargs: dict[str, Any] = {}
    layers: list[Mapping[str, Any]] = []
    while isinstance(value, RunnableBinding):
        layers.append(value.kwargs)
        value = value.bound
    if not isinstance(value, BaseChatModel):
        raise TypeError(
            f"routes[{route!r}] must be a chat model (or a binding of one), got "
            f"{type(value).__name__}; use with_failover() for other runnables"
        )
    for layer in reversed(layers):  # outer bindings override inner ones
        kwargs.update(layer)
    return value, kwargs


def warn_retries(models: Mapping[str, Runnable[Any, Any]], stacklevel: int = 3) -> None:
    """Warn once per wrapper when route models retry by themselves."""
    retrying = []
    for route, value in models.items():
        model = value
        while isinstance(model, RunnableBinding):
            model = model.bound
        if not hasattr(model, "max_retries"):
            continue
        retries = model.max_retries
        if retries is None or (isinstance(retries, int) and retries != 0):
            retrying.append(f"{route} (max_retries={retries})")
    if retrying:
        warnings.warn(
            "swerve: route models retry by themselves, which hides failures from swerve and "
            f"delays failover: {', '.join(retrying)}. Build them with max_retries=0 and let "
            "swerve's config (max_retries, backoff) do the retrying.",
            SwerveRetryWarning,
            stacklevel=stacklevel,
        )
