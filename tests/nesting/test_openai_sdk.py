"""swerve's spans next to the OpenAI instrumentations, with the openai SDK over the failover
transport: swerve sits under the SDK, so the instrumentation's span of the request is the
parent of swerve's call span, and the attempts are swerve's own spans below it.

The transport reads a stream up to its first content event before it hands the response to
the SDK, so every retry and swap of a stream happens inside ``create()``; what the consumer
reads later, from anywhere, only ends the spans that were opened then.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import StatusCode

from swerve import Failover, FallbackConfig, MemoryHealth, StreamSpec
from swerve._telemetry import names as n
from swerve.testing import FakeProvider, Fault, TelemetryRecorder

from ._apps import MESSAGES, sdk_client
from ._families import Family
from ._tree import Tree, trace_ids
from .conftest import FALLBACK, PRIMARY

OUTAGE = {  # three attempts: the primary, its retry, the fallback (which serves)
    "create": [Fault.status(503), Fault.status(503)],
    "stream": [Fault.error_before_content("openai"), Fault.status(503)],
}


def _framework_span(tree: Tree) -> ReadableSpan:
    (span,) = tree.llm_spans(tree.family.openai_scope)  # one, for three attempts
    return span


def _check_shape(tree: Tree, family: Family) -> ReadableSpan:
    """The failover's shape under the SDK's LLM span; that span."""
    llm = _framework_span(tree)
    assert llm.status.status_code is not StatusCode.ERROR
    assert tree.llm_spans(family.langchain_scope) == []
    assert tree.parent(tree.call) is llm
    assert tree.one("app") in tree.ancestors(llm)
    attempts = tree.attempts
    assert [a.attributes[n.ROUTE] for a in attempts] == [PRIMARY, PRIMARY, FALLBACK]
    assert all(tree.parent(a) is tree.call for a in attempts)
    assert trace_ids(attempts) == {llm.context.trace_id}
    # One request each, right below it.
    per_attempt = [[s for s in tree.http_spans() if tree.parent(s) is a] for a in attempts]
    assert [len(spans) for spans in per_attempt] == [1] * len(attempts)
    # swerve's spans are not LLM spans by the family's own marks. The call span is the one
    # GenAI inference span of swerve's (backends that read gen_ai.* map it to the LLM kind);
    # the attempts are not inferences of their own.
    assert not [s for s in (tree.call, *attempts) if family.marks_llm(s)]
    assert tree.call.attributes[n.GEN_AI_OPERATION_NAME] == "chat"
    assert not [a for a in attempts if n.GEN_AI_OPERATION_NAME in (a.attributes or {})]
    # Inside the SDK's LLM span, which counts the call's tokens, swerve's spans carry none a
    # backend would add to them.
    assert _tokens(tree.call, *attempts) == 0
    return llm


def _tokens(*spans: ReadableSpan) -> int:
    """The tokens a GenAI backend adds up over ``spans``: Phoenix reads OpenInference's
    ``llm.token_count.*`` and the GenAI conventions' ``gen_ai.usage.*`` (totals excluded)."""
    counted = ("llm.token_count.prompt", "llm.token_count.completion", "gen_ai.usage.")
    return sum(
        int(v)
        for s in spans
        for k, v in (s.attributes or {}).items()
        if k.startswith(counted)
        and isinstance(v, int)
        and not k.endswith("total_tokens")
        and "cache" not in k
    )


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_create_nests_the_call_under_the_sdk_llm_span(
    otel: TelemetryRecorder, family: Family, fake_provider: FakeProvider, failover: Failover,
    mode: str,
) -> None:  # fmt: skip
    fake_provider.script("primary", OUTAGE["create"])
    tracer = otel.tracer_provider.get_tracer("app")

    def sync() -> Any:
        with tracer.start_as_current_span("app"):
            return sdk_client(fake_provider, failover).chat.completions.create(
                model=PRIMARY, messages=MESSAGES
            )

    async def run_async() -> Any:
        with tracer.start_as_current_span("app"):
            return await sdk_client(fake_provider, failover, is_async=True).chat.completions.create(
                model=PRIMARY, messages=MESSAGES
            )

    reply = sync() if mode == "sync" else asyncio.run(run_async())
    assert reply.choices[0].message.content == "hello from fallback"
    _check_shape(Tree(otel.finished(), family), family)


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_stream_read_elsewhere_keeps_the_context_of_the_send(
    otel: TelemetryRecorder, family: Family, fake_provider: FakeProvider, failover: Failover,
    mode: str,
) -> None:  # fmt: skip
    """The primary's stream errors before content, twice: swerve retries, then swaps, while
    it reads the stream. The stream is then read to its end by another function, after the
    app's span ended, under a span of its own."""
    fake_provider.script("primary", OUTAGE["stream"])
    tracer = otel.tracer_provider.get_tracer("app")
    finished_at_send: list[str] = []  # names of the spans ended when create() returned

    def read(stream: Iterator[Any]) -> str:
        with tracer.start_as_current_span("elsewhere"):
            return "".join(c.choices[0].delta.content or "" for c in stream if c.choices)

    async def aread(stream: AsyncIterator[Any]) -> str:
        with tracer.start_as_current_span("elsewhere"):
            return "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])

    def sync() -> str:
        client = sdk_client(fake_provider, failover)
        with tracer.start_as_current_span("app"):
            stream = client.chat.completions.create(model=PRIMARY, messages=MESSAGES, stream=True)
        finished_at_send.extend(s.name for s in otel.finished())
        return read(stream)

    async def run_async() -> str:
        client = sdk_client(fake_provider, failover, is_async=True)
        with tracer.start_as_current_span("app"):
            stream = await client.chat.completions.create(
                model=PRIMARY, messages=MESSAGES, stream=True
            )
        finished_at_send.extend(s.name for s in otel.finished())
        return await asyncio.create_task(aread(stream))  # another task, another context

    assert (sync() if mode == "sync" else asyncio.run(run_async())) == "hello from fallback"
    tree = Tree(otel.finished(), family)
    llm = _check_shape(tree, family)
    call, attempts = tree.call, tree.attempts
    # The retry and the swap happened before create() returned; the call ended only once the
    # stream was read, outside the app's span, and kept its place in the tree.
    assert finished_at_send.count(attempts[0].name) == 2  # attempts 1 and 2, not 3
    assert call.name not in finished_at_send
    assert [s.attributes[n.ATTEMPT_OUTCOME] for s in attempts[:2]] == ["failure", "failure"]
    elsewhere = tree.one("elsewhere")
    assert elsewhere.context.trace_id != llm.context.trace_id
    assert not [s for s in tree.spans if elsewhere in tree.ancestors(s)]
    assert tree.one("app").end_time < call.end_time
    # The SDK instrumentation's span covers the whole stream, its retries included.
    assert llm.start_time <= call.start_time and call.end_time <= llm.end_time


def test_a_close_after_the_finish_is_a_success() -> None:
    """A consumer that closes a stream once its finish arrived leaves a served call (the sync
    openai SDK closes the response at ``[DONE]``, before the transport reads its end)."""
    config = FallbackConfig(fallbacks={PRIMARY: FALLBACK})
    fo = Failover(config, health=MemoryHealth(), telemetry=TelemetryRecorder().telemetry)
    spec: StreamSpec[str] = StreamSpec(is_finish=lambda chunk: chunk == "finish")
    stream = fo.stream(PRIMARY, lambda _: iter(["text", "finish", "[DONE]"]), spec)
    next(stream), next(stream)
    stream.close()
    assert stream.attempts[-1].outcome == "success"


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_stream_the_sdk_reads_to_its_finish_is_served(
    otel: TelemetryRecorder, family: Family, fake_provider: FakeProvider, failover: Failover,
    mode: str,
) -> None:  # fmt: skip
    """Read to its end by the SDK, which closes it at ``[DONE]``: the serving attempt and
    the call succeeded (no error status on swerve's spans, under a successful LLM span)."""

    def sync() -> None:
        for _ in sdk_client(fake_provider, failover).chat.completions.create(
            model=PRIMARY, messages=MESSAGES, stream=True
        ):
            pass

    async def run_async() -> None:
        client = sdk_client(fake_provider, failover, is_async=True)
        async for _ in await client.chat.completions.create(
            model=PRIMARY, messages=MESSAGES, stream=True
        ):
            pass

    sync() if mode == "sync" else asyncio.run(run_async())
    tree = Tree(otel.finished(), family)
    (attempt,) = tree.attempts
    assert attempt.attributes[n.ATTEMPT_OUTCOME] == "success"
    assert tree.call.status.status_code is not StatusCode.ERROR


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_backends_token_totals_are_the_same_with_swerve_as_without(
    otel: TelemetryRecorder, family: Family, fake_provider: FakeProvider, failover: Failover,
    mode: str,
) -> None:  # fmt: skip
    # The same answer (the fallback's: 10 in, 5 out), once straight from the provider and
    # once through swerve after a failover: what a backend sums over the trace is the same.
    import openai

    def direct() -> Any:
        return openai.OpenAI(
            base_url=f"{fake_provider.url('fallback')}/v1", api_key="k", max_retries=0
        ).chat.completions.create(model="fake-model", messages=MESSAGES)

    async def adirect() -> Any:
        client = openai.AsyncOpenAI(
            base_url=f"{fake_provider.url('fallback')}/v1", api_key="k", max_retries=0
        )
        return await client.chat.completions.create(model="fake-model", messages=MESSAGES)

    def swerved() -> Any:
        return sdk_client(fake_provider, failover).chat.completions.create(
            model=PRIMARY, messages=MESSAGES
        )

    async def aswerved() -> Any:
        client = sdk_client(fake_provider, failover, is_async=True)
        return await client.chat.completions.create(model=PRIMARY, messages=MESSAGES)

    (direct() if mode == "sync" else asyncio.run(adirect()))
    without = _tokens(*otel.finished())
    otel.spans.clear()
    fake_provider.script("primary", OUTAGE["create"])
    (swerved() if mode == "sync" else asyncio.run(aswerved()))
    assert _tokens(*otel.finished()) == without == 15
