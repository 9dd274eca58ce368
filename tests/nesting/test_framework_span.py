"""The framework span (swerve_langchain._callbacks) on its own: it finds the LLM span each
family opened for a chat-model run, makes it current for a block, and for a stream only while
a chunk is pulled (never across a yield, so the consumer's context is left alone)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from opentelemetry import trace
from swerve_langchain._callbacks import parented, within

from swerve.testing import TelemetryRecorder

from ._families import Family
from ._tree import Tree


class _Probe(BaseChatModel):
    """Records the current span: in a parented block, after it, and around a stream's pulls."""

    seen: list[trace.Span]

    @property
    def _llm_type(self) -> str:
        return "probe"

    def _generate(
        self, messages: list[BaseMessage], stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None, **kwargs: Any,
    ) -> ChatResult:  # fmt: skip
        with parented(run_manager):
            self.seen.append(trace.get_current_span())
        self.seen.append(trace.get_current_span())
        for _ in within(run_manager, self._chunks()):
            self.seen.append(trace.get_current_span())  # between pulls
        return ChatResult(generations=[ChatGeneration(message=AIMessage("ok"))])

    def _chunks(self) -> Iterator[str]:
        for text in ("a", "b"):
            self.seen.append(trace.get_current_span())  # while pulled
            yield text


def test_the_llm_span_is_current_in_the_block_and_while_pulled_only(
    otel: TelemetryRecorder, family: Family
) -> None:
    probe = _Probe(seen=[])
    with otel.tracer_provider.get_tracer("app").start_as_current_span("app") as app:
        probe.invoke("hi")
        assert trace.get_current_span() is app
    (llm,) = Tree(otel.finished(), family).llm_spans(family.langchain_scope)
    assert [s.get_span_context() == llm.context for s in probe.seen] == [True, False] * 3
    assert all(s is app for s in probe.seen[1::2])


def test_without_a_tracing_handler_nothing_changes() -> None:
    with parented(None):
        assert trace.get_current_span() is trace.INVALID_SPAN
    assert list(within(None, iter([1, 2]))) == [1, 2]
