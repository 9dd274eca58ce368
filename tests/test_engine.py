"""The engine against real httpx and the fake provider served in-process: the seed's
sequences, cooldowns, breakers, streams, timeouts, cancellation, config reload and the off
switch.

Every behaviour is written once and run in both modes (the ``mode`` fixture, tests/_drive.py):
sync through ``call``, ``stream`` and ``collect`` on an ``httpx.Client``, async through
``acall`` and ``astream`` on an ``httpx.AsyncClient``.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from swerve import (
    Attempt,
    FallbackConfig,
    MemoryHealth,
    MidStreamError,
    StreamReset,
)
from swerve._failures import AttemptTimeout, CircuitOpenError, FailureKind
from swerve._health.store import CooldownRule
from swerve._telemetry.decisions import Swapped
from swerve.testing import FakeProvider, Fault, Reply

from . import _wire
from ._drive import ANSWERING_LIMIT_S, Mode, in_process_fake, in_process_mode
from .conftest import FakeClock, Otel

# This module's fake and mode run in-process: the engine's decisions do not need a socket.
fake, mode = in_process_fake, in_process_mode

P, F = "primary/model-a", "fallback/model-b"


class WallClock(FakeClock):
    """Real time, for limits that must really expire; backoffs are still recorded, not slept."""

    def time(self) -> float:
        return time.time()

    def monotonic(self) -> float:
        return time.monotonic()


class FailingRandomClock(FakeClock):
    """A clock whose jitter cannot be drawn: the failover decision itself fails."""

    def random(self) -> float:
        raise ArithmeticError("a policy that cannot compute")


def cool(health: MemoryHealth, route: str, clock: FakeClock, seconds: float) -> None:
    health.cool_down(route, clock.now, CooldownRule(seconds, seconds))


def cooling_until(health: MemoryHealth, route: str, clock: FakeClock) -> float | None:
    return {r.route: r.degraded_until for r in health.snapshot(clock.now)}.get(route)


def seed_config(**kw: Any) -> FallbackConfig:
    params: dict[str, Any] = {"fallbacks": {P: F, F: P}, "jitter": False, "cooldown_s": 60}
    params.update(kw)
    return FallbackConfig(**params)


# --- the seed's sequences ---------------------------------------------------------------------
def test_both_routes_down_retries_swaps_bounces_and_surfaces(
    make_failover: Any, mode: Mode, fake: FakeProvider, clock: FakeClock, health: MemoryHealth,
    otel: Otel,
) -> None:  # fmt: skip
    fo = make_failover(seed_config(max_retries=3, max_swaps=2))
    fake.set_fault("primary", Fault.status(503))
    fake.set_fault("fallback", Fault.status(503))
    with pytest.raises(httpx.HTTPStatusError) as info:
        mode.call(fo)
    assert info.value.response.status_code == 503
    # OpenRouter fails, 3 retries, swap, 3 retries, swap back (the last swap), 3 retries, error:
    # the primary is cooling, but this call cooled it, so its health does not refuse them.
    assert (fake.requests("primary"), fake.requests("fallback")) == (8, 4)
    assert clock.sleeps == [2, 4, 8] * 3
    assert any(f"requested {P}" in note for note in info.value.__notes__)
    assert P in health.unavailable(clock.now) and F in health.unavailable(clock.now)
    names = [name for name, _ in otel.events()]
    assert names.count("swerve.swap") == 2
    assert names[-2:] == ["swerve.cooldown", "swerve.swap_declined"]
    assert otel.events("swerve.swap_declined")[0][1]["swerve.reason"] == "swap_budget"
    (call,) = otel.call_spans()
    assert call.attributes["error.type"] == "503"
    assert call.attributes["swerve.swaps"] == 2 and call.attributes["swerve.attempts"] == 12


def test_two_503s_then_the_fallback_answers_and_the_next_call_starts_there(
    make_failover: Any, mode: Mode, fake: FakeProvider, clock: FakeClock, health: MemoryHealth,
    otel: Otel,
) -> None:  # fmt: skip
    fo = make_failover(seed_config(max_retries=1))
    fake.script("primary", [Fault.status(503), Fault.status(503)])
    result = mode.call(fo)
    assert result.value == "from fallback"
    assert str(result.route) == F and str(result.requested) == P
    assert (result.retries, result.swaps) == (1, 1)
    assert P in health.unavailable(clock.now)
    (cooldown,) = otel.events("swerve.cooldown")
    assert cooldown[1]["swerve.route"] == P and cooldown[1]["swerve.cooldown.seconds"] == 60
    # Call 2: no retries, straight to the fallback, no request to the primary.
    before = fake.requests("primary")
    second = mode.call(fo)
    assert str(second.route) == F and len(second.attempts) == 1
    assert fake.requests("primary") == before
    skipped = otel.events("swerve.route_skipped")
    assert [e[1]["swerve.route"] for e in skipped] == [P]
    # After the cooldown the primary is used again.
    clock.advance(61)
    assert str(mode.call(fo).route) == P


def test_each_swap_logs_a_trace_correlated_record(
    make_failover: Any, mode: Mode, fake: FakeProvider, otel: Otel,
    caplog: pytest.LogCaptureFixture,
) -> None:  # fmt: skip
    fo = make_failover(seed_config(max_retries=0))
    fake.script("primary", [Fault.status(503)])
    with caplog.at_level(logging.WARNING, logger="swerve"):
        mode.call(fo)
    (record,) = [r for r in caplog.records if "[model-fallback]" in r.getMessage()]
    assert record.getMessage() == f"[model-fallback] switched model from {P} to {F} (unavailable)"
    (call,) = otel.call_spans()
    assert record.otelSpanID == f"{call.context.span_id:016x}"  # type: ignore[attr-defined]
    assert record.otelTraceID == f"{call.context.trace_id:032x}"  # type: ignore[attr-defined]


def test_failed_fallback_leaves_the_requested_route_on_the_error(
    make_failover: Any, mode: Mode, fake: FakeProvider, otel: Otel
) -> None:
    fo = make_failover(seed_config(max_retries=0, max_swaps=1))
    fake.set_fault("primary", Fault.status(502))
    fake.set_fault("fallback", Fault.status(500))
    with pytest.raises(httpx.HTTPStatusError) as info:
        mode.call(fo)
    assert info.value.response.status_code == 500
    assert any(f"requested {P}" in n for n in info.value.__notes__)
    (call,) = otel.call_spans()
    assert call.attributes["swerve.route.requested"] == P
    assert "swerve.route.served" not in call.attributes


# --- cooldowns ---------------------------------------------------------------------------------
def test_cooldown_walk_with_a_cycle_starts_on_the_requested_route(
    make_failover: Any, mode: Mode, clock: FakeClock, health: MemoryHealth
) -> None:
    third = "third/model-c"
    fo = make_failover(FallbackConfig(fallbacks={P: F, F: third, third: P}))
    for route in (P, F, third):
        cool(health, route, clock, 30)
    result = mode.call(fo)
    assert str(result.route) == P
    health.clear()
    cool(health, P, clock, 30)
    cool(health, F, clock, 30)
    assert str(mode.call(fo).route) == third


def test_refailure_extends_the_cooldown(
    make_failover: Any, mode: Mode, fake: FakeProvider, clock: FakeClock, health: MemoryHealth
) -> None:
    fo = make_failover(FallbackConfig(fallbacks={P: F}, max_retries=0, cooldown_s=60))
    fake.set_fault("primary", Fault.status(503))
    mode.call(fo)
    first = cooling_until(health, P, clock)
    assert first == clock.now + 60
    clock.advance(59)
    # Pinned to the primary (no fallback for this route) while it is still cooling.
    pinned = make_failover(FallbackConfig(max_retries=0, cooldown_s=60))
    with pytest.raises(httpx.HTTPStatusError):
        mode.call(pinned)
    assert cooling_until(health, P, clock) == clock.now + 60 > first  # type: ignore[operator]


def test_retry_after_sets_the_cooldown_within_its_cap(
    make_failover: Any, mode: Mode, fake: FakeProvider, clock: FakeClock, health: MemoryHealth
) -> None:
    config = FallbackConfig(fallbacks={P: F}, max_retries=0, cooldown_s=30, cooldown_max_s=600)
    fo = make_failover(config)
    fake.set_fault("primary", Fault.status(429, retry_after=300))
    assert str(mode.call(fo).route) == F
    assert cooling_until(health, P, clock) == clock.now + 300
    # A server asking for a day is held to the longest cooldown; a probe checks after that.
    health.clear()
    fake.set_fault("primary", Fault.status(429, retry_after=86_400))
    assert str(mode.call(fo).route) == F
    assert cooling_until(health, P, clock) == clock.now + 600


def test_not_qualifying_errors_surface_at_once_without_cooldown(
    make_failover: Any, mode: Mode, fake: FakeProvider, clock: FakeClock, health: MemoryHealth,
    otel: Otel,
) -> None:  # fmt: skip
    fo = make_failover(seed_config())
    fake.set_fault("primary", Fault.context_overflow())
    with pytest.raises(httpx.HTTPStatusError):
        mode.call(fo)
    assert (fake.requests("primary"), fake.requests("fallback")) == (1, 0)
    assert P not in health.unavailable(clock.now)
    assert otel.events("swerve.swap_declined")[0][1]["swerve.reason"] == "not_qualifying"


def test_a_recorded_effect_declines_retry_and_swap(
    make_failover: Any, mode: Mode, fake: FakeProvider, clock: FakeClock, health: MemoryHealth,
    otel: Otel,
) -> None:  # fmt: skip
    fo = make_failover(seed_config())
    fake.set_fault("primary", Fault.status(503))
    with pytest.raises(httpx.HTTPStatusError):
        mode.call(fo, before=lambda attempt: attempt.record_effect("tool:send_email"))
    assert (fake.requests("primary"), fake.requests("fallback")) == (1, 0)
    assert P in health.unavailable(clock.now)  # still the route's fault
    assert otel.events("swerve.swap_declined")[0][1]["swerve.reason"] == "effects"


# --- breakers -----------------------------------------------------------------------------------
def test_open_breaker_sends_calls_to_the_sibling_and_a_probe_closes_it(
    make_failover: Any, mode: Mode, fake: FakeProvider, clock: FakeClock, otel: Otel
) -> None:
    config = FallbackConfig(
        fallbacks={P: F}, max_retries=0, cooldown_s=0,
        breaker={"min_calls": 2, "failure_rate": 1.0, "open_s": 10},
    )  # fmt: skip
    fo = make_failover(config)
    fake.script("primary", [Fault.status(503), Fault.status(503)])
    mode.call(fo)
    mode.call(fo)
    transitions = otel.events("swerve.breaker")
    assert [(e["swerve.breaker.from"], e["swerve.breaker.to"]) for _, e in transitions] == [
        ("closed", "open")
    ]
    # Open: the route counts as degraded (no cooldown here: cooldown_s=0), and the call walks
    # past it without a request.
    gauge = dict((tuple(a.items()), v) for a, v in otel.metrics()["swerve.route.degraded"])
    assert gauge[(("swerve.route", P),)] == 1
    before = fake.requests("primary")
    assert str(mode.call(fo).route) == F
    assert fake.requests("primary") == before
    # After open_s the breaker lets a probe through; it succeeds and closes the breaker.
    clock.advance(10)
    assert str(mode.call(fo).route) == P
    assert [(e["swerve.breaker.to"]) for _, e in otel.events("swerve.breaker")] == [
        "open", "half_open", "closed",
    ]  # fmt: skip
    gauge = dict((tuple(a.items()), v) for a, v in otel.metrics()["swerve.route.degraded"])
    assert gauge[(("swerve.route", P),)] == 0


def test_breaker_rejection_is_a_failure_that_swaps(
    make_failover: Any, mode: Mode, clock: FakeClock, health: MemoryHealth
) -> None:
    config = FallbackConfig(fallbacks={P: F}, breaker={"half_open_probes": 1, "open_s": 5})
    fo = make_failover(config)
    # Force the breaker open, let its one half-open probe out, and call while it is taken.
    from swerve._health.store import Outcome

    for _ in range(10):
        health.record(P, Outcome.FAILURE, clock.now, config.breaker, probe=False)
    clock.advance(5)
    health.admit(P, clock.now, config.breaker)  # the probe slot is now in flight elsewhere
    seen: list[str] = []
    result = mode.call(fo, before=lambda attempt: seen.append(str(attempt.route)))
    assert str(result.route) == F and seen == [F]
    assert result.attempts[0].outcome == "rejected"
    assert result.attempts[0].failure is not None
    assert result.attempts[0].failure.kind is FailureKind.BREAKER_OPEN
    assert isinstance(CircuitOpenError(P), Exception)


# --- streams ------------------------------------------------------------------------------------
def test_in_stream_error_before_content_swaps_invisibly(
    make_failover: Any, mode: Mode, fake: FakeProvider, otel: Otel
) -> None:
    fo = make_failover(seed_config(max_retries=0))
    fake.set_fault("primary", Fault.error_before_content("openrouter", 503))
    out: list[Any] = []
    stream = mode.stream(fo, out=out)
    assert not any(isinstance(c, StreamReset) for c in out)
    assert _wire.text(out) == "from fallback"
    # the role delta of the failed attempt never reached the consumer: one role delta only
    roles = [
        c
        for c in out
        if isinstance(c, dict) and c.get("choices") and c["choices"][0]["delta"].get("role")
    ]
    assert len(roles) == 1
    assert str(stream.route) == F
    attempts = otel.attempt_spans()
    assert attempts[0].attributes["swerve.failure.in_stream"] is True
    assert attempts[0].attributes["http.response.status_code"] == 503


@pytest.mark.parametrize("style", ["openrouter", "openai"])
def test_in_stream_error_after_content_raises_midstream_error(
    make_failover: Any, mode: Mode, fake: FakeProvider, clock: FakeClock, health: MemoryHealth,
    style: str,
) -> None:  # fmt: skip
    fo = make_failover(seed_config())
    fake.set_reply("primary", Reply(text="one two three four"))
    fake.set_fault("primary", Fault.error_after(2, style, 503))  # type: ignore[arg-type]
    got: list[Any] = []
    with pytest.raises(MidStreamError) as info:
        mode.stream(fo, out=got)
    err = info.value
    assert str(err.route) == P and err.failure.status == 503 and err.failure.in_stream
    assert _wire.text(list(err.partial)) == "one two" == _wire.text(got)
    assert P in health.unavailable(clock.now)
    assert fake.requests("fallback") == 0


def test_restart_mode_resets_and_continues_on_the_sibling(
    make_failover: Any, mode: Mode, fake: FakeProvider, otel: Otel
) -> None:
    fo = make_failover(seed_config(max_retries=0))
    fake.set_reply("primary", Reply(text="one two three"))
    fake.set_fault("primary", Fault.error_after(1, "openrouter", 503))
    out: list[Any] = []
    mode.stream(fo, mid_stream="restart", out=out)
    resets = [i for i, c in enumerate(out) if isinstance(c, StreamReset)]
    assert len(resets) == 1
    before, after = out[: resets[0]], out[resets[0] + 1 :]
    assert _wire.text(before) == "one"
    assert _wire.text(after) == "from fallback"
    reset = out[resets[0]]
    assert (str(reset.route), str(reset.next_route)) == (P, F)
    assert otel.events("swerve.stream_reset")


def test_stream_that_ends_without_finish_is_a_failure(
    make_failover: Any, mode: Mode, fake: FakeProvider
) -> None:
    fo = make_failover(seed_config(max_retries=0))
    fake.set_fault("primary", Fault.no_finish())
    result = mode.collect(fo)
    assert _wire.text(result.value) == "from fallback"
    assert result.attempts[0].failure is not None
    assert result.attempts[0].failure.kind is FailureKind.INCOMPLETE


def test_collect_never_returns_output_of_a_failed_attempt(
    make_failover: Any, mode: Mode, fake: FakeProvider, otel: Otel
) -> None:
    fo = make_failover(seed_config(max_retries=0))
    fake.set_reply("primary", Reply(text="partial words here"))
    fake.set_fault("primary", Fault.drop_after(2))
    result = mode.collect(fo)
    assert _wire.text(result.value) == "from fallback"
    (discarded,) = otel.events("swerve.partial_discarded")
    assert discarded[1]["swerve.discarded.text"] == 2
    assert discarded[1]["swerve.route"] == P


def test_stream_before_and_after_content(
    make_failover: Any, mode: Mode, fake: FakeProvider
) -> None:
    fo = make_failover(seed_config(max_retries=0))
    fake.set_fault("primary", Fault.error_before_content("anthropic", 529))
    fake.script("primary", [Fault.error_before_content("openrouter", 503)])
    out: list[Any] = []
    mode.stream(fo, out=out)
    assert _wire.text(out) == "from fallback"
    fake.set_fault("primary", Fault.error_after(1, "openrouter", 502))
    fo2 = make_failover(seed_config(max_retries=0), health=MemoryHealth())
    with pytest.raises(MidStreamError):
        mode.stream(fo2)


# --- timeouts -----------------------------------------------------------------------------------
# These run on real time: the limits must actually expire. Async code is cut at the limit (the
# failure names it); sync code cannot be pre-empted, so the limit reaches httpx as its timeout.
@pytest.mark.parametrize(
    ("fault", "limits", "expected"),
    [
        (Fault.hang(), {"attempt_timeout_s": ANSWERING_LIMIT_S}, "attempt"),
        (Fault.slow(first_token_s=5), {"first_token_timeout_s": ANSWERING_LIMIT_S}, "first_token"),
    ],
)
def test_stream_timeouts_fail_over(
    make_failover: Any, mode: Mode, fake: FakeProvider, fault: Fault, limits: dict[str, float],
    expected: str,
) -> None:  # fmt: skip
    # A call bound of its own, far off: the primary's limit is under test, and a loaded machine
    # must not turn the fallback's ordinary answer into a deadline.
    fo = make_failover(seed_config(max_retries=0, deadline_s=30, **limits), clock=WallClock())
    fake.set_fault("primary", fault)
    out: list[Any] = []
    stream = mode.stream(fo, out=out)
    assert _wire.text(out) == "from fallback"
    failure = stream.attempts[0].failure
    assert failure is not None and failure.kind is FailureKind.TIMEOUT
    if not mode.sync:
        assert failure.message.startswith(expected)


def test_stall_after_content_is_a_midstream_timeout(
    make_failover: Any, mode: Mode, fake: FakeProvider, health: MemoryHealth
) -> None:
    fo = make_failover(seed_config(max_retries=0, stall_timeout_s=0.2), clock=WallClock())
    fake.set_reply("primary", Reply(text="one two three"))
    fake.set_fault("primary", Fault.slow(per_chunk_s=5))
    with pytest.raises(MidStreamError) as info:
        mode.stream(fo)
    assert info.value.failure.kind is FailureKind.TIMEOUT
    if not mode.sync:
        assert info.value.failure.message.startswith("stall")
    assert P in health.unavailable(time.time())


def test_deadline_ends_the_call(make_failover: Any, mode: Mode, fake: FakeProvider) -> None:
    fo = make_failover(seed_config(deadline_s=0.3), clock=WallClock())
    fake.set_fault("primary", Fault.hang())
    fake.set_fault("fallback", Fault.hang())
    with pytest.raises((AttemptTimeout, httpx.TimeoutException)) as info:
        mode.call(fo)
    if mode.sync:  # the deadline reached httpx as the attempt's timeout, and ended the call
        assert isinstance(info.value, httpx.TimeoutException | AttemptTimeout)
    else:
        assert isinstance(info.value, AttemptTimeout) and info.value.limit == "deadline"


def test_attempt_timeout_fails_over(make_failover: Any, mode: Mode, fake: FakeProvider) -> None:
    """Sync code cannot be pre-empted: the attempt's timeout is handed to httpx; async code is
    cancelled at it."""
    fo = make_failover(seed_config(max_retries=0, attempt_timeout_s=ANSWERING_LIMIT_S))
    fake.set_fault("primary", Fault.hang())
    result = mode.call(fo)
    assert result.value == "from fallback"
    failure = result.attempts[0].failure
    assert failure is not None and failure.kind is FailureKind.TIMEOUT


# --- cancellation ---------------------------------------------------------------------------------
def test_cancellation_never_swaps_and_leaks_nothing(
    make_failover: Any, mode: Mode, fake: FakeProvider, clock: FakeClock, health: MemoryHealth,
    otel: Otel,
) -> None:  # fmt: skip
    fo = make_failover(seed_config())
    fake.set_fault("primary", Fault.hang())
    mode.abort(fo)
    assert fake.requests("fallback") == 0
    assert P not in health.unavailable(clock.now)
    assert not otel.events("swerve.swap")
    outcomes = [s.attributes["swerve.attempt.outcome"] for s in otel.attempt_spans()]
    assert outcomes == ["aborted", "aborted"]
    assert len(otel.call_spans()) == 2


def test_consumer_stopping_early_closes_the_upstream(
    make_failover: Any, mode: Mode, fake: FakeProvider, otel: Otel
) -> None:
    fo = make_failover(seed_config())
    fake.set_reply("primary", Reply(text="a b c d e f"))
    mode.stream(fo, take=2)
    assert len(otel.call_spans()) == 1 and len(otel.attempt_spans()) == 1
    assert fake.requests("fallback") == 0


# --- config: reload and off ---------------------------------------------------------------------
def test_config_reload_clears_cooldowns(
    make_failover: Any, mode: Mode, fake: FakeProvider, clock: FakeClock, health: MemoryHealth,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    var = "SWERVE_TEST_RELOAD"
    monkeypatch.setenv(var, json.dumps({"fallbacks": {P: F}, "maxUpstreamRetryAttempts": 0}))
    fo = make_failover(None, env_var=var)
    fake.script("primary", [Fault.status(503)])
    assert str(mode.call(fo).route) == F
    assert str(mode.call(fo).route) == F  # cooling
    monkeypatch.setenv(var, json.dumps({"fallbacks": {P: F}, "maxUpstreamRetryAttempts": 1}))
    assert str(mode.call(fo).route) == P
    assert P not in health.unavailable(clock.now)


@pytest.mark.parametrize("config", [None, FallbackConfig(fallbacks={P: F}, max_swaps=0)])
def test_no_config_or_zero_swaps_passes_straight_through(
    make_failover: Any, mode: Mode, fake: FakeProvider, otel: Otel,
    monkeypatch: pytest.MonkeyPatch, config: FallbackConfig | None,
) -> None:  # fmt: skip
    monkeypatch.delenv("SWERVE_FALLBACK_CONFIG", raising=False)
    fo = make_failover(config)
    fake.set_fault("primary", Fault.status(503))
    with pytest.raises(httpx.HTTPStatusError) as info:
        mode.call(fo)
    assert not getattr(info.value, "__notes__", None)
    assert (fake.requests("primary"), fake.requests("fallback")) == (1, 0)
    assert otel.finished() == []
    stream: list[Any] = []
    mode.stream(fo, fn=lambda a: iter([1, 2]), spec=None, out=stream)
    assert stream == [1, 2]


# --- telemetry nesting --------------------------------------------------------------------------
def test_httpx_spans_nest_under_the_attempt_that_made_them(
    make_failover: Any, mode: Mode, fake: FakeProvider, otel: Otel
) -> None:
    from opentelemetry.instrumentation.httpx import HTTPXClientInstrumentor

    fo = make_failover(seed_config(max_retries=0))
    fake.script("primary", [Fault.status(503)])
    mode.call(
        fo,
        on_client=lambda c: HTTPXClientInstrumentor.instrument_client(
            c, tracer_provider=otel.tracer_provider
        ),
    )
    spans = otel.finished()
    attempts = otel.attempt_spans()
    http = [s for s in spans if s.name == "POST"]
    assert len(attempts) == 2 and len(http) == 2
    for h, a in zip(http, attempts, strict=True):
        assert h.parent is not None and h.parent.span_id == a.context.span_id
    (call,) = otel.call_spans()
    assert all(a.parent is not None and a.parent.span_id == call.context.span_id for a in attempts)
    assert call.kind.name == "CLIENT" and attempts[0].kind.name == "INTERNAL"
    assert attempts[1].attributes["gen_ai.response.model"] == "model-b"
    assert call.attributes["gen_ai.response.model"] == "model-b"


def test_concurrent_calls_share_health(
    make_failover: Any, mode: Mode, fake: FakeProvider, clock: FakeClock, health: MemoryHealth
) -> None:
    fo = make_failover(seed_config(max_retries=0))
    fake.set_fault("primary", Fault.status(503))
    assert [str(r.route) for r in mode.calls(fo, 8)] == [F] * 8
    assert P in health.unavailable(clock.now)


def test_pinned_call_neither_walks_nor_swaps(
    make_failover: Any, mode: Mode, fake: FakeProvider, clock: FakeClock, health: MemoryHealth
) -> None:
    fo = make_failover(seed_config(max_retries=1))
    cool(health, P, clock, 60)  # a normal call would start on the fallback
    assert str(mode.call(fo, pin=True).route) == P
    fake.set_fault("primary", Fault.status(503))
    with pytest.raises(httpx.HTTPStatusError):
        mode.call(fo, pin=True)
    assert fake.requests("primary") == 3 and fake.requests("fallback") == 0  # 1 + 1 retry, no swap
    assert str(mode.call(fo).route) == F  # unpinned swaps


# --- a decision that cannot be made, and hostile values in log lines --------------------------
@pytest.mark.parametrize(
    ("config", "clock"),
    [
        # A huge retry budget with a huge factor: the backoff must neither overflow nor sleep.
        (seed_config(max_retries=400, backoff_factor=10, jitter=True), FakeClock()),
        (seed_config(max_retries=2, jitter=True), FakeClock(random_value=float("inf"))),
        (seed_config(max_retries=2, jitter=True), FailingRandomClock()),  # the decision fails
    ],
    ids=["overflowing-backoff", "infinite-wait", "failing-decision"],
)
def test_the_upstream_error_surfaces_whatever_the_policy_computes(
    make_failover: Any, mode: Mode, fake: FakeProvider, config: FallbackConfig, clock: FakeClock
) -> None:
    fo = make_failover(config.model_copy(update={"fallbacks": {}}), clock=clock)
    fake.set_fault("primary", Fault.status(503))
    with pytest.raises(httpx.HTTPStatusError) as caught:  # the provider's own error, unmasked
        mode.call(fo)
    assert caught.value.response.status_code == 503
    # Every wait the engine took was finite and within the call's bound.
    assert all(0 <= s <= config.call_bound_s for s in clock.sleeps)


def test_a_limit_already_past_reports_no_negative_duration(
    make_failover: Any, mode: Mode, clock: FakeClock
) -> None:
    fo = make_failover(seed_config(fallbacks={}, attempt_timeout_s=5))

    def slow_chunks(_: Attempt) -> Iterator[dict[str, int]]:
        for n in range(5):
            clock.advance(3)  # each chunk arrives 3 s after the last: the limit passes
            yield {"n": n}

    with pytest.raises(MidStreamError) as caught:
        mode.stream(fo, fn=slow_chunks, spec=None)
    cause = caught.value.__cause__
    assert isinstance(cause, AttemptTimeout) and cause.seconds >= 0
    assert "-" not in str(cause), str(cause)


@pytest.mark.parametrize(
    "hostile",
    ["evil/model\nWARNING forged line", "evil/\x1b[31mred\x1b[0m", "evil/a\rb\u2028c"],
)
def test_no_route_name_forges_or_colours_a_log_line(
    otel: Otel, caplog: pytest.LogCaptureFixture, hostile: str
) -> None:
    span = otel.telemetry.tracer.start_span("call")
    with caplog.at_level(logging.WARNING, logger="swerve"):
        otel.telemetry.emit(Swapped(hostile, "b/c", "unavailable\n", 1), span)
    span.end()
    (record,) = caplog.records
    line = record.getMessage()
    assert line.isprintable(), repr(line)  # no newline, carriage return or escape survives
    assert line.startswith("[model-fallback] switched model from evil/")


def test_a_break_after_the_finish_reason_is_a_whole_answer(
    make_failover: Any, mode: Mode, health: MemoryHealth
) -> None:
    # The answer said it finished; only [DONE] was lost: no swap, no cooldown, no error.
    fo = make_failover(seed_config(max_retries=0))
    words = {"choices": [{"delta": {"content": "all of it"}, "finish_reason": None}]}
    stop = {"choices": [{"delta": {}, "finish_reason": "stop"}]}
    calls: list[str] = []

    def chunks(attempt: Attempt) -> Iterator[dict[str, Any]]:
        calls.append(str(attempt.route))
        yield words
        yield stop
        raise httpx.RemoteProtocolError("peer closed connection without [DONE]")

    result = mode.collect(fo, fn=chunks)
    assert _wire.text(result.value) == "all of it"
    assert calls == [P] and str(result.route) == P
    assert [a.failure for a in result.attempts] == [None]
    assert not [h for h in health.snapshot(0.0) if h.degraded or h.degraded_until]
