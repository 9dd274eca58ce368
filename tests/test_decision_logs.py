"""Decisions as log-based events (``Telemetry(log_decisions=True)``): the same name and
attributes as the span event, tied to the span the event is on; nothing without the opt-in.

Real OTel SDK tracer and logger providers with in-memory exporters; the transport over the
fake provider served in-process (sync and async, tests/_drive.py)."""

from __future__ import annotations

import pytest
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from swerve import Failover, FallbackConfig, MemoryHealth, Telemetry
from swerve.testing import Fault

from ._drive import InProcessProvider, Mode, in_process_fake, in_process_mode
from .conftest import FakeClock

fake, mode = in_process_fake, in_process_mode
P, F = "primary/model-a", "fallback/model-b"
CONFIG = FallbackConfig(fallbacks={P: F}, max_retries=1, jitter=False)


@pytest.mark.parametrize("opted_in", [True, False])
def test_each_decision_is_also_a_log_event_tied_to_its_span(
    mode: Mode, fake: InProcessProvider, clock: FakeClock, opted_in: bool
) -> None:
    spans, logs = InMemorySpanExporter(), InMemoryLogRecordExporter()
    tracer_provider, logger_provider = TracerProvider(), LoggerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(spans))
    logger_provider.add_log_record_processor(SimpleLogRecordProcessor(logs))
    telemetry = Telemetry(
        tracer_provider, log_decisions=opted_in, logger_provider=logger_provider, clock=clock
    )
    fo = Failover(CONFIG, health=MemoryHealth(), telemetry=telemetry, clock=clock)
    fake.set_fault("primary", Fault.status(503))
    assert mode.over(fake).call(fo).value == "from fallback"
    (call,) = [s for s in spans.get_finished_spans() if s.name == "chat model-a"]
    events = [(e.name, dict(e.attributes or {})) for e in call.events]
    assert {name for name, _ in events} >= {"swerve.retry", "swerve.cooldown", "swerve.swap"}
    records = [r.log_record for r in logs.get_finished_logs()]
    if not opted_in:
        assert records == []
        return
    assert [(r.event_name, dict(r.attributes or {})) for r in records] == events
    assert {(r.trace_id, r.span_id) for r in records} == {
        (call.context.trace_id, call.context.span_id)
    }
