"""Users' own code and clocks cannot break a call, and nothing raw reaches a terminal.

A classifier that answers junk, a ``Clock`` whose monotonic time goes back, a slow rule, text
with ANSI escapes from a rule or an upstream, a route name of any length, a wall clock stepped
a little at a time, a process too starved to read an answer in time: each is met here, sync
and async, on the injected clock (the one exception says why it needs real time).
"""

from __future__ import annotations

import asyncio
import io
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from swerve import (
    Attempt,
    BreakerConfig,
    ConfigError,
    Failover,
    Failure,
    FailureKind,
    FallbackConfig,
    MemoryHealth,
    UpstreamError,
)
from swerve._cli.probe import Probe
from swerve._engine.failover import ROUTE_CACHE_SIZE
from swerve._engine.routes import MAX_ROUTE_CHARS
from swerve._health.cooldown import CooldownRule
from swerve._health.memory import STEP_TOLERANCE_S
from swerve.testing import FakeClock

from .conftest import Report

P, F = "primary/model-a", "fallback/model-b"
ESC = "\x1b[2J\x1b]0;owned\x07"  # clear the screen; set the terminal's title
MODES = ("call", "acall")


def run(mode: str, fo: Failover, route: str, fn: Callable[[Attempt], object]) -> object:
    """One unary call in ``mode``: ``fn``'s value, or its error raised."""
    if mode == "call":
        return fo.call(route, fn).value

    async def afn(attempt: Attempt) -> object:
        return fn(attempt)

    async def go() -> object:
        return (await fo.acall(route, afn)).value

    return asyncio.run(go())


def attempts(mode: str, fo: Failover, route: str, fn: Callable[[Attempt], object]) -> int:
    """How many attempts a call that fails made (its note lists them)."""
    try:
        run(mode, fo, route, fn)
    except UpstreamError as exc:
        note = next(n for n in exc.__notes__ if n.startswith("swerve: requested"))
        return note.count("#")
    raise AssertionError("the call did not fail")


# -- 12: a junk Failure from a classifier -------------------------------------------------------
JUNK: dict[str, Callable[[], Failure]] = {
    "kind a str": lambda: Failure("timeout"),  # type: ignore[arg-type]
    "kind None": lambda: Failure(None),  # type: ignore[arg-type]
    "retry_after a str": lambda: Failure(FailureKind.RATE_LIMITED, retry_after="5"),  # type: ignore[arg-type]
    "retry_after NaN": lambda: Failure(FailureKind.RATE_LIMITED, retry_after=float("nan")),
    "status a str": lambda: Failure(FailureKind.SERVER_ERROR, status="503"),  # type: ignore[arg-type]
    "status True": lambda: Failure(FailureKind.SERVER_ERROR, status=True),
    "in_stream a str": lambda: Failure(FailureKind.TRANSPORT, in_stream="no"),  # type: ignore[arg-type]
    "message None": lambda: Failure(FailureKind.UNKNOWN, message=None),  # type: ignore[arg-type]
    "error_type an int": lambda: Failure(FailureKind.UNKNOWN, error_type=5),  # type: ignore[arg-type]
}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("junk", JUNK)
def test_a_junk_failure_from_a_classifier_leaves_the_upstream_error(
    mode: str, junk: str, caplog: pytest.LogCaptureFixture, figure: Report
) -> None:
    def rule(error: BaseException) -> Failure | None:
        return JUNK[junk]()

    fo = Failover(
        FallbackConfig(fallbacks={P: F}), MemoryHealth(), clock=FakeClock(), classifiers=[rule]
    )

    def fn(attempt: Attempt) -> object:
        if str(attempt.route) == P:
            raise UpstreamError(503, message="down")
        return "ok"

    with caplog.at_level(logging.WARNING, logger="swerve"):
        # the built-in rules apply: a 503 swaps to the fallback, which answers
        assert run(mode, fo, P, fn) == "ok"
        with pytest.raises(UpstreamError) as raised:  # a 400 surfaces as itself
            run(mode, fo, P, lambda _: (_ for _ in ()).throw(UpstreamError(400)))
    assert raised.value.status == 400
    warned = [r.getMessage() for r in caplog.records if "classifier" in r.getMessage()]
    assert len(warned) == 1 and "returned a Failure whose" in warned[0], warned
    figure(
        f"classifier returning a Failure with {junk} ({mode})",
        "the upstream error surfaces, the built-in rules apply, one warning",
        measured=f"{type(raised.value).__name__} 400 surfaced, {len(warned)} warning",
    )


@pytest.mark.parametrize("mode", MODES)
def test_rule_errors_reach_the_log_escaped(
    mode: str, caplog: pytest.LogCaptureFixture, figure: Report
) -> None:
    def rule(error: BaseException) -> Failure | None:
        raise RuntimeError(f"bad rule {ESC}")

    def predicate(failure: Failure) -> bool:
        raise RuntimeError(f"bad predicate {ESC}")

    fo = Failover(
        FallbackConfig(fallbacks={P: F}, fallback_on=predicate),
        MemoryHealth(),
        clock=FakeClock(),
        classifiers=[rule],
    )
    with caplog.at_level(logging.WARNING, logger="swerve"), pytest.raises(UpstreamError):
        run(mode, fo, P, lambda _: (_ for _ in ()).throw(UpstreamError(503)))
    lines = [r.getMessage() for r in caplog.records]
    assert any("bad rule" in line for line in lines)
    assert any("bad predicate" in line for line in lines)
    assert not any("\x1b" in line or "\x07" in line for line in lines), lines
    assert any("\\x1b[2J" in line for line in lines)  # shown, as text
    figure(
        f"rule errors with ANSI escapes in the log ({mode})",
        "0 raw control characters",
        measured=f"{len(lines)} lines, 0 raw control characters",
    )


def test_a_valid_failure_keeps_what_a_failure_promises() -> None:
    """A user's Failure with control characters or a key in its text is escaped and redacted:
    spans and log lines carry it."""

    def rule(error: BaseException) -> Failure | None:
        return Failure(FailureKind.INVALID_REQUEST, message=f"no {ESC} sk-abcdef1234567890")

    fo = Failover(FallbackConfig(), MemoryHealth(), clock=FakeClock(), classifiers=[rule])
    failure = fo._wiring.classify(ValueError("x"))
    assert "\x1b" not in failure.message and "sk-abcdef" not in failure.message


# -- 13: a monotonic clock that goes back ------------------------------------------------------
@dataclass
class BackClock(FakeClock):
    """A FakeClock whose monotonic time steps back an hour once ``stepped`` is set."""

    stepped: bool = False

    def monotonic(self) -> float:
        return self.now - (3600.0 if self.stepped else 0.0)


@pytest.mark.parametrize("mode", MODES)
def test_a_monotonic_clock_that_goes_back_does_not_extend_the_deadline(
    mode: str, figure: Report
) -> None:
    clock = BackClock()
    config = FallbackConfig(
        fallbacks={P: F}, max_retries=50, max_swaps=1, deadline_s=1, backoff_initial_s=0.01
    )
    fo = Failover(config, MemoryHealth(), clock=clock)
    t0 = clock.now

    def fn(attempt: Attempt) -> object:
        clock.stepped = True  # the clock goes back an hour during the first attempt
        clock.advance(0.2)
        raise UpstreamError(503)

    made = attempts(mode, fo, P, fn)
    took = clock.now - t0
    # 1 s of attempts of 0.2 s and short backoffs: a handful, never an hour's worth (without
    # the clamp: all 51 on the primary, and the swap's)
    assert made <= 7 and took <= 1.5, (made, took)
    figure(
        f"deadline_s=1 with a monotonic clock stepped back 3,600 s ({mode})",
        "the call ends within its deadline (plus one attempt)",
        measured=f"{made} attempts, {took:.2f} s on the call's clock",
    )


# -- 14: slow rules, asked once per failure -----------------------------------------------------
@pytest.mark.parametrize("mode", MODES)
def test_slow_rules_are_asked_once_and_count_against_the_deadline(
    mode: str, figure: Report
) -> None:
    clock = FakeClock()
    asked = {"classifier": 0, "predicate": 0}

    def slow_rule(error: BaseException) -> Failure | None:
        asked["classifier"] += 1
        clock.advance(3)  # a rule that takes 3 s
        return None

    def slow_predicate(failure: Failure) -> bool:
        asked["predicate"] += 1
        clock.advance(3)
        return True

    config = FallbackConfig(
        fallbacks={P: F}, fallback_on=slow_predicate, max_retries=5, deadline_s=1
    )
    fo = Failover(config, MemoryHealth(), clock=clock, classifiers=[slow_rule])
    t0 = clock.now
    made = attempts(mode, fo, P, lambda _: (_ for _ in ()).throw(UpstreamError(503)))
    took = clock.now - t0
    # One failure: each rule asked once, the 6 s they took spend the deadline: no retry.
    assert asked == {"classifier": 1, "predicate": 1}, asked
    assert made == 1 and took == pytest.approx(6.0)
    figure(
        f"a 3 s classifier and a 3 s predicate, deadline_s=1 ({mode})",
        "each rule asked once per failure; no attempt after the deadline",
        measured=f"asked {asked['classifier']}+{asked['predicate']}, {made} attempt, {took:g} s",
    )


# -- 15: `swerve health` prints an upstream's text as text -------------------------------------
def test_swerve_health_prints_an_upstreams_escapes_as_text(figure: Report) -> None:
    from rich.console import Console

    from swerve._cli.health import _print_probes

    for width in (200, 20):  # the table, and the one-block-per-route layout
        out = io.StringIO()
        console = Console(file=out, width=width, force_terminal=True, color_system=None)
        _print_probes(console, [Probe(P, False, "500", 0.1, f"upstream said {ESC}[bold]x[/]")])
        text = out.getvalue()
        assert "\x1b]" not in text and "\x07" not in text and "\x1b[2J" not in text, repr(text)
        assert "[bold]x[/]" in text.replace("\n", "").replace(" ", "") or "[bold]" in text
    figure(
        "`swerve health` with ESC/OSC sequences in an upstream's error",
        "0 raw control sequences on the terminal",
        measured="0 raw sequences, table and block layouts",
    )


# -- smaller: route names of any length -------------------------------------------------------
@pytest.mark.parametrize("mode", MODES)
def test_a_route_name_past_the_limit_is_refused_naming_it(mode: str, figure: Report) -> None:
    fo = Failover(FallbackConfig(fallbacks={P: F}), MemoryHealth(), clock=FakeClock())
    long = "p/" + "m" * 100_000
    with pytest.raises(ValueError, match="characters long") as raised:
        run(mode, fo, long, lambda _: "ok")
    assert "'p/mmm" in str(raised.value) and len(str(raised.value)) < 300
    ok = "p/" + "m" * (MAX_ROUTE_CHARS - 2)
    assert run(mode, fo, ok, lambda _: "ok") == "ok"
    with pytest.raises(ConfigError, match="characters long") as bad:
        FallbackConfig.from_json(f'{{"fallbacks": {{"{long}": "{F}"}}}}')
    assert len(str(bad.value)) < 2000
    with pytest.raises(ValueError, match="characters long"):
        FallbackConfig(fallbacks={P: long})
    figure(
        f"route names of 100,000 characters ({mode})",
        f"refused past {MAX_ROUTE_CHARS} characters, with a short error naming the route",
        measured=f"refused, error of {len(str(raised.value))} characters",
    )


def test_the_route_cache_stays_bounded() -> None:
    fo = Failover(FallbackConfig(fallbacks={P: F}), MemoryHealth(), clock=FakeClock())
    for i in range(ROUTE_CACHE_SIZE * 2):
        fo.call(f"p/{i:0>250}", lambda _: "ok")
    assert len(fo._routes._parsed) <= ROUTE_CACHE_SIZE


# -- smaller: sub-second wall-clock steps add up -----------------------------------------------
@dataclass
class SteppedClock(FakeClock):
    """Monotonic time is ``now``; the wall clock is ``now + offset``."""

    offset: float = 0.0

    def time(self) -> float:
        return self.now + self.offset


@pytest.mark.parametrize("step", [0.9, 0.2, -0.9])
def test_small_wall_clock_steps_cannot_shorten_a_cooldown(step: float, figure: Report) -> None:
    clock = SteppedClock()
    h = MemoryHealth(clock=clock)
    h.cool_down(P, clock.time(), CooldownRule(2, 60))
    ended = None
    for i in range(1, 80):  # 50 ms of monotonic time per look; a step every other look
        clock.advance(0.05)
        if i % 2 and i < 20:
            clock.offset += step
        if P not in h.unavailable(clock.time()):
            ended = clock.now - FakeClock.now
            break
    assert ended is not None and ended >= 2 - STEP_TOLERANCE_S, ended
    if step < 0:  # a clock set back never lengthens it by more than the tolerance either
        assert ended <= 2 + STEP_TOLERANCE_S
    figure(
        f"a 2 s cooldown under ten wall-clock steps of {step:+g} s",
        f"lasts 2 s within {STEP_TOLERANCE_S:g} s",
        measured=f"lasted {ended:.2f} s",
    )


# -- smaller: a starved process does not blame a healthy route ---------------------------------
def test_a_timeout_of_a_starved_loop_does_not_blame_the_route(figure: Report) -> None:
    """Real time: the attempt's timer is the event loop's. The test starves the loop for 0.3 s
    (a blocking sleep, as a CPU-bound task would) while an attempt with a 50 ms limit waits on
    an upstream: its timer fires 0.25 s late. The call still moves on (its time is spent), but
    the route is neither cooled nor counted by its breaker. A timeout whose timer fired on time
    blames the route as before."""
    breaker = BreakerConfig(min_calls=1, failure_rate=0.5, open_s=10, half_open_probes=1)
    config = FallbackConfig(fallbacks={P: F}, attempt_timeout_s=0.05, breaker=breaker)

    async def fn(attempt: Attempt) -> object:
        if str(attempt.route) == P:
            await asyncio.Event().wait()  # an upstream that has not answered yet
        return "fallback"

    async def call(starve: bool) -> tuple[Any, MemoryHealth]:
        health = MemoryHealth()
        fo = Failover(config, health, clock=FakeClock())
        task = asyncio.create_task(fo.acall(P, fn))
        await asyncio.sleep(0)  # the attempt is waiting on its upstream, its timer set
        if starve:
            time.sleep(0.3)  # noqa: ASYNC251 - the point: the loop can run nothing else
        return await task, health

    async def both() -> tuple[tuple[Any, MemoryHealth], tuple[Any, MemoryHealth]]:
        return await call(True), await call(False)

    (starved, h1), (slow, h2) = asyncio.run(both())
    now = FakeClock().time()
    assert starved.value == slow.value == "fallback"  # both calls moved on
    late = starved.attempts[0].failure
    assert late is not None and late.kind is FailureKind.TIMEOUT
    assert not any(h.degraded for h in h1.snapshot(now)), h1.snapshot(now)  # not blamed
    assert any(h.route == P and h.degraded for h in h2.snapshot(now))  # on time: blamed
    figure(
        "attempt timeout (50 ms) while the event loop was starved for 0.3 s",
        "the route is not cooled and its breaker not counted; an on-time timeout still is",
        measured="starved: route healthy; on time: route cooled",
    )
