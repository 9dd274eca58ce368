"""One logical call: its span, its attempts, and every decision between them.

A :class:`Call` gets what it needs of its :class:`~swerve.Failover` as one :class:`Wiring`
(clock, health store, telemetry, failure rules, operation name, route parser) and the config
in force when it began. Its decisions are :data:`~swerve._engine.steps.Steps`: the sync and async
drivers only answer what they wait on.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable, Container
from dataclasses import dataclass
from typing import Any, Literal, Protocol, TypeVar

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Span, Status, StatusCode
from opentelemetry.util.types import AttributeValue

from .._failures import AttemptTimeout, CircuitOpenError, Failure, FailureKind
from .._health.store import (
    Admission,
    Admitted,
    BreakerTransition,
    CooldownRule,
    HealthStore,
    Outcome,
)
from .._telemetry.decisions import (
    BreakerChanged,
    CooledDown,
    Hedged,
    HedgeWon,
    LearnedLimitHit,
    OperatorNoticed,
    PartialDiscarded,
    Probed,
    Retried,
    RouteSkipped,
    SwapDeclined,
    Swapped,
)
from .._telemetry.names import (
    ATTEMPT_PROBE,
    CALL_ATTEMPTS,
    CALL_RETRIES,
    CALL_SWAPS,
    ERROR_TYPE,
    ROUTE_SERVED,
)
from .._telemetry.telemetry import Telemetry
from . import policy
from .clock import Clock, SystemClock
from .config import QUANTILES, FallbackConfig
from .policy import GiveUp, GiveUpReason, Retry, Swap
from .results import Attempt, AttemptRecord, CooldownLearned, MidStreamError, Result, SkippedRoute
from .routes import Route
from .steps import Admit, Claim, Invoke, Settle, Sleep, Steps
from .timing import CallTime

__all__ = [
    "ABORTS",
    "PROBE_LEASE_S",
    "Call",
    "Derived",
    "Latency",
    "OwnCooldowns",
    "Parked",
    "Wiring",
]

T = TypeVar("T")
ABORTS = (GeneratorExit, KeyboardInterrupt, asyncio.CancelledError, SystemExit)
"""Ends of a call that are the caller's decision, never the route's fault."""
# How long a recovery probe holds its route when attempts have no time limit of their own:
# a probe that never answers must not keep every other call off the route for long.
PROBE_LEASE_S = 60.0
_NO_ROUTES: tuple[str, ...] = ()  # routes a call skipped, when it skipped none


class OwnCooldowns(Protocol):
    """The cooldowns and open breakers a Failover set itself (``swerve._engine.failover``): a
    route a call walks past was degraded by this Failover, or elsewhere in a shared store."""

    def remember(self, route: str, until: float) -> None: ...
    def forget(self, route: str) -> None: ...
    def learned(self, route: str, now: float) -> CooldownLearned: ...
    def retry(self, route: str, call: object, now: float, until: float) -> bool: ...
    def retried(self, route: str, call: object) -> None: ...


class Latency(Protocol):
    """A store's learned time to first chunk per route (``MemoryHealth``, ``RedisHealth``): the
    optional part of the store protocol that adaptive limits and hedges read."""

    def observe_first_chunk(self, route: str, seconds: float, now: float) -> None: ...
    def first_chunk_quantile(
        self, route: str, q: float, now: float, min_samples: int = ...
    ) -> float | None: ...


class Budget(Protocol):
    """The hedges a Failover allows per route (``swerve._engine.hedging.HedgeBudget``)."""

    def called(self, route: str, now: float) -> None: ...
    def take(self, route: str, now: float, share: float) -> bool: ...


@dataclass(frozen=True, slots=True)
class Wiring:
    """What every call of one Failover shares, handed to each call explicitly."""

    clock: Clock
    health: HealthStore
    telemetry: Telemetry
    classify: Callable[[BaseException], Failure]
    operation: str
    route: Callable[[str], Route]
    """Parses a route name (cached: routes are few, calls are many)."""
    own: OwnCooldowns
    waitless: bool = False
    """The health store answers at once (in process) in async code too: a call asks it
    directly instead of yielding the question to its driver."""
    latency: Latency | None = None
    """The store's learned latency, when it keeps one."""
    hedges: Budget | None = None


class Derived:
    """What a call reads of its config that the config alone decides: computed once per config
    (the Failover keeps it with the config in force), never per call."""

    __slots__ = ("adaptive", "bound_s", "enabled", "first_token_s", "hedge", "lease_s", "limited")

    def __init__(self, config: FallbackConfig) -> None:
        self.enabled = config.enabled
        first = config.first_token_timeout_s
        self.adaptive = first == "adaptive"
        self.first_token_s = first if isinstance(first, float | int) else None
        # hedge_after as (seconds, None) or (None, quantile); None: streams never hedge.
        after = config.hedge_after
        self.hedge: tuple[float | None, float | None] | None = (
            None
            if after is None
            else (None, QUANTILES[after])
            if isinstance(after, str)
            else (float(after), None)
        )
        self.bound_s = config.call_bound_s
        # Whether attempt.timeout is a limit the config set, or only the derived call bound.
        self.limited = config.attempt_timeout_s is not None or config.deadline_s is not None
        self.lease_s = config.attempt_timeout_s or min(self.bound_s, PROBE_LEASE_S)


@dataclass(slots=True)
class Parked:
    """An attempt set aside while another runs beside it (a hedge race): everything the call
    keeps of its current attempt."""

    current: Route
    attempt: Attempt
    span: Span
    context: Context | None
    probe: bool
    period: int
    time: CallTime


class Call:
    """One logical call: its span, its attempts, and every decision between them."""

    # Slots: a call holds more attributes than an instance dict shares its keys for (30), and
    # every call makes one and reads them throughout.
    __slots__ = (
        "asked",
        "attempt",
        "attempt_context",
        "attempt_span",
        "bound_s",
        "clock",
        "config",
        "context",
        "current",
        "derived",
        "health",
        "judged",
        "known",
        "learned_p99",
        "lease_s",
        "limited",
        "metered",
        "nested",
        "observed",
        "period",
        "pinned",
        "probe",
        "probing",
        "records",
        "requested",
        "retries",
        "served",
        "skipped",
        "span",
        "stream",
        "swaps",
        "telemetry",
        "time",
        "wall",
        "wiring",
    )

    attempt: Attempt
    """The current attempt (set when it begins)."""

    def __init__(
        self,
        wiring: Wiring,
        config: FallbackConfig,
        requested: Route,
        *,
        stream: bool,
        pinned: bool = False,
        derived: Derived | None = None,
    ):
        derived = derived if derived is not None else Derived(config)
        self.wiring = wiring
        self.clock = clock = wiring.clock
        # The system clock is read directly: every reading is on the hot path.
        self.wall = time.time if type(clock) is SystemClock else clock.time
        self.health = wiring.health
        self.telemetry = wiring.telemetry
        self.config = config
        self.requested = requested
        self.time = CallTime(config, clock, derived.bound_s)
        # Untraced, the call makes no span and leaves the caller's context current: its
        # attempts hold its span (the caller's, recording nothing) and attach nothing.
        # nested: another instrumentation's LLM span holds the call (it counts the tokens).
        # metered: whether its measurements go anywhere (its ends are told, not asked again).
        self.span, self.context, self.nested, self.metered = self.telemetry.start_call(
            wiring.operation, requested.name, requested.provider, requested.model, stream
        )
        # Whether the wire's facts (usage, the model that answered) go anywhere.
        self.observed = self.context is not None or self.metered
        # Traced: the model the call asked for on the wire (its first attempt's there).
        self.asked: str | None = None
        self.stream = stream
        # A pinned call stays on its route whatever its health says, retries included.
        self.pinned = pinned
        self.records: list[AttemptRecord] = []
        self.skipped: list[SkippedRoute] = []
        self.limited = derived.limited
        self.derived = derived
        self.learned_p99: float | None = None  # the current attempt's, when its limit was learned
        self.bound_s = derived.bound_s
        self.retries = 0
        self.swaps = 0
        self.probing: str | None = None  # the route whose recovery probe this call holds
        # Routes this call cooled itself or walked onto knowing they were unavailable: their
        # health says nothing new, so it does not refuse this call's retries there (a retry
        # asks health to learn what others found since the call chose the route).
        self.known: set[str] = set()
        self.lease_s = derived.lease_s
        self.current = requested  # until start() has walked the chain
        self.served: Route | None = None
        # Per-attempt state, reset by begin().
        # self.attempt: set by begin() (an attempt is only made when one begins).
        self.attempt_span: Span = self.span
        self.attempt_context = self.context  # the attempt span's, current while fn runs
        self.probe = False
        self.period = 0  # the half-open period that admitted the attempt, when it is a probe
        # The last error classified and its Failure: the user's rules are asked once per
        # failure, however many places (decision, stream, surfacing error) need the answer.
        self.judged: tuple[BaseException, Failure] | None = None

    def start(self) -> Steps[None]:
        """Choose the route the call starts on: the first healthy one of its chain walk."""
        config, requested, health = self.config, self.requested.name, self.health
        now = self.wall()
        unavailable = health.unavailable(now)
        if requested not in unavailable and not health.probe_due(requested, now):
            # Most calls: the route asked for is healthy, so the walk would start, and stay,
            # there (policy.start_route's first answer), with no probe of it to claim.
            start, skipped = requested, _NO_ROUTES
        else:
            start, skipped = yield from self._choose(
                lambda degraded: policy.start_route(config, requested, degraded),
                now,
                unavailable,
            )
        for route, what in self.health.take_notices():
            self.telemetry.emit(OperatorNoticed(route, what), self.span)
        for route in skipped:
            self._skip(route)
        # Most calls start where they were asked to: that route is parsed already.
        self.current = self.requested if start == requested else self.wiring.route(start)

    def _skip(self, route: str) -> None:
        learned = self.wiring.own.learned(route, self.wall())
        self.skipped.append(SkippedRoute(self.wiring.route(route), learned))
        self.telemetry.emit(RouteSkipped(route, learned), self.span)

    def _breaker(self, transition: BreakerTransition) -> None:
        if transition.open_until is not None:  # it opened: calls walk past it till then
            self.wiring.own.remember(transition.route, transition.open_until)
            self.known.add(transition.route)
        self.telemetry.emit(
            BreakerChanged(transition.route, transition.before.value, transition.after.value),
            self.span,
        )

    # -- attempts -----------------------------------------------------------------------------
    def begin(self) -> Attempt:
        number = len(self.records) + 1
        first = self.derived.first_token_s
        if self.derived.adaptive and self.stream:
            first = self._learned_limit(self.current.name)
        timeout, read = self.time.begin_attempt(self.stream, first)
        self.attempt = Attempt(
            self.current,
            self.requested,
            number,
            self.retries,
            self.swaps,
            timeout,
            read,
            limited=self.limited,
            time=self.time,
            observed=self.observed,
        )
        route = self.current
        if self.context is None:  # untraced: the call's span stands for it
            return self.attempt
        self.attempt_span = self.telemetry.start_attempt(
            self.wiring.operation,
            route.name,
            route.provider,
            route.model,
            number,
            self.retries,
            self.swaps,
            self.context,
        )
        if self.probing == route.name:
            self.attempt_span.set_attribute(ATTEMPT_PROBE, True)
        self.attempt_context = trace.set_span_in_context(self.attempt_span, self.context)
        return self.attempt

    def _learned_limit(self, route: str) -> float:
        """The adaptive first-token limit of a stream attempt on ``route``: its learned p99
        times the multiplier, within the floor and ceiling; the ceiling until it is learned."""
        learned = self.config.learned
        latency = self.wiring.latency
        p99 = None
        if latency is not None:
            p99 = latency.first_chunk_quantile(route, 0.99, self.wall(), learned.min_samples)
        self.learned_p99 = p99
        if p99 is None:
            return learned.ceiling_s
        return min(max(p99 * learned.multiplier, learned.floor_s), learned.ceiling_s)

    def _learned_hit(self, exc: BaseException) -> bool:
        """Whether ``exc`` is the current attempt running out of a first-token limit learned
        from its route (``first_token_timeout_s="adaptive"``)."""
        return (
            self.derived.adaptive
            and isinstance(exc, AttemptTimeout)
            and exc.limit == "first_token"
            and self.time.first_token_s is not None
        )

    def admit(self) -> Steps[None]:
        """Ask the breaker; raises :class:`CircuitOpenError` (a failure like any other) if not."""
        time = self.time
        # remaining(), as the attempt began (begin() read the clock just now)
        if time.deadline - time.attempt_t0 <= 0:
            raise AttemptTimeout("deadline", self.bound_s)
        answer: Admitted  # a store's answer, or the driver's (untyped): no cast() per call
        if self.wiring.waitless:
            answer = self.health.admit(
                self.current.name, self.wall(), self.config.breaker, lease_s=self.lease_s
            )
        else:
            answer = yield Admit(
                self.health, self.current.name, self.wall(), self.config.breaker, self.lease_s
            )
        admission, transition, period = answer
        if transition is not None:
            self._breaker(transition)
        self.probe = admission is Admission.PROBE
        self.period = period
        if admission is Admission.REJECTED:
            raise CircuitOpenError(self.current.name)

    def _end_attempt(
        self, outcome: Literal["success", "failure", "rejected", "aborted"], failure: Failure | None
    ) -> float:
        """Record and report the attempt's end; the call's time it ended at."""
        now = self.time.now()
        duration = now - self.time.attempt_t0  # in_attempt(), written out
        route = self.current.name
        if self.context is not None and self.asked is None and route == self.requested.name:
            self.asked = self.attempt.request_model
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
        if self.observed:  # else it would tell nothing to anyone (neither traced nor metered)
            self.telemetry.end_attempt(
                self.attempt_span, route, self.attempt, outcome, failure, duration, self.metered
            )
        return now

    def _record_health(self, outcome: Outcome) -> None:
        transition = self.health.record(
            self.current.name,
            outcome,
            self.wall(),
            self.config.breaker,
            probe=self.probe,
            period=self.period if self.probe else None,
        )
        self.probe = False
        if transition is not None:
            self._breaker(transition)

    def committed(self) -> None:
        """The attempt's first content chunk arrived: its time is learned for its route."""
        seconds = self.time.in_attempt()
        if self.metered:  # start_call's word on the call's measurements, as its ends take it
            self.telemetry.first_chunk(self.current.name, seconds)
        if self.wiring.latency is not None:
            self.wiring.latency.observe_first_chunk(self.current.name, seconds, self.wall())

    def succeeded(self) -> float:
        """The attempt served the call; the call's time it ended at (for :meth:`finish_ok`)."""
        if self.records:  # only a call that failed before may hold a route's retries
            self.wiring.own.retried(self.current.name, self)
        # _record_health(SUCCESS), written out: every call that is served records one.
        transition = self.health.record(
            self.current.name,
            Outcome.SUCCESS,
            self.wall(),
            self.config.breaker,
            probe=self.probe,
            period=self.period if self.probe else None,
        )
        self.probe = False
        if transition is not None:
            self._breaker(transition)
        ended = self._end_attempt("success", None)
        self.served = route = self.current
        # A success on a recovering route is its probe's verdict: the route is healthy again
        # (any call may deliver it: a pinned one, or one with nowhere else to go).
        if self.health.recovered(route.name, self.wall()):
            self.wiring.own.forget(route.name)
            self.telemetry.emit(Probed(route.name, "success"), self.span)
        if self.probing == route.name:
            self.probing = None
        return ended

    # -- hedges -------------------------------------------------------------------------------
    def park(self) -> Parked:
        return Parked(
            self.current,
            self.attempt,
            self.attempt_span,
            self.attempt_context,
            self.probe,
            self.period,
            self.time,
        )

    def resume(self, parked: Parked) -> None:
        self.current, self.attempt = parked.current, parked.attempt
        self.attempt_span, self.attempt_context = parked.span, parked.context
        self.probe, self.period, self.time = parked.probe, parked.period, parked.time

    def hedge_after(self) -> float | None:
        """Seconds into the current stream attempt after which it hedges (``hedge_after``,
        or the route's learned quantile); None: it does not (off, pinned, effects, no swap
        left, not learned yet)."""
        hedge = self.derived.hedge
        if hedge is None:
            return None
        if not self.records and (budget := self.wiring.hedges) is not None:
            budget.called(self.current.name, self.wall())  # every stream call counts, once
        if self.pinned or self.attempt.effects or self.swaps >= self.config.max_swaps:
            return None
        seconds, quantile = hedge
        if quantile is None:
            return seconds
        latency = self.wiring.latency
        if latency is None:
            return None
        return latency.first_chunk_quantile(
            self.current.name, quantile, self.wall(), self.config.learned.min_samples
        )

    def hedge(self, after: float) -> Parked | None:
        """Start a hedge of the current attempt, ``after`` seconds into it: the route a swap
        would go to, if one is available and the route's hedge budget allows. The current
        attempt is parked (returned) and the hedge's begun (``self.attempt``); None: no hedge."""
        config, source = self.config, self.current.name
        if self.attempt.effects:  # something happened on it since it began: never twice
            return None
        unavailable = self.health.unavailable(self.wall())
        target = next(
            (
                route
                for route in policy.walk(config, self.requested.name, source)
                if route != source and route not in unavailable
            ),
            None,
        )
        if target is None:
            return None
        budget = self.wiring.hedges
        if budget is not None and not budget.take(source, self.wall(), config.learned.hedge_budget):
            return None
        parked = self.park()
        self.time = self.time.fork()
        self.swaps += 1
        self.retries = 0
        self.probe = False
        self.telemetry.emit(Hedged(source, target, after), self.span)
        self.current = self.wiring.route(target)
        self.begin()
        return parked

    def hedge_won(self, loser: Parked, hedge: bool) -> None:
        """The current attempt delivered first; ``loser`` is ended: not its route's fault
        (neutral for its health), its tokens counted as what failover cost."""
        winner = self.park()
        self.resume(loser)
        self._record_health(Outcome.NEUTRAL)
        if self.probing == loser.current.name:
            self._release_probe()
        self._end_attempt("aborted", None)
        self.telemetry.wasted(self.attempt)
        self.resume(winner)
        self.telemetry.emit(HedgeWon(self.current.name, loser.current.name, hedge), self.span)

    def lane_failed(self, parked: Parked, exc: BaseException) -> None:
        """``parked``'s attempt failed while another races on: it ends as a failure, its
        route cools down if the failure qualifies, and no decision is made (the other goes
        on serving the call)."""
        other = self.park()
        self.resume(parked)
        failure = self.classify(exc)
        qualifying = (
            policy.qualifies(self.config, failure)
            and not isinstance(exc, ABORTS)
            and not _starved(exc)
        )
        self._record_health(Outcome.FAILURE if qualifying else Outcome.NEUTRAL)
        outcome: Literal["failure", "rejected"] = (
            "rejected" if isinstance(exc, CircuitOpenError) else "failure"
        )
        self._end_attempt(outcome, failure)
        if (
            qualifying
            and failure.kind is not FailureKind.BREAKER_OPEN
            and not self._learned_hit(exc)
        ):
            self._cool_down(failure)
        elif self.probing == parked.current.name:
            self._release_probe()
        self.resume(other)

    # -- route choice -------------------------------------------------------------------------
    def _choose(
        self,
        pick: Callable[[Container[str]], T],
        now: float | None = None,
        unavailable: Container[str] | None = None,
    ) -> Steps[T]:
        """Run a route choice of the policy's, claiming the probe of the route it lands on when
        that route is recovering; a probe someone else took sends the walk past it.
        ``unavailable``: the store's view at ``now``, when the caller asked for it already."""
        health = self.health
        if now is None:
            now = self.wall()
        blocked: set[str] = set()
        while True:
            if unavailable is None:
                unavailable = health.unavailable(now)
            view = _Either(unavailable, blocked)
            unavailable = None  # a walk past a taken probe asks the store again
            choice = pick(view)
            route = _target(choice)
            if route is not None and route in view:
                self.known.add(route)  # every route was degraded: the call moves on knowingly
            if (
                route is None
                or route in blocked
                or not health.probe_due(route, now)
                or route == self.probing
            ):
                return choice
            if (yield Claim(health, route, now, self.lease_s)):
                self._release_probe()  # a call holds one probe at a time
                self.probing = route
                return choice
            blocked.add(route)  # taken since the walk looked: walk past it like the others

    def _release_probe(self) -> None:
        if self.probing is not None:
            self.health.release_probe(self.probing)
            self.telemetry.emit(Probed(self.probing, "inconclusive"), self.span)
            self.probing = None

    def _cool_down(self, failure: Failure) -> None:
        config, route = self.config, self.current.name
        if config.cooldown_s <= 0 and not failure.retry_after:
            if self.probing == route:
                self._release_probe()
            return
        longest = config.longest_cooldown_s
        rule = CooldownRule(config.cooldown_s, longest, min(failure.retry_after or 0.0, longest))
        cooldown = self.health.cool_down(route, self.wall(), rule, failure.kind.value)
        self.known.add(route)
        # Calls walk past the route while it cools and while it recovers after.
        self.wiring.own.remember(route, cooldown.until + longest)
        self.telemetry.emit(CooledDown(route, cooldown.seconds, cooldown.until), self.span)
        if self.probing == route:
            self.telemetry.emit(Probed(route, "failure"), self.span)
            self.probing = None

    def failed(
        self, exc: BaseException, discarded: Counter[str] | None = None
    ) -> Steps[policy.Decision]:
        """Account for a failed attempt and decide what comes next.

        The user's rules (classifiers, a ``fallback_on`` predicate) are asked once here; the
        time they take counts against the call's deadline, which the decision reads after
        them: a slow rule ends the call with its error rather than buying it more attempts.
        """
        failure = self.classify(exc)
        config = self.config
        if learned := self._learned_hit(exc):
            assert self.time.first_token_s is not None
            self.telemetry.emit(
                LearnedLimitHit(self.current.name, self.time.first_token_s, self.learned_p99),
                self.span,
            )
        act = policy.action(config, failure)
        qualifying = act != "surface"
        aborted = isinstance(exc, ABORTS)
        starved = _starved(exc)
        self._record_health(
            Outcome.FAILURE if qualifying and not aborted and not starved else Outcome.NEUTRAL
        )
        outcome: Literal["failure", "rejected", "aborted"] = (
            "aborted" if aborted else "rejected" if isinstance(exc, CircuitOpenError) else "failure"
        )
        self._end_attempt(outcome, failure)
        source = self.current.name
        if discarded:
            self.telemetry.emit(PartialDiscarded(source, discarded), self.span)
        if aborted:
            # Cancellation is the caller's decision, never a reason to move.
            self._release_probe()
            return GiveUp(GiveUpReason.NOT_QUALIFYING, qualifying=False)
        probe = self.probing == source
        now = self.wall()
        # One call at a time spends its retry budget on a failing route: another call that
        # fails there meanwhile treats it as degraded (it swaps), as it will once that call
        # gives up and cools it. Pinned calls keep their retries.
        busy = not self.pinned and not self.wiring.own.retry(
            source, self, now, now + max(self.time.remaining(), 0.0)
        )
        # A breaker that refused the attempt already keeps calls off the route; a timeout of a
        # starved process says nothing about it (the call still moves on: its time is going).
        # A first token later than the route's learned limit fails that attempt over; one slow
        # answer is not an outage, so the route is not cooled down for it (its breaker still
        # counts it: a route that is always that slow opens it).
        blame = (
            qualifying
            and failure.kind is not FailureKind.BREAKER_OPEN
            and not starved
            and not learned
        )
        try:
            decision = yield from self._choose(
                lambda degraded: policy.decide(
                    config,
                    failure,
                    requested=self.requested.name,
                    current=source,
                    retries=self.retries,
                    swaps=self.swaps,
                    degraded=(
                        frozenset()
                        if self.pinned
                        else _Either(degraded, {source})
                        if busy
                        else _Except(degraded, source)
                        if source in self.known
                        else degraded
                    ),
                    effects=bool(self.attempt.effects),
                    remaining_s=self.time.remaining(),
                    probe=probe,
                    rand=self.clock.random,
                    act=act,
                )
            )
        except Exception as error:
            # A decision that cannot be made (a config the policy cannot compute with) must
            # not replace the upstream failure: that error surfaces, with a note saying why.
            exc.add_note(f"swerve: no failover decision ({type(error).__name__}: {error})")
            decision = GiveUp(GiveUpReason.NOT_QUALIFYING, qualifying=qualifying)
        if not isinstance(decision, Retry):
            self.wiring.own.retried(source, self)
        if isinstance(decision, Retry):
            self.retries += 1
            self.telemetry.emit(
                Retried(source, self.attempt.number, decision.delay, failure), self.span
            )
            return decision
        if blame:
            self._cool_down(failure)
            # The fleet's next call must find it, however soon it starts: an async call waits
            # for its store to share it (a sync call's store did, on this thread).
            if (settle := getattr(self.health, "asettle", None)) is not None:
                yield Settle(settle)
        elif probe:
            self._release_probe()  # says nothing about the route: the next call may probe
        if isinstance(decision, Swap):
            for skipped in decision.skipped:
                self._skip(skipped)
            self.swaps += 1
            self.retries = 0
            # A retry the route's health refused says so ("degraded"), not the failure's kind.
            why = "degraded" if decision.degraded else failure.kind.value
            self.telemetry.emit(Swapped(source, decision.route, why, self.swaps), self.span)
            self.current = self.wiring.route(decision.route)
        else:
            self.telemetry.emit(SwapDeclined(source, decision.reason.value), self.span)
        return decision

    def failed_mid_stream(self, exc: BaseException, partial: tuple[object, ...]) -> MidStreamError:
        """A live stream broke after output reached the consumer: degrade, report, surface."""
        failure = self.classify(exc)
        qualifying = policy.qualifies(self.config, failure) and not _starved(exc)
        self._record_health(Outcome.FAILURE if qualifying else Outcome.NEUTRAL)
        self._end_attempt("failure", failure)
        if qualifying:
            self._cool_down(failure)
        else:
            self._release_probe()
        self.telemetry.emit(SwapDeclined(self.current.name, "mid_stream"), self.span)
        error = MidStreamError(self.current, self.requested, failure, partial)
        error.__cause__ = exc
        return error

    # -- the call -----------------------------------------------------------------------------
    def unary(self, fn: Callable[[Attempt], object]) -> Steps[Result[Any]]:
        """The whole of a unary call: attempts until one succeeds or the error surfaces."""
        try:
            yield from self.start()
            while True:
                attempt = self.begin()
                try:
                    yield from self.admit()
                    value = yield Invoke(fn, attempt, self.attempt_context, self.time.next_limit)
                except BaseException as exc:
                    decision = yield from self.failed(exc)
                    if isinstance(decision, Retry):
                        yield Sleep(self.clock, self.time.wait(decision.delay))
                        continue
                    if isinstance(decision, Swap):
                        continue
                    raise
                return self.finish_ok(value, self.succeeded())
        except BaseException as exc:
            self.finish_error(exc)
            raise

    def classify(self, exc: BaseException) -> Failure:
        """``exc``'s Failure, asking the rules only for an error not classified already."""
        judged = self.judged
        if judged is not None and judged[0] is exc:
            return judged[1]
        failure = self.wiring.classify(exc)
        self.judged = (exc, failure)
        return failure

    def _summarise(self, attrs: dict[str, AttributeValue]) -> None:
        # Retries and swaps only when there were some: each attribute costs on the hot path.
        attrs[CALL_ATTEMPTS] = len(self.records)
        if len(self.records) > 1:
            attrs[CALL_RETRIES] = sum(1 for r in self.records if r.retry > 0)
            attrs[CALL_SWAPS] = self.swaps
        self.span.set_attributes(attrs)

    def finish_ok(self, value: T, ended: float) -> Result[T]:
        """The call is served; ``ended``: when its serving attempt ended (what
        :meth:`succeeded` returned), which is when the call's time ends too."""
        served = self.served or self.current
        duration = ended - self.time.t0
        records = self.records
        added = None
        if len(records) > 1:  # a first-try success adds nothing; keep it off the hot path
            added = max(duration - records[-1].duration_s, 0.0)
        span = self.span
        # Untraced (no context), the span is the caller's, recording nothing: nothing to end.
        if self.context is not None:
            if span.is_recording():  # else the attributes go nowhere: none is built
                # _summarise(), written out: every served call ends here.
                named = self.requested.model
                attrs = self.telemetry.answered(
                    span,
                    self.wiring.operation,
                    named,
                    self.asked or named,
                    self.attempt,
                    self.nested,
                )
                attrs |= {
                    ROUTE_SERVED: served.name,
                    CALL_ATTEMPTS: len(records),
                }
                if len(records) > 1:
                    attrs[CALL_RETRIES] = sum(1 for r in records if r.retry > 0)
                    attrs[CALL_SWAPS] = self.swaps
                span.set_attributes(attrs)
            span.end()
        if self.metered:  # else call_ended() would measure nothing
            self.telemetry.call_ended(
                self.requested.name,
                duration,
                served=served.name,
                added=added,
                inference=(self.wiring.operation, self.attempt, self.nested),
                context=self.context,
            )
        # result(), written out
        return Result(value, served, self.requested, tuple(records), tuple(self.skipped))

    def finish_error(self, exc: BaseException) -> None:
        """The call surfaces ``exc``: its note, its duration metric and (when traced) its span's
        status, whether or not a tracer records; a failed call is off the hot path."""
        self._release_probe()  # the call ended on an error of its own, not the route's
        self.wiring.own.retried(self.current.name, self)
        failure = self.classify(
            exc.__cause__ if isinstance(exc, MidStreamError) and exc.__cause__ else exc
        )
        if self.span.is_recording():
            self._summarise({ERROR_TYPE: failure.error_type})
            self.span.set_status(Status(StatusCode.ERROR, failure.kind.value))
        self.span.end()
        self.telemetry.call_ended(
            self.requested.name,
            self.time.in_call(),
            error_type=failure.error_type,
            # A call that ended before its first attempt began: the one it would have made.
            inference=(self.wiring.operation, self._attempt_or_first(), self.nested),
            context=self.context,
            metered=self.metered,
        )
        _annotate(exc, self.requested, self.records)

    def _attempt_or_first(self) -> Attempt:
        attempt: Attempt | None = getattr(self, "attempt", None)
        return attempt if attempt is not None else Attempt(self.current, self.requested)

    def result(self, value: T) -> Result[T]:
        served = self.served or self.current
        return Result(value, served, self.requested, tuple(self.records), tuple(self.skipped))


def _starved(exc: BaseException) -> bool:
    """A timeout whose timer fired far too late: this process, not the route, was slow."""
    return isinstance(exc, AttemptTimeout) and exc.starved


def _target(choice: object) -> str | None:
    """The route a start (``(route, skipped)``) or a :class:`Swap` lands on."""
    if isinstance(choice, Swap):
        return choice.route
    if isinstance(choice, tuple) and choice and isinstance(choice[0], str):
        return choice[0]
    return None


class _Either:
    """The store's routes to walk past, plus those this call found taken, without copying.

    It remembers its last answer: the walk's last question is about the route it lands on,
    which :meth:`Call._choose` asks again (one store lookup per choice, not two)."""

    __slots__ = ("_answer", "_base", "_extra", "_last")

    def __init__(self, base: Container[str], extra: set[str]) -> None:
        self._base = base
        self._extra = extra
        self._last: object = None
        self._answer = False

    def __contains__(self, route: object) -> bool:
        if route is not self._last:
            self._answer = route in self._extra or route in self._base
            self._last = route
        return self._answer


class _Except:
    """The store's routes to walk past, but for ``route`` (one this call knew was degraded:
    its retries there stand; the policy still walks past it on a swap)."""

    __slots__ = ("_base", "_route")

    def __init__(self, base: Container[str], route: str) -> None:
        self._base = base
        self._route = route

    def __contains__(self, route: object) -> bool:
        return route != self._route and route in self._base


def _annotate(exc: BaseException, requested: Route, records: list[AttemptRecord]) -> None:
    """The error that surfaces keeps its type; a note says what swerve tried."""
    if isinstance(exc, ABORTS) or not records:
        return
    tried = ", ".join(f"{r.route}#{r.number}" for r in records)
    exc.add_note(f"swerve: requested {requested}; attempts: {tried}")
