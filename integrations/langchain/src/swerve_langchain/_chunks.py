"""How swerve reads LangChain chat chunks: what counts as content, and what ends a stream."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Iterator, Mapping
from typing import Any

from langchain_core.messages import BaseMessage
from langchain_core.outputs import ChatGenerationChunk, ChatResult

from swerve import Attempt, PartKind, StreamSpec
from swerve.adapters import IncompleteStreamError

from ._errors import ProviderStreamError

__all__ = [
    "CHAT_SPEC",
    "Tally",
    "achecked",
    "check_result",
    "checked",
    "part_of",
    "report",
    "report_response",
    "strict_finish",
]

_TEXT_BLOCKS = frozenset({"text", "text_delta", "output_text", "refusal"})
_REASONING_BLOCKS = frozenset({"thinking", "redacted_thinking", "reasoning", "thinking_delta"})
_TOOL_BLOCKS = frozenset(
    {"tool_use", "tool_call", "tool_call_chunk", "input_json_delta", "server_tool_use"}
)
_REASONING_KWARGS = ("reasoning_content", "reasoning", "reasoning_details")
# Providers whose LangChain integrations always report how a response ended; for them a
# stream without that report was cut short. Others are trusted to end when they end.
_STRICT_LLM_TYPES = frozenset(
    {"openai-chat", "azure-openai-chat", "anthropic-chat", "openrouter-chat"}
)
_FINISH_KEYS = ("finish_reason", "stop_reason")
# Ids LangChain gives messages itself (``run-...``, ``lc_run--...``): not the provider's.
_LANGCHAIN_IDS = ("run-", "lc_")


def part_of(chunk: ChatGenerationChunk) -> PartKind | None:
    """The kind of output a chunk carries, or None for a role-only / empty / metadata chunk."""
    message = chunk.message
    if getattr(message, "tool_call_chunks", None):
        return "tool_call"
    content = message.content
    if isinstance(content, str):
        if content:
            return "text"
    else:
        for block in content:
            kind = _block_part(block)
            if kind is not None:
                return kind
    kwargs = message.additional_kwargs
    if any(kwargs.get(k) for k in _REASONING_KWARGS):
        return "reasoning"
    if kwargs.get("function_call") or kwargs.get("tool_calls"):
        return "tool_call"
    if kwargs.get("refusal"):
        return "text"
    return None


def _block_part(block: object) -> PartKind | None:
    if isinstance(block, str):
        return "text" if block else None
    if not isinstance(block, Mapping):
        return None
    kind = block.get("type")
    if kind in _TEXT_BLOCKS:
        text = block.get("text", block.get("refusal"))
        return "text" if text else None
    if kind in _REASONING_BLOCKS:
        body = block.get("thinking") or block.get("reasoning") or block.get("data")
        return "reasoning" if body or block.get("signature") else None
    if kind in _TOOL_BLOCKS:
        return "tool_call"
    return "other" if kind else None


CHAT_SPEC: StreamSpec[ChatGenerationChunk] = StreamSpec(part=part_of)
"""The engine's view of chat chunks. Finish signals are checked per route (:func:`checked`)."""


def strict_finish(llm_type: str) -> bool:
    return llm_type in _STRICT_LLM_TYPES


def _finish_of(metadata: Mapping[str, Any] | None) -> str | None:
    if not metadata:
        return None
    for key in _FINISH_KEYS:
        value = metadata.get(key)
        if isinstance(value, str) and value:
            return value
    return None


def chunk_finish(chunk: ChatGenerationChunk) -> str | None:
    return _finish_of(chunk.message.response_metadata) or _finish_of(chunk.generation_info)


def _raise_for_finish(finish: str, route: str) -> None:
    if finish == "error":
        raise ProviderStreamError(
            f"the stream of {route} ended with finish_reason 'error' (the provider failed "
            "inside the stream; the integration did not pass its error on)"
        )


class Tally:
    """Token counts summed over an answer's parts (a stream's chunks, the model runs of an
    attempt): LangChain's usage parts add up. A cache count stays None until a part has one."""

    __slots__ = ("counts",)

    def __init__(self) -> None:
        self.counts: list[int | None] = [None, None, None, None]  # in, out, cache read, write

    def add(self, usage: Mapping[str, Any]) -> None:
        if not usage:  # no usage reported: the counts stay unknown
            return
        details = usage.get("input_token_details") or {}
        parts = (
            usage.get("input_tokens", 0),
            usage.get("output_tokens", 0),
            details.get("cache_read"),
            details.get("cache_creation"),
        )
        for i, value in enumerate(parts):
            if isinstance(value, int):
                self.counts[i] = (self.counts[i] or 0) + value

    def report(self, attempt: Attempt, reasons: Iterable[str] = ()) -> None:
        inputs, outputs, cache_read, cache_write = self.counts
        attempt.report_usage(inputs, outputs, reasons, cache_read, cache_write)


def _text(sources: Iterable[Mapping[str, Any] | None], keys: tuple[str, ...]) -> str | None:
    for source in sources:
        for key in keys:
            value = (source or {}).get(key)
            if isinstance(value, str) and value:
                return value
    return None


def report_response(
    attempt: Attempt, message: BaseMessage, *infos: Mapping[str, Any] | None
) -> None:
    """The model the provider said answered and the response's id, told the attempt (the
    first report holds): from ``response_metadata`` (``model_name``: ChatOpenAI, ChatAnthropic;
    ``model``: older ChatAnthropic; ``id``), then ``infos`` (a chunk's ``generation_info``, a
    result's ``llm_output``), then the message's own id when the provider gave it."""
    sources = (message.response_metadata, *infos)
    response_id = _text(sources, ("id",))
    if response_id is None and isinstance(message.id, str):
        response_id = None if message.id.startswith(_LANGCHAIN_IDS) else message.id
    attempt.report_response(_text(sources, ("model_name", "model")), response_id)


def report(
    attempt: Attempt, message: BaseMessage, finish: str | None, *infos: Mapping[str, Any] | None
) -> None:
    """A whole answer's token usage (``usage_metadata``, with its cache tokens), finish
    reason, answering model and response id, told the attempt."""
    tally = Tally()
    tally.add(getattr(message, "usage_metadata", None) or {})
    tally.report(attempt, (finish,) if finish is not None else ())
    report_response(attempt, message, *infos)


class _Finish:
    """Watches a route's chunks for the finish reason, and excuses a break after it; tells
    the attempt the usage, finish reason, model and response id the chunks carry. Shared by
    :func:`checked` and :func:`achecked`, which only differ in how they iterate."""

    def __init__(self, route: str, strict: bool, attempt: Attempt) -> None:
        self.route = route
        self.strict = strict
        self.attempt = attempt
        self.finished = False
        self.usage = Tally()  # chunks carry parts of the usage (input first, output last)

    def see(self, chunk: ChatGenerationChunk) -> ChatGenerationChunk:
        usage = getattr(chunk.message, "usage_metadata", None)
        if usage:
            self.usage.add(usage)
            self.usage.report(self.attempt)
        # The first chunk that names them holds (ChatAnthropic's first, ChatOpenAI's last).
        report_response(self.attempt, chunk.message, chunk.generation_info)
        finish = chunk_finish(chunk)
        if finish is not None:
            if not self.finished:  # some integrations repeat it on a later chunk
                self.attempt.report_usage(finish_reasons=(finish,))
            _raise_for_finish(finish, self.route)
            self.finished = True
        return chunk

    def __enter__(self) -> _Finish:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: object, tb: object) -> bool:
        # A break after the finish reason arrived leaves the answer whole: all it cost is the
        # stream's terminator ([DONE], message_stop). Not a failure of the route.
        return self.finished and kind is not None and issubclass(kind, Exception)

    def end(self) -> None:
        if self.strict and not self.finished:
            raise IncompleteStreamError(f"the stream of {self.route} ended without a finish reason")


def checked(
    chunks: Iterator[ChatGenerationChunk], route: str, strict: bool, attempt: Attempt
) -> Iterator[ChatGenerationChunk]:
    """A route's chunks, with the end verified."""
    try:
        with _Finish(route, strict, attempt) as finish:
            for chunk in chunks:
                yield finish.see(chunk)
    finally:
        close = getattr(chunks, "close", None)
        if close is not None:
            close()
    finish.end()


async def achecked(
    chunks: AsyncIterator[ChatGenerationChunk], route: str, strict: bool, attempt: Attempt
) -> AsyncIterator[ChatGenerationChunk]:
    """Async :func:`checked`."""
    try:
        with _Finish(route, strict, attempt) as finish:
            async for chunk in chunks:
                yield finish.see(chunk)
    finally:
        aclose = getattr(chunks, "aclose", None)
        if aclose is not None:
            await aclose()
    finish.end()


def check_result(result: ChatResult, route: str, strict: bool, attempt: Attempt) -> ChatResult:
    """A non-streaming result of a strict provider must say how it ended; its usage and
    finish reasons, answering model and response id are told the attempt."""
    for generation in result.generations:
        message: BaseMessage = generation.message
        finish = (
            _finish_of(message.response_metadata)
            or _finish_of(generation.generation_info)
            or _finish_of(result.llm_output)  # ChatAnthropic reports it there
        )
        report(attempt, message, finish, generation.generation_info, result.llm_output)
        if not strict:
            continue
        if finish is None:
            raise IncompleteStreamError(f"the response of {route} has no finish reason")
        _raise_for_finish(finish, route)
    return result
