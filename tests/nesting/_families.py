"""The two GenAI instrumentation families LLM apps run, and how each marks an LLM call.

Each family is its LangChain and OpenAI instrumentors, plus the httpx2 client
instrumentation (the openai SDK and ChatOpenAI run on httpx2), all on one tracer provider.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from opentelemetry.instrumentation.httpx import HTTPX2ClientInstrumentor
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider


@dataclass(frozen=True, slots=True)
class Family:
    name: str
    langchain_scope: str
    openai_scope: str
    instrumentors: Callable[[], list[Any]]
    marks_llm: Callable[[ReadableSpan], bool]
    """Whether the family's own instrumentation marks this span as an LLM call."""

    def instrument(self, provider: TracerProvider) -> list[Any]:
        started = [*self.instrumentors(), HTTPX2ClientInstrumentor()]
        for instrumentor in started:
            instrumentor.instrument(tracer_provider=provider)
        return started


def _scope(span: ReadableSpan) -> str:
    return span.instrumentation_scope.name if span.instrumentation_scope else ""


def _openinference() -> list[Any]:
    from openinference.instrumentation.langchain import LangChainInstrumentor
    from openinference.instrumentation.openai import OpenAIInstrumentor

    return [LangChainInstrumentor(), OpenAIInstrumentor()]


def _openllmetry() -> list[Any]:
    from opentelemetry.instrumentation.langchain import LangchainInstrumentor
    from opentelemetry.instrumentation.openai import OpenAIInstrumentor

    return [LangchainInstrumentor(), OpenAIInstrumentor()]


OPENINFERENCE = Family(
    "openinference",
    "openinference.instrumentation.langchain",
    "openinference.instrumentation.openai",
    _openinference,
    lambda span: (span.attributes or {}).get("openinference.span.kind") == "LLM",
)
# OpenLLMetry 0.62 marks its LLM spans with gen_ai.operation.name (llm.request.type is gone);
# swerve's spans carry that attribute too, so only the family's own scopes count here.
OPENLLMETRY = Family(
    "openllmetry",
    "opentelemetry.instrumentation.langchain",
    "opentelemetry.instrumentation.openai.v1",
    _openllmetry,
    lambda span: (
        _scope(span).startswith("opentelemetry.instrumentation.")
        and bool({"gen_ai.operation.name", "llm.request.type"} & set(span.attributes or {}))
    ),
)
FAMILIES = {f.name: f for f in (OPENINFERENCE, OPENLLMETRY)}
