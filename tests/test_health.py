"""Route health: cooldowns that only extend, and breakers with a bounded half-open probe."""

from __future__ import annotations

import threading

from swerve import BreakerConfig, MemoryHealth
from swerve.health import Admission, BreakerState, CooldownRule, HealthStore, Outcome

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
        admission, _ = h.admit(R, 10.0, CFG)
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
    admission, t = h.admit(R, 10.0, CFG)
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
