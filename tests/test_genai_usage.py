"""GenAI usage on attempt spans through the failover transport: token counts and finish
reasons read from JSON bodies and SSE streams of both wires, ``error`` for a stream cut short,
and the tokens failed attempts cost (``swerve.failover.tokens``).

Real openai / anthropic SDKs and httpx clients over the transport, sync and async (the
``mode`` fixture, tests/_drive.py), against the fake provider; spans and metrics through the
real OTel SDK."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import httpx2
import openai
import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from swerve import Failover, FallbackConfig, Route, Telemetry
from swerve._telemetry import names as names
from swerve.httpx import Upstream
from swerve.testing import FakeProvider, Fault, Reply

from ._drive import Mode
from .conftest import Otel

OR, BK = "openrouter/gpt-x", "backup/gpt-x"  # OpenAI wire
AN, AB = "anthropic/claude-x", "anthropic-backup/claude-x"  # Anthropic wire
CONFIG = FallbackConfig(fallbacks={OR: BK, AN: AB}, max_retries=1, max_swaps=1, jitter=False)
MESSAGES = [{"role": "user", "content": "hi"}]
IN, OUT = names.ATTEMPT_INPUT_TOKENS, names.ATTEMPT_OUTPUT_TOKENS  # an attempt's own usage
REASONS = names.GEN_AI_RESPONSE_FINISH_REASONS


@pytest.fixture
def fake() -> Iterator[FakeProvider]:
    with FakeProvider() as server:
        for name in ("openrouter", "backup", "anthropic", "anthropic-backup"):
            server.set_reply(name, Reply(text="one two three", usage=(12, 7)))
        yield server


@pytest.fixture
def failover(make_failover: Any) -> Failover:
    return make_failover(CONFIG)  # type: ignore[no-any-return]


def _upstreams(fake: FakeProvider) -> dict[str, Upstream]:
    return {
        OR: Upstream(f"{fake.url('openrouter')}/v1", api_key="k"),
        BK: Upstream(f"{fake.url('backup')}/v1", api_key="k"),
        AN: Upstream(fake.url("anthropic"), wire="anthropic", api_key="k"),
        AB: Upstream(fake.url("anthropic-backup"), wire="anthropic", api_key="k"),
    }


def _usage(otel: Otel) -> list[tuple[str, object, object, object]]:
    """Each attempt span's route, input and output tokens and finish reasons, in order."""
    return [
        (
            str(attrs[names.ROUTE]),
            attrs.get(IN),
            attrs.get(OUT),
            tuple(r) if isinstance(r := attrs.get(REASONS), tuple | list) else r,
        )
        for attrs in (dict(s.attributes or {}) for s in otel.attempt_spans())
    ]


def _http(mode: Mode, fake: FakeProvider, failover: Failover, module: Any = httpx2) -> Any:
    """A client over the transport: httpx2, as the current SDKs take; or plain httpx."""
    return mode.client(_upstreams(fake), failover=failover, module=module)


def test_openai_json_usage_and_finish_reason(
    mode: Mode, fake: FakeProvider, failover: Failover, otel: Otel
) -> None:
    fake.script("openrouter", [Fault.status(503)])
    sdk = mode.openai(_http(mode, fake, failover))
    completion = sdk.create(model=OR, messages=MESSAGES)
    assert completion.usage.prompt_tokens == 12  # the client gets the body unchanged
    assert _usage(otel) == [(OR, None, None, ("error",)), (OR, 12, 7, ("stop",))]
    # The failed attempt read no usage: it cost no tokens anyone was told of.
    assert otel.counter(names.METRIC_FAILOVER_TOKENS) == 0


def test_anthropic_json_usage_and_stop_reason(
    mode: Mode, fake: FakeProvider, failover: Failover, otel: Otel
) -> None:
    sdk = mode.anthropic(_http(mode, fake, failover))
    message = sdk.create(model=AN, max_tokens=10, messages=MESSAGES)
    assert message.usage.output_tokens == 7
    assert _usage(otel) == [(AN, 12, 7, ("end_turn",))]


@pytest.mark.parametrize("include_usage", [True, False])
def test_openai_stream_usage_when_asked_for(
    mode: Mode, fake: FakeProvider, failover: Failover, otel: Otel, include_usage: bool
) -> None:
    sdk = mode.openai(_http(mode, fake, failover))
    extra: dict[str, Any] = {"stream_options": {"include_usage": True}} if include_usage else {}
    chunks = sdk.create(model=OR, messages=MESSAGES, stream=True, **extra)
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == (
        "one two three"
    )
    tokens = (12, 7) if include_usage else (None, None)
    assert _usage(otel) == [(OR, *tokens, ("stop",))]


def test_anthropic_stream_usage_from_message_start_and_delta(
    mode: Mode, fake: FakeProvider, failover: Failover, otel: Otel
) -> None:
    sdk = mode.anthropic(_http(mode, fake, failover))
    final = sdk.final_message(model=AN, max_tokens=10, messages=MESSAGES)
    assert final.usage.input_tokens == 12
    assert _usage(otel) == [(AN, 12, 7, ("end_turn",))]


def test_failed_stream_attempt_reports_error_and_counts_its_tokens(
    mode: Mode, fake: FakeProvider, failover: Failover, otel: Otel
) -> None:
    # message_start (the input tokens) came, then the connection dropped: retried.
    fake.script("anthropic", [Fault.drop_after(0)])
    sdk = mode.anthropic(_http(mode, fake, failover))
    assert sdk.stream_text(model=AN, max_tokens=10, messages=MESSAGES) == "one two three"
    assert _usage(otel) == [(AN, 12, None, ("error",)), (AN, 12, 7, ("end_turn",))]
    failed = {"swerve__route": AN, "gen_ai__token__type": "input"}
    assert otel.counter(names.METRIC_FAILOVER_TOKENS, **failed) == 12
    assert otel.counter(names.METRIC_FAILOVER_TOKENS, gen_ai__token__type="output") == 0
    (metric,) = [m for m in otel.reader.get_metrics_data().resource_metrics[0].scope_metrics[0]
                 .metrics if m.name == names.METRIC_FAILOVER_TOKENS]  # fmt: skip
    assert metric.unit == "{token}"


def test_truncated_stream_reports_error(
    mode: Mode, fake: FakeProvider, failover: Failover, otel: Otel
) -> None:
    """A stream that ended before its final event (all content, no finish chunk): the output
    had reached the client, so the attempt fails where it is, with finish reason ``error``."""
    fake.set_fault("openrouter", Fault.no_finish())
    http = _http(mode, fake, failover, httpx)
    body = {"model": OR, "messages": MESSAGES, "stream": True}
    url = "http://swerve.invalid/v1/chat/completions"
    with pytest.raises(httpx.RemoteProtocolError), http.stream("POST", url, json=body) as r:
        r.read()
    assert _usage(otel) == [(OR, None, None, ("error",))]


# --- what the wire said, not the route's name parts ----------------------------------------------
def _wire_named(fake: FakeProvider) -> dict[str, Upstream]:
    """The routes of _upstreams, each sending a model name of its own on the wire."""
    ups = _upstreams(fake)
    return {
        route: Upstream(
            up.base_url, wire=up.wire, api_key="k", model=f"{Route.parse(route).model}-2026"
        )
        for route, up in ups.items()
    }


def _facts(span: Any, *keys: str) -> dict[str, object]:
    attrs = dict(span.attributes or {})
    return {k: attrs.get(k) for k in keys}


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("route", [OR, AN])
def test_the_call_span_is_the_inference_span_with_what_the_wire_said(
    mode: Mode, fake: FakeProvider, failover: Failover, otel: Otel, route: str, stream: bool
) -> None:
    provider = Route.parse(route).provider
    fake.script(provider, [Fault.status(503)])  # one retry: two attempts, one inference span
    fake.set_reply(provider, Reply(text="one two three", usage=(12, 7), cached=(8, 2)))
    http = mode.client(_wire_named(fake), failover=failover, module=httpx2)
    kwargs: dict[str, Any] = {"stream_options": {"include_usage": True}} if route == OR else {}
    if route == OR:
        mode.openai(http).create(model=route, messages=MESSAGES, stream=stream, **kwargs)
    elif stream:
        mode.anthropic(http).final_message(model=route, max_tokens=10, messages=MESSAGES)
    else:
        mode.anthropic(http).create(model=route, max_tokens=10, messages=MESSAGES)
    sent = f"{Route.parse(route).model}-2026"
    answered = fake.received(provider)[-1]["model"]
    (call,) = otel.call_spans()
    failed, served = otel.attempt_spans()
    # One GenAI inference span (CLIENT), named for the model sent on the wire, not the route's.
    assert (call.name, call.kind.name) == (f"chat {sent}", "CLIENT")
    assert {(a.name, a.kind.name) for a in (failed, served)} == {
        (f"swerve attempt {route}", "INTERNAL")
    }
    assert names.GEN_AI_OPERATION_NAME not in (served.attributes or {})  # no LLM call of its own
    assert _facts(served, names.HTTP_REQUEST_RESEND_COUNT, names.GEN_AI_REQUEST_MODEL) == {
        names.HTTP_REQUEST_RESEND_COUNT: 1, names.GEN_AI_REQUEST_MODEL: sent,
    }  # fmt: skip
    facts = _facts(
        call, names.GEN_AI_REQUEST_MODEL, names.GEN_AI_RESPONSE_MODEL, names.SERVER_ADDRESS,
        names.SERVER_PORT, names.GEN_AI_USAGE_INPUT_TOKENS, names.GEN_AI_USAGE_OUTPUT_TOKENS,
        names.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS, names.GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS,
    )  # fmt: skip
    assert facts == {
        names.GEN_AI_REQUEST_MODEL: sent,  # the Upstream's model, not the route's
        names.GEN_AI_RESPONSE_MODEL: answered,  # what the provider said answered
        names.SERVER_ADDRESS: "127.0.0.1",
        names.SERVER_PORT: fake.port,
        names.GEN_AI_USAGE_INPUT_TOKENS: 12,
        names.GEN_AI_USAGE_OUTPUT_TOKENS: 7,
        names.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS: 8,
        names.GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS: 2 if route == AN else None,  # OpenAI: reads
    }
    rid = (call.attributes or {})[names.GEN_AI_RESPONSE_ID]
    assert isinstance(rid, str) and rid.startswith("msg_" if route == AN else ("gen-", "chatcmpl-"))
    assert (served.attributes or {})[names.GEN_AI_RESPONSE_ID] == rid
    # The attempt's usage under swerve's own names: a GenAI backend counts the call's once.
    assert names.GEN_AI_USAGE_INPUT_TOKENS not in (served.attributes or {})
    assert (served.attributes or {})[names.ATTEMPT_INPUT_TOKENS] == 12


def test_the_genai_client_metrics_count_each_call_once(
    mode: Mode, fake: FakeProvider, failover: Failover, otel: Otel
) -> None:
    # Served after a retry: one operation (not two), its tokens the answer's; then a call the
    # provider refuses (a 400 is the caller's, never swapped): one operation, with its
    # error.type and no tokens.
    fake.script("openrouter", [Fault.status(503)])
    sdk = mode.openai(mode.client(_wire_named(fake), failover=failover, module=httpx2))
    sdk.create(model=OR, messages=MESSAGES)
    fake.set_fault("openrouter", Fault.status(400))
    with pytest.raises(openai.BadRequestError):
        sdk.create(model=OR, messages=MESSAGES)
    found = otel.metrics()
    served = {
        names.GEN_AI_OPERATION_NAME: "chat",
        names.GEN_AI_PROVIDER_NAME: "openrouter",
        names.GEN_AI_REQUEST_MODEL: "gpt-x-2026",  # what went on the wire
        names.GEN_AI_RESPONSE_MODEL: fake.received("openrouter")[1]["model"],
    }
    failed = {k: v for k, v in served.items() if k != names.GEN_AI_RESPONSE_MODEL}
    failed[names.ERROR_TYPE] = "400"
    assert sorted(
        (sorted(attrs.items()), count)
        for attrs, count in found[names.METRIC_GEN_AI_OPERATION_DURATION]
    ) == sorted([(sorted(served.items()), 1), (sorted(failed.items()), 1)])
    tokens = {
        attrs[names.GEN_AI_TOKEN_TYPE]: count
        for attrs, count in found[names.METRIC_GEN_AI_TOKEN_USAGE]
    }
    assert tokens == {"input": 1, "output": 1}  # one record of each, for the one answer


def test_durations_carry_exemplars_of_the_spans_they_measure(
    mode: Mode, fake: FakeProvider, failover: Failover, otel: Otel
) -> None:
    # The SDK's default exemplar filter keeps a measurement made in a sampled span's context:
    # each call and attempt duration points at its span, for a backend that keeps exemplars.
    fake.script("openrouter", [Fault.status(503)])
    mode.openai(_http(mode, fake, failover)).create(model=OR, messages=MESSAGES)
    (call,) = otel.call_spans()
    attempts = {s.context.span_id for s in otel.attempt_spans()}
    data = otel.reader.get_metrics_data()
    assert data is not None
    linked: dict[str, set[int]] = {}
    for rm in data.resource_metrics:
        for sm in rm.scope_metrics:
            for metric in sm.metrics:
                for point in metric.data.data_points:
                    for exemplar in getattr(point, "exemplars", None) or ():
                        linked.setdefault(metric.name, set()).add(exemplar.span_id)
    assert linked[names.METRIC_CALL_DURATION] == {call.context.span_id}
    assert linked[names.METRIC_GEN_AI_OPERATION_DURATION] == {call.context.span_id}
    assert linked[names.METRIC_ATTEMPT_DURATION] == attempts and len(attempts) == 2


def test_tokens_and_their_cost_by_route_and_what_they_were_spent_on() -> None:
    reader = InMemoryMetricReader()
    telemetry = Telemetry(
        meter_provider=MeterProvider(metric_readers=[reader]),
        prices={"primary/m": (1.0, 4.0), "m-backup": (2.0, 10.0)},  # by route, by wire model
    )

    def points(name: str) -> list[tuple[dict[str, Any], Any]]:
        data = reader.get_metrics_data()
        assert data is not None
        return [
            (dict(p.attributes or {}), p.value)
            for rm in data.resource_metrics
            for sm in rm.scope_metrics
            for m in sm.metrics
            if m.name == name
            for p in m.data.data_points
        ]

    fo = Failover(
        FallbackConfig(fallbacks={"primary/m": "backup/m"}, max_retries=0),
        telemetry=telemetry,
    )

    def answer(attempt: Any) -> str:
        if attempt.route.name == "backup/m":
            attempt.report_request("m-backup")  # the name the backup's wire takes
        attempt.report_usage(input_tokens=1000, output_tokens=100)
        if attempt.route.name == "primary/m":
            raise TimeoutError("cut off after it reported its usage")
        return "ok"

    assert fo.call("primary/m", answer).value == "ok"
    tokens = {
        (a[names.ROUTE], a[names.GEN_AI_TOKEN_TYPE], a[names.ATTEMPT_OUTCOME]): v
        for a, v in points(names.METRIC_TOKENS)
        if v
    }
    assert tokens == {
        ("primary/m", "input", "failure"): 1000, ("primary/m", "output", "failure"): 100,
        ("backup/m", "input", "success"): 1000, ("backup/m", "output", "success"): 100,
    }  # fmt: skip
    cost = {
        (a[names.ROUTE], a[names.ATTEMPT_OUTCOME]): round(v, 9)
        for a, v in points(names.METRIC_COST)
        if v
    }
    assert cost == {("primary/m", "failure"): 0.0014, ("backup/m", "success"): 0.003}


@pytest.mark.parametrize("price", [(1.0,), (-1.0, 2.0), (float("nan"), 1.0), "3,15", (True, 1)])
def test_a_price_that_is_not_two_numbers_is_refused_naming_it(price: Any) -> None:
    with pytest.raises(ValueError, match=r"prices\['a/m'\]"):
        Telemetry(prices={"a/m": price})
