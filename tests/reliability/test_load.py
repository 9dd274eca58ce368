"""Load: 1,000 concurrent async calls plus 32 threads of sync calls while routes flap.

Real parts only: ``Failover.acall`` / ``Failover.call`` around real httpx clients (async ones on
httpx-aiohttp, the inner transport docs/httpx.md recommends for async code at concurrency; sync
ones on httpx's own pool), the fake provider on 127.0.0.1, the real OTel SDK in memory.

The schedule is driven by events, not by wall-clock time: the fake provider's faults change
when the calls have made a given number of attempts, and a cooldown ends when the test moves
the health clock on between rounds. Only a hanging route costs real time (its attempts end at
``attempt_timeout_s``).

What the policy promises, and what is measured against the fake provider's own counts:

- per call at most ``max_retries + 1`` attempts per visit of a route and ``max_swaps`` swaps,
  so at most ``(max_retries + 1) * (max_swaps + 1)`` attempts; a pinned call stays on its
  route: at most ``max_retries + 1``;
- every attempt is at most one request (none duplicated, none sent behind swerve's back);
- a route that is cooling down or whose breaker is open gets no request from a call that
  starts after it failed (when its chain has a healthy route);
- a half-open breaker has at most ``breaker.half_open_probes`` probes in flight, in each
  half-open period, counted as requests in flight at the fake provider.
"""

from __future__ import annotations

import asyncio
import gc
import itertools
import logging
import threading
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from httpx_aiohttp import AiohttpTransport

from swerve import BreakerConfig, Failover, FallbackConfig, MemoryHealth, Result
from swerve._engine.clock import SystemClock
from swerve._failures import AttemptTimeout, CircuitOpenError
from swerve.testing import FakeProvider, Fault, Reply, TelemetryRecorder

from ._measure import open_fds, rss_mb

ASYNC_CALLS = 1000
THREADS = 32
CALLS_PER_THREAD = 4
PIN_EVERY = 10  # every 10th call is pinned to its route: the documented-error path
# The hang detector; sized for the in-process fake's latency at this load on a two-core machine
# that runs the rest of the suite beside it (2 s let the healthy end of the chain time out too).
ATTEMPT_S = 3.0
ROUTES = ("a/m", "b/m", "c/m")
CHAIN: dict[str, str | list[str]] = {
    "a/m": ["b/m", "c/m"],
    "b/m": ["c/m", "a/m"],
    "c/m": ["a/m", "b/m"],
}
CONFIG = FallbackConfig(
    fallbacks=CHAIN,
    max_retries=1,
    max_swaps=2,
    backoff_initial_s=0.005,
    backoff_max_s=0.02,
    cooldown_s=60,
    cooldown_max_s=120,
    attempt_timeout_s=ATTEMPT_S,
)
PER_CALL = (CONFIG.max_retries + 1) * (CONFIG.max_swaps + 1)
PER_PINNED = CONFIG.max_retries + 1
# What a call may surface: the last attempt's own error (httpx's, unchanged in type) or
# swerve's own time limit and breaker refusal (docs/concepts.md).
DOCUMENTED = (httpx.HTTPError, AttemptTimeout, CircuitOpenError)
FLAPS = (Fault.status(503), Fault.reset(), Fault.hang(), Fault.ok())
FLAP_NAMES = ("503", "reset", "hang", "ok")
ROUNDS_CI = 3  # round 2 against round 3 in CI; the soak runs as many as fit
WAVE2 = 100  # calls after each storm, to check that cooled routes get no traffic
FD_TOLERANCE = 8
RSS_TOLERANCE_MB = 32.0


class ShiftedClock(SystemClock):
    """Wall time plus a shift the test moves on, to end cooldowns and open breakers between
    rounds without waiting for them."""

    def __init__(self) -> None:
        self.shift = 0.0

    def time(self) -> float:
        return time.time() + self.shift


@dataclass
class Ledger:
    """What the calls did, from the calling side: attempts made, responses received, flips."""

    sent: Counter[str] = field(default_factory=Counter)  # call id -> attempts that ran
    responded: Counter[str] = field(default_factory=Counter)  # call id -> HTTP responses seen
    lock: threading.Lock = field(default_factory=threading.Lock)
    total: int = 0
    flips: list[tuple[int, str, Fault]] = field(default_factory=list)  # (after n, provider, fault)

    def attempt(self, fake: FakeProvider, cid: str) -> None:
        with self.lock:
            self.sent[cid] += 1
            self.total += 1
            while self.flips and self.flips[0][0] <= self.total:
                _, provider, fault = self.flips.pop(0)
                fake.set_fault(provider, fault)

    def response(self, cid: str) -> None:
        with self.lock:
            self.responded[cid] += 1


def body(attempt: Any, cid: str) -> dict[str, Any]:
    return {"model": attempt.route.model, "messages": [{"role": "user", "content": cid}]}


def answer(response: httpx.Response) -> str:
    response.raise_for_status()
    return str(response.json()["choices"][0]["message"]["content"])


@dataclass
class Outcome:
    cid: str
    requested: str
    pinned: bool
    result: Result[str] | None = None
    error: BaseException | None = None


class Harness:
    def __init__(self, fake: FakeProvider) -> None:
        self.fake = fake
        self.clock = ShiftedClock()
        self.recorder = TelemetryRecorder()
        self.health = MemoryHealth()
        self.failover = Failover(
            CONFIG, health=self.health, telemetry=self.recorder.telemetry, clock=self.clock
        )
        self.ledger = Ledger()
        # One client per provider, as an application has one SDK client per provider: a hung
        # provider's connections do not hold up the others. Opened per round (see run_round).
        self.sync_clients: dict[str, httpx.Client] = {}
        self.async_clients: dict[str, httpx.AsyncClient] = {}
        self.ids = itertools.count()

    def url(self, attempt: Any) -> str:
        return f"{self.fake.url(attempt.route.provider)}/v1/chat/completions"

    def sync_call(self, requested: str, pinned: bool) -> Outcome:
        cid = f"call-{next(self.ids)}"
        out = Outcome(cid, requested, pinned)

        def fn(attempt: Any) -> str:
            self.ledger.attempt(self.fake, cid)
            client = self.sync_clients[attempt.route.provider]
            r = client.post(self.url(attempt), json=body(attempt, cid), timeout=attempt.timeout)
            self.ledger.response(cid)
            return answer(r)

        try:
            out.result = self.failover.call(requested, fn, pin=pinned)
        except Exception as exc:  # judged by the test: documented or not
            out.error = exc
        return out

    async def async_call(self, requested: str, pinned: bool) -> Outcome:
        cid = f"call-{next(self.ids)}"
        out = Outcome(cid, requested, pinned)

        async def fn(attempt: Any) -> str:
            self.ledger.attempt(self.fake, cid)
            client = self.async_clients[attempt.route.provider]
            r = await client.post(
                self.url(attempt), json=body(attempt, cid), timeout=attempt.timeout
            )
            self.ledger.response(cid)
            return answer(r)

        try:
            out.result = await self.failover.acall(requested, fn, pin=pinned)
        except Exception as exc:
            out.error = exc
        return out

    async def wave(self, n_async: int, threads: int, per_thread: int) -> list[Outcome]:
        """``n_async`` concurrent async calls and ``threads`` threads of sync calls at once."""
        loop = asyncio.get_running_loop()

        def worker(t: int) -> list[Outcome]:
            return [
                self.sync_call(ROUTES[0], (t * per_thread + i) % PIN_EVERY == 0)
                for i in range(per_thread)
            ]

        with ThreadPoolExecutor(max(threads, 1)) as pool:
            sync = [loop.run_in_executor(pool, worker, t) for t in range(threads)]
            tasks = [self.async_call(ROUTES[0], i % PIN_EVERY == 0) for i in range(n_async)]
            async_out = await asyncio.gather(*tasks)
            sync_out = [o for chunk in await asyncio.gather(*sync) for o in chunk]
        return [*async_out, *sync_out]

    def per_cid_requests(self) -> Counter[str]:
        seen: Counter[str] = Counter()
        for p in "abc":
            for b in self.fake.received(p):
                seen[str(b["messages"][0]["content"])] += 1
        return seen

    def open_clients(self) -> None:
        limits = httpx.Limits(max_connections=48)  # under the fake's listen backlog (64)
        self.async_clients = {
            p: httpx.AsyncClient(transport=AiohttpTransport(limits=limits)) for p in "abc"
        }
        self.sync_clients = {
            p: httpx.Client(limits=httpx.Limits(max_connections=THREADS)) for p in "abc"
        }

    async def close_clients(self) -> None:
        for c in self.sync_clients.values():
            c.close()
        for a in self.async_clients.values():
            await a.aclose()

    def quiesce(self, threads: int) -> None:
        """Release every hung request and wait (bounded) until the fake provider's handler
        threads for the closed connections have ended, so a count taken now sees leaks only."""
        for p in "abc":
            self.fake.set_fault(p, Fault.ok())
        for _ in range(300):
            if threading.active_count() <= threads:
                return
            threading.Event().wait(0.01)

    def close(self) -> None:
        self.recorder.shutdown()


@pytest.fixture
def harness() -> Iterator[Harness]:
    with FakeProvider() as fake:
        for p in "abc":
            fake.set_reply(p, Reply(text=f"served by {p}"))
        h = Harness(fake)
        try:
            yield h
        finally:
            for p in "abc":
                fake.set_fault(p, Fault.ok())  # release anything still hanging
            h.close()


def check_round(h: Harness, outcomes: list[Outcome], launched: int) -> dict[str, int]:
    """Every call ends exactly once, answered by the route it names or with a documented error;
    attempts and requests stay within the policy's bounds. Returns the round's counts."""
    assert len(outcomes) == launched
    cids = [o.cid for o in outcomes]
    assert len(set(cids)) == launched, "a call ended twice, or two calls share an id"
    requests = h.per_cid_requests()
    assert set(requests) <= set(cids), "a request reached the provider for no call of ours"
    answered = errors = 0
    for o in outcomes:
        sent = h.ledger.sent[o.cid]
        if o.result is not None:
            answered += 1
            served = str(o.result.route)
            assert o.result.value == f"served by {o.result.route.provider}", (o.cid, served)
            outcomes_seen = [r.outcome for r in o.result.attempts]
            assert outcomes_seen.count("success") == 1 and outcomes_seen[-1] == "success", (
                "answered twice, or an answer that was not the last attempt",
                o.cid,
                outcomes_seen,
            )
            runs = [
                len(list(g)) for _, g in itertools.groupby(str(r.route) for r in o.result.attempts)
            ]
            assert max(runs) <= CONFIG.max_retries + 1, (o.cid, o.result.attempts)
            assert o.result.swaps <= CONFIG.max_swaps
            if o.pinned:
                assert served == o.requested
        else:
            errors += 1
            assert isinstance(o.error, DOCUMENTED), (o.cid, type(o.error), o.error)
            notes = getattr(o.error, "__notes__", [])
            assert any(f"requested {o.requested}" in n for n in notes), (o.cid, notes)
        assert sent <= (PER_PINNED if o.pinned else PER_CALL), (o.cid, sent)
        # Each attempt is at most one request; every attempt that saw a response made one.
        assert h.ledger.responded[o.cid] <= requests[o.cid] <= sent, (
            o.cid,
            h.ledger.responded[o.cid],
            requests[o.cid],
            sent,
        )
    total = sum(requests.values())
    return {
        "calls": launched,
        "answered": answered,
        "errors": errors,
        "requests": total,
        "wasted": total - answered,
        "bound": sum(PER_PINNED if o.pinned else PER_CALL for o in outcomes) - answered,
    }


async def run_round(h: Harness, r: int, *, async_calls: int) -> dict[str, int]:
    h.open_clients()
    try:
        return await _round(h, r, async_calls)
    finally:
        await h.close_clients()


async def _round(h: Harness, r: int, async_calls: int) -> dict[str, int]:
    fake = h.fake
    fake.reset_counts()
    h.ledger.sent.clear()
    h.ledger.responded.clear()
    h.ledger.total = 0
    h.recorder.spans.clear()
    # The schedule: a starts in one state, flips after 30% of the round's first attempts; b
    # flips at 30% and again at 70%; c is the healthy end of every chain.
    n = async_calls + THREADS * CALLS_PER_THREAD
    fake.set_fault("a", FLAPS[r % 4])
    fake.set_fault("b", Fault.ok())
    fake.set_fault("c", Fault.ok())
    h.ledger.flips = [
        (int(n * 0.3), "a", FLAPS[(r + 1) % 4]),
        (int(n * 0.3), "b", FLAPS[(r + 2) % 4]),
        (int(n * 0.7), "b", FLAPS[(r + 3) % 4]),
    ]
    outcomes = await h.wave(async_calls, THREADS, CALLS_PER_THREAD)
    h.ledger.flips = []
    counts = check_round(h, outcomes, n)

    # Wave 2: the faults stand, the routes wave 1 cooled (or whose breakers opened) stay
    # unavailable on the health clock, and later calls must walk past them.
    now = h.clock.time()
    unavailable = {route for route in ROUTES if route in h.health.unavailable(now)}
    before = {p: fake.requests(p) for p in "abc"}
    wave2 = [h.async_call(ROUTES[0], False) for _ in range(WAVE2)]
    later = await asyncio.gather(*wave2)
    to_cooled = sum(fake.requests(route[0]) - before[route[0]] for route in unavailable)
    if len(unavailable) < len(ROUTES):  # a chain with a healthy route on it
        assert to_cooled == 0, (unavailable, {p: fake.requests(p) - before[p] for p in "abc"})
        for o in later:
            assert o.result is not None or isinstance(o.error, DOCUMENTED), o.error
    counts["cooled"] = len(unavailable)
    counts["to_cooled"] = to_cooled
    counts["checked_cooled"] = int(len(unavailable) < len(ROUTES))
    h.clock.shift += 3600.0  # every cooldown and open breaker ends before the next round
    return counts


def test_load_with_flapping_routes(
    harness: Harness, figure: Any, soak_s: float, caplog: pytest.LogCaptureFixture
) -> None:
    h = harness
    # Each swap logs a warning; kept by pytest, thousands a round would read as a memory leak.
    caplog.set_level(logging.ERROR, logger="swerve")

    async def main() -> list[tuple[dict[str, int], float, int, int, int]]:
        rows = []
        base_threads = threading.active_count()
        t0 = time.monotonic()
        for r in itertools.count():
            counts = await run_round(h, r, async_calls=ASYNC_CALLS)
            h.quiesce(base_threads)
            gc.collect()
            rows.append(
                (counts, rss_mb(), open_fds(), threading.active_count(), len(asyncio.all_tasks()))
            )
            if r + 1 >= ROUNDS_CI and time.monotonic() - t0 >= soak_s:
                break
        return rows

    rows = asyncio.run(main())
    total = Counter[str]()
    for counts, *_ in rows:
        total.update(counts)
    rounds = len(rows)
    figure(
        "calls under flapping routes (1,000 async + 32 threads, per round)",
        "every call answered by the route it names or a documented error; none twice",
        measured=(
            f"{rounds} rounds, {total['calls']} calls: {total['answered']} answered, "
            f"{total['errors']} documented errors, 0 lost, 0 answered twice"
        ),
    )
    figure(
        "wasted requests",
        f"<= {PER_CALL} attempts per call ({PER_PINNED} pinned), each at most one request: "
        f"{total['bound']} over the run",
        measured=(
            f"{total['wasted']} ({total['requests']} requests for {total['answered']} answers)"
        ),
    )
    checked = sum(c["checked_cooled"] for c, *_ in rows)
    figure(
        "requests to cooled routes from later calls",
        "0",
        measured=f"{total['to_cooled']} ({checked} of {rounds} rounds had cooled routes to check, "
        f"{total['cooled']} route-rounds cooled)",
    )
    assert checked >= 1, "no round left a route cooled: the schedule did not exercise cooldowns"
    (_, rss2, fd2, th2, tk2), (_, rss_n, fd_n, th_n, tk_n) = rows[1], rows[-1]
    figure(
        "RSS and open fds, round 2 -> last round",
        f"fds +{FD_TOLERANCE}, RSS +{RSS_TOLERANCE_MB:g} MB, threads and tasks flat",
        measured=(
            f"RSS {rss2:.1f} -> {rss_n:.1f} MB, fds {fd2} -> {fd_n}, threads {th2} -> {th_n}, "
            f"tasks {tk2} -> {tk_n} ({rounds} rounds)"
        ),
    )
    assert fd_n <= fd2 + FD_TOLERANCE, [r[2] for r in rows]
    assert rss_n <= rss2 + RSS_TOLERANCE_MB, [round(r[1], 1) for r in rows]
    assert th_n <= th2 + 1, [r[3] for r in rows]
    assert tk_n <= tk2, [r[4] for r in rows]


# --- half-open ------------------------------------------------------------------------------
PROBES = 3
BREAKER = BreakerConfig(
    min_calls=4, failure_rate=0.5, open_s=30, max_open_s=300, half_open_probes=PROBES
)
# No cooldowns: the breaker alone guards the route, so its half-open probes are what is seen.
HALF_OPEN = FallbackConfig(
    fallbacks={"a/m": "b/m"},
    max_retries=0,
    max_swaps=1,
    cooldown_s=0,
    attempt_timeout_s=10.0,  # a probe hangs until the test releases it; this bounds the worst case
    breaker=BREAKER,
)


def test_half_open_admits_exactly_the_configured_probes(figure: Any) -> None:
    """A burst of 300 async calls and 32 threads onto a half-open route: exactly
    ``half_open_probes`` requests are in flight on it (each hangs, so every admitted probe is
    still in flight when counted), in each half-open period, including one that starts while
    probes of the previous period are still in flight."""

    with FakeProvider() as fake:
        fake.set_reply("a", Reply(text="served by a"))
        fake.set_reply("b", Reply(text="served by b"))
        clock = ShiftedClock()
        recorder = TelemetryRecorder()
        fo = Failover(HALF_OPEN, health=MemoryHealth(), telemetry=recorder.telemetry, clock=clock)
        sync_client = httpx.Client(limits=httpx.Limits(max_connections=THREADS))

        def sync_fn(attempt: Any) -> str:
            r = sync_client.post(
                f"{fake.url(attempt.route.provider)}/v1/chat/completions",
                json=body(attempt, "probe"),
                timeout=attempt.timeout,
            )
            return answer(r)

        ended: list[Any] = []

        async def burst(
            client: httpx.AsyncClient, n_async: int, answered_on_a: int
        ) -> tuple[int, list[Any]]:
            """Fire the burst; return the requests a holds in flight once every call that was not
            admitted has ended, and the pending calls (the probes)."""

            async def afn(attempt: Any) -> str:
                r = await client.post(
                    f"{fake.url(attempt.route.provider)}/v1/chat/completions",
                    json=body(attempt, "probe"),
                    timeout=attempt.timeout,
                )
                return answer(r)

            loop = asyncio.get_running_loop()
            start = fake.requests("a")
            pool = ThreadPoolExecutor(THREADS)
            futures: list[Any] = [
                loop.run_in_executor(pool, fo.call, "a/m", sync_fn) for _ in range(THREADS)
            ]
            futures += [asyncio.ensure_future(fo.acall("a/m", afn)) for _ in range(n_async)]
            pool.shutdown(wait=False)
            # Every call not admitted swaps to b at once; the admitted ones hang on a. Wait
            # (bounded) until every call is either done or a request in flight on a.
            # Bounded in time, not in passes: waiting on the pending calls only (the done ones
            # would end every wait at once, and a loaded machine outlasts any pass count).
            deadline = loop.time() + 60
            while loop.time() < deadline:
                done = sum(f.done() for f in futures)
                hanging = fake.requests("a") - start - answered_on_a
                if done + hanging >= len(futures):
                    break
                waiting = [f for f in futures if not f.done()]
                await asyncio.wait(waiting, timeout=0.05, return_when=asyncio.FIRST_COMPLETED)
            pending = [f for f in futures if not f.done()]
            ended.extend(futures)
            return fake.requests("a") - start, pending

        async def main() -> list[tuple[int, int]]:
            seen = []
            async with httpx.AsyncClient(
                transport=AiohttpTransport(limits=httpx.Limits(max_connections=48))
            ) as client:

                async def afail(attempt: Any) -> str:
                    r = await client.post(
                        f"{fake.url(attempt.route.provider)}/v1/chat/completions",
                        json=body(attempt, "open"),
                        timeout=attempt.timeout,
                    )
                    return answer(r)

                # Open a's breaker: min_calls failures in a row (each call swaps to b).
                fake.set_fault("a", Fault.status(503))
                for _ in range(BREAKER.min_calls):
                    result = await fo.acall("a/m", afail)
                    assert str(result.route) == "b/m"
                assert fake.requests("a") == BREAKER.min_calls

                # Period 1: the open time ends; a hangs, except that its third request gets a
                # 503. Exactly PROBES requests reach it: two stay in flight, the third fails
                # and reopens the breaker.
                fake.set_fault("a", Fault.hang())
                fake.script("a", [Fault.hang(), Fault.hang(), Fault.status(503)])
                clock.shift += BREAKER.open_s + 1
                admitted, probes = await burst(client, 300, answered_on_a=1)
                seen.append((admitted, admitted))
                assert len(probes) == PROBES - 1  # everyone else went to b without waiting

                # Period 2 begins while those two probes of period 1 are still in flight: the
                # in-flight total on a must stay within half_open_probes.
                clock.shift += 2 * BREAKER.open_s + 1
                admitted, probes2 = await burst(client, 300, answered_on_a=0)
                seen.append((admitted, admitted + len(probes)))

                # Recovery: a answers; the next probe closes the breaker and traffic returns.
                fake.set_fault("a", Fault.ok())  # releases every hung probe (they fail)
                await asyncio.gather(*probes, *probes2, return_exceptions=True)
                clock.shift += 4 * BREAKER.open_s + 1
                result = await fo.acall("a/m", afail)
                assert str(result.route) == "a/m" and result.value == "served by a"
                for f in await asyncio.gather(*ended, return_exceptions=True):
                    assert isinstance(f, (Result, *DOCUMENTED)), repr(f)
            return seen

        try:
            seen = asyncio.run(main())
        finally:
            fake.set_fault("a", Fault.ok())
            sync_client.close()
            recorder.shutdown()
    figure(
        "half-open probes on a recovering route (332 callers per period)",
        f"in flight at once <= breaker.half_open_probes = {PROBES}; "
        f"the first period admits {PROBES}",
        measured="; ".join(
            f"period {i + 1}: {a} admitted, {f} in flight" for i, (a, f) in enumerate(seen)
        ),
    )
    assert seen[0] == (PROBES, PROBES), seen
    assert seen[1][1] <= PROBES and seen[1][0] >= 1, seen
