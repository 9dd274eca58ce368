"""One route's chat model, resolved once from what the route was given (a chat model or a
binding of one), as an attempt on that route calls it."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any
from urllib.parse import urlsplit

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage
from langchain_core.messages.tool import tool_call_chunk
from langchain_core.outputs import ChatGenerationChunk, ChatResult
from langchain_core.runnables import RunnableBinding, RunnableParallel, RunnableSequence

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

__all__ = ["RouteModel", "WireTarget"]


@dataclass(frozen=True, slots=True)
class WireTarget:
    """What an attempt on a route sends on the wire: the model's own name for the model (a
    route's name need not be it) and the server its base URL names (None: not known)."""

    model: str | None = None
    server: tuple[str, int | None] | None = None

    @classmethod
    def of(cls, model: BaseChatModel) -> WireTarget:
        # ChatOpenAI and ChatOpenRouter name it ``model_name``, ChatAnthropic ``model``.
        names = (getattr(model, "model_name", None), getattr(model, "model", None))
        return cls(next((n for n in names if isinstance(n, str) and n), None), _server_of(model))

    @classmethod
    def find(cls, value: object) -> WireTarget:
        """The target of the chat model a runnable calls: the model itself, unwrapped from
        its bindings, or the first in a sequence or map (``with_structured_output``)."""
        model = _chat_model_in(value)
        return cls.of(model) if model is not None else cls()

    def tell(self, attempt: Attempt, call: Mapping[str, Any] | None = None) -> None:
        """Report the request on ``attempt``; a ``model`` kwarg of the call overrides the
        model's own (the provider's payload takes it)."""
        bound = (call or {}).get("model")
        address, port = self.server or (None, None)
        attempt.report_request(bound if isinstance(bound, str) else self.model, address, port)


_BASE_URLS = ("openai_api_base", "anthropic_api_url", "openrouter_api_base", "azure_endpoint")
_PORTS = {"https": 443, "http": 80}


def _server_of(model: BaseChatModel) -> tuple[str, int | None] | None:
    # The openai SDK client's base URL first: it is what is sent to, its env and default
    # included (ChatOpenAI leaves ``openai_api_base`` None then).
    client = getattr(model, "root_client", None)
    urls = (getattr(client, "base_url", None), *(getattr(model, f, None) for f in _BASE_URLS))
    for url in urls:
        if not url:
            continue
        parts = urlsplit(str(url))
        if not parts.hostname:
            continue
        try:
            port = parts.port
        except ValueError:  # not a port number: the address is still known
            port = None
        return parts.hostname, port if port is not None else _PORTS.get(parts.scheme)
    return None


def _chat_model_in(value: object) -> BaseChatModel | None:
    while isinstance(value, RunnableBinding):
        value = value.bound
    if isinstance(value, BaseChatModel):
        return value
    steps: list[object] = []
    if isinstance(value, RunnableSequence):
        steps = list(value.steps)
    elif isinstance(value, RunnableParallel):
        steps = list(value.steps__.values())
    for step in steps:
        if (found := _chat_model_in(step)) is not None:
            return found
    return None


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
    wire: WireTarget = WireTarget()

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
            WireTarget.of(model),
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
    # Each tells ``attempt`` the model and server it sends to, and the token usage, finish
    # reason, answering model and response id the answer reports. The sync
    # ones hold the model to ``limits`` (see _limits): through its SDK's per-request timeout
    # when it has one, else by no longer waiting for it in a worker thread.
    def generate(
        self, messages: list[BaseMessage], stop: list[str] | None, kwargs: dict[str, Any],
        attempt: Attempt, limits: SyncLimits | None = None,
    ) -> ChatResult:  # fmt: skip
        call = self._call(kwargs)
        self.wire.tell(attempt, call)
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
        call = self._call(kwargs)
        self.wire.tell(attempt, call)
        result = await self.model._agenerate(messages, stop=stop, **call)
        return check_result(result, str(self.route), self.strict, attempt)

    def stream(
        self, messages: list[BaseMessage], stop: list[str] | None, kwargs: dict[str, Any],
        attempt: Attempt, limits: SyncLimits | None = None,
    ) -> Iterator[ChatGenerationChunk]:  # fmt: skip
        call = self._call(kwargs)
        self.wire.tell(attempt, call)
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
        call = self._call(kwargs)
        self.wire.tell(attempt, call)
        chunks = self.sources[1](self.model, messages, stop, call)
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
    # What the whole result says (ChatOpenAI's model and response id) goes on a lone
    # generation's metadata, as LangChain's invoke puts it there.
    whole = (result.llm_output or {}) if len(result.generations) == 1 else {}
    for generation in result.generations:
        message = generation.message
        ai = message if isinstance(message, AIMessage) else None
        chunk = AIMessageChunk(
            content=message.content,
            additional_kwargs=message.additional_kwargs,
            response_metadata={**whole, **message.response_metadata},
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
