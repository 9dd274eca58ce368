"""What a failure means decides what happens next, in the engine against the fake provider.

A hang or a stall swaps at once; an overflow follows its own map; a content filter surfaces;
recovery costs one probe, never a stampede; a stream that finished is finished; malformed data
is a transport failure; and no call outlives its bound. Each behaviour is written once and run
through both the sync and the async engine (the ``mode`` fixture, tests/_drive.py), against the
fake provider served in-process.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from swerve import Attempt, Failover, FallbackConfig, MemoryHealth, Result, StreamReset
from swerve._failures import FailureKind, InStreamError
from swerve.testing import FakeClock, FakeProvider, Fault, Reply

from . import _wire
from ._drive import ANSWERING_LIMIT_S, InProcessProvider, Mode, in_process
from .conftest import Otel

P, F, BIG = "primary/model-a", "fallback/model-b", "large/model-xl"
CONTENT_FILTER = Fault.status(
    400,
    body={
        "error": {
            "message": "The response was filtered due to the prompt triggering a content filter.",
            "type": "invalid_request_error",
            "param": "prompt",
            "code": "content_filter",
        }
    },
)


@pytest.fixture
def fake() -> Iterator[InProcessProvider]:
    """The fake provider in-process: what a failure means is decided without a socket."""
    with in_process("primary", "fallback", "large") as provider:
        yield provider


@pytest.fixture
def mode(mode: Mode, fake: InProcessProvider) -> Mode:
    return mode.over(fake)


def config(**kw: Any) -> FallbackConfig:
    params: dict[str, Any] = {"fallbacks": {P: F, F: P}, "jitter": False}
    params.update(kw)
    return FallbackConfig(**params)


def streamed(mode: Mode, fo: Failover, **kw: Any) -> tuple[list[Any], Result[list[Any]]]:
    """The chunks a consumer saw (resets included), and the stream's result."""
    out: list[Any] = []
    stream = mode.stream(fo, out=out, **kw)
    return out, stream.result(out)


def served(results: list[Result[str]]) -> list[str]:
    return [str(r.route) for r in results]


# --- hangs and stalls: one timeout, then another route ------------------------------------------
def test_a_hanging_route_costs_one_timeout_then_the_fallback_answers(
    mode: Mode, make_failover: Any, fake: FakeProvider, otel: Otel
) -> None:
    fo = make_failover(config(max_retries=2, attempt_timeout_s=1))
    fake.set_fault("primary", Fault.hang())
    result = mode.call(fo)
    assert result.value == "from fallback"
    assert fake.requests("primary") == 1  # not three: a hang is not retried on its route
    assert [e["swerve.reason"] for _, e in otel.events("swerve.swap")] == ["timeout"]
    assert not otel.events("swerve.retry")


def test_a_stalling_stream_swaps_after_one_stall(
    mode: Mode, make_failover: Any, fake: FakeProvider
) -> None:
    fo = make_failover(config(max_retries=2, stall_timeout_s=ANSWERING_LIMIT_S))
    fake.set_fault("primary", Fault.slow(first_token_s=10))
    out, result = streamed(mode, fo)
    assert _wire.text(out) == "from fallback"
    assert fake.requests("primary") == 1
    failure = result.attempts[0].failure
    assert failure is not None and failure.kind is FailureKind.TIMEOUT


def test_a_stall_after_content_restarts_once_on_the_next_route(
    mode: Mode, make_failover: Any, fake: FakeProvider, clock: FakeClock
) -> None:
    """The stall happens on the injected clock: once the first content is out, the clock jumps
    past the stall limit. The async engine computes its next wait from that clock, finds the
    limit already past and cuts the wait at once (the primary sends nothing more, so only the
    limit can end it). A sync read cannot be cut, so the primary's next chunk comes at once
    and the engine finds it late. Either way no real-time bound decides the outcome, so a
    loaded machine cannot turn the stall after content into one before it."""
    fo = make_failover(config(max_retries=2, stall_timeout_s=30))
    fake.set_reply("primary", Reply(text="one two three"))
    if not mode.sync:
        fake.set_fault("primary", Fault.slow(per_chunk_s=120))  # after the first chunk, silence
    stalled = []

    def stall_after_content(chunk: Any) -> None:
        if not stalled and _wire.text([chunk]):
            stalled.append(chunk)
            clock.advance(31)

    out, result = streamed(mode, fo, seen=stall_after_content, mid_stream="restart")
    resets = [c for c in out if isinstance(c, StreamReset)]
    assert [(str(r.route), str(r.next_route)) for r in resets] == [(P, F)]
    assert _wire.text(out[: out.index(resets[0])]) == "one"
    assert _wire.text(out[out.index(resets[0]) + 1 :]) == "from fallback"
    assert fake.requests("primary") == 1
    failure = result.attempts[0].failure
    assert failure is not None and failure.kind is FailureKind.TIMEOUT


# --- overflows, filters: the prompt is to blame, not the route ----------------------------------
def test_an_overflow_goes_to_the_mapped_larger_model_and_cools_nothing(
    mode: Mode, make_failover: Any, fake: FakeProvider, clock: FakeClock, health: MemoryHealth,
    otel: Otel,
) -> None:  # fmt: skip
    fo = make_failover(config(fallbacks_by_failure={"context_overflow": {P: BIG}}))
    fake.script("primary", [Fault.context_overflow()])
    result = mode.call(fo)
    assert (str(result.route), result.value) == (BIG, "from large")
    assert fake.requests("primary") == 1 and fake.requests("fallback") == 0
    assert [e["swerve.reason"] for _, e in otel.events("swerve.swap")] == ["context_overflow"]
    assert P not in health.unavailable(clock.now)  # a shorter prompt still starts there
    assert str(mode.call(fo).route) == P


def test_an_overflow_without_a_map_surfaces_after_one_request(
    mode: Mode, make_failover: Any, fake: FakeProvider
) -> None:
    fo = make_failover(config())
    fake.set_fault("primary", Fault.context_overflow())
    with pytest.raises(httpx.HTTPStatusError) as info:
        mode.call(fo)
    assert info.value.response.status_code == 400
    assert (fake.requests("primary"), fake.requests("fallback")) == (1, 0)


def test_a_content_filter_is_retried_nowhere_even_with_400_listed(
    mode: Mode, make_failover: Any, fake: FakeProvider, clock: FakeClock, health: MemoryHealth,
    otel: Otel,
) -> None:  # fmt: skip
    fo = make_failover(config(fallback_on=frozenset({400, 429, 503})))
    fake.set_fault("primary", CONTENT_FILTER)
    with pytest.raises(httpx.HTTPStatusError):
        mode.call(fo)
    assert (fake.requests("primary"), fake.requests("fallback")) == (1, 0)
    assert P not in health.unavailable(clock.now)
    assert [e["swerve.reason"] for _, e in otel.events("swerve.swap_declined")] == [
        "not_qualifying"
    ]


# --- recovery: one probe, never a stampede ----------------------------------------------------
def test_when_a_cooldown_ends_one_call_probes_and_the_rest_stay_on_the_fallback(
    mode: Mode, make_failover: Any, fake: FakeProvider, clock: FakeClock, health: MemoryHealth,
    otel: Otel,
) -> None:  # fmt: skip
    fo = make_failover(config(max_retries=2, cooldown_s=10, cooldown_max_s=80))
    fake.set_fault("primary", Fault.status(503))
    assert str(mode.call(fo).route) == F  # the primary fails and cools down for 10 s
    fake.reset_counts()

    clock.advance(10)  # the cooldown is over; the primary is still dead
    results = mode.calls(fo, 50)
    assert served(results) == [F] * 50
    assert fake.requests("primary") == 1  # one probe, and a failed probe is not retried
    assert [e["swerve.probe.outcome"] for _, e in otel.events("swerve.probe")] == ["failure"]
    # The failed probe cooled the route again, for twice as long.
    assert otel.events("swerve.cooldown")[-1][1]["swerve.cooldown.seconds"] == 20
    assert P in health.unavailable(clock.now + 19)

    fake.set_fault("primary", Fault.ok())  # healed
    clock.advance(20)
    results = mode.calls(fo, 1) + mode.calls(fo, 5)
    assert served(results) == [P] * 6  # back on the primary from the probe on
    assert [e["swerve.probe.outcome"] for _, e in otel.events("swerve.probe")][-1] == "success"
    assert P not in health.unavailable(clock.now)
    assert {r.route: r.degraded for r in health.snapshot(clock.now)}[P] is False


def test_a_long_outage_returns_to_the_primary_sooner_than_a_fixed_60s_cooldown(
    mode: Mode, fake: FakeProvider, otel: Otel
) -> None:
    """A 10-minute outage, a call every 2 s: seconds from recovery to traffic on the primary.

    How long depends on where recovery falls in the cooldown cycle, so the outage ends at
    several points of it and the worst and the mean are compared.
    """

    def back_after(cfg: FallbackConfig, outage: float) -> float:
        clock = FakeClock()
        health = MemoryHealth()
        fo = Failover(cfg, health, telemetry=otel.telemetry, clock=clock)
        start = tick = clock.now
        fake.set_fault("primary", Fault.status(503))
        while tick - start < 2 * outage:
            clock.now = max(clock.now, tick)
            if clock.now - start >= outage:
                fake.set_fault("primary", Fault.ok())
            if P in health.unavailable(clock.now):
                # This tick's call would go straight to the fallback and change nothing for the
                # primary: skipped, it would only cost a request.
                tick += 2.0
                continue
            if str(mode.call(fo).route) == P and clock.now - start >= outage:
                return clock.now - start - outage
            tick += 2.0
        raise AssertionError("never returned to the primary")

    outages = [600.0 + offset for offset in (0, 11, 23, 37, 49)]
    fixed = [back_after(config(cooldown_s=60, cooldown_max_s=60), o) for o in outages]
    growing = [back_after(config(), o) for o in outages]
    figures = (
        f"[{mode!r}] back on the primary after recovery: worst {max(growing):g}s, "
        f"mean {sum(growing) / 5:g}s (fixed 60 s cooldown: worst {max(fixed):g}s, "
        f"mean {sum(fixed) / 5:g}s)"
    )
    assert max(growing) < max(fixed) and sum(growing) < sum(fixed), figures


# --- streams: finished is finished; malformed is a transport failure ---------------------------
def test_a_stream_with_a_finish_reason_and_no_done_is_a_success(
    mode: Mode, make_failover: Any, fake: FakeProvider, clock: FakeClock, health: MemoryHealth,
    otel: Otel,
) -> None:  # fmt: skip
    fo = make_failover(config())
    fake.set_fault("primary", Fault.no_done())
    out, result = streamed(mode, fo)
    assert _wire.text(out) == "from primary" and str(result.route) == P
    assert fake.requests("primary") == 1
    assert P not in health.unavailable(clock.now) and not otel.events("swerve.cooldown")


def test_an_undecodable_chunk_before_content_swaps(
    mode: Mode, make_failover: Any, fake: FakeProvider
) -> None:
    fo = make_failover(config(max_retries=1))
    fake.set_fault("primary", Fault.malformed_before_content())
    out, result = streamed(mode, fo)
    assert _wire.text(out) == "from fallback"
    failure = result.attempts[0].failure
    assert failure is not None and failure.kind is FailureKind.TRANSPORT
    assert failure.error_type == "malformed"
    assert fake.requests("primary") == 2  # a transport failure is retried, then swapped


# --- every call has a finite bound ------------------------------------------------------------
_FAILURES = [
    httpx.ReadTimeout("read timed out"),
    httpx.ConnectError("connection refused"),
    InStreamError({"error": {"code": 503, "message": "upstream unavailable"}}),
    InStreamError({"error": {"code": 429, "message": "slow down"}}),
]


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    max_retries=st.integers(0, 4),
    max_swaps=st.integers(1, 3),
    attempt_timeout=st.sampled_from([None, 0.5, 3.0]),
    deadline=st.sampled_from([None, 1.0, 7.0]),
    durations=st.lists(st.floats(0, 1000), min_size=1, max_size=40),
    failures=st.lists(st.integers(0, len(_FAILURES) - 1), min_size=1, max_size=40),
)
def test_no_call_outlives_its_documented_bound(
    max_retries: int,
    max_swaps: int,
    attempt_timeout: float | None,
    deadline: float | None,
    durations: list[float],
    failures: list[int],
) -> None:
    cfg = config(
        max_retries=max_retries,
        max_swaps=max_swaps,
        attempt_timeout_s=attempt_timeout,
        deadline_s=deadline,
        backoff_initial_s=1,
        jitter=False,
    )
    clock = FakeClock()
    fo = Failover(cfg, MemoryHealth(), clock=clock)
    calls = iter(range(1000))

    def upstream(attempt: Attempt) -> str:
        # A client that honours the attempt's timeout: it takes at most that long.
        n = next(calls)
        assert attempt.timeout is not None  # every attempt has a finite limit
        clock.advance(min(durations[n % len(durations)], attempt.timeout))
        raise _FAILURES[failures[n % len(failures)]]

    start = clock.now
    with pytest.raises(Exception):  # noqa: B017, PT011 - every route keeps failing
        fo.call(P, upstream)
    assert clock.now - start <= cfg.call_bound_s + 1e-6


def test_the_default_bound_is_finite_and_derived_from_the_budgets() -> None:
    cfg = FallbackConfig(max_retries=2, max_swaps=1, attempt_timeout_s=10, backoff_max_s=30)
    # 2 routes x (3 attempts x 10 s + 2 waits x max(backoff cap 30, Retry-After cap 60)).
    assert cfg.call_bound_s == 2 * (3 * 10 + 2 * 60)
    assert FallbackConfig(deadline_s=45).call_bound_s == 45
    assert 0 < FallbackConfig().call_bound_s < float("inf")


def test_an_attempt_without_a_limit_still_gets_a_finite_timeout(
    make_failover: Any, fake: FakeProvider
) -> None:
    fo = make_failover(config())
    seen: list[float | None] = []

    def upstream(attempt: Attempt) -> str:
        seen.append(attempt.timeout)
        return "ok"

    fo.call(P, upstream)
    assert seen == [FallbackConfig(fallbacks={P: F, F: P}).call_bound_s]
