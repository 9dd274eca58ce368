"""One route's chat model, resolved once from what the route was given (a chat model or a
binding of one), as an attempt on that route calls it."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage
from langchain_core.messages.tool import tool_call_chunk
from langchain_core.outputs import ChatGenerationChunk, ChatResult
from langchain_core.runnables import RunnableBinding

from swerve import Attempt, Route, Telemetry
from swerve.adapters import CACHE_CONTROL, prepare_for_route

from ._chunks import achecked, check_result, checked, part_of, strict_finish
from ._history import MessageRules, Target, target_of
from ._limits import (
    SyncLimits,
    bounded_call,
    bounded_stream,
    has_request_timeout,
    request_timeout,
)

__all__ = ["RouteModel"]


@dataclass
class RouteModel:
    """One route's model, resolved once: the chat model, its bound kwargs, what it is."""

    route: Route
    model: BaseChatModel
    kwargs: dict[str, Any]
    target: Target
    strict: bool
    sources: tuple[_Source, _ASource]
    """Where an attempt's chunks come from: the model's stream, or its whole answer."""
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def resolve(cls, route: Route, value: object) -> RouteModel:
        model, kwargs = resolve_chat_model(value, str(route))
        streams = type(model)._stream is not BaseChatModel._stream and (
            model.disable_streaming is not True
        )
        return cls(
            route,
            model,
            kwargs,
            target_of(model),
            strict_finish(getattr(model, "_llm_type", "")),
            (_streamed, _astreamed) if streams else (_whole, _awhole),
            _own_retries_off(model),
        )

    # -- what an attempt sends ------------------------------------------------------------------
    def messages_for(
        self, attempt: Attempt, messages: list[BaseMessage], telemetry: Telemetry
    ) -> list[BaseMessage]:
        """The history as this route should get it (the core's wire rules, on messages)."""
        return prepare_for_route(
            messages,
            MessageRules(self.target),
            route=str(self.route),
            moved=attempt.route != attempt.requested,
            telemetry=telemetry,
        )

    def _call(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        call = {**self.kwargs, **kwargs, **self.extra}
        call.pop("stream", None)
        if not self.target.claude:
            call.pop(CACHE_CONTROL, None)  # Anthropic's top-level caching kwarg
        return call

    def _what(self) -> str:
        return f"the {type(self.model).__name__} of route {self.route}"

    # -- the attempt ----------------------------------------------------------------------------
    # Each tells ``attempt`` the token usage and finish reason the answer reports. The sync
    # ones hold the model to ``limits`` (see _limits): through its SDK's per-request timeout
    # when it has one, else by no longer waiting for it in a worker thread.
    def generate(
        self, messages: list[BaseMessage], stop: list[str] | None, kwargs: dict[str, Any],
        attempt: Attempt, limits: SyncLimits | None = None,
    ) -> ChatResult:  # fmt: skip
        call = self._call(kwargs)
        bound = limits.unary() if limits is not None else None
        timed = request_timeout(self.model, call, bound[1] if bound else None)
        call.update(timed)
        run = partial(self.model._generate, messages, stop=stop, **call)
        result = run() if bound is None or timed else bounded_call(run, bound, self._what())
        return check_result(result, str(self.route), self.strict, attempt)

    async def agenerate(
        self, messages: list[BaseMessage], stop: list[str] | None, kwargs: dict[str, Any],
        attempt: Attempt,
    ) -> ChatResult:  # fmt: skip
        result = await self.model._agenerate(messages, stop=stop, **self._call(kwargs))
        return check_result(result, str(self.route), self.strict, attempt)

    def stream(
        self, messages: list[BaseMessage], stop: list[str] | None, kwargs: dict[str, Any],
        attempt: Attempt, limits: SyncLimits | None = None,
    ) -> Iterator[ChatGenerationChunk]:  # fmt: skip
        call = self._call(kwargs)
        if limits is None:
            chunks = self.sources[0](self.model, messages, stop, call)
        else:
            # Every wait for a chunk is bounded by the reader; where the SDK takes a timeout,
            # its client's timeout (capped by swerve's) also ends the abandoned read itself, so
            # no warning is needed.
            call.update(request_timeout(self.model, call, limits.per_request(stream=True)))
            source = partial(self.sources[0], self.model, messages, stop, call)
            what = None if has_request_timeout(self.model) else self._what()
            chunks = bounded_stream(source, limits, part_of, what)
        return checked(chunks, str(self.route), self.strict, attempt)

    def astream(
        self, messages: list[BaseMessage], stop: list[str] | None, kwargs: dict[str, Any],
        attempt: Attempt,
    ) -> AsyncIterator[ChatGenerationChunk]:  # fmt: skip
        chunks = self.sources[1](self.model, messages, stop, self._call(kwargs))
        return achecked(chunks, str(self.route), self.strict, attempt)


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


_Source = Callable[
    [BaseChatModel, list[BaseMessage], list[str] | None, dict[str, Any]],
    Iterator[ChatGenerationChunk],
]
_ASource = Callable[
    [BaseChatModel, list[BaseMessage], list[str] | None, dict[str, Any]],
    AsyncIterator[ChatGenerationChunk],
]


def _streamed(
    model: BaseChatModel, messages: list[BaseMessage], stop: list[str] | None, call: dict[str, Any]
) -> Iterator[ChatGenerationChunk]:
    return model._stream(messages, stop=stop, **call)


def _astreamed(
    model: BaseChatModel, messages: list[BaseMessage], stop: list[str] | None, call: dict[str, Any]
) -> AsyncIterator[ChatGenerationChunk]:
    return model._astream(messages, stop=stop, **call)


def _whole(
    model: BaseChatModel, messages: list[BaseMessage], stop: list[str] | None, call: dict[str, Any]
) -> Iterator[ChatGenerationChunk]:
    """A route that does not stream, called when the engine first reads it."""
    yield from _as_chunks(model._generate(messages, stop=stop, **call))


async def _awhole(
    model: BaseChatModel, messages: list[BaseMessage], stop: list[str] | None, call: dict[str, Any]
) -> AsyncIterator[ChatGenerationChunk]:
    for chunk in _as_chunks(await model._agenerate(messages, stop=stop, **call)):
        yield chunk


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
