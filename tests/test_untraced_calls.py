"""What a call tells its caller without a tracer: the failure note on the error that surfaces,
the call and attempt metrics with only a meter provider, the one attempt of a call swerve let
straight through, and log lines without a redundant ``swerve:`` prefix.

Each behaviour runs sync and async (the ``mode`` fixture, tests/_drive.py) against real httpx
and the fake provider served in-process; telemetry is the real OTel SDK, with no tracer
provider at all (a no-op one passed explicitly, as an application without an SDK tracer has)
and, for metrics, an SDK ``MeterProvider`` on an ``InMemoryMetricReader``.
"""

from __future__ import annotations

import logging
import subprocess
import sys
from collections.abc import Iterator
from typing import Any, cast

import httpx
import pytest
from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from swerve import (
    Failover,
    FallbackConfig,
    MemoryHealth,
    MidStreamError,
    Telemetry,
    UpstreamError,
)
from swerve._engine.config import EnvConfig
from swerve._failures import InStreamError
from swerve._telemetry.decisions import StoreChanged
from swerve._telemetry.names import METRIC_ATTEMPTS, METRIC_CALL_DURATION
from swerve.testing import FakeProvider, Fault, Reply

from . import _wire
from ._drive import InProcessProvider, Mode, in_process_fake, in_process_mode
from .conftest import FakeClock, Otel

# This module's fake and mode run in-process: the engine's decisions do not need a socket.
fake, mode = in_process_fake, in_process_mode

P, F = "primary/model-a", "fallback/model-b"
CONFIG = FallbackConfig(fallbacks={P: F}, max_retries=1, max_swaps=1, jitter=False)
NOTE = f"swerve: requested {P}; attempts: {P}#1, {P}#2, {F}#3, {F}#4"


class MetricsOnly:
    """A real SDK meter provider on an in-memory reader, and no tracer provider."""

    def __init__(self) -> None:
        self.reader = InMemoryMetricReader()
        self.meter_provider = MeterProvider(metric_readers=[self.reader])
        self.telemetry = Telemetry(trace.NoOpTracerProvider(), self.meter_provider)

    def points(self, name: str) -> list[tuple[dict[str, Any], Any]]:
        """``[(attributes, value)]`` of one metric; a histogram's value is its count."""
        data = self.reader.get_metrics_data()
        out = []
        for rm in data.resource_metrics if data is not None else ():
            for sm in rm.scope_metrics:
                for metric in sm.metrics:
                    if metric.name != name:
                        continue
                    for point in metric.data.data_points:
                        value = getattr(point, "value", None)
                        value = getattr(point, "count", None) if value is None else value
                        out.append((dict(point.attributes or {}), value))
        return out


@pytest.fixture
def meter() -> Iterator[MetricsOnly]:
    recorder = MetricsOnly()
    yield recorder
    recorder.meter_provider.shutdown()


@pytest.fixture(params=["no telemetry", "metrics only"])
def untraced(request: pytest.FixtureRequest, meter: MetricsOnly) -> Telemetry:
    """Telemetry without a tracer provider: with no meter provider either, or with one."""
    if request.param == "metrics only":
        return meter.telemetry
    return Telemetry(trace.NoOpTracerProvider(), metrics.NoOpMeterProvider())


def failover(telemetry: Telemetry, clock: FakeClock, config: FallbackConfig | None = CONFIG) -> Any:
    return Failover(config, health=MemoryHealth(), telemetry=telemetry, clock=clock)


def notes(exc: BaseException) -> list[str]:
    return list(getattr(exc, "__notes__", []))


# --- the failure note, with or without a tracer -------------------------------------------------
def test_the_issue_reproduction_gets_its_note_without_a_tracer(clock: FakeClock) -> None:
    fo = Failover(
        FallbackConfig(fallbacks={"a/m1": "b/m2"}, max_retries=1, jitter=False),
        health=MemoryHealth(),
        clock=clock,
        telemetry=Telemetry(trace.NoOpTracerProvider(), metrics.NoOpMeterProvider()),
    )

    def fn(attempt: Any) -> None:
        raise UpstreamError(503)

    with pytest.raises(UpstreamError) as info:
        fo.call("a/m1", fn)
    assert notes(info.value) == ["swerve: requested a/m1; attempts: a/m1#1, a/m1#2, b/m2#3, b/m2#4"]


@pytest.mark.parametrize("tracing", ["untraced", "traced"])
def test_a_failed_call_carries_the_same_note_traced_or_not(
    mode: Mode, fake: FakeProvider, clock: FakeClock, untraced: Telemetry, otel: Otel,
    tracing: str,
) -> None:  # fmt: skip
    fo = failover(untraced if tracing == "untraced" else otel.telemetry, clock)
    fake.set_fault("primary", Fault.status(503))
    fake.set_fault("fallback", Fault.status(503))
    with pytest.raises(httpx.HTTPStatusError) as info:
        mode.call(fo)
    assert info.value.response.url.path.startswith("/fallback/")  # the last route's error
    assert notes(info.value) == [NOTE]
    with pytest.raises(httpx.HTTPStatusError) as streamed:
        mode.stream(fo, route=P)
    # The cooling routes are walked past: the call starts on the requested route again.
    assert notes(streamed.value) and notes(streamed.value)[0].startswith(f"swerve: requested {P};")


def test_a_stream_failing_before_content_carries_its_note_untraced(
    mode: Mode, fake: FakeProvider, clock: FakeClock, untraced: Telemetry
) -> None:
    fo = failover(untraced, clock)
    fake.set_fault("primary", Fault.error_before_content("openrouter", 503))
    fake.set_fault("fallback", Fault.error_before_content("openrouter", 503))
    with pytest.raises(InStreamError) as info:
        mode.stream(fo)
    assert notes(info.value) == [NOTE]


def test_a_stream_failing_after_content_carries_its_note_untraced(
    mode: Mode, fake: FakeProvider, clock: FakeClock, untraced: Telemetry
) -> None:
    fo = failover(untraced, clock)
    fake.set_reply("primary", Reply(text="one two three"))
    fake.set_fault("primary", Fault.error_after(1, "openrouter", 502))
    with pytest.raises(MidStreamError) as info:
        mode.stream(fo)
    assert notes(info.value) == [f"swerve: requested {P}; attempts: {P}#1"]


# --- metrics without a tracer -------------------------------------------------------------------
def test_failed_calls_are_in_the_call_duration_metric_without_a_tracer(
    mode: Mode, fake: FakeProvider, clock: FakeClock, meter: MetricsOnly
) -> None:
    fo = failover(meter.telemetry, clock)
    assert mode.call(fo).value == "from primary"
    fake.set_fault("primary", Fault.status(503))
    fake.set_fault("fallback", Fault.status(503))
    with pytest.raises(httpx.HTTPStatusError):
        mode.call(fo)
    fake.set_fault("primary", Fault.error_before_content("openrouter", 503))
    fake.set_fault("fallback", Fault.error_before_content("openrouter", 503))
    with pytest.raises(InStreamError):
        mode.stream(fo)
    calls = meter.points(METRIC_CALL_DURATION)
    served = [v for attrs, v in calls if attrs.get("swerve.route.served") == P]
    failed = [v for attrs, v in calls if "error.type" in attrs]
    assert served == [1]
    assert sum(failed) == 2, calls  # the unary call and the stream, each once
    assert all(attrs["swerve.route.requested"] == P for attrs, _ in calls)
    attempts = meter.points(METRIC_ATTEMPTS)
    failures = sum(v for attrs, v in attempts if attrs.get("swerve.attempt.outcome") == "failure")
    assert failures >= 5  # four for the unary call, and the stream's


# --- a call swerve lets straight through still has its one attempt ------------------------------
@pytest.mark.parametrize("config", [None, FallbackConfig(fallbacks={P: F}, max_swaps=0)])
def test_a_passthrough_result_carries_its_one_attempt(
    mode: Mode, fake: InProcessProvider, clock: FakeClock, otel: Otel,
    monkeypatch: pytest.MonkeyPatch, config: FallbackConfig | None,
) -> None:  # fmt: skip
    monkeypatch.delenv("SWERVE_FALLBACK_CONFIG", raising=False)
    fo = failover(otel.telemetry, clock, config)
    result = mode.call(fo)
    assert result.value == "from primary"
    (record,) = result.attempts
    assert (str(record.route), record.number, record.outcome, record.failure) == (
        P, 1, "success", None,
    )  # fmt: skip
    assert record.duration_s >= 0 and (result.retries, result.swaps) == (0, 0)
    stream = mode.stream(fo)
    (streamed,) = stream.attempts
    assert (str(streamed.route), streamed.outcome) == (P, "success")
    assert stream.result("x").attempts == stream.attempts
    if mode.sync:
        with fake.client() as c:
            collected = fo.collect(P, lambda a: _wire.chunks(c, fake, a), _wire.SPEC)
        assert [r.outcome for r in collected.attempts] == ["success"]
    assert otel.finished() == []  # still nothing emitted: only the record the caller reads


def test_a_passthrough_stream_stopped_early_records_no_attempt(
    mode: Mode, clock: FakeClock, otel: Otel, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SWERVE_FALLBACK_CONFIG", raising=False)
    fo = failover(otel.telemetry, clock, None)
    closed: list[bool] = []

    def upstream(attempt: Any) -> Iterator[int]:
        try:
            yield from (1, 2, 3)
        finally:
            closed.append(True)

    stream = mode.stream(fo, fn=upstream, spec=None, take=1)
    assert closed == [True]  # the consumer's close reached the upstream (it used to raise)
    assert stream.attempts == ()  # it never ended: there is no outcome to record


# --- log lines: the logger already says "swerve" --------------------------------------------------
def test_log_lines_do_not_repeat_the_logger_name(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch, clock: FakeClock,
    otel: Otel, fake: FakeProvider,
) -> None:  # fmt: skip
    monkeypatch.setenv("SWERVE_TEST_CONFIG", '{"max_retries": 1}')
    env = EnvConfig("SWERVE_TEST_CONFIG")

    def broken_classifier(exc: BaseException) -> None:
        raise RuntimeError("a classifier bug")

    def broken_predicate(failure: Any) -> bool:
        raise RuntimeError("a predicate bug")

    def fn(attempt: Any) -> None:
        raise UpstreamError(503)

    with caplog.at_level(logging.DEBUG, logger="swerve"):
        monkeypatch.setenv("SWERVE_TEST_CONFIG", '{"max_retries": "x"}')
        env.current()  # a bad new value: logged, the last good config kept
        otel.telemetry.emit(StoreChanged("redis://127.0.0.1:1", True, ""))
        otel.telemetry.emit(StoreChanged("redis://127.0.0.1:1", False, "refused"))
        for fo in (
            Failover(CONFIG, health=MemoryHealth(), clock=clock, classifiers=[broken_classifier]),
            Failover(
                CONFIG.model_copy(update={"fallback_on": broken_predicate}),
                health=MemoryHealth(),
                clock=clock,
            ),
        ):
            with pytest.raises(UpstreamError) as info:
                fo.call(P, fn)
    messages = [r.getMessage() for r in caplog.records if r.name == "swerve"]
    assert len(messages) >= 5, messages
    for message in messages:
        assert not message.lower().startswith("swerve:"), message
        assert "ERROR:swerve:swerve:" not in caplog.text
    assert any("keeping the last good config" in m for m in messages)
    assert any("classifier" in m for m in messages)
    assert any("fallback_on predicate" in m for m in messages)
    # Exception notes keep their prefix: they are read away from the logger's name.
    assert all(n.startswith("swerve: ") for n in notes(info.value))


# --- untraced, a call leaves the caller's trace alone ---------------------------------------------
def test_an_untraced_call_keeps_the_callers_span_current_and_writes_nothing_on_it(
    mode: Mode, fake: FakeProvider, clock: FakeClock, untraced: Telemetry
) -> None:
    # The application traces with a provider of its own that swerve was not given: swerve's
    # attempts run under the application's span (its HTTP spans nest there), and swerve's
    # retries and swaps are not written onto a span that is not swerve's.
    exporter = InMemorySpanExporter()
    app = TracerProvider()
    app.add_span_processor(SimpleSpanProcessor(exporter))
    seen: list[trace.Span] = []
    fake.set_fault("primary", Fault.status(503))
    with app.get_tracer("app").start_as_current_span("app call") as outer:
        result = mode.call(failover(untraced, clock), before=lambda _: seen.append(
            trace.get_current_span()
        ))  # fmt: skip
    assert result.route.name == F
    assert seen == [outer] * len(seen) and len(seen) == 3  # two on the primary, one swapped to
    (span,) = exporter.get_finished_spans()
    assert span.name == "app call" and not span.events
    app.shutdown()


def test_telemetry_on_the_global_provider_traces_once_an_sdk_provider_is_installed() -> None:
    # A Telemetry made at import time, before the application installs its tracer provider
    # (the usual order), traces every call made after the install.
    code = """
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from swerve import Failover, FallbackConfig, MemoryHealth, Telemetry

fo = Failover(FallbackConfig(fallbacks={"a/m": "b/m"}), health=MemoryHealth(),
              telemetry=Telemetry())
assert fo.call("a/m", lambda attempt: "before").value == "before"
exporter = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
trace.set_tracer_provider(provider)
assert fo.call("a/m", lambda attempt: "after").value == "after"
print(sorted(span.name for span in exporter.get_finished_spans()))
"""
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert out.stdout.strip() == "['chat m', 'swerve attempt a/m']", out.stdout  # call, attempt


def test_telemetry_on_the_global_provider_measures_once_an_sdk_provider_is_installed() -> None:
    # The same for metrics: without a meter provider a call measures nothing (nothing would
    # read it); the calls after the application installs one are counted, from then on.
    code = """
from opentelemetry import metrics
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from swerve import Failover, FallbackConfig, MemoryHealth, Telemetry

fo = Failover(FallbackConfig(fallbacks={"a/m": "b/m"}), health=MemoryHealth(),
              telemetry=Telemetry())
assert fo.call("a/m", lambda attempt: "before").value == "before"
reader = InMemoryMetricReader()
metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))
assert fo.call("a/m", lambda attempt: "after").value == "after"
data = reader.get_metrics_data()
found = {}
for rm in data.resource_metrics:
    for sm in rm.scope_metrics:
        for m in sm.metrics:
            for p in m.data.data_points:
                if m.name == "swerve.attempts":
                    found[m.name] = found.get(m.name, 0) + p.value
                elif m.name in ("swerve.attempt.duration", "swerve.call.duration"):
                    found[m.name] = found.get(m.name, 0) + p.count
print(sorted(found.items()))
"""
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    # One call counted (the one after the install), in the counter and the histograms.
    assert out.stdout.strip() == (
        "[('swerve.attempt.duration', 1), ('swerve.attempts', 1), ('swerve.call.duration', 1)]"
    ), out.stdout


def test_on_the_no_op_meter_a_call_counts_nothing(clock: FakeClock) -> None:
    telemetry = Telemetry(trace.NoOpTracerProvider(), metrics.NoOpMeterProvider())
    fo = Failover(CONFIG, MemoryHealth(), clock=clock, telemetry=telemetry)
    assert fo.call(P, lambda attempt: "ok").value == "ok"
    # The zero samples a config seeds stay zeros: nothing was added to them.
    counted = telemetry.attempts.observe(cast(Any, None))
    assert counted and all(o.value == 0 for o in counted) and not telemetry.metering()
    assert MetricsOnly().telemetry.metering()
