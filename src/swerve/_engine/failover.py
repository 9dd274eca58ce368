"""The engine's front: :class:`Failover` runs calls (sync, async, unary, streaming) on routes.

Each call gets the Failover's :class:`~swerve._engine.call.Wiring` and the config in force, and
its decisions are written once (:mod:`swerve._engine.call`, :mod:`swerve._engine.streams`); the
sync and async methods here differ only in how they drive them. The policy decides, the health store
remembers, telemetry reports, and the :class:`~swerve.Clock` tells the time.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import os
import threading
from collections.abc import AsyncIterable, Awaitable, Callable, Iterable
from functools import partial
from typing import TypeVar, cast

from .._failures import Classifier, Classifiers
from .._health.store import HealthStore, MemoryHealth
from .._telemetry.telemetry import Telemetry, default_telemetry
from .call import Call, Derived, Latency, Wiring
from .clock import SYSTEM_CLOCK, Clock
from .config import DEFAULT_ENV_VAR, EnvConfig, FallbackConfig
from .hedging import HedgeBudget
from .results import Attempt, CooldownLearned, Result, StreamReset, StreamSpec, passthrough
from .routes import Route
from .steps import run_async, run_sync
from .streams import AsyncFailoverStream, FailoverStream, MidStream

__all__ = ["HEALTH_PREFIX_VAR", "HEALTH_URL_VAR", "Failover", "default_health"]

T = TypeVar("T")
C = TypeVar("C")
_log = logging.getLogger("swerve")
# Parsed routes kept for reuse. Routes are few in practice; a caller that sends a new name per
# call (a model id from user input) must not grow this without bound, so past it the cache
# starts over (the hot routes are back in it after one call each).
ROUTE_CACHE_SIZE = 1024

# The process-wide store runs on the system clock, so it watches the monotonic clock for
# wall-clock steps (a Failover with an injected clock should bring its own store).
_DEFAULT_HEALTH = MemoryHealth(clock=SYSTEM_CLOCK)
HEALTH_URL_VAR = "SWERVE_HEALTH_URL"
HEALTH_PREFIX_VAR = "SWERVE_HEALTH_PREFIX"
_SHARED: dict[str, HealthStore] = {}
_SHARED_LOCK = threading.Lock()


def _learns_latency(health: object) -> bool:
    return hasattr(health, "observe_first_chunk") and hasattr(health, "first_chunk_quantile")


def default_health() -> HealthStore:
    """The process-wide store: a :class:`RedisHealth` on ``$SWERVE_HEALTH_URL`` when it is set
    (one per URL, shared by every Failover), else one in-memory store."""
    url = os.environ.get(HEALTH_URL_VAR, "").strip()
    if not url:
        return _DEFAULT_HEALTH
    with _SHARED_LOCK:
        store = _SHARED.get(url)
        if store is None:
            from .._health.redis import RedisHealth

            prefix = os.environ.get(HEALTH_PREFIX_VAR, "") or "swerve"
            store = _SHARED[url] = RedisHealth.from_url(url, prefix=prefix)
        return store


class _Routes:
    """Routes parsed once and kept (routes are few, calls are many)."""

    __slots__ = ("_parsed",)

    def __init__(self) -> None:
        self._parsed: dict[str, Route] = {}

    def parse(self, value: str) -> Route:
        route = self._parsed.get(value)
        if route is None:
            route = Route.parse(value)
            if len(self._parsed) >= ROUTE_CACHE_SIZE:
                self._parsed = {}  # a fresh dict: a reader on another thread keeps the old one
            self._parsed[value] = route
        return route


class _OwnCooldowns:
    """The routes this Failover degraded itself (a cooldown, an opened breaker), each with the
    time until which a call walking past it does so because of what this Failover learned.

    A skip of any other route was caused elsewhere: another Failover on the same store (the
    process-wide one, by default), another process through Redis, an operator. Bounded like the
    route cache: past it, the route remembered longest ago is forgotten first.
    """

    __slots__ = ("_lock", "_retrying", "_until")

    def __init__(self) -> None:
        self._until: dict[str, float] = {}
        # route -> (the call retrying it, until when): one call's budget per failing route at
        # a time; the others that fail there meanwhile swap (issue 20).
        self._retrying: dict[str, tuple[object, float]] = {}
        self._lock = threading.Lock()

    def retry(self, route: str, call: object, now: float, until: float) -> bool:
        """Whether ``call`` may retry ``route``: no other call of this Failover is retrying
        it (a hold lasts until ``until`` at most, so a lost call cannot keep it)."""
        with self._lock:
            held = self._retrying.get(route)
            if held is not None and held[0] is not call and now < held[1]:
                return False
            if held is None and len(self._retrying) >= ROUTE_CACHE_SIZE:
                del self._retrying[next(iter(self._retrying))]
            self._retrying[route] = (call, until)
            return True

    def retried(self, route: str, call: object) -> None:
        """``call`` is done with ``route`` (it succeeded, moved on, or ended)."""
        with self._lock:
            held = self._retrying.get(route)
            if held is not None and held[0] is call:
                del self._retrying[route]

    def remember(self, route: str, until: float) -> None:
        with self._lock:
            until = max(until, self._until.pop(route, until))  # re-added last: the newest
            if len(self._until) >= ROUTE_CACHE_SIZE:
                del self._until[next(iter(self._until))]
            self._until[route] = until

    def forget(self, route: str) -> None:
        with self._lock:
            self._until.pop(route, None)

    def clear(self) -> None:
        with self._lock:
            self._until = {}

    def learned(self, route: str, now: float) -> CooldownLearned:
        until = self._until.get(route)
        return "this_failover" if until is not None and now < until else "elsewhere"


class Failover:
    """Runs calls on routes with retries, swaps, cooldowns and breakers.

    ``config``: a :class:`FallbackConfig`, or None to read ``$SWERVE_FALLBACK_CONFIG`` (re-read
    whenever the variable changes; a change clears cooldowns). With no config, or
    ``max_swaps=0``, calls pass straight through: one attempt, nothing added.
    ``health``: where cooldowns and breakers live; by default one in-memory store per process,
    shared by every Failover, so a route degraded by one wrapper is skipped by all (each
    ``swerve.route_skipped`` event says whether this Failover learned the cooldown or it was
    learned elsewhere). Pass ``health=MemoryHealth()`` for a Failover that decides alone.
    ``clock``: the one source of time, waiting and backoff jitter (:class:`~swerve.Clock`);
    tests pass :class:`swerve.testing.FakeClock`.
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
        clock: Clock = SYSTEM_CLOCK,
        classifiers: Iterable[Classifier] = (),
    ) -> None:
        self._fixed = config
        self._env = None if config is not None else EnvConfig(env_var)
        self._generation = 0
        self._routes = _Routes()
        self._pinned: tuple[FallbackConfig, FallbackConfig] | None = None
        self._ready_for: FallbackConfig | None = None  # the config its store was readied for
        self._derived: tuple[FallbackConfig, Derived] | None = None  # kept for the config in force
        health = health if health is not None else default_health()
        telemetry = telemetry if telemetry is not None else default_telemetry()
        telemetry.watch(health)
        self._classifiers = Classifiers(classifiers)
        self._own = _OwnCooldowns()
        self._wiring = Wiring(
            clock,
            health,
            telemetry,
            self._classifiers,
            operation,
            self._routes.parse,
            self._own,
            # The in-process store answers at once, sync or async: its calls need no driver.
            waitless=type(health) is MemoryHealth,
            # A store that learns its routes' latency (optional in the store protocol).
            latency=cast(Latency, health) if _learns_latency(health) else None,
            hedges=HedgeBudget(),
        )
        if config is not None:  # a shared store learns the config's bounds now, no waiting
            self._ready(config, False)
        # Every series the config's routes can count starts at 0 now, not at its first
        # increment, so a backend's rate() counts the first burst.
        if (initial := config if self._env is None else self._env.current()) is not None:
            telemetry.seed(initial)

    def with_classifiers(self, *classifiers: Classifier) -> Failover:
        """This Failover with ``classifiers`` tried before its own rules: the same config (or
        env var), health store, telemetry, clock and operation. An adapter uses it to teach a
        Failover it was handed the errors its framework raises; rules already there are not
        added twice."""
        other = copy.copy(self)
        other._classifiers = self._classifiers.after(classifiers)
        other._wiring = dataclasses.replace(self._wiring, classify=other._classifiers)
        return other

    @property
    def health(self) -> HealthStore:
        return self._wiring.health

    @property
    def telemetry(self) -> Telemetry:
        return self._wiring.telemetry

    @property
    def operation(self) -> str:
        return self._wiring.operation

    @property
    def config(self) -> FallbackConfig | None:
        """The config in force now (re-read from the environment when it came from there)."""
        if self._env is None:
            return self._fixed
        config = self._env.current()
        if self._env.generation != self._generation:
            self._generation = self._env.generation
            self.health.clear()  # a new config starts from a clean slate
            self._own.clear()
            if config is not None:  # its routes' series start at 0 too
                self.telemetry.seed(config)
        return config

    def route(self, value: str | Route) -> Route:
        """Parse a route once and keep it (routes are few, calls are many)."""
        return value if isinstance(value, Route) else self._routes.parse(value)

    def _active(self, pin: bool) -> FallbackConfig | None:
        config = self.config
        if config is None or not config.enabled:
            return None
        if pin:  # the same config with an empty map: nowhere to walk or swap to
            if self._pinned is None or self._pinned[0] is not config:
                self._pinned = (config, config.model_copy(update={"fallbacks": {}}))
            return self._pinned[1]
        return config

    def _open_call(
        self, requested: Route, pin: bool, stream: bool, wait: bool = True
    ) -> Call | None:
        """A new call on ``requested`` under the config in force, or None when swerve is off."""
        # _active, written out for a fixed config: every call opens here.
        config = self._fixed if self._env is None else self.config
        if config is None:
            return None
        derived = self._derived
        if derived is None or derived[0] is not config:
            # The pinned copy differs only in its map: what is derived holds for both.
            derived = self._derived = (config, Derived(config))
            self._learns(config)
        if not derived[1].enabled:
            return None
        if pin:
            config = self._active(pin)
            assert config is not None
        if config is not self._ready_for:
            self._ready(config, wait)
        return Call(self._wiring, config, requested, stream=stream, pinned=pin, derived=derived[1])

    def _learns(self, config: FallbackConfig) -> None:
        """Say so, once per config, when the config reads learned latency from a store that
        keeps none (a store of the user's without the optional methods): its adaptive limit
        stays at the ceiling and a quantile hedge never starts."""
        learned = config.first_token_timeout_s == "adaptive" or isinstance(config.hedge_after, str)
        if learned and self._wiring.latency is None:
            _log.warning(
                "%s keeps no learned latency (observe_first_chunk, first_chunk_quantile): "
                'first_token_timeout_s="adaptive" stays at learned.ceiling_s and hedge_after '
                "by quantile never hedges",
                type(self._wiring.health).__name__,
            )

    def _ready(self, config: FallbackConfig, wait: bool) -> None:
        """A shared store (``RedisHealth.ready``) learns the config's bounds, and gets a short,
        bounded moment for its first sync before this Failover's first decision, so a new
        process finds the outages its fleet knows of. Any other store: nothing to do."""
        ready = getattr(self._wiring.health, "ready", None)
        if ready is None or ready(config, wait=wait):
            self._ready_for = config

    async def _aready(self, pin: bool) -> None:
        config = self._active(pin)
        if config is None or config is self._ready_for:
            return
        aready = getattr(self._wiring.health, "aready", None)
        if aready is None or await aready(config):
            self._ready_for = config

    # -- unary --------------------------------------------------------------------------------
    def call(
        self, route: str | Route, fn: Callable[[Attempt], T], *, pin: bool = False
    ) -> Result[T]:
        """Run ``fn(attempt)`` on ``route``, retrying and swapping per the config.

        ``pin=True`` keeps the call on ``route``: no swaps, no walk past a cooling route (for
        an evaluation that must not change models); retries still apply.
        """
        if isinstance(route, Route):
            requested = route
        else:  # route(), written out: every call asks
            parsed = self._routes._parsed.get(route)
            requested = parsed if parsed is not None else self._routes.parse(route)
        if (run := self._open_call(requested, pin, False)) is None:
            clock = self._wiring.clock
            t0 = clock.monotonic()
            value = fn(Attempt(requested, requested))
            return passthrough(requested, value, clock.monotonic() - t0)
        return run_sync(run.unary(fn))

    async def acall(
        self, route: str | Route, fn: Callable[[Attempt], Awaitable[T]], *, pin: bool = False
    ) -> Result[T]:
        """Async :meth:`call`; time limits are enforced by cancelling the attempt."""
        requested = self.route(route)
        if pin or self._env is not None or self._ready_for is not self._fixed:
            await self._aready(pin)  # else a fixed config its store is ready for: nothing to do
        if (run := self._open_call(requested, pin, False, wait=False)) is None:
            clock = self._wiring.clock
            t0 = clock.monotonic()
            value = await fn(Attempt(requested, requested))
            return passthrough(requested, value, clock.monotonic() - t0)
        return await run_async(run.unary(fn))

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
        requested = self.route(route)
        opener = partial(self._open_call, requested, pin, True)
        return FailoverStream(
            opener, requested, fn, spec or StreamSpec(), mid_stream, True, self._wiring.clock
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
        requested = self.route(route)
        opener = partial(self._open_call, requested, pin, True, False)  # never block a loop
        # The first chunk awaits the store's first sync, as acall does; once the store is
        # ready (the flag), a stream adds nothing.
        ready = partial(self._aready, pin) if self._ready_for is None else None
        return AsyncFailoverStream(
            opener,
            requested,
            fn,
            spec or StreamSpec(),
            mid_stream,
            True,
            self._wiring.clock,
            ready=ready,
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
        requested = self.route(route)
        opener = partial(self._open_call, requested, False, True)
        stream = FailoverStream(
            opener, requested, fn, spec or StreamSpec(), "error", False, self._wiring.clock
        )
        chunks = [c for c in stream if not isinstance(c, StreamReset)]
        return stream.result(chunks)
