"""Route health: cooldowns that only extend, and breakers with a bounded half-open probe."""

from __future__ import annotations

import threading

from swerve import BreakerConfig, MemoryHealth
from swerve.health import Admission, BreakerState, HealthStore, Outcome

R = "anthropic/claude-sonnet-5"
CFG = BreakerConfig(
    window_s=60, min_calls=4, failure_rate=0.5, open_s=10, max_open_s=35, half_open_probes=2
)


def test_memory_health_is_a_health_store() -> None:
    assert isinstance(MemoryHealth(), HealthStore)


def test_cooldown_extends_never_shortens() -> None:
    h = MemoryHealth()
    assert h.mark_degraded(R, 100.0) == 100.0
    assert h.mark_degraded(R, 50.0) == 100.0
    assert h.mark_degraded(R, 150.0) == 150.0
    assert R in h.unavailable(149.0)
    assert R not in h.unavailable(150.0)
    assert "other/route" not in h.unavailable(0.0)


def test_clear_forgets_cooldowns_and_breakers() -> None:
    h = MemoryHealth()
    h.mark_degraded(R, 100.0)
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
    h.mark_degraded("a/x", 50.0)
    _open(h)
    snap = {r.route: r for r in h.snapshot(5.0)}
    assert snap["a/x"].degraded_until == 50.0
    assert snap[R].breaker is BreakerState.OPEN
    assert {r.route: r.degraded_until for r in h.snapshot(60.0)}["a/x"] is None
