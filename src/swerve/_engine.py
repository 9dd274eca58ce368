"""The failover engine: runs attempts (sync, async, unary, streaming) under the policy.

Every decision goes through one object, :class:`_Call`, which both the sync and the async
drivers use; the drivers differ only in how they wait and iterate. The policy decides, the
health store remembers, telemetry reports, and this module owns time and cancellation.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import random as _random
import threading
import time
from collections import Counter
from collections.abc import (
    AsyncGenerator,
    AsyncIterable,
    AsyncIterator,
    Awaitable,
    Callable,
    Container,
    Generator,
    Iterable,
    Iterator,
)
from dataclasses import dataclass, field
from typing import Generic, Literal, TypeVar, cast

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Span, Status, StatusCode
from opentelemetry.util.types import AttributeValue

from . import _policy as policy
from ._config import DEFAULT_ENV_VAR, EnvConfig, FallbackConfig
from ._failures import (
    AttemptTimeout,
    CircuitOpenError,
    Classifier,
    Classifiers,
    Failure,
    FailureKind,
    IncompleteStreamError,
)
from ._health import (
    Admission,
    Admitted,
    CooldownRule,
    HealthStore,
    MemoryHealth,
    Outcome,
)
from ._policy import GiveUp, GiveUpReason, Retry, Swap
from ._routes import Route
from ._steps import Admit, Claim, Steps, run_async, run_sync
from ._telemetry import (
    ATTEMPT_OUTCOME,
    ATTEMPT_PROBE,
    CALL_ATTEMPTS,
    CALL_RETRIES,
    CALL_SWAPS,
    ERROR_TYPE,
    GEN_AI_RESPONSE_MODEL,
    ROUTE_SERVED,
    STREAM,
    Telemetry,
    default_telemetry,
)

__all__ = [
    "AsyncFailoverStream",
    "Attempt",
    "AttemptRecord",
    "Failover",
    "FailoverStream",
    "MidStreamError",
    "PartKind",
    "Result",
    "StreamReset",
    "StreamSpec",
]

T = TypeVar("T")
C = TypeVar("C")
PartKind = Literal["text", "reasoning", "tool_call", "other"]
MidStream = Literal["error", "restart"]
_ABORTS = (GeneratorExit, KeyboardInterrupt, asyncio.CancelledError, SystemExit)
# How long a recovery probe holds its route when attempts have no time limit of their own:
# a probe that never answers must not keep every other call off the route for long.
PROBE_LEASE_S = 60.0
# Parsed routes kept for reuse. Routes are few in practice; a caller that sends a new name per
# call (a model id from user input) must not grow this without bound, so past it the cache
# starts over (the hot routes are back in it after one call each).
ROUTE_CACHE_SIZE = 1024


class Attempt:
    """One call on one route, handed to the function swerve runs.

    ``timeout`` is the time this attempt may still take (the attempt limit and the call's
    deadline, whichever is sooner) and ``read_timeout`` the longest wait for the next chunk;
    pass them to the client so a blocking call cannot outlive them (in async code swerve also
    enforces them itself). Call :meth:`record_effect` when something happened that must not
    happen twice (a tool ran): a failure after that surfaces instead of being retried.
    """

    __slots__ = (
        "_effects",
        "number",
        "read_timeout",
        "requested",
        "retry",
        "route",
        "swap",
        "timeout",
    )

    def __init__(
        self,
        route: Route,
        requested: Route,
        number: int = 1,
        retry: int = 0,
        swap: int = 0,
        timeout: float | None = None,
        read_timeout: float | None = None,
    ) -> None:
        self.route = route
        self.requested = requested
        self.number = number
        self.retry = retry
        self.swap = swap
        self.timeout = timeout
        self.read_timeout = read_timeout
        self._effects: list[str] = []

    def record_effect(self, what: str = "effect") -> None:
        self._effects.append(what)

    @property
    def effects(self) -> tuple[str, ...]:
        return tuple(self._effects)

    def __repr__(self) -> str:
        return (
            f"Attempt(route={self.route}, number={self.number}, "
            f"retry={self.retry}, swap={self.swap})"
        )


@dataclass(frozen=True, slots=True)
class AttemptRecord:
    """What happened on one attempt."""

    route: Route
    number: int
    retry: int
    swap: int
    outcome: Literal["success", "failure", "rejected", "aborted"]
    failure: Failure | None
    duration_s: float


@dataclass(frozen=True, slots=True)
class Result(Generic[T]):
    """A call's value, the route that answered, the route asked for, and every attempt."""

    value: T
    route: Route
    requested: Route
    attempts: tuple[AttemptRecord, ...]

    @property
    def retries(self) -> int:
        return sum(1 for a in self.attempts if a.retry > 0)

    @property
    def swaps(self) -> int:
        return max((a.swap for a in self.attempts), default=0)


def _any_part(_: object) -> PartKind | None:
    return "other"


@dataclass(frozen=True, slots=True)
class StreamSpec(Generic[C]):
    """How the engine reads an adapter's chunks.

    ``part`` names the kind of output a chunk carries, or None when it carries none (a role-only
    or empty delta, a keep-alive): the attempt commits at the first chunk with a part.
    ``is_finish`` recognises the chunk that ends a complete stream; when given, a stream that
    ends without one is a failure (a silent truncation is never a success).
    ``keep_partial``: whether the chunks delivered so far are kept for
    :attr:`MidStreamError.partial`. An adapter that hands each chunk on and never reads the
    partial output back (the httpx transport) turns it off, so no stream is held in memory.
    """

    part: Callable[[C], PartKind | None] = _any_part
    is_finish: Callable[[C], bool] | None = None
    keep_partial: bool = True


@dataclass(frozen=True, slots=True)
class StreamReset:
    """Yielded by a ``mid_stream="restart"`` stream before the new route's first chunk: drop
    everything received since the stream began (or since the last reset)."""

    route: Route
    next_route: Route


class MidStreamError(Exception):
    """A stream failed after its output had started reaching the consumer.

    The route is already marked degraded. ``partial`` holds the chunks delivered before the
    failure; the original error is ``__cause__``.
    """

    def __init__(
        self, route: Route, requested: Route, failure: Failure, partial: tuple[object, ...]
    ) -> None:
        self.route = route
        self.requested = requested
        self.failure = failure
        self.partial = partial
        super().__init__(
            f"stream from {route} failed after output had started ({failure.kind.value}"
            f"{f', status {failure.status}' if failure.status else ''}); requested {requested}"
        )


# The process-wide store runs on the real clocks, so it watches the monotonic clock for
# wall-clock steps (a Failover with an injected clock should bring its own store).
_DEFAULT_HEALTH = MemoryHealth(monotonic=time.monotonic)
HEALTH_URL_VAR = "SWERVE_HEALTH_URL"
HEALTH_PREFIX_VAR = "SWERVE_HEALTH_PREFIX"
_SHARED: dict[str, HealthStore] = {}
_SHARED_LOCK = threading.Lock()


def default_health() -> HealthStore:
    """The process-wide store: a :class:`RedisHealth` on ``$SWERVE_HEALTH_URL`` when it is set
    (one per URL, shared by every Failover), else one in-memory store."""
    url = os.environ.get(HEALTH_URL_VAR, "").strip()
    if not url:
        return _DEFAULT_HEALTH
    with _SHARED_LOCK:
        store = _SHARED.get(url)
        if store is None:
            from ._redis import RedisHealth

            prefix = os.environ.get(HEALTH_PREFIX_VAR, "") or "swerve"
            store = _SHARED[url] = RedisHealth.from_url(url, prefix=prefix)
        return store


class Failover:
    """Runs calls on routes with retries, swaps, cooldowns and breakers.

    ``config``: a :class:`FallbackConfig`, or None to read ``$SWERVE_FALLBACK_CONFIG`` (re-read
    whenever the variable changes; a change clears cooldowns). With no config, or
    ``max_swaps=0``, calls pass straight through: one attempt, nothing added.
    ``health``: where cooldowns and breakers live; by default one in-memory store per process,
    shared by every Failover, so a route degraded by one wrapper is skipped by all.
    ``classifiers``: functions ``(exception) -> Failure | None`` tried in order before the
    built-in :func:`~swerve._failures.classify`; the first Failure wins. One that raises counts
    as None (logged once), so it never masks the upstream's error.
    """

    def __init__(
        self,
        config: FallbackConfig | None = None,
        health: HealthStore | None = None,
        *,
        env_var: str = DEFAULT_ENV_VAR,
        telemetry: Telemetry | None = None,
        operation: str = "chat",
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        async_sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        random: Callable[[], float] = _random.random,
        classifiers: Iterable[Classifier] = (),
    ) -> None:
        self._classify = Classifiers(classifiers)
        self._fixed = config
        self._env = None if config is not None else EnvConfig(env_var)
        self._generation = 0
        self.health: HealthStore = health if health is not None else default_health()
        self.telemetry = telemetry if telemetry is not None else default_telemetry()
        self.telemetry.watch(self.health)
        self.operation = operation
        self._clock = clock
        self._monotonic = monotonic
        self._sleep = sleep
        self._async_sleep = async_sleep
        self._random = random
        self._routes: dict[str, Route] = {}
        self._pinned: tuple[FallbackConfig, FallbackConfig] | None = None

    @property
    def config(self) -> FallbackConfig | None:
        """The config in force now (re-read from the environment when it came from there)."""
        if self._env is None:
            return self._fixed
        config = self._env.current()
        if self._env.generation != self._generation:
            self._generation = self._env.generation
            self.health.clear()  # a new config starts from a clean slate
        return config

    def route(self, value: str | Route) -> Route:
        """Parse a route once and keep it (routes are few, calls are many)."""
        if isinstance(value, Route):
            return value
        route = self._routes.get(value)
        if route is None:
            route = Route.parse(value)
            if len(self._routes) >= ROUTE_CACHE_SIZE:
                self._routes = {}  # a fresh dict: a reader on another thread keeps the old one
            self._routes[value] = route
        return route

    def _active(self, pin: bool = False) -> FallbackConfig | None:
        config = self.config
        if config is None or not config.enabled:
            return None
        if pin:  # the same config with an empty map: nowhere to walk or swap to
            if self._pinned is None or self._pinned[0] is not config:
                self._pinned = (config, config.model_copy(update={"fallbacks": {}}))
            return self._pinned[1]
        return config

    # -- unary --------------------------------------------------------------------------------
    def call(
        self, route: str | Route, fn: Callable[[Attempt], T], *, pin: bool = False
    ) -> Result[T]:
        """Run ``fn(attempt)`` on ``route``, retrying and swapping per the config.

        ``pin=True`` keeps the call on ``route``: no swaps, no walk past a cooling route (for
        an evaluation that must not change models); retries still apply.
        """
        requested = self.route(route)
        config = self._active(pin)
        if config is None:
            return _passthrough(requested, fn(Attempt(requested, requested)))
        run = _Call(self, config, requested, stream=False)
        health = self.health
        try:
            run_sync(run.start(), health)
            while True:
                attempt = run.begin()
                try:
                    run_sync(run.admit(), health)
                    with run.attempt_context():
                        value = fn(attempt)
                except BaseException as exc:
                    decision = run_sync(run.failed(exc), health)
                    if isinstance(decision, Retry):
                        self._sleep(run.wait(decision.delay))
                        continue
                    if isinstance(decision, Swap):
                        continue
                    raise
                run.succeeded()
                return run.finish_ok(value)
        except BaseException as exc:
            run.finish_error(exc)
            raise

    async def acall(
        self, route: str | Route, fn: Callable[[Attempt], Awaitable[T]], *, pin: bool = False
    ) -> Result[T]:
        """Async :meth:`call`; time limits are enforced by cancelling the attempt."""
        requested = self.route(route)
        config = self._active(pin)
        if config is None:
            return _passthrough(requested, await fn(Attempt(requested, requested)))
        run = _Call(self, config, requested, stream=False)
        health = self.health
        try:
            await run_async(run.start(), health)
            while True:
                attempt = run.begin()
                try:
                    await run_async(run.admit(), health)
                    limit, seconds = run.next_limit(committed=True)
                    with run.attempt_context():
                        value = await _bounded(fn(attempt), limit, seconds)
                except BaseException as exc:
                    decision = await run_async(run.failed(exc), health)
                    if isinstance(decision, Retry):
                        await self._async_sleep(run.wait(decision.delay))
                        continue
                    if isinstance(decision, Swap):
                        continue
                    raise
                run.succeeded()
                return run.finish_ok(value)
        except BaseException as exc:
            run.finish_error(exc)
            raise

    # -- streaming ----------------------------------------------------------------------------
    def stream(
        self,
        route: str | Route,
        fn: Callable[[Attempt], Iterable[C]],
        spec: StreamSpec[C] | None = None,
        *,
        mid_stream: MidStream = "error",
        pin: bool = False,
    ) -> FailoverStream[C]:
        """Stream ``fn(attempt)``'s chunks; failures before the first content chunk are invisible.

        After content has reached the consumer, ``mid_stream="error"`` raises
        :class:`MidStreamError`; ``"restart"`` retries or swaps and yields a
        :class:`StreamReset` before the new route's chunks.
        """
        return FailoverStream(
            self, self.route(route), fn, spec or StreamSpec(), mid_stream, True, pin
        )

    def astream(
        self,
        route: str | Route,
        fn: Callable[[Attempt], AsyncIterable[C]],
        spec: StreamSpec[C] | None = None,
        *,
        mid_stream: MidStream = "error",
        pin: bool = False,
    ) -> AsyncFailoverStream[C]:
        """Async :meth:`stream`."""
        return AsyncFailoverStream(
            self, self.route(route), fn, spec or StreamSpec(), mid_stream, True, pin
        )

    def collect(
        self,
        route: str | Route,
        fn: Callable[[Attempt], Iterable[C]],
        spec: StreamSpec[C] | None = None,
    ) -> Result[list[C]]:
        """A non-streaming call built on a stream: the chunks of the attempt that completed.

        Nothing from a failed attempt (text, reasoning, streamed tool calls) is returned; each
        discard is reported.
        """
        stream = FailoverStream(self, self.route(route), fn, spec or StreamSpec(), "error", False)
        chunks = [c for c in stream if not isinstance(c, StreamReset)]
        return stream._result(chunks)

    async def acollect(
        self,
        route: str | Route,
        fn: Callable[[Attempt], AsyncIterable[C]],
        spec: StreamSpec[C] | None = None,
    ) -> Result[list[C]]:
        """Async :meth:`collect`."""
        stream = AsyncFailoverStream(
            self, self.route(route), fn, spec or StreamSpec(), "error", False
        )
        chunks = [c async for c in stream if not isinstance(c, StreamReset)]
        return stream._result(chunks)


def _passthrough(requested: Route, value: T) -> Result[T]:
    return Result(value, requested, requested, ())


async def _bounded(awaitable: Awaitable[T], limit: str | None, seconds: float | None) -> T:
    if seconds is None or limit is None:
        return await awaitable
    # A limit already past (time spent before this wait) waits 0 s, and says so: a timeout
    # message never shows a negative duration.
    seconds = max(seconds, 0.0)
    try:
        async with asyncio.timeout(seconds) as scope:
            return await awaitable
    except TimeoutError:
        if scope.expired():
            raise AttemptTimeout(limit, seconds) from None
        raise


class _Call:
    """One logical call: its span, its attempts, and every decision between them."""

    def __init__(self, fo: Failover, config: FallbackConfig, requested: Route, *, stream: bool):
        self.fo = fo
        self.config = config
        self.requested = requested
        self.telemetry = fo.telemetry
        self.t0 = fo._monotonic()
        self.deadline = self.t0 + config.call_bound_s
        self.span = self.telemetry.start_call(
            fo.operation, str(requested), requested.provider, requested.model
        )
        if stream:
            self.span.set_attribute(STREAM, True)
        self.context = trace.set_span_in_context(self.span)
        self.records: list[AttemptRecord] = []
        self.retries = 0
        self.swaps = 0
        self.probing: str | None = None  # the route whose recovery probe this call holds
        self.lease_s = config.attempt_timeout_s or min(config.call_bound_s, PROBE_LEASE_S)
        self.current = requested  # until start() has walked the chain
        self.served: Route | None = None
        # Per-attempt state, reset by begin().
        self.attempt = Attempt(self.current, requested)
        self.attempt_span: Span = trace.INVALID_SPAN
        self.attempt_t0 = self.t0
        self.last_chunk = self.t0
        self.probe = False
        self.period = 0  # the half-open period that admitted the attempt, when it is a probe

    def start(self) -> Steps[None]:
        """Choose the route the call starts on: the first healthy one of its chain walk."""
        config, requested = self.config, str(self.requested)
        start, skipped = yield from self._choose(
            lambda degraded: policy.start_route(config, requested, degraded)
        )
        for route, what in self.fo.health.take_notices():
            self.telemetry.operator(self.span, route, what)
        for route in skipped:
            self.telemetry.route_skipped(self.span, route)
        self.current = self.fo.route(start)

    # -- time ---------------------------------------------------------------------------------
    def _limits(self, committed: bool) -> Iterator[tuple[str, float]]:
        """Absolute (monotonic) ends of the limits that apply to the next wait."""
        c = self.config
        yield "deadline", self.deadline
        if c.attempt_timeout_s is not None:
            yield "attempt", self.attempt_t0 + c.attempt_timeout_s
        if not committed and c.first_token_timeout_s is not None:
            yield "first_token", self.attempt_t0 + c.first_token_timeout_s
        if c.stall_timeout_s is not None:
            yield "stall", self.last_chunk + c.stall_timeout_s

    def next_limit(self, committed: bool) -> tuple[str | None, float | None]:
        """The limit that ends soonest for the next wait, and the seconds left until it."""
        soonest = min(self._limits(committed), key=lambda lim: lim[1], default=None)
        if soonest is None:
            return None, None
        return soonest[0], soonest[1] - self.fo._monotonic()

    def check_limits(self, committed: bool) -> None:
        """Sync streams cannot be pre-empted: a chunk that came too late counts as a timeout."""
        now = self.fo._monotonic()
        for limit, end in self._limits(committed):
            if now > end:
                raise AttemptTimeout(limit, now - self.attempt_t0)

    def remaining(self) -> float:
        return self.deadline - self.fo._monotonic()

    def wait(self, delay: float) -> float:
        """The wait before the next attempt: the policy's, within ``[0, remaining()]``, so a
        delay that is not finite (an overflowing backoff) can neither sleep forever nor fail
        inside the sleep and mask the upstream error."""
        if not math.isfinite(delay) or delay <= 0:
            return 0.0
        return min(delay, max(self.remaining(), 0.0))

    # -- attempts -----------------------------------------------------------------------------
    def begin(self) -> Attempt:
        number = len(self.records) + 1
        self.attempt_t0 = self.last_chunk = self.fo._monotonic()
        timeout = None
        read = None
        _, left = self.next_limit(committed=False)
        if left is not None:
            read = max(left, 0.0)
        ends = [end for name, end in self._limits(True) if name in ("deadline", "attempt")]
        if ends:
            timeout = max(min(ends) - self.attempt_t0, 0.0)
        self.attempt = Attempt(
            self.current, self.requested, number, self.retries, self.swaps, timeout, read
        )
        route = self.current
        self.attempt_span = self.telemetry.start_attempt(
            self.fo.operation,
            str(route),
            route.provider,
            route.model,
            number,
            self.retries,
            self.swaps,
            self.context,
        )
        if self.probing == str(route):
            self.attempt_span.set_attribute(ATTEMPT_PROBE, True)
        return self.attempt

    def admit(self) -> Steps[None]:
        """Ask the breaker; raises :class:`CircuitOpenError` (a failure like any other) if not."""
        if self.remaining() <= 0:
            raise AttemptTimeout("deadline", self.config.call_bound_s)
        answer = yield Admit(str(self.current), self.fo._clock(), self.config.breaker, self.lease_s)
        admission, transition, period = cast(Admitted, answer)
        if transition is not None:
            self.telemetry.breaker(self.span, transition)
        self.probe = admission is Admission.PROBE
        self.period = period
        if admission is Admission.REJECTED:
            raise CircuitOpenError(str(self.current))

    def attempt_context(self) -> _Attached:
        return _Attached(trace.set_span_in_context(self.attempt_span, self.context))

    def _end_attempt(
        self, outcome: Literal["success", "failure", "rejected", "aborted"], failure: Failure | None
    ) -> float:
        duration = self.fo._monotonic() - self.attempt_t0
        route = str(self.current)
        self.records.append(
            AttemptRecord(
                self.current,
                self.attempt.number,
                self.attempt.retry,
                self.attempt.swap,
                outcome,
                failure,
                duration,
            )
        )
        if failure is not None:
            self.telemetry.fail_span(self.attempt_span, failure, outcome)
        else:
            self.attempt_span.set_attributes(
                {ATTEMPT_OUTCOME: outcome, GEN_AI_RESPONSE_MODEL: self.current.model}
            )
        self.attempt_span.end()
        self.telemetry.attempt_ended(
            route, outcome, failure.error_type if failure is not None else None, duration
        )
        return duration

    def _record_health(self, outcome: Outcome) -> None:
        transition = self.fo.health.record(
            str(self.current),
            outcome,
            self.fo._clock(),
            self.config.breaker,
            probe=self.probe,
            period=self.period if self.probe else None,
        )
        self.probe = False
        if transition is not None:
            self.telemetry.breaker(self.span, transition)

    def committed(self) -> None:
        """The attempt's first content chunk arrived."""
        self.telemetry.first_chunk(str(self.current), self.fo._monotonic() - self.attempt_t0)

    def succeeded(self) -> None:
        self._record_health(Outcome.SUCCESS)
        self._end_attempt("success", None)
        self.served = route = self.current
        # A success on a recovering route is its probe's verdict: the route is healthy again
        # (any call may deliver it: a pinned one, or one with nowhere else to go).
        if self.fo.health.recovered(str(route), self.fo._clock()):
            self.telemetry.probe(self.span, str(route), "success")
        if self.probing == str(route):
            self.probing = None

    # -- route choice -------------------------------------------------------------------------
    def _choose(self, pick: Callable[[Container[str]], T]) -> Steps[T]:
        """Run a route choice of the policy's, claiming the probe of the route it lands on when
        that route is recovering; a probe someone else took sends the walk past it."""
        health, now = self.fo.health, self.fo._clock()
        blocked: set[str] = set()
        while True:
            choice = pick(_Either(health.unavailable(now), blocked))
            route = _target(choice)
            if (
                route is None
                or route in blocked
                or not health.probe_due(route, now)
                or route == self.probing
            ):
                return choice
            if (yield Claim(route, now, self.lease_s)):
                self._release_probe()  # a call holds one probe at a time
                self.probing = route
                return choice
            blocked.add(route)  # taken since the walk looked: walk past it like the others

    def _release_probe(self) -> None:
        if self.probing is not None:
            self.fo.health.release_probe(self.probing)
            self.telemetry.probe(self.span, self.probing, "inconclusive")
            self.probing = None

    def _cool_down(self, failure: Failure) -> None:
        config, route = self.config, str(self.current)
        if config.cooldown_s <= 0 and not failure.retry_after:
            if self.probing == route:
                self._release_probe()
            return
        longest = config.longest_cooldown_s
        rule = CooldownRule(config.cooldown_s, longest, min(failure.retry_after or 0.0, longest))
        cooldown = self.fo.health.cool_down(route, self.fo._clock(), rule, failure.kind.value)
        self.telemetry.cooldown(self.span, route, cooldown.seconds, cooldown.until)
        if self.probing == route:
            self.telemetry.probe(self.span, route, "failure")
            self.probing = None

    def failed(
        self, exc: BaseException, discarded: Counter[str] | None = None
    ) -> Steps[policy.Decision]:
        """Account for a failed attempt and decide what comes next."""
        failure = self.fo._classify(exc)
        config = self.config
        qualifying = policy.qualifies(config, failure)
        aborted = isinstance(exc, _ABORTS)
        self._record_health(Outcome.FAILURE if qualifying and not aborted else Outcome.NEUTRAL)
        outcome: Literal["failure", "rejected", "aborted"] = (
            "aborted" if aborted else "rejected" if isinstance(exc, CircuitOpenError) else "failure"
        )
        self._end_attempt(outcome, failure)
        source = str(self.current)
        if discarded:
            self.telemetry.partial_discarded(self.span, source, discarded)
        if aborted:
            # Cancellation is the caller's decision, never a reason to move.
            self._release_probe()
            return GiveUp(GiveUpReason.NOT_QUALIFYING, qualifying=False)
        probe = self.probing == source
        # A breaker that refused the attempt already keeps calls off the route.
        blame = qualifying and failure.kind is not FailureKind.BREAKER_OPEN
        try:
            decision = yield from self._choose(
                lambda degraded: policy.decide(
                    config,
                    failure,
                    requested=str(self.requested),
                    current=source,
                    retries=self.retries,
                    swaps=self.swaps,
                    degraded=degraded,
                    effects=bool(self.attempt.effects),
                    remaining_s=self.remaining(),
                    probe=probe,
                    rand=self.fo._random,
                )
            )
        except Exception as error:
            # A decision that cannot be made (a config the policy cannot compute with) must
            # not replace the upstream failure: that error surfaces, with a note saying why.
            exc.add_note(f"swerve: no failover decision ({type(error).__name__}: {error})")
            decision = GiveUp(GiveUpReason.NOT_QUALIFYING, qualifying=qualifying)
        if isinstance(decision, Retry):
            self.retries += 1
            self.telemetry.retry(self.span, source, self.attempt.number, decision.delay, failure)
            return decision
        if blame:
            self._cool_down(failure)
        elif probe:
            self._release_probe()  # says nothing about the route: the next call may probe
        if isinstance(decision, Swap):
            for skipped in decision.skipped:
                self.telemetry.route_skipped(self.span, skipped)
            self.swaps += 1
            self.retries = 0
            self.telemetry.swap(self.span, source, decision.route, failure.kind.value, self.swaps)
            self.current = self.fo.route(decision.route)
        else:
            self.telemetry.swap_declined(self.span, source, decision.reason.value)
        return decision

    def failed_mid_stream(self, exc: BaseException, partial: tuple[object, ...]) -> MidStreamError:
        """A live stream broke after output reached the consumer: degrade, report, surface."""
        failure = self.fo._classify(exc)
        qualifying = policy.qualifies(self.config, failure)
        self._record_health(Outcome.FAILURE if qualifying else Outcome.NEUTRAL)
        self._end_attempt("failure", failure)
        if qualifying:
            self._cool_down(failure)
        else:
            self._release_probe()
        self.telemetry.swap_declined(self.span, str(self.current), "mid_stream")
        error = MidStreamError(self.current, self.requested, failure, partial)
        error.__cause__ = exc
        return error

    # -- the call -----------------------------------------------------------------------------
    def _summarise(self, attrs: dict[str, AttributeValue]) -> None:
        # Retries and swaps only when there were some: each attribute costs on the hot path.
        attrs[CALL_ATTEMPTS] = len(self.records)
        if len(self.records) > 1:
            attrs[CALL_RETRIES] = sum(1 for r in self.records if r.retry > 0)
            attrs[CALL_SWAPS] = self.swaps
        self.span.set_attributes(attrs)

    def finish_ok(self, value: T) -> Result[T]:
        served = self.served or self.current
        duration = self.fo._monotonic() - self.t0
        self._summarise({ROUTE_SERVED: str(served), GEN_AI_RESPONSE_MODEL: served.model})
        self.span.end()
        added = None
        if len(self.records) > 1:  # a first-try success adds nothing; keep it off the hot path
            added = max(duration - self.records[-1].duration_s, 0.0)
        self.telemetry.call_ended(str(self.requested), duration, served=str(served), added=added)
        return Result(value, served, self.requested, tuple(self.records))

    def finish_error(self, exc: BaseException) -> None:
        self._release_probe()  # the call ended on an error of its own, not the route's
        if not self.span.is_recording():
            return
        failure = self.fo._classify(
            exc.__cause__ if isinstance(exc, MidStreamError) and exc.__cause__ else exc
        )
        self._summarise({ERROR_TYPE: failure.error_type})
        self.span.set_status(Status(StatusCode.ERROR, failure.kind.value))
        self.span.end()
        self.telemetry.call_ended(
            str(self.requested), self.fo._monotonic() - self.t0, error_type=failure.error_type
        )
        _annotate(exc, self.requested, self.records)

    def result(self, value: T) -> Result[T]:
        return Result(value, self.served or self.current, self.requested, tuple(self.records))


def _target(choice: object) -> str | None:
    """The route a start (``(route, skipped)``) or a :class:`Swap` lands on."""
    if isinstance(choice, Swap):
        return choice.route
    if isinstance(choice, tuple) and choice and isinstance(choice[0], str):
        return choice[0]
    return None


class _Either:
    """The store's routes to walk past, plus those this call found taken, without copying."""

    __slots__ = ("_base", "_extra")

    def __init__(self, base: Container[str], extra: set[str]) -> None:
        self._base = base
        self._extra = extra

    def __contains__(self, route: object) -> bool:
        return route in self._extra or route in self._base


def _annotate(exc: BaseException, requested: Route, records: list[AttemptRecord]) -> None:
    """The error that surfaces keeps its type; a note says what swerve tried."""
    if isinstance(exc, _ABORTS) or not records:
        return
    tried = ", ".join(f"{r.route}#{r.number}" for r in records)
    exc.add_note(f"swerve: requested {requested}; attempts: {tried}")


class _Attached:
    """Make the attempt span current while the adapter's code runs, so HTTP spans nest under it."""

    __slots__ = ("_ctx", "_token")

    def __init__(self, ctx: otel_context.Context) -> None:
        self._ctx = ctx

    def __enter__(self) -> None:
        self._token = otel_context.attach(self._ctx)

    def __exit__(self, *_: object) -> None:
        otel_context.detach(self._token)


@dataclass
class _StreamState(Generic[C]):
    """One attempt's chunks: held back until the attempt commits, then passed through."""

    spec: StreamSpec[C]
    live: bool
    buffer: list[C] = field(default_factory=list)
    delivered: list[C] = field(default_factory=list)  # only with spec.keep_partial
    delivered_parts: Counter[str] = field(default_factory=Counter)
    committed: bool = False
    finished: bool = False

    def feed(self, chunk: C, run: _Call) -> list[C]:
        """What to hand the consumer now that ``chunk`` arrived."""
        spec = self.spec
        if spec.is_finish is not None and spec.is_finish(chunk):
            self.finished = True
        if self.committed:
            return self._deliver([chunk])
        self.buffer.append(chunk)
        if self.live and spec.part(chunk) is not None:
            self.committed = True
            run.committed()
            out, self.buffer = self.buffer, []
            return self._deliver(out)
        return []

    def _deliver(self, chunks: list[C]) -> list[C]:
        part = self.spec.part
        self.delivered_parts.update(kind for c in chunks if (kind := part(c)) is not None)
        if self.spec.keep_partial:
            self.delivered.extend(chunks)
        return chunks

    def end(self) -> list[C]:
        if self.spec.is_finish is not None and not self.finished:
            raise IncompleteStreamError("stream ended without its finish signal")
        out, self.buffer = self.buffer, []
        return out

    def discarded(self, including_delivered: bool) -> Counter[str]:
        part = self.spec.part
        counts: Counter[str] = Counter(kind for c in self.buffer if (kind := part(c)) is not None)
        return counts + self.delivered_parts if including_delivered else counts


class _StreamBase(Generic[C]):
    """Everything a failover stream decides; the sync and async drivers only do the I/O.

    Per attempt a driver calls :meth:`_begin`, hands every chunk to :meth:`_chunk` and the end
    of the upstream to :meth:`_end` (yielding what they return), and on an exception asks
    :meth:`_failed` for the wait before the next attempt (it raises when the error surfaces).
    """

    def __init__(
        self,
        fo: Failover,
        requested: Route,
        spec: StreamSpec[C],
        mid_stream: MidStream,
        live: bool,
        pin: bool = False,
    ) -> None:
        self._fo = fo
        self._pin = pin
        self.requested = requested
        self._spec = spec
        self._mid_stream = mid_stream
        self._live = live
        self._run: _Call | None = None
        self._state = _StreamState(spec, live)
        self._reset: StreamReset | None = None
        self.route: Route | None = None
        """The route whose output is being (or was) delivered."""

    @property
    def attempts(self) -> tuple[AttemptRecord, ...]:
        return tuple(self._run.records) if self._run else ()

    def _result(self, value: T) -> Result[T]:
        if self._run is None:
            return _passthrough(self.requested, value)
        return self._run.result(value)

    def _start(self) -> _Call | None:
        """The call's state, or None when swerve is off (the driver passes straight through)."""
        config = self._fo._active(self._pin)
        if config is None:
            self.route = self.requested
            return None
        self._run = _Call(self._fo, config, self.requested, stream=True)
        return self._run

    def _begin(self, run: _Call) -> Attempt:
        self._state = _StreamState(self._spec, self._live)
        return run.begin()

    def _release(self, out: list[C]) -> list[C | StreamReset]:
        """Chunks for the consumer, behind a pending reset marker if there is one."""
        if not out:
            return []
        run = self._run
        assert run is not None
        self.route = run.current
        if self._reset is None:
            return list(out)
        reset, self._reset = self._reset, None
        return [reset, *out]

    def _chunk(self, run: _Call, chunk: C, *, check: bool) -> list[C | StreamReset]:
        if check:  # sync: a chunk that came after its limit is a timeout
            run.check_limits(self._state.committed)
        run.last_chunk = self._fo._monotonic()
        return self._release(self._state.feed(chunk, run))

    def _end(self) -> list[C | StreamReset]:
        return self._release(self._state.end())

    def _whole(self, exc: BaseException) -> bool:
        """Whether the answer was whole when ``exc`` broke the stream: its finish signal had
        arrived (a finish reason, a stop reason), so all that was lost is a terminator such
        as ``[DONE]`` or ``message_stop``. That is a success, not a failure of the route."""
        return self._state.finished and not isinstance(exc, _ABORTS)

    def _failed(self, run: _Call, exc: BaseException) -> Steps[float]:
        """Decide after a failure: the wait before the next attempt, or raise to surface."""
        state = self._state
        if state.committed and (self._mid_stream == "error" or isinstance(exc, _ABORTS)):
            if isinstance(exc, _ABORTS):
                yield from run.failed(exc)
                raise exc
            raise run.failed_mid_stream(exc, tuple(state.delivered)) from exc
        failed_route = run.current
        decision = yield from run.failed(exc, state.discarded(including_delivered=state.committed))
        if isinstance(decision, GiveUp):
            if state.committed:  # restart mode with nowhere to restart: as in "error" mode
                failure = run.records[-1].failure or run.fo._classify(exc)
                error = MidStreamError(failed_route, run.requested, failure, tuple(state.delivered))
                raise error from exc
            raise exc
        if state.committed:  # restart mode: the consumer has to drop what it got
            self._reset = StreamReset(failed_route, run.current)
            run.telemetry.stream_reset(run.span, str(failed_route), str(run.current))
        return decision.delay if isinstance(decision, Retry) else 0.0

    def _succeeded(self, run: _Call) -> None:
        run.succeeded()
        run.finish_ok(None)


class FailoverStream(_StreamBase[C], Iterator[C | StreamReset]):
    """The chunks of a failover stream (see :meth:`Failover.stream`); iterate once."""

    def __init__(
        self,
        fo: Failover,
        requested: Route,
        fn: Callable[[Attempt], Iterable[C]],
        spec: StreamSpec[C],
        mid_stream: MidStream,
        live: bool,
        pin: bool = False,
    ) -> None:
        super().__init__(fo, requested, spec, mid_stream, live, pin)
        self._fn = fn
        self._gen = self._drive()

    def __next__(self) -> C | StreamReset:
        return next(self._gen)

    def __iter__(self) -> FailoverStream[C]:
        return self

    def close(self) -> None:
        """Stop early: closes the upstream stream and ends the spans."""
        self._gen.close()

    def __enter__(self) -> FailoverStream[C]:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def _drive(self) -> Generator[C | StreamReset, None, None]:
        run = self._start()
        if run is None:
            yield from self._fn(Attempt(self.requested, self.requested))
            return
        health = self._fo.health
        try:
            run_sync(run.start(), health)
            while True:
                attempt = self._begin(run)
                upstream: Iterator[C] | None = None
                try:
                    run_sync(run.admit(), health)
                    with run.attempt_context():
                        upstream = iter(self._fn(attempt))
                    while True:
                        with run.attempt_context():
                            chunk = next(upstream, _END)
                        if chunk is _END:
                            break
                        yield from self._chunk(run, chunk, check=True)  # type: ignore[arg-type]
                    yield from self._end()
                except BaseException as exc:
                    _close(upstream)
                    if self._whole(exc):
                        yield from self._end()
                        self._succeeded(run)
                        return
                    delay = run.wait(run_sync(self._failed(run, exc), health))
                    if delay:
                        self._fo._sleep(delay)
                    continue
                self._succeeded(run)
                return
        except BaseException as exc:
            run.finish_error(exc)
            raise


class AsyncFailoverStream(_StreamBase[C], AsyncIterator[C | StreamReset]):
    """The chunks of an async failover stream (see :meth:`Failover.astream`)."""

    def __init__(
        self,
        fo: Failover,
        requested: Route,
        fn: Callable[[Attempt], AsyncIterable[C]],
        spec: StreamSpec[C],
        mid_stream: MidStream,
        live: bool,
        pin: bool = False,
    ) -> None:
        super().__init__(fo, requested, spec, mid_stream, live, pin)
        self._fn = fn
        self._gen = self._drive()

    async def __anext__(self) -> C | StreamReset:
        return await self._gen.__anext__()

    def __aiter__(self) -> AsyncFailoverStream[C]:
        return self

    async def aclose(self) -> None:
        """Stop early: closes the upstream stream and ends the spans."""
        await self._gen.aclose()

    async def __aenter__(self) -> AsyncFailoverStream[C]:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.aclose()

    async def _drive(self) -> AsyncGenerator[C | StreamReset, None]:
        run = self._start()
        if run is None:
            async for chunk in self._fn(Attempt(self.requested, self.requested)):
                yield chunk
            return
        health = self._fo.health
        try:
            await run_async(run.start(), health)
            while True:
                attempt = self._begin(run)
                upstream: AsyncIterator[C] | None = None
                try:
                    await run_async(run.admit(), health)
                    with run.attempt_context():
                        upstream = aiter(self._fn(attempt))
                    while True:
                        limit, seconds = run.next_limit(self._state.committed)
                        with run.attempt_context():
                            chunk = await _bounded(anext(upstream, cast(C, _END)), limit, seconds)
                        if chunk is _END:
                            break
                        for item in self._chunk(run, chunk, check=False):
                            yield item
                    for item in self._end():
                        yield item
                except BaseException as exc:
                    await _aclose(upstream)
                    if self._whole(exc):
                        for item in self._end():
                            yield item
                        self._succeeded(run)
                        return
                    delay = run.wait(await run_async(self._failed(run, exc), health))
                    if delay:
                        await self._fo._async_sleep(delay)
                    continue
                self._succeeded(run)
                return
        except BaseException as exc:
            run.finish_error(exc)
            raise


_END: object = object()


def _close(upstream: object) -> None:
    close = getattr(upstream, "close", None)
    if close is not None:
        with contextlib.suppress(Exception):  # a broken upstream must not mask the failure
            close()


async def _aclose(upstream: object) -> None:
    aclose = getattr(upstream, "aclose", None)
    if aclose is not None:
        with contextlib.suppress(Exception):
            await aclose()
