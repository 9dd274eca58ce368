"""What sharing route health through Redis costs a call, and what it saves a fleet.

Run: uv run python bench/bench_fleet.py [--n 5000] [--trials 200] [--calls 25]

It starts its own redis-server (the Debian package; on 127.0.0.1, a free port, a temporary
directory, no persistence) and its own fake provider, and stops both when done. The fleet's
processes are real processes (multiprocessing, spawned), each with its own Failover.

  a. latency      Failover.call around a no-op, healthy route, tracing on (SDK + batch
                  processor): RedisHealth against MemoryHealth, interleaved in one run.
                  Goal: medians within 20 us.
  b. propagation  one process cools a route; another, calling in a loop, walks past it:
                  from the start of the failing call to the first call served elsewhere.
                  Goal: p99 <= 50 ms on loopback.
  b2. busy        the same, the other process busy: 8 threads calling in a loop without
                  pause. Goal: p99 <= 50 ms on loopback.
  c. 503 outage   4 processes x --calls calls on a route that answers 503 (max_retries=2):
                  requests that reached the dead route, fleet-wide. Goal: the retry budget
                  once, plus the budgets of calls already in flight when the first gave up.
  d. hang         the same on a route that hangs (attempt_timeout_s=1): seconds callers
                  spent waiting on it, fleet-wide. Goal: one attempt timeout, plus one per
                  call already in flight when the first gave up.

c and d run in three patterns: one at a time (each call handed to the next process once the
previous one answered), staggered (every process calling back to back, each starting 0.1 s
after the one before) and all at once (every process from one start). Each is also run with
every process on its own MemoryHealth, for comparison.
"""

from __future__ import annotations

import argparse
import logging
import multiprocessing
import shutil
import socket
import statistics
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import httpx
import redis
from _support import traced
from opentelemetry import metrics, trace

from swerve import (
    Attempt,
    BreakerConfig,
    Failover,
    FallbackConfig,
    MemoryHealth,
    RedisHealth,
    Telemetry,
)
from swerve._health.store import HealthStore
from swerve.testing import FakeProvider, Fault

# The outages here are on purpose: swerve's WARNING per swap (shown when an application
# configures no logging) would bury the figures. Module level: the spawned processes import it.
logging.getLogger("swerve").setLevel(logging.ERROR)

PROCESSES = 4
LIVE = "live/model-b"
# How the fleet's calls arrive: the seconds between the processes' starts (None: one call at a
# time, each handed to the next process once the previous one answered).
PATTERNS: dict[float | None, str] = {None: "one at a time", 0.1: "staggered", 0.0: "all at once"}


# -- a real Redis ------------------------------------------------------------------------------
@contextmanager
def redis_server() -> Iterator[str]:
    """A redis-server on 127.0.0.1 and a free port, killed on exit; yields its URL."""
    binary = shutil.which("redis-server")
    if binary is None:
        raise SystemExit("redis-server is not installed (Debian package redis-server)")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with tempfile.TemporaryDirectory(prefix="swerve-bench-redis-") as home:
        proc = subprocess.Popen(
            [binary, "--port", str(port), "--bind", "127.0.0.1", "--dir", home, "--save", "",
             "--appendonly", "no", "--logfile", str(Path(home) / "redis.log")],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
        )  # fmt: skip
        try:
            client = redis.Redis(port=port, socket_timeout=0.5, socket_connect_timeout=0.5)
            deadline = time.monotonic() + 10
            while True:
                try:
                    client.ping()
                    break
                except redis.RedisError:
                    if time.monotonic() > deadline or proc.poll() is not None:
                        raise SystemExit("redis-server did not start") from None
                    time.sleep(0.02)
            client.close()
            yield f"redis://127.0.0.1:{port}/0"
        finally:
            proc.kill()
            proc.wait(timeout=10)


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


# -- a. a healthy call, RedisHealth against MemoryHealth -------------------------------------------
def latency(url: str, n: int) -> None:
    for tracing in (True, False):
        _latency(url, n, tracing)


def _latency(url: str, n: int, tracing: bool) -> None:
    """Failover.call around a no-op on each store, interleaved. Traced, the span processor's
    thread runs whenever a call lets go of the GIL (RedisHealth polls the channel's socket
    before each call's first decision): its export is billed to that side, so the pair's total
    is printed too; untraced, the difference is the store's own cost."""
    if tracing:
        telemetry, tracer_provider, meter_provider = traced()
    else:
        telemetry = Telemetry(trace.NoOpTracerProvider(), metrics.NoOpMeterProvider())
    config = FallbackConfig(fallbacks={"primary/model-a": LIVE})
    shared = RedisHealth.from_url(url, prefix="bench-latency", telemetry=telemetry)
    assert shared.wait_until_shared(), "the store did not connect"
    on_redis = Failover(config, shared, telemetry=telemetry)
    in_memory = Failover(config, MemoryHealth(), telemetry=telemetry)
    route = "primary/model-a"

    def noop(_: Attempt) -> None:
        return None

    for _ in range(500):  # warm both
        on_redis.call(route, noop)
        in_memory.call(route, noop)
    r: list[float] = []
    m: list[float] = []
    began = time.perf_counter_ns()
    for _ in range(n):  # interleaved, so drift hits both alike
        t0 = time.perf_counter_ns()
        on_redis.call(route, noop)
        t1 = time.perf_counter_ns()
        in_memory.call(route, noop)
        t2 = time.perf_counter_ns()
        r.append((t1 - t0) / 1000)
        m.append((t2 - t1) / 1000)
    pair = (time.perf_counter_ns() - began) / 1000 / n
    shared.close()
    if tracing:
        tracer_provider.shutdown()
        meter_provider.shutdown()
    rm, mm = statistics.median(r), statistics.median(m)
    how = "tracing on" if tracing else "no tracer"
    print(f"a. healthy call, Failover.call around a no-op, {how} ({n} calls per side)")
    print(f"   MemoryHealth   median {mm:7.1f} us   p99 {percentile(m, 0.99):7.1f} us")
    print(f"   RedisHealth    median {rm:7.1f} us   p99 {percentile(r, 0.99):7.1f} us")
    if tracing:  # the exporter's work lands on either side: the pair's wall time is the cost
        print(f"   difference     median {rm - mm:7.1f} us   (the span export, billed here)")
        print(f"   the pair       mean   {pair:7.1f} us of wall time, both calls and the export")
    else:
        verdict = "met" if rm - mm <= 20 else "MISSED"
        print(f"   difference     median {rm - mm:7.1f} us   (goal <= 20 us: {verdict})")


# -- b. propagation between two processes -----------------------------------------------------
def _unavailable(attempt: Attempt) -> None:
    request = httpx.Request("POST", "http://127.0.0.1/v1/chat/completions")
    raise httpx.HTTPStatusError(
        "503 Service Unavailable", request=request, response=httpx.Response(503, request=request)
    )


def _propagation_config() -> FallbackConfig:
    return FallbackConfig(
        fallbacks={"primary/model-a": LIVE},
        max_retries=0,
        cooldown_s=60,
        breaker=BreakerConfig(enabled=False),
    )


def _marker(conn: Connection, url: str) -> None:
    """Cools the primary when told (a call that fails there), and clears it fleet-wide."""
    store = RedisHealth.from_url(url, prefix="bench-propagation")
    store.wait_until_shared()
    failover = Failover(_propagation_config(), store)

    def fails_on_primary(attempt: Attempt) -> None:
        if attempt.route.provider == "primary":
            _unavailable(attempt)

    conn.send("ready")
    while (command := conn.recv()) != "quit":
        if command == "fail":
            t0 = time.monotonic()
            result = failover.call("primary/model-a", fails_on_primary)
            if str(result.attempts[0].route) != "primary/model-a":
                raise RuntimeError("the primary was still cooling here: nothing was measured")
            conn.send(t0)
        elif command == "clear":
            store.clear("primary/model-a")
            conn.send("ok")
    store.close()


def _watcher(conn: Connection, url: str) -> None:
    """Calls in a loop until a call walks past the primary; reports when."""
    store = RedisHealth.from_url(url, prefix="bench-propagation")
    store.wait_until_shared()
    failover = Failover(_propagation_config(), store)

    def served() -> str:
        return str(failover.call("primary/model-a", lambda _: None).route)

    conn.send("ready")
    while conn.recv() != "quit":
        deadline = time.monotonic() + 10
        while served() != "primary/model-a":  # the last trial's cooldown, cleared
            if time.monotonic() > deadline:
                raise RuntimeError("the primary was never cleared")
            time.sleep(0.001)
        conn.send("watching")
        while served() == "primary/model-a":
            if time.monotonic() > deadline:
                raise RuntimeError("the cooldown never arrived")
            time.sleep(0.0002)
        conn.send(time.monotonic())
    store.close()


def _propagation_ms(
    url: str, trials: int, watcher: Callable[[Connection, str], None]
) -> list[float]:
    """Per trial: from the marker's failing call to the first call ``watcher`` serves elsewhere."""
    ctx = multiprocessing.get_context("spawn")
    marker_end, marker_conn = ctx.Pipe()
    watcher_end, watcher_conn = ctx.Pipe()
    procs = [
        ctx.Process(target=_marker, args=(marker_conn, url), daemon=True),
        ctx.Process(target=watcher, args=(watcher_conn, url), daemon=True),
    ]
    for proc in procs:
        proc.start()
    try:
        _expect(marker_end, "ready")
        _expect(watcher_end, "ready")
        samples = []
        for _ in range(trials):
            watcher_end.send("watch")
            _expect(watcher_end, "watching")
            marker_end.send("fail")
            t0 = _recv(marker_end)
            t1 = _recv(watcher_end)
            samples.append((t1 - t0) * 1000)
            marker_end.send("clear")
            _expect(marker_end, "ok")
        for end in (marker_end, watcher_end):
            end.send("quit")
    finally:
        _join(procs)
    return samples


def _print_propagation(samples: list[float]) -> tuple[float, float]:
    p50, p99 = statistics.median(samples), percentile(samples, 0.99)
    verdict = "met" if p99 <= 50 else "MISSED"
    print(f"   p50 {p50:6.2f} ms   p99 {p99:6.2f} ms   max {max(samples):6.2f} ms   "
          f"(goal p99 <= 50 ms: {verdict})")  # fmt: skip
    return p50, p99


def propagation(url: str, trials: int) -> None:
    samples = _propagation_ms(url, trials, _watcher)
    print(f"b. propagation: one process cools a route, another walks past it ({trials} trials)")
    _print_propagation(samples)


# -- b2. propagation to a busy process -------------------------------------------------------------
BUSY_THREADS = 8


def _busy_watcher(conn: Connection, url: str) -> None:
    """8 threads call in a loop, without pause; reports when the first walks past the primary
    after being told to watch (the reader thread that applies the message competes with them)."""
    store = RedisHealth.from_url(url, prefix="bench-propagation")
    store.wait_until_shared()
    failover = Failover(_propagation_config(), store)
    lock = threading.Lock()
    state: dict[str, Any] = {"watching": False, "moved": None, "primary": 0}
    moved, stop = threading.Event(), threading.Event()

    def loop() -> None:
        while not stop.is_set():
            route = str(failover.call("primary/model-a", lambda _: None).route)
            with lock:
                if route == "primary/model-a":
                    state["primary"] += 1
                elif state["watching"] and state["moved"] is None:
                    state["moved"] = time.monotonic()
                    moved.set()

    threads = [threading.Thread(target=loop, daemon=True) for _ in range(BUSY_THREADS)]
    for thread in threads:
        thread.start()
    conn.send("ready")
    while conn.recv() != "quit":
        deadline = time.monotonic() + 10
        with lock:
            seen = state["primary"]
        while True:  # the last trial's cooldown cleared: a call served by the primary again
            with lock:
                if state["primary"] > seen:
                    state.update(watching=True, moved=None)
                    moved.clear()
                    break
            if time.monotonic() > deadline:
                raise RuntimeError("the primary was never cleared")
            time.sleep(0.001)
        conn.send("watching")
        if not moved.wait(10):
            raise RuntimeError("the cooldown never arrived")
        with lock:
            state["watching"] = False
            conn.send(state["moved"])
    stop.set()
    for thread in threads:
        thread.join(5)
    store.close()


def busy_propagation(url: str, trials: int) -> tuple[float, float]:
    samples = _propagation_ms(url, trials, _busy_watcher)
    print(f"b2. propagation to a busy process ({BUSY_THREADS} threads calling in a loop, "
          f"{trials} trials)")  # fmt: skip
    return _print_propagation(samples)


# -- c, d. a fleet during an outage ------------------------------------------------------------
@dataclass(frozen=True)
class CallRecord:
    start: float  # time.monotonic(), one clock for every process on the machine
    end: float
    route: str
    dead: tuple[tuple[float, float], ...]  # (start, end) of each attempt on the dead route


def _fleet_worker(conn: Connection, url: str, base: str) -> None:
    """One fleet process: runs the calls it is told to, on the store it is told to use."""
    client = httpx.Client()
    store: HealthStore | None = None
    failover: Failover | None = None
    dead: list[tuple[float, float]] = []  # the current call's attempts on the dead route

    messages = [{"role": "user", "content": "hi"}]

    def complete(attempt: Attempt) -> str:
        t0 = time.monotonic()
        try:
            response = client.post(
                f"{base}/{attempt.route.provider}/v1/chat/completions",
                json={"model": attempt.route.model, "messages": messages},
                timeout=attempt.timeout,
            )
            response.raise_for_status()
            return str(response.json()["choices"][0]["message"]["content"])
        finally:
            if attempt.route.provider != "live":
                dead.append((t0, time.monotonic()))

    def complete_quiet(attempt: Attempt) -> str:  # for threads: records nothing shared
        response = client.post(
            f"{base}/{attempt.route.provider}/v1/chat/completions",
            json={"model": attempt.route.model, "messages": messages},
            timeout=attempt.timeout,
        )
        response.raise_for_status()
        return str(response.json()["choices"][0]["message"]["content"])

    def one(route: str) -> CallRecord:
        assert failover is not None
        dead.clear()
        start = time.monotonic()
        result = failover.call(route, complete)
        return CallRecord(start, time.monotonic(), str(result.route), tuple(dead))

    conn.send("ready")
    while (command := conn.recv())[0] != "quit":
        if command[0] == "setup":
            _, kind, prefix, config = command
            if isinstance(store, RedisHealth):
                store.close()
            if kind == "redis":
                store = RedisHealth.from_url(url, prefix=prefix)
                store.wait_until_shared()
            else:
                store = MemoryHealth()
            failover = Failover(config, store)
            conn.send("ok")
        elif command[0] == "call":
            conn.send(one(command[1]))
        elif command[0] == "burst":  # k calls at once, each on a thread of its own
            _, route, k, at = command
            time.sleep(max(0.0, at - time.time()))
            assert failover is not None
            fo = failover
            served: list[str] = []

            def burst_one(fo: Failover, route: str, served: list[str]) -> None:
                served.append(str(fo.call(route, complete_quiet).route))

            threads = [
                threading.Thread(target=burst_one, args=(fo, route, served)) for _ in range(k)
            ]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(timeout=60)
            conn.send(served)
        elif command[0] == "calls":
            _, route, n, at, pace = command
            time.sleep(max(0.0, at - time.time()))
            records = []
            for _ in range(n):
                records.append(one(route))
                time.sleep(pace)
            conn.send(records)
    if isinstance(store, RedisHealth):
        store.close()
    client.close()


@dataclass(frozen=True)
class Outcome:
    requests: int  # to the dead route, counted by the fake provider
    waited_s: float  # in attempts on the dead route
    in_flight: int  # calls on the dead route already running when the first one gave up
    served_elsewhere: int


def _outcome(records: list[CallRecord], requests: int) -> Outcome:
    touched = [r for r in records if r.dead]
    gave_up = min((r.dead[-1][1] for r in touched), default=0.0)
    in_flight = sum(1 for r in touched if r.start < gave_up and r.dead[-1][1] > gave_up)
    waited = sum(end - start for r in records for start, end in r.dead)
    return Outcome(requests, waited, in_flight, sum(r.route == LIVE for r in records))


class Fleet:
    serial = 0

    def __init__(self, url: str, base: str, n: int = PROCESSES) -> None:
        ctx = multiprocessing.get_context("spawn")
        self.url, self.base, self.n = url, base, n
        self.ends: list[Connection] = []
        self.procs = []
        for _ in range(n):
            end, theirs = ctx.Pipe()
            proc = ctx.Process(target=_fleet_worker, args=(theirs, url, base), daemon=True)
            proc.start()
            self.ends.append(end)
            self.procs.append(proc)
        for end in self.ends:
            _expect(end, "ready")
        self.runs = 0

    def run(
        self, fake: FakeProvider, fault: Fault, kind: str, config: dict[str, Any],
        calls: int, stagger: float | None,
    ) -> Outcome:  # fmt: skip
        dead, route, _ = self.setup(fake, fault, kind, config)
        records: list[CallRecord] = []
        if stagger is not None:
            at = time.time() + 0.3
            for i, end in enumerate(self.ends):
                end.send(("calls", route, calls, at + i * stagger, 0.01))
            for end in self.ends:
                records += _recv(end, timeout=120)
        else:
            for i in range(calls * self.n):
                end = self.ends[i % self.n]
                end.send(("call", route))
                records.append(_recv(end, timeout=30))
        fake.set_fault(dead, Fault.ok())  # releases anything still hung
        return _outcome(records, fake.requests(dead))

    def setup(
        self, fake: FakeProvider, fault: Fault, kind: str, config: dict[str, Any]
    ) -> tuple[str, str, FallbackConfig]:
        """A fresh dead route (and Redis prefix: nothing carries over), set up everywhere."""
        self.runs += 1
        Fleet.serial += 1  # unique across fleets too: no route or prefix is ever reused
        dead = f"dead{Fleet.serial}"
        route = f"{dead}/model-a"
        fake.set_fault(dead, fault)
        cfg = FallbackConfig(fallbacks={route: LIVE}, **config)
        for end in self.ends:
            end.send(("setup", kind, self.prefix, cfg))
        for end in self.ends:
            _expect(end, "ok")
        return dead, route, cfg

    @property
    def prefix(self) -> str:
        return f"bench-fleet-{Fleet.serial}"

    def burst(self, route: str, k: int) -> list[str]:
        """Every process runs ``k`` calls at once, all processes from one start."""
        at = time.time() + 0.3
        for end in self.ends:
            end.send(("burst", route, k, at))
        served: list[str] = []
        for end in self.ends:
            served += _recv(end, timeout=120)
        return served

    def close(self) -> None:
        for end in self.ends:
            end.send(("quit",))
        _join(self.procs)


def _late(conn: Connection, url: str, base: str, prefix: str, cfg: FallbackConfig) -> None:
    """A process that starts after the fleet learned an outage: its store, its Failover,
    and its first call at once (no wait_until_shared: the Failover waits by itself)."""
    store = RedisHealth.from_url(url, prefix=prefix)
    failover = Failover(cfg, store)
    with httpx.Client() as client:

        def complete(attempt: Attempt) -> str:
            response = client.post(
                f"{base}/{attempt.route.provider}/v1/chat/completions",
                json={
                    "model": attempt.route.model,
                    "messages": [{"role": "user", "content": "hi"}],
                },
            )
            response.raise_for_status()
            return response.text

        (route,) = cfg.fallbacks
        conn.send(str(failover.call(route, complete).route))
    store.close()


def issue20(url: str, sizes: list[int], reps: int) -> list[tuple[str, str, str]]:
    """The issue's scenarios at each fleet size; returns the closing table's rows."""
    rows: list[tuple[str, str, str]] = []
    budget = 3
    c = {"max_retries": 2, "backoff_initial_s": 0.01, "jitter": False, "cooldown_s": 30,
         "attempt_timeout_s": 1}  # fmt: skip
    off = {**c, "breaker": BreakerConfig(enabled=False)}
    ctx = multiprocessing.get_context("spawn")
    with FakeProvider() as fake:
        base = f"http://127.0.0.1:{fake.port}"
        for n in sizes:
            fleet = Fleet(url, base, n)
            try:
                # e. a late process, after one call of the fleet cooled the route
                late_requests = []
                for _ in range(3):
                    dead, route, cfg = fleet.setup(fake, Fault.status(503), "redis", c)
                    fleet.ends[0].send(("call", route))
                    _recv(fleet.ends[0])
                    before = fake.requests(dead)
                    ends, procs = [], []
                    for _ in range(n):  # n late processes, all at once
                        end, theirs = ctx.Pipe()
                        proc = ctx.Process(
                            target=_late, args=(theirs, url, base, fleet.prefix, cfg), daemon=True
                        )
                        proc.start()
                        ends.append(end)
                        procs.append(proc)
                    for end in ends:
                        _recv(end, timeout=60)
                    _join(procs)
                    late_requests.append(fake.requests(dead) - before)
                    fake.set_fault(dead, Fault.ok())
                verdict = "met" if not any(late_requests) else "MISSED"
                print(f"e. N={n}: {n} late processes x 3 runs, requests to the known-dead route: "
                      f"{late_requests}   (goal 0: {verdict})")  # fmt: skip
                rows.append((f"late process, N={n}", f"{sum(late_requests)} requests", verdict))
                # f. calls one after another, fleet-wide, reps times
                counts = []
                for _ in range(reps):
                    o = fleet.run(fake, Fault.status(503), "redis", c, 2, None)
                    counts.append(o.requests)
                verdict = "met" if all(x == budget for x in counts) else "MISSED"
                print(f"f. N={n}: one after another ({2 * n} calls) x {reps}, requests to the "
                      f"dead route: {counts}   (goal {budget} every time: {verdict})")  # fmt: skip
                rows.append((f"one after another, N={n}", f"{counts}", verdict))
                # g. breaker off, 8 concurrent calls per process
                dead, route, _ = fleet.setup(fake, Fault.status(503), "redis", off)
                served = fleet.burst(route, 8)
                got = fake.requests(dead)
                most = (8 + budget) * n
                verdict = "met" if got <= most else "MISSED"
                ok = sum(r == LIVE for r in served)
                print(f"g. N={n}: breaker off, 8 calls at once per process: {got} requests to "
                      f"the dead route, {ok}/{len(served)} served by the fallback   "
                      f"(goal <= {most}, 3 a call: {budget * 8 * n}: {verdict})")  # fmt: skip
                rows.append((f"breaker off, 8 x N={n} at once", f"{got} requests", verdict))
                fake.set_fault(dead, Fault.ok())
                # h. recovery: the cooldown ends, the route still fails, everyone calls at once
                short = {**off, "cooldown_s": 1, "cooldown_max_s": 1}
                dead, route, _ = fleet.setup(fake, Fault.status(503), "redis", short)
                fleet.ends[0].send(("call", route))
                _recv(fleet.ends[0])
                time.sleep(1.2)  # the cooldown is over: the route is recovering
                before = fake.requests(dead)
                fleet.burst(route, 8)
                probes = fake.requests(dead) - before
                verdict = "met" if probes == 1 else "MISSED"
                print(f"h. N={n}: recovery, 8 calls at once per process: {probes} probe(s) "
                      f"fleet-wide   (goal 1: {verdict})")  # fmt: skip
                rows.append((f"recovery probes, N={n}", f"{probes}", verdict))
                fake.set_fault(dead, Fault.ok())
            finally:
                fleet.close()
    return rows


def outages(url: str, calls: int) -> None:
    with FakeProvider() as fake:
        base = f"http://127.0.0.1:{fake.port}"
        fleet = Fleet(url, base)
        try:
            budget = 3  # max_retries=2: three requests per call on the dead route
            c = {
                "max_retries": 2, "backoff_initial_s": 0.01, "jitter": False,
                "cooldown_s": 60, "attempt_timeout_s": 5,
            }  # fmt: skip
            print(f"c. {PROCESSES} processes x {calls} calls, the route answering 503 "
                  f"(max_retries=2: {budget} requests per call)")  # fmt: skip
            for stagger in PATTERNS:
                for kind in ("redis", "memory"):
                    o = fleet.run(fake, Fault.status(503), kind, c, calls, stagger)
                    most = budget * (1 + o.in_flight)
                    _row(kind, stagger, f"{o.requests:3d} requests to the dead route", o, calls,
                         f"goal <= {most}" if kind == "redis" else "")  # fmt: skip
            timeout = 1.0
            d = {"attempt_timeout_s": timeout, "max_retries": 2, "jitter": False,
                 "cooldown_s": 60}  # fmt: skip
            print(f"d. {PROCESSES} processes x {calls} calls, the route hanging "
                  f"(attempt_timeout_s={timeout:g})")  # fmt: skip
            for stagger in PATTERNS:
                for kind in ("redis", "memory"):
                    o = fleet.run(fake, Fault.hang(), kind, d, calls, stagger)
                    about = timeout * (1 + o.in_flight)
                    _row(kind, stagger, f"{o.waited_s:5.2f} s waited on the hang", o, calls,
                         f"goal ~ {about:g} s" if kind == "redis" else "")  # fmt: skip
        finally:
            fleet.close()


def _row(kind: str, stagger: float | None, figure: str, o: Outcome, calls: int, goal: str) -> None:
    store = "RedisHealth, shared" if kind == "redis" else "MemoryHealth each"
    pattern = PATTERNS[stagger]
    served = f"{o.served_elsewhere}/{calls * PROCESSES} served by the fallback"
    extra = f"   ({goal}: {o.in_flight} in flight when the first gave up)" if goal else ""
    print(f"   {pattern:<13}  {store:<19}  {figure}   {served}{extra}")


# -- plumbing -----------------------------------------------------------------------------
def _recv(end: Connection, timeout: float = 30.0) -> Any:
    if not end.poll(timeout):
        raise RuntimeError(f"a bench process did not answer within {timeout:g}s")
    return end.recv()


def _expect(end: Connection, what: str) -> None:
    got = _recv(end)
    if got != what:
        raise RuntimeError(f"expected {what!r} from a bench process, got {got!r}")


def _join(procs: list[Any]) -> None:
    for proc in procs:
        proc.join(timeout=10)
        if proc.is_alive():
            proc.kill()
            proc.join(timeout=5)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=5000, help="calls per side in a")
    parser.add_argument("--trials", type=int, default=200, help="trials in b")
    parser.add_argument("--calls", type=int, default=25, help="calls per process in c and d")
    parser.add_argument("--sizes", default="4,8", help="fleet sizes for e-h (issue 20)")
    parser.add_argument("--reps", type=int, default=10, help="repetitions in f")
    parser.add_argument("--only-issue20", action="store_true", help="run e-h only")
    parser.add_argument(
        "--only-propagation", action="store_true", help="run b and b2 (busy receiver) only"
    )
    args = parser.parse_args()
    sizes = [int(x) for x in args.sizes.split(",") if x]
    rows: list[tuple[str, str, str]] = []
    started = time.monotonic()
    with redis_server() as url:
        with redis.Redis.from_url(url) as client:
            print(f"redis-server {client.info()['redis_version']} on {url}")
        steps: list[Callable[[], None]] = [
            lambda: latency(url, args.n),
            lambda: propagation(url, args.trials),
            lambda: busy_propagation(url, args.trials),
            lambda: outages(url, args.calls),
        ]
        if args.only_propagation:
            steps = steps[1:3]
        for step in [] if args.only_issue20 else steps:
            step()
        if not args.only_propagation:
            rows = issue20(url, sizes, args.reps)
    print(f"({time.monotonic() - started:.1f} s)")
    print("\n| scenario | measured | goal |")
    print("|---|---|---|")
    for row in rows:
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
