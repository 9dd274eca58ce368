"""A fleet of real processes shares route health through one real Redis.

Each worker is its own Python process (tests/fleet/worker.py) with a Failover on a RedisHealth,
calling the fake provider (served from this process) over httpx; sync and async workers mix in
every fleet. What is asserted is what users of the fleet would see: which route answered each
call, and how many requests reached the dead primary.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from swerve.testing import FakeProvider, Fault

from ._fleet import F, P, Worker, calls_to, events, start_together
from ._servers import wait_for

Fleet = Callable[..., list[Worker]]
BASE: dict[str, Any] = {
    "fallbacks": {P: F},
    "jitter": False,
    "backoff_initial_s": 0.01,
    "attempt_timeout_s": 5,
    "breaker": {"enabled": False},  # cooldowns alone, unless a test is about the breaker
}


def answers_within(workers: list[Worker], n: int, timeout: float) -> dict[str, dict[str, Any]]:
    """The first ``n`` answers of ``workers`` (by worker name), waiting at most ``timeout``."""
    got: dict[str, dict[str, Any]] = {}

    def collect() -> bool:
        for worker in workers:
            if len(got) < n and worker.name not in got and (answer := worker.poll()) is not None:
                got[worker.name] = answer
        return len(got) >= n

    wait_for(f"{n} answers", collect, timeout, poll=0.01)
    return got


def test_one_process_cools_the_primary_and_the_others_never_call_it(
    fleet: Fleet, fake: FakeProvider
) -> None:
    config = {**BASE, "max_retries": 1, "cooldown_s": 30}
    a, b, c = fleet(config, 3, modes=("sync", "async"))
    fake.set_fault("primary", Fault.status(503))

    first = a.call()
    assert first["route"] == F
    assert fake.requests("primary") == 2  # A spent its retry budget on the primary, once
    assert [e["swerve.route"] for e in events([first], "swerve.cooldown")] == [P]

    for worker in (b, c):
        worker.wait_until_sees(P, degraded=True)
    (d,) = fleet(config, 1, modes=("async",))  # started only after A cooled the primary
    assert d.sees(P, degraded=True)  # it synced the fleet's view before its first call

    later = [worker.call() for worker in (b, c, d)]
    assert [answer["route"] for answer in later] == [F, F, F]
    assert fake.requests("primary") == 2  # zero requests from B, C and D
    assert calls_to(P, later) == 0
    assert [e["swerve.route"] for e in events(later, "swerve.route_skipped")] == [P, P, P]


def test_of_four_processes_racing_on_a_recovering_route_exactly_one_probes(
    fleet: Fleet, fake: FakeProvider
) -> None:
    config = {**BASE, "max_retries": 0, "cooldown_s": 1, "cooldown_max_s": 4}
    workers = fleet(config, 4, modes=("sync", "async"))
    fake.set_fault("primary", Fault.status(503))
    first = workers[0].call()
    assert first["route"] == F
    (cooldown,) = events([first], "swerve.cooldown")
    for worker in workers[1:]:
        worker.wait_until_sees(P, degraded=True)

    # The primary is still dead, and now hangs: the probe stays in flight while the others
    # call, so they really race it. All four call the moment the cooldown is over.
    fake.set_fault("primary", Fault.hang())
    fake.reset_counts()
    ended = float(cooldown["swerve.cooldown.until"])
    start_together(workers, at=max(ended + 0.05, time.time() + 0.2))

    assert fake.wait_for_requests("primary", 1, timeout=10)
    others = answers_within(workers, 3, timeout=10)
    assert [answer["route"] for answer in others.values()] == [F, F, F]
    assert calls_to(P, list(others.values())) == 0  # they did not wait for the probe either
    assert fake.requests("primary") == 1

    fake.set_fault("primary", Fault.status(503))  # the hung probe fails
    (prober,) = [w for w in workers if w.name not in others]
    probe = prober.answer(timeout=10)
    assert probe["route"] == F
    assert fake.requests("primary") == 1
    everyone = [probe, *others.values()]
    assert [e["swerve.probe.outcome"] for e in events(everyone, "swerve.probe")] == ["failure"]


def test_of_four_processes_racing_on_a_half_open_breaker_exactly_two_probe(
    fleet: Fleet, fake: FakeProvider
) -> None:
    config = {
        **BASE,
        "max_retries": 0,
        "cooldown_s": 0,  # the breaker alone keeps calls off the primary
        "breaker": {
            "window_s": 30, "min_calls": 2, "failure_rate": 0.5, "open_s": 1, "max_open_s": 4,
            "half_open_probes": 2,
        },
    }  # fmt: skip
    workers = fleet(config, 4, modes=("sync", "async"))
    fake.set_fault("primary", Fault.status(503))
    opened = [workers[0].call(), workers[0].call()]  # two failures in two calls: open
    assert [a["route"] for a in opened] == [F, F]
    assert [(e["swerve.breaker.from"], e["swerve.breaker.to"]) for e in events(
        opened, "swerve.breaker"
    )] == [("closed", "open")]  # fmt: skip
    for worker in workers:  # the fleet's breaker: open everywhere, then half-open everywhere
        worker.wait_until_sees(P, breaker="half_open")

    fake.set_fault("primary", Fault.hang())  # the probes stay in flight while the others call
    fake.reset_counts()
    start_together(workers, at=time.time() + 0.2)

    assert fake.wait_for_requests("primary", 2, timeout=10)
    others = answers_within(workers, 2, timeout=10)
    assert [answer["route"] for answer in others.values()] == [F, F]
    rejected = [a["outcome"] for answer in others.values() for a in answer["attempts"]]
    assert rejected == ["rejected", "success"] * 2  # refused without a request, then swapped
    assert fake.requests("primary") == 2

    fake.set_fault("primary", Fault.status(503))  # the hung probes fail
    probes = [w.answer(timeout=10) for w in workers if w.name not in others]
    assert [answer["route"] for answer in probes] == [F, F]
    assert fake.requests("primary") == 2


def test_kill_9_of_the_process_holding_the_probe_frees_it_when_its_lease_ends(
    fleet: Fleet, fake: FakeProvider
) -> None:
    lease_s = 2.0  # a probe's lease is its attempt timeout
    config = {**BASE, "max_retries": 0, "cooldown_s": 0.5, "attempt_timeout_s": lease_s}
    holder, other = fleet(config, 2, modes=("sync", "async"))
    fake.set_fault("primary", Fault.status(503))
    assert holder.call()["route"] == F
    other.wait_until_sees(P, degraded=True)
    holder.wait_until_sees(P, recovering=True)  # the cooldown is over: the next call probes

    fake.set_fault("primary", Fault.hang())
    fake.reset_counts()
    sent = time.time()
    holder.send(cmd="call", route=P)
    assert fake.wait_for_requests("primary", 1, timeout=10)  # the probe is in flight
    holder.kill()
    fake.set_fault("primary", Fault.ok())  # the primary is back; only a probe can tell

    # Until the dead holder's lease ends, the other process walks past the primary; then it
    # takes the probe itself, and its success brings the fleet back to the primary.
    seen: list[dict[str, Any]] = []

    def back_on_primary() -> bool:
        seen.append(other.call())
        return bool(seen[-1]["route"] == P)

    wait_for("the other process to probe the primary", back_on_primary, lease_s + 3)
    during = [a for a in seen if a["start"] < sent + lease_s]
    assert during and all(a["route"] == F and calls_to(P, [a]) == 0 for a in during)
    assert seen[-1]["start"] < sent + lease_s + 1.0  # freed within its expiry (and a poll)
    assert [e["swerve.probe.outcome"] for e in events(seen, "swerve.probe")] == ["success"]
    assert fake.requests("primary") == 2  # the dead holder's probe, and the other's
