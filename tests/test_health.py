"""Route health: cooldowns that only extend, and breakers with a bounded half-open probe."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

import pytest

from swerve import BreakerConfig, MemoryHealth
from swerve._health import memory
from swerve._health.cooldown import RouteHealth
from swerve._health.memory import STEP_TOLERANCE_S
from swerve._health.store import (
    Admission,
    BreakerState,
    CooldownRule,
    HealthStore,
    Outcome,
)
from swerve.testing import FakeClock

R = "anthropic/claude-sonnet-5"
CFG = BreakerConfig(
    window_s=60, min_calls=4, failure_rate=0.5, open_s=10, max_open_s=35, half_open_probes=2
)


def test_memory_health_is_a_health_store() -> None:
    assert isinstance(MemoryHealth(), HealthStore)


RULE = CooldownRule(base_s=10, max_s=60)


def test_cooldown_extends_never_shortens() -> None:
    h = MemoryHealth()
    assert h.cool_down(R, 0.0, CooldownRule(100, 100)).until == 100.0
    assert h.cool_down(R, 20.0, CooldownRule(10, 10)).until == 100.0  # shorter: kept
    extended = h.cool_down(R, 90.0, CooldownRule(60, 60))
    assert (extended.until, extended.seconds, extended.streak) == (150.0, 60.0, 0)
    assert R in h.unavailable(149.0)
    assert "other/route" not in h.unavailable(0.0)


def test_cooldown_doubles_per_failed_probe_up_to_its_cap_and_a_success_resets_it() -> None:
    h = MemoryHealth()
    lengths = []
    now = 0.0
    for _ in range(5):  # each failure lands after the cooldown ended: a failed probe
        cooldown = h.cool_down(R, now, RULE)
        lengths.append((cooldown.seconds, cooldown.streak))
        now = cooldown.until
    assert lengths == [(10, 0), (20, 1), (40, 2), (60, 3), (60, 4)]
    assert h.recovered(R, now)
    assert h.cool_down(R, now + 1, RULE).seconds == 10  # a new outage starts short again


def test_retry_after_sets_a_floor_that_the_cap_bounds() -> None:
    h = MemoryHealth()
    assert h.cool_down(R, 0.0, CooldownRule(10, 60, floor_s=45)).seconds == 45
    assert h.cool_down("b/y", 0.0, CooldownRule(10, 60, floor_s=1e11)).seconds == 60


def test_a_recovering_route_admits_exactly_one_probe_until_its_verdict() -> None:
    h = MemoryHealth()
    h.cool_down(R, 0.0, RULE)
    assert not h.probe_due(R, 5.0) and R in h.unavailable(5.0)
    # The cooldown is over: the route is still walked past, but its probe is free.
    assert h.probe_due(R, 10.0) and R not in h.unavailable(10.0)
    claims = [h.claim_probe(R, 10.0, lease_s=30) for _ in range(3)]
    assert claims == [True, False, False]
    assert R in h.unavailable(11.0) and not h.probe_due(R, 11.0)
    # A lease that outlives its holder frees the probe by itself.
    assert h.probe_due(R, 40.0) and h.claim_probe(R, 40.0, lease_s=30)
    h.release_probe(R)
    assert h.probe_due(R, 41.0)
    snap = {r.route: r for r in h.snapshot(41.0)}
    assert snap[R].recovering and snap[R].degraded and snap[R].degraded_until is None
    assert h.recovered(R, 41.0)
    assert R not in h.unavailable(41.0) and not h.probe_due(R, 41.0)
    assert not h.recovered(R, 42.0)  # already healthy: nothing to report


def test_a_recovering_route_nobody_calls_is_forgotten_after_one_more_longest_cooldown() -> None:
    h = MemoryHealth()
    h.cool_down(R, 0.0, RULE)  # cooling until 10; recovering until 10 + 60
    assert {r.route: r.degraded for r in h.snapshot(69.0)} == {R: True}
    assert h.snapshot(70.0) == []
    assert R not in h.unavailable(70.0) and not h.probe_due(R, 70.0)
    assert h.cool_down(R, 71.0, RULE).streak == 0  # a new outage, not a failed probe


def test_a_success_while_still_cooling_shortens_nothing() -> None:
    h = MemoryHealth()
    h.cool_down(R, 0.0, RULE)
    assert not h.recovered(R, 5.0)
    assert R in h.unavailable(5.0)


def test_concurrent_claims_admit_exactly_one() -> None:
    h = MemoryHealth()
    h.cool_down(R, 0.0, RULE)
    start = threading.Barrier(16)
    won: list[bool] = []

    def claim() -> None:
        start.wait()
        won.append(h.claim_probe(R, 10.0, lease_s=30))

    threads = [threading.Thread(target=claim) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(won) == [False] * 15 + [True]


def test_clear_forgets_cooldowns_and_breakers() -> None:
    h = MemoryHealth()
    h.cool_down(R, 0.0, RULE)
    for _ in range(4):
        h.record(R, Outcome.FAILURE, 0.0, CFG, probe=False)
    h.clear()
    assert R not in h.unavailable(0.0)
    assert h.admit(R, 0.0, CFG)[0] is Admission.ALLOWED


def _open(h: MemoryHealth, now: float = 0.0) -> None:
    transitions = [h.record(R, Outcome.FAILURE, now, CFG, probe=False) for _ in range(4)]
    assert transitions[:3] == [None, None, None]
    assert transitions[3] is not None and transitions[3].after is BreakerState.OPEN


def test_breaker_opens_on_failure_rate_with_minimum_calls() -> None:
    h = MemoryHealth()
    for ok in (True, True, True):
        h.record(R, Outcome.SUCCESS if ok else Outcome.FAILURE, 0.0, CFG, probe=False)
    # 2 failures of 5 < 50 %: stays closed; the third makes 3/6 = 50 %: opens.
    assert h.record(R, Outcome.FAILURE, 1.0, CFG, probe=False) is None
    assert h.record(R, Outcome.FAILURE, 1.0, CFG, probe=False) is None
    t = h.record(R, Outcome.FAILURE, 1.0, CFG, probe=False)
    assert t is not None and (t.before, t.after) == (BreakerState.CLOSED, BreakerState.OPEN)
    assert t.open_until == 11.0
    assert R in h.unavailable(5.0)
    assert h.admit(R, 5.0, CFG)[0] is Admission.REJECTED


def test_old_outcomes_leave_the_window() -> None:
    h = MemoryHealth()
    for _ in range(3):
        h.record(R, Outcome.FAILURE, 0.0, CFG, probe=False)
    # 61 s later the three failures are out of the window: one more does not open it.
    assert h.record(R, Outcome.FAILURE, 61.0, CFG, probe=False) is None


def test_neutral_outcomes_do_not_count() -> None:
    h = MemoryHealth()
    for _ in range(10):
        assert h.record(R, Outcome.NEUTRAL, 0.0, CFG, probe=False) is None
    assert h.admit(R, 0.0, CFG)[0] is Admission.ALLOWED


def test_half_open_lets_exactly_n_probes_through_under_concurrency() -> None:
    h = MemoryHealth()
    _open(h)
    barrier = threading.Barrier(16)
    results: list[Admission] = []
    lock = threading.Lock()

    def worker() -> None:
        barrier.wait()
        admission = h.admit(R, 10.0, CFG).admission
        with lock:
            results.append(admission)

    threads = [threading.Thread(target=worker) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=5)
    assert results.count(Admission.PROBE) == 2
    assert results.count(Admission.REJECTED) == 14
    # a probe slot frees when a probe ends without a verdict
    h.record(R, Outcome.NEUTRAL, 10.0, CFG, probe=True)
    assert h.admit(R, 10.0, CFG)[0] is Admission.PROBE


def test_probe_success_closes_failure_reopens_longer_and_bounded() -> None:
    h = MemoryHealth()
    _open(h)
    admission, t, _ = h.admit(R, 10.0, CFG)
    assert admission is Admission.PROBE
    assert t is not None and (t.before, t.after) == (BreakerState.OPEN, BreakerState.HALF_OPEN)
    t = h.record(R, Outcome.FAILURE, 10.0, CFG, probe=True)
    assert t is not None and t.after is BreakerState.OPEN and t.open_until == 30.0  # 10 s * 2
    h.admit(R, 30.0, CFG)
    t = h.record(R, Outcome.FAILURE, 30.0, CFG, probe=True)
    assert t is not None and t.open_until == 65.0  # 40 s bounded to max_open_s = 35
    h.admit(R, 65.0, CFG)
    t = h.record(R, Outcome.SUCCESS, 65.0, CFG, probe=True)
    assert t is not None and (t.before, t.after) == (BreakerState.HALF_OPEN, BreakerState.CLOSED)
    # closed again, and the open duration starts over
    _open(h, 70.0)
    h.admit(R, 80.0, CFG)
    t = h.record(R, Outcome.FAILURE, 80.0, CFG, probe=True)
    assert t is not None and t.open_until == 100.0


def test_disabled_breaker_never_rejects() -> None:
    h = MemoryHealth()
    off = BreakerConfig(enabled=False, min_calls=1)
    for _ in range(20):
        h.record(R, Outcome.FAILURE, 0.0, off, probe=False)
    assert h.admit(R, 0.0, off)[0] is Admission.ALLOWED


def test_snapshot_reports_cooling_and_breaker_state() -> None:
    h = MemoryHealth()
    h.cool_down("a/x", 0.0, CooldownRule(50, 50))
    _open(h)
    snap = {r.route: r for r in h.snapshot(5.0)}
    assert snap["a/x"].degraded_until == 50.0 and snap["a/x"].degraded
    assert snap[R].breaker is BreakerState.OPEN and snap[R].degraded
    later = {r.route: r for r in h.snapshot(60.0)}["a/x"]
    assert later.degraded_until is None and later.recovering and later.degraded


# -- B2: a half-open probe counts only for the period that admitted it --------------------------
def test_a_probe_from_an_earlier_half_open_period_keeps_its_slot_but_never_decides() -> None:
    h = MemoryHealth()
    _open(h)  # open until 10
    first, second = h.admit(R, 10.0, CFG), h.admit(R, 10.0, CFG)
    assert first.admission is second.admission is Admission.PROBE
    # The first probe fails: open again, for twice as long (until 31). The second is still out.
    t = h.record(R, Outcome.FAILURE, 11.0, CFG, probe=True, period=first.period)
    assert t is not None and t.after is BreakerState.OPEN
    # The next half-open period has one free slot: the stale probe still holds the other...
    now_probes = [h.admit(R, 31.0, CFG) for _ in range(2)]
    assert [a.admission for a in now_probes] == [Admission.PROBE, Admission.REJECTED]
    assert now_probes[0].period != second.period
    # ...and the stale probe ending frees its slot but does not decide (a success, here).
    assert h.record(R, Outcome.SUCCESS, 32.0, CFG, probe=True, period=second.period) is None
    assert {r.route: r.breaker for r in h.snapshot(32.0)}[R] is BreakerState.HALF_OPEN
    assert h.admit(R, 32.0, CFG).admission is Admission.PROBE
    assert h.admit(R, 32.0, CFG).admission is Admission.REJECTED  # two in flight: full
    # The current period's probe decides.
    t = h.record(R, Outcome.SUCCESS, 33.0, CFG, probe=True, period=now_probes[0].period)
    assert t is not None and t.after is BreakerState.CLOSED


def test_half_open_never_has_more_probes_in_flight_than_configured_across_periods() -> None:
    h = MemoryHealth()
    _open(h)
    in_flight: list[int] = []  # periods of the probes running now
    most = 0
    now = 10.0
    for step in range(200):  # every probe fails or ends late: periods keep turning over
        admitted = h.admit(R, now, CFG)
        if admitted.admission is Admission.PROBE:
            in_flight.append(admitted.period)
        current = [p for p in in_flight if p == admitted.period]
        most = max(most, len(current))
        if in_flight and step % 3 == 0:  # the oldest probe ends, failing
            h.record(R, Outcome.FAILURE, now, CFG, probe=True, period=in_flight.pop(0))
        now += 7.0
    assert most <= CFG.half_open_probes


# -- B13: cooldowns and breakers hold to their length whichever way the wall clock jumps --------
@dataclass
class SteppedClock(FakeClock):
    """A FakeClock whose wall clock may also jump (by ``offset``); its monotonic time is
    ``now``, which only moves when the test says."""

    offset: float = 0.0

    def time(self) -> float:
        return self.now + self.offset


@pytest.mark.parametrize("jump", [-3600.0, 3600.0])
def test_a_cooldown_lasts_what_it_was_granted_when_the_wall_clock_steps(jump: float) -> None:
    clock = SteppedClock()
    h = MemoryHealth(clock=clock)
    granted = h.cool_down(R, clock.time(), CooldownRule(2, 60))
    assert granted.seconds == 2
    clock.advance(0.5)
    clock.offset += jump  # an NTP step, an operator, a resumed VM
    assert R in h.unavailable(clock.time())  # not ended by a forward step
    clock.advance(1.6)  # 2.1 s after the cooldown began: over, whatever the wall clock says
    assert R not in h.unavailable(clock.time()) and h.probe_due(R, clock.time())
    snap = {r.route: r for r in h.snapshot(clock.time())}[R]
    assert snap.recovering and snap.degraded_until is None
    assert h.steps == 1


@pytest.mark.parametrize("jump", [-3600.0, 3600.0])
def test_an_open_breaker_lasts_its_open_time_when_the_wall_clock_steps(jump: float) -> None:
    clock = SteppedClock()
    h = MemoryHealth(clock=clock)
    _open(h, clock.time())  # open for 10 s
    clock.advance(5)
    clock.offset += jump
    assert h.admit(R, clock.time(), CFG).admission is Admission.REJECTED
    clock.advance(5)
    probe = h.admit(R, clock.time(), CFG)
    assert probe.admission is Admission.PROBE
    t = h.record(R, Outcome.FAILURE, clock.time(), CFG, probe=True, period=probe.period)
    # the times it reports are in the new wall time: absolute, as a shared store needs them
    assert t is not None and t.open_until == pytest.approx(clock.time() + 20)
    until = {r.route: r for r in h.snapshot(clock.time())}[R].breaker_until
    assert until == t.open_until


def test_without_a_monotonic_clock_a_backward_step_leaves_no_more_than_was_left() -> None:
    h = MemoryHealth()
    now = 1_800_000_000.0
    h.cool_down(R, now, CooldownRule(2, 60))
    now -= 3600  # the wall clock went back an hour
    assert R in h.unavailable(now)
    assert R not in h.unavailable(now + 2.0)  # 2 s later, not an hour later
    # Scheduling noise (a thread that read the clock a moment earlier) is not a step.
    h.cool_down("b/y", now + 10, CooldownRule(5, 60))
    assert "b/y" in h.unavailable(now + 10 - STEP_TOLERANCE_S / 2)
    assert h.steps == 1


# -- B14: bounded whatever the number of distinct routes --------------------------------------
def test_the_store_keeps_at_most_max_routes_and_keeps_the_unhealthy_ones() -> None:
    h = MemoryHealth(max_routes=100)
    for i in range(20):  # 20 routes that are down
        h.cool_down(f"down/{i}", 0.0, CooldownRule(1000, 1000))
        _open_route(h, f"down/{i}")
    for i in range(10_000):  # then many healthy routes, each called once
        h.record(f"ok/{i}", Outcome.SUCCESS, 1.0, CFG, probe=False)
        assert h.admit(f"ok/{i}", 1.0, CFG).admission is Admission.ALLOWED
    assert len(h) <= 100
    snap = {r.route: r for r in h.snapshot(2.0)}
    assert len(snap) <= 100
    assert all(snap[f"down/{i}"].degraded for i in range(20))  # none of them forgotten
    assert all(snap[f"down/{i}"].breaker is BreakerState.OPEN for i in range(20))


def test_a_healthy_route_costs_no_entry_until_an_outcome_needs_one() -> None:
    h = MemoryHealth()
    for i in range(1000):
        assert h.admit(f"p/{i}", 0.0, CFG).admission is Admission.ALLOWED
        h.record(f"p/{i}", Outcome.NEUTRAL, 0.0, CFG, probe=False)
    assert len(h) == 0 and h.snapshot(0.0) == []


def test_a_snapshot_of_a_full_store_does_not_stall_calls(monkeypatch: pytest.MonkeyPatch) -> None:
    # Copying the table under the lock is quick; building a RouteHealth for each of 10k routes
    # (and sorting them) happens outside it, so a call never waits for that. Counted, not
    # timed: a timed bound on a busy machine measures the machine.
    h = MemoryHealth()
    for i in range(10_000):
        h.cool_down(f"p/{i}", 0.0, CooldownRule(100, 100))
    lock, real = h._lock, memory.RouteHealth
    under_lock = 0

    def built(*args: Any, **kwargs: Any) -> RouteHealth:
        nonlocal under_lock
        under_lock += lock.locked()  # one thread here: locked means held by the snapshot
        return real(*args, **kwargs)

    monkeypatch.setattr(memory, "RouteHealth", built)
    assert len(h.snapshot(1.0)) == 10_000
    assert under_lock == 0


def _open_route(h: MemoryHealth, route: str) -> None:
    for _ in range(4):
        h.record(route, Outcome.FAILURE, 0.0, CFG, probe=False)
