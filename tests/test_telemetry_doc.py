"""docs/telemetry.md, swerve._telemetry.names and what a run emits must agree, both ways."""

from __future__ import annotations

import asyncio
import re
import socket
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from swerve import (
    BreakerConfig,
    Failover,
    FallbackConfig,
    MemoryHealth,
    MidStreamError,
    RedisHealth,
    StreamSpec,
    Telemetry,
)
from swerve._telemetry import bounded as bounds
from swerve._telemetry import names as names
from swerve._telemetry.decisions import DECISIONS, CacheFixed, Downgraded, On
from swerve.testing import FakeProvider, Fault, Reply

from . import _wire
from .conftest import FakeClock, Otel

DOC = Path(__file__).parent.parent / "docs" / "telemetry.md"


def _table(section: str) -> list[list[str]]:
    text = DOC.read_text()
    body = text.split(f"## {section}\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in body.splitlines() if line.startswith("| `")]
    return [[cell.strip() for cell in row.strip("|").split("|")] for row in rows]


def _first(section: str) -> set[str]:
    return {re.findall(r"`([^`]+)`", row[0])[0] for row in _table(section)}


def _constants(prefix: str) -> set[str]:
    return {v for k, v in vars(names).items() if k.startswith(prefix) and isinstance(v, str)}


ATTRIBUTE_CONSTANTS = {
    v
    for k, v in vars(names).items()
    if k.isupper()
    and isinstance(v, str)
    and not k.startswith(("METRIC_", "EVENT_", "SPAN_", "INSTRUMENTATION", "OVERFLOW"))
}


def test_doc_prometheus_names_are_the_exporters() -> None:
    from dashboards import PROMETHEUS_NAMES  # checked against the real exporter there

    documented = {
        re.findall(r"`([^`]+)`", row[0])[0]: re.findall(r"`([^`]+)`", row[4])[0]
        for row in _table("Metrics")
    }
    assert documented == PROMETHEUS_NAMES


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])  # nothing listens there once the socket closes


def test_doc_lists_exactly_the_names_in_the_code() -> None:
    assert _first("Events") == _constants("EVENT_")
    assert _first("Metrics") == _constants("METRIC_")
    assert _first("Attributes") == ATTRIBUTE_CONSTANTS
    assert _first("Spans") == {names.SPAN_CALL, names.SPAN_ATTEMPT, names.SPAN_STORE}


def _role(span_name: str) -> str:
    """Which span an event was on, in the decision table's words ("outer": the current span)."""
    if span_name == names.SPAN_STORE:
        return On.STORE.value
    if span_name == "outer":
        return "outer"
    return "attempt" if span_name.startswith("swerve attempt ") else On.CALL.value


def test_doc_events_are_the_decision_table() -> None:
    """Each decision kind: one event, the span it is on, the one metric it counts in (or none)
    and the attributes that metric is counted by, as documented."""
    documented = {re.findall(r"`([^`]+)`", row[0])[0]: row for row in _table("Events")}
    assert set(documented) == {emits.event for emits in DECISIONS.values()}
    assert len(DECISIONS) == len(documented)  # one kind per event
    metrics = {re.findall(r"`([^`]+)`", row[0])[0]: row for row in _table("Metrics")}
    for emits in DECISIONS.values():
        row = documented[emits.event]
        assert row[1] == emits.on.value, emits.event
        if emits.metric is None:
            assert row[2] == "none", emits.event
            assert not emits.counted_by, emits.event
            continue
        assert row[2] == f"`{emits.metric}`", emits.event
        metric = metrics[emits.metric]
        assert metric[1] == "counter", emits.metric
        assert re.findall(r"`([^`]+)`", metric[2]) == [emits.unit], emits.metric
        assert re.findall(r"`([^`]+)`", metric[3]) == list(emits.counted_by), emits.metric
        listed = set(re.findall(r"`([^`*]+)`", row[3]))
        assert set(emits.counted_by) <= listed, emits.event  # counted by the event's own


@pytest.fixture
def emitted() -> Iterator[dict[str, Any]]:
    """Run scenarios that take every decision once, and collect what was emitted."""
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    reader = InMemoryMetricReader()
    meter_provider = MeterProvider(metric_readers=[reader])
    clock = FakeClock()
    P, F = "primary/model-a", "fallback/model-b"
    telemetry = Telemetry(
        tracer_provider, meter_provider, record_messages=True, clock=clock,
        prices={F: (1.0, 2.0)},  # the tokens reported below get a cost
    )  # fmt: skip
    config = FallbackConfig(
        fallbacks={P: F}, max_retries=1, jitter=False,
        breaker={"min_calls": 2, "failure_rate": 1.0, "open_s": 10},
    )  # fmt: skip
    fo = Failover(config, MemoryHealth(), telemetry=telemetry, clock=clock)
    with FakeProvider() as fake, httpx.Client() as client:
        fake.script("primary", [Fault.status(503), Fault.status(503)])
        fo.call(P, lambda a: _wire.complete(client, fake, a))  # retry, breaker, cooldown, swap
        fo.call(P, lambda a: _wire.complete(client, fake, a))  # route skipped
        fake.set_fault("fallback", Fault.context_overflow())
        with pytest.raises(httpx.HTTPStatusError):  # swap declined
            fo.call(F, lambda a: _wire.complete(client, fake, a))
        fake.set_fault("fallback", Fault.ok())
        clock.advance(100)
        fake.set_reply("primary", Reply(text="one two three"))
        fake.set_fault("primary", Fault.error_after(1, "openrouter"))
        restart = fo.stream(
            P, lambda a: _wire.chunks(client, fake, a), _wire.SPEC, mid_stream="restart"
        )
        list(restart)  # stream reset, partial discarded, time to first chunk
        clock.advance(100)
        fake.set_fault("primary", Fault.error_after(1, "openrouter"))
        with pytest.raises(MidStreamError):
            list(fo.stream(P, lambda a: _wire.chunks(client, fake, a), _wire.SPEC))

        # Every part kind a failed attempt can leave behind, from a plain generator adapter.
        def parts(attempt: Any) -> Iterator[dict[str, str]]:
            for kind in ("text", "reasoning", "tool_call", "other"):
                yield {"k": kind}
            if attempt.retry == 0:
                raise httpx.RemoteProtocolError("peer closed connection")

        fo.collect(F, parts, StreamSpec(part=lambda c: c["k"]))  # type: ignore[arg-type,return-value]

        # Usage an adapter reported, on a failed attempt (failover's cost) and a served one.
        def used(attempt: Any) -> str:
            attempt.report_usage(
                input_tokens=12, output_tokens=3, finish_reasons=["length"],
                cache_read_tokens=8, cache_write_tokens=2,
            )  # fmt: skip
            # What the wire said: the model sent and the one that answered, the server, the id.
            attempt.report_request("model-b-2026", server_address="127.0.0.1", server_port=443)
            attempt.report_response("model-b-2026-01-01", "resp-1")
            if attempt.retry == 0:
                raise httpx.RemoteProtocolError("peer closed connection")
            return "ok"

        fo.call(F, used)
        # A first chunk later than hedge_after: the same request starts on the fallback, which
        # delivers first (the waits are real and short: the race is between two real waits).
        hedging = Failover(
            FallbackConfig(fallbacks={P: F}, hedge_after=0.05, learned={"hedge_budget": 1.0}),
            MemoryHealth(), telemetry=telemetry, clock=clock,
        )  # fmt: skip

        def late_on_primary(attempt: Any) -> Iterator[dict[str, str]]:
            if attempt.route.name == P:
                time.sleep(0.5)
            yield {"k": "text"}

        list(hedging.stream(P, late_on_primary, StreamSpec(part=lambda c: c["k"])))
        # A first chunk later than the limit learned for the route (from one earlier first
        # chunk, at once on the fake clock: the floor): an adaptive first-token timeout.
        adaptive = Failover(
            FallbackConfig(
                fallbacks={P: F}, first_token_timeout_s="adaptive",
                learned={"min_samples": 1, "floor_s": 0.05, "ceiling_s": 0.1},
            ),
            MemoryHealth(), telemetry=telemetry, clock=clock,
        )  # fmt: skip
        list(adaptive.stream(P, lambda _: iter([{"k": "text"}]), StreamSpec(part=lambda c: c["k"])))

        async def alate_on_primary(attempt: Any) -> AsyncIterator[dict[str, str]]:
            if attempt.route.name == P:
                await asyncio.sleep(0.5)
            yield {"k": "text"}

        async def adaptive_stream() -> None:
            stream = adaptive.astream(P, alate_on_primary, StreamSpec(part=lambda c: c["k"]))
            assert [c async for c in stream] == [{"k": "text"}]

        asyncio.run(adaptive_stream())
        # A cooldown that ends into a still-dead route: its one probe fails.
        fo = Failover(
            config.model_copy(update={"breaker": BreakerConfig(enabled=False)}), MemoryHealth(),
            telemetry=telemetry, clock=clock,
        )  # fmt: skip
        fake.set_fault("primary", Fault.status(503))
        fo.call(P, lambda a: _wire.complete(client, fake, a))  # cools the primary
        clock.advance(10)
        fo.call(P, lambda a: _wire.complete(client, fake, a))  # its probe fails
        # An operator drains a route: the next call reports it.
        fo.health.drain(F, clock.now + 60, clock.now)
        fo.call(F, lambda a: _wire.complete(client, fake, a))
        # A shared store that cannot reach its Redis says so (a closed loopback port).
        store = RedisHealth.from_url(
            f"redis://:s3cret@127.0.0.1:{_closed_port()}/0", telemetry=telemetry
        )
        Failover(config, store, telemetry=telemetry)  # watched: the store.up gauge
        deadline = time.monotonic() + 10
        while store.sharing or not any(
            s.name == names.SPAN_STORE for s in exporter.get_finished_spans()
        ):
            assert time.monotonic() < deadline, "the store never reported itself down"
            time.sleep(0.01)
        # A message on the channel it cannot read: dropped and counted (store.rejected).
        store._sync._on_message(b'{"op": "cool", "route": "a/m", "until": "x"}')
        store.close()
        # The empty-text cache fix is reported by the payload fixer; here, straight from the API.
        # Given no span, they go on the current one (an attempt's, in the transport).
        with telemetry.tracer.start_as_current_span("outer"):
            telemetry.emit(CacheFixed(P, 1, ["messages[0].content[0]"]))
            telemetry.emit(Downgraded(F, ["messages[1].reasoning_details"]))
    spans = [s for s in exporter.get_finished_spans() if s.name != "outer"]
    outer = [s for s in exporter.get_finished_spans() if s.name == "outer"]
    metrics: dict[str, tuple[str, set[str]]] = {}
    data = reader.get_metrics_data()
    assert data is not None
    for rm in data.resource_metrics:
        for sm in rm.scope_metrics:
            for metric in sm.metrics:
                keys: set[str] = set()
                for point in metric.data.data_points:
                    keys |= set(point.attributes or {})
                metrics[metric.name] = (metric.unit, keys)
    on: dict[str, set[str]] = {}
    for s in spans + outer:
        for e in s.events:
            on.setdefault(e.name, set()).add(_role(s.name))
    yield {
        "events": {e.name: set(e.attributes or {}) for s in spans + outer for e in s.events},
        "on": on,
        "span_attributes": {k for s in spans for k in s.attributes or {}},
        "metrics": metrics,
    }
    meter_provider.shutdown()
    tracer_provider.shutdown()


def test_every_documented_name_is_emitted_and_nothing_else(emitted: dict[str, Any]) -> None:
    events: dict[str, set[str]] = emitted["events"]
    assert set(events) == _first("Events")
    documented_attrs = _first("Attributes")
    for row in _table("Events"):
        name = re.findall(r"`([^`]+)`", row[0])[0]
        listed = set(re.findall(r"`([^`*]+)`", row[3]))
        wildcard = [p.rstrip("*") for p in re.findall(r"`([^`]+\*)`", row[3])]
        got = events[name]
        assert got <= documented_attrs, name
        assert {a for a in got if not any(a.startswith(w) for w in wildcard)} <= listed, name
    used = emitted["span_attributes"] | set().union(*events.values())
    metrics: dict[str, tuple[str, set[str]]] = emitted["metrics"]
    for _, keys in metrics.values():
        used |= keys
    assert used == documented_attrs
    for row in _table("Metrics"):
        name, unit = (re.findall(r"`([^`]+)`", cell)[0] for cell in (row[0], row[2]))
        assert name in metrics, name
        assert metrics[name][0] == unit, name
        listed = set(re.findall(r"`([^`]+)`", row[3]))
        assert metrics[name][1] <= listed, name


def test_every_decision_is_on_the_span_the_table_says(emitted: dict[str, Any]) -> None:
    for emits in DECISIONS.values():
        expected = "outer" if emits.on is On.ATTEMPT else emits.on.value
        assert emitted["on"][emits.event] == {expected}, emits.event


def test_doc_states_the_cardinality_limits_the_code_applies() -> None:
    text = " ".join(DOC.read_text().split())
    assert f"first {bounds.ROUTE_LIMIT:,} distinct routes" in text
    assert f"first {bounds.ERROR_TYPE_LIMIT:,} distinct values" in text
    assert f"`{bounds.OVERFLOW}`" in text


def test_doc_names_every_value_of_where_a_cooldown_was_learned() -> None:
    (row,) = [r for r in _table("Attributes") if f"`{names.COOLDOWN_LEARNED}`" in r[0]]
    assert "`this_failover`" in row[2] and "`elsewhere`" in row[2]
    (event,) = [r for r in _table("Events") if f"`{names.EVENT_ROUTE_SKIPPED}`" in r[0]]
    assert f"`{names.COOLDOWN_LEARNED}`" in event[3]


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_healthy_call_makes_no_decision(mode: str, otel: Otel, clock: FakeClock) -> None:
    """A call served at once decides nothing: no event, no decision counted; only its spans,
    its attempt and its duration."""
    fo = Failover(
        FallbackConfig(fallbacks={"p/a": "f/b"}), MemoryHealth(), telemetry=otel.telemetry,
        clock=clock,
    )  # fmt: skip

    def chunks(_: Any) -> Iterator[str]:
        yield from ("one", "two")

    async def achunks(_: Any) -> AsyncIterator[str]:
        for chunk in ("one", "two"):
            yield chunk

    async def served(_: Any) -> str:
        return "ok"

    async def drive() -> None:
        await fo.acall("p/a", served)
        assert [c async for c in fo.astream("p/a", achunks, StreamSpec())] == ["one", "two"]

    if mode == "sync":
        fo.call("p/a", lambda _: "ok")
        assert list(fo.stream("p/a", chunks, StreamSpec())) == ["one", "two"]
    else:
        asyncio.run(drive())
    assert len(otel.call_spans()) == 2
    assert [e for s in otel.finished() for e in s.events] == []
    decided = {emits.metric for emits in DECISIONS.values()}
    # Every counter holds its zero samples from the start (tests/test_zero_samples.py): none moved.
    assert not any(v for name in decided for _, v in otel.metrics().get(name, []))
    assert sum(v for _, v in otel.metrics()[names.METRIC_ATTEMPTS]) == 2
