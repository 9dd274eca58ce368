"""swerve's spans next to the LangChain and OpenAI instrumentations, under FailoverChatModel.

FailoverChatModel calls its route models directly, not as LangChain runs, so the LangChain
instrumentation sees one chat-model run per logical call, whatever the attempts. The OpenAI
instrumentation sees each attempt's SDK request (OpenLLMetry suppresses its own spans under
its LangChain LLM span; OpenInference records one per request, inside that attempt's span).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator

import pytest
import swerve_langchain
import swerve_langchain._chat
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import StatusCode

from swerve import Failover
from swerve._telemetry import names as n
from swerve.testing import FakeProvider, Fault, TelemetryRecorder

from ._apps import chat_model
from ._families import Family
from ._tree import Tree, trace_ids
from .conftest import FALLBACK, PRIMARY
from .test_openai_sdk import _tokens

# Neither family makes its LLM span current: FailoverChatModel does it for swerve's call
# (swerve_langchain._callbacks), else the call span would be the LLM span's sibling.

OUTAGE = {  # three attempts: the primary, its retry, the fallback (which serves)
    "invoke": [Fault.status(503), Fault.status(503)],
    "stream": [Fault.error_before_content("openai"), Fault.status(503)],
}


def _run(mode: str, otel: TelemetryRecorder, model_call: str, fake: FakeProvider, fo: Failover):
    """One logical call in the app's span; the text it answered."""
    fake.script("primary", list(OUTAGE[model_call]))
    model = chat_model(fake, fo)
    tracer = otel.tracer_provider.get_tracer("app")

    def sync() -> str:
        with tracer.start_as_current_span("app"):
            if model_call == "invoke":
                return str(model.invoke("Say hello.").content)
            return "".join(str(c.content) for c in model.stream("Say hello."))

    async def run_async() -> str:
        with tracer.start_as_current_span("app"):
            if model_call == "invoke":
                return str((await model.ainvoke("Say hello.")).content)
            return "".join([str(c.content) async for c in model.astream("Say hello.")])

    return sync() if mode == "sync" else asyncio.run(run_async())


def _framework_span(tree: Tree) -> ReadableSpan:
    (span,) = tree.llm_spans(tree.family.langchain_scope)
    return span


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("model_call", ["invoke", "stream"])
def test_one_framework_llm_span_per_call(
    otel: TelemetryRecorder, family: Family, fake_provider: FakeProvider, failover: Failover,
    mode: str, model_call: str,
) -> None:  # fmt: skip
    assert _run(mode, otel, model_call, fake_provider, failover) == "hello from fallback"
    tree = Tree(otel.finished(), family)
    llm = _framework_span(tree)  # one, for three attempts
    assert llm.status.status_code is not StatusCode.ERROR
    app = tree.one("app")
    assert trace_ids(tree.spans) == {app.context.trace_id}
    assert app in tree.ancestors(llm) and app in tree.ancestors(tree.call)

    # swerve's attempts are its own spans, children of its call span, each with its request.
    attempts = tree.attempts
    assert [a.attributes[n.ROUTE] for a in attempts] == [PRIMARY, PRIMARY, FALLBACK]
    assert all(tree.parent(a) is tree.call for a in attempts)
    per_attempt = [[s for s in tree.http_spans() if a in tree.ancestors(s)] for a in attempts]
    assert [len(spans) for spans in per_attempt] == [1] * len(attempts)
    assert len(tree.http_spans()) == len(attempts)
    # None of them is an LLM span by the family's own marks; the call span is swerve's one
    # GenAI inference span (gen_ai-reading backends, Phoenix, map it to LLM), the attempts
    # are no inferences of their own.
    assert not [s for s in (tree.call, *attempts) if family.marks_llm(s)]
    assert tree.call.attributes[n.GEN_AI_OPERATION_NAME] == "chat"
    assert not [a for a in attempts if n.GEN_AI_OPERATION_NAME in (a.attributes or {})]
    # Inside the framework's LLM span, which counts the call's tokens, swerve's carry none.
    assert _tokens(tree.call, *attempts) == 0

    sdk_llm = tree.llm_spans(family.openai_scope)
    if family.name == "openllmetry":  # suppressed under its own LangChain LLM span
        assert sdk_llm == []
    else:  # one per attempt's request, inside that attempt, failed like it
        assert sorted(tree.parent(s).attributes[n.ATTEMPT_NUMBER] for s in sdk_llm) == [1, 2, 3]
        failed = {tree.parent(s).attributes[n.ATTEMPT_NUMBER] for s in sdk_llm
                  if s.status.status_code is StatusCode.ERROR}  # fmt: skip
        assert failed == {1, 2}


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("model_call", ["invoke", "stream"])
def test_call_span_nests_under_the_framework_llm_span(
    otel: TelemetryRecorder, family: Family, fake_provider: FakeProvider, failover: Failover,
    mode: str, model_call: str,
) -> None:  # fmt: skip
    _run(mode, otel, model_call, fake_provider, failover)
    tree = Tree(otel.finished(), family)
    assert tree.parent(tree.call) is _framework_span(tree)


def _first_then_rest(
    otel: TelemetryRecorder, model: swerve_langchain.FailoverChatModel, mode: str
) -> list[str]:
    """The stream's first chunk read in the app's span; the rest read by another function
    after that span ended, under a span of its own (``elsewhere``)."""
    tracer = otel.tracer_provider.get_tracer("app")

    def rest(chunks: Iterator[object]) -> list[str]:
        with tracer.start_as_current_span("elsewhere"):
            return [str(getattr(c, "content", "")) for c in chunks]

    async def arest(chunks: AsyncIterator[object]) -> list[str]:
        with tracer.start_as_current_span("elsewhere"):
            return [str(getattr(c, "content", "")) async for c in chunks]

    if mode == "sync":
        with tracer.start_as_current_span("app"):
            chunks = model.stream("Say hello.")
            first = [str(next(chunks).content)]
        return first + rest(chunks)

    async def main() -> list[str]:
        with tracer.start_as_current_span("app"):
            achunks = model.astream("Say hello.")
            first = [str((await anext(achunks)).content)]
        # Another task: it starts from a copy of the context current here, not the app's.
        return first + await asyncio.create_task(arest(achunks))

    return asyncio.run(main())


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_restart_while_read_elsewhere_keeps_the_call_context(
    otel: TelemetryRecorder, family: Family, fake_provider: FakeProvider, failover: Failover,
    mode: str,
) -> None:  # fmt: skip
    """mid_stream="restart": the primary fails after content reached the consumer, and the
    retry runs while the consumer reads from elsewhere. Its spans keep the call's context."""
    fake_provider.script("primary", [Fault.error_after(2, "openai")])
    model = chat_model(fake_provider, failover, mid_stream="restart")
    text = "".join(_first_then_rest(otel, model, mode))
    assert text.endswith("hello from primary")
    tree = Tree(otel.finished(), family)
    first, retry = tree.attempts
    assert retry.attributes.get(n.ATTEMPT_RETRY) == 1
    elsewhere = tree.one("elsewhere")
    assert elsewhere.context.trace_id != first.context.trace_id
    assert retry.context.trace_id == first.context.trace_id == tree.one("app").context.trace_id
    assert tree.parent(retry) is tree.parent(first) is tree.call
    assert tree.one("app") in tree.ancestors(tree.call)
    # What the retry sent nests under it, not under the consumer's span.
    (http,) = [s for s in tree.http_spans() if retry in tree.ancestors(s)]
    assert elsewhere not in tree.ancestors(http)
    assert len(tree.llm_spans(family.langchain_scope)) == 1
