"""GenAI usage on attempt spans through the LangChain adapter: ``usage_metadata`` and the
finish reason of real ChatOpenAI / ChatAnthropic answers (whole and streamed, sync and
async), ``error`` for a stream cut short, and the tokens failed attempts cost."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from lc_support import F, Otel, P, chat_anthropic, chat_openai, seed_config
from swerve_langchain import FailoverChatModel, with_failover

from swerve import Failover, MidStreamError
from swerve._telemetry import names as names
from swerve.testing import FakeProvider, Fault

pytestmark = pytest.mark.anyio
IN, OUT = names.ATTEMPT_INPUT_TOKENS, names.ATTEMPT_OUTPUT_TOKENS  # an attempt's own usage
REASONS = names.GEN_AI_RESPONSE_FINISH_REASONS


@pytest.fixture(params=["sync", "async"])
def sync(request: pytest.FixtureRequest) -> bool:
    return bool(request.param == "sync")


async def _invoke(model: Any, sync: bool) -> Any:
    return model.invoke("hi") if sync else await model.ainvoke("hi")


async def _stream(model: Any, sync: bool) -> list[Any]:
    return list(model.stream("hi")) if sync else [c async for c in model.astream("hi")]


def _usage(otel: Otel) -> list[tuple[str, object, object, object]]:
    return [
        (
            str(attrs[names.ROUTE]),
            attrs.get(IN),
            attrs.get(OUT),
            tuple(r) if isinstance(r := attrs.get(REASONS), tuple | list) else r,
        )
        for attrs in (dict(s.attributes or {}) for s in otel.attempt_spans())
    ]


def _model(
    fake: FakeProvider, make_failover: Callable[..., Failover], primary: str = P, **kw: Any
) -> FailoverChatModel:
    return FailoverChatModel(
        routes={P: chat_openai(fake, "primary"), F: chat_anthropic(fake, "fallback")},
        primary=primary,
        failover=make_failover(seed_config(max_retries=1)),
        **kw,
    )


async def test_invoke_reports_usage_of_each_attempt(
    fake: FakeProvider, make_failover: Callable[..., Failover], otel: Otel, sync: bool
) -> None:
    fake.set_fault("primary", Fault.status(503))
    answer = await _invoke(_model(fake, make_failover), sync)
    assert answer.usage_metadata["output_tokens"] == 3
    assert _usage(otel) == [
        (P, None, None, ("error",)),
        (P, None, None, ("error",)),
        (F, 7, 3, ("end_turn",)),
    ]


async def test_openai_stream_usage(
    fake: FakeProvider, make_failover: Callable[..., Failover], otel: Otel, sync: bool
) -> None:
    model = _model(fake, make_failover)
    model.routes[P].stream_usage = True
    chunks = await _stream(model, sync)
    assert "".join(str(c.content) for c in chunks) == "from primary"
    assert _usage(otel) == [(P, 10, 5, ("stop",))]


async def test_anthropic_stream_usage_and_failed_attempt(
    fake: FakeProvider, make_failover: Callable[..., Failover], otel: Otel, sync: bool
) -> None:
    """ChatAnthropic hands on the usage only with its last chunk (message_delta), so a stream
    that broke before it reports no tokens through LangChain (the transport reads them from
    message_start), and failover counts none for it. Its streamed usage_metadata says 0 input
    tokens here: the fake provider's message_delta carries only output_tokens."""
    fake.script("fallback", [Fault.drop_after(1)])
    await _stream(_model(fake, make_failover, F, mid_stream="restart"), sync)
    assert _usage(otel) == [(F, None, None, ("error",)), (F, 0, 3, ("end_turn",))]
    assert otel.counter(names.METRIC_FAILOVER_TOKENS) == 0


async def test_truncated_stream_reports_error(
    fake: FakeProvider, make_failover: Callable[..., Failover], otel: Otel, sync: bool
) -> None:
    fake.set_fault("primary", Fault.no_finish())
    with pytest.raises(MidStreamError):
        await _stream(_model(fake, make_failover), sync)
    assert _usage(otel) == [(P, None, None, ("error",))]


async def test_runnable_wrapper_reports_model_usage(
    fake: FakeProvider, make_failover: Callable[..., Failover], otel: Otel, sync: bool
) -> None:
    """with_failover over plain runnables: the models that ran in an attempt report through
    LangChain's callbacks."""
    runnable = with_failover(
        {P: chat_openai(fake, "primary"), F: chat_anthropic(fake, "fallback")},
        primary=P,
        failover=make_failover(seed_config()),
    )
    fake.set_fault("primary", Fault.status(503))
    await _invoke(runnable, sync)
    assert _usage(otel) == [(P, None, None, ("error",)), (F, 7, 3, ("end_turn",))]
