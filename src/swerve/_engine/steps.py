"""The seam between the engine's decisions and everything that waits, for sync and async alike.

A call is written once, as a generator (:data:`Steps`) that yields what it waits on: the
health store's answer (a probe :class:`Claim`, a breaker :class:`Admit`), the adapter's
function (:class:`Invoke`), its stream (:class:`Open`, :class:`Pull`, :class:`Close`), a
backoff (:class:`Sleep`), or output for the consumer (:class:`Out`). The sync drivers answer
with the blocking call, the async drivers await its async twin, so a shared store (Redis)
never blocks an event loop and no decision is written twice (stamina's one retrying object
with thin sync and async drivers is the model). An error raised while waiting is thrown into
the generator where it waited, as if the call had been made there.

The waits are slotted dataclasses, not frozen ones: every attempt and every read makes one,
and a frozen one's ``__init__`` sets each field through ``object.__setattr__`` (about three
times the cost). Nothing keeps one past the answer to it.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import queue
import threading
from collections.abc import (
    AsyncIterator,
    Awaitable,
    Callable,
    Coroutine,
    Generator,
    Iterator,
)
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, cast

from opentelemetry.context import Context, attach, detach

from .._failures import AttemptTimeout

if TYPE_CHECKING:
    from .._health.store import HealthStore
    from .clock import Clock
    from .config import BreakerConfig
    from .results import Attempt

__all__ = [
    "END",
    "HEDGE_DUE",
    "Abandon",
    "Admit",
    "Claim",
    "Close",
    "Invoke",
    "Lane",
    "LaneFailed",
    "Open",
    "Out",
    "Pull",
    "Race",
    "Settle",
    "Sleep",
    "Steps",
    "Wait",
    "drive_async",
    "drive_sync",
    "run_async",
    "run_sync",
]

T = TypeVar("T")
END: Any = object()
"""What :class:`Pull` answers when the upstream has no more chunks."""
HEDGE_DUE: Any = object()
"""What a :class:`Race` with no limit answers when its time passed and no lane had a chunk."""

Limits = Callable[[bool], tuple[str | None, float | None]]
"""``committed -> (limit, seconds)``: the limit that ends soonest for the next wait."""


class Wait(Protocol):
    """Something a call waits on, answered by :meth:`run` (sync) or :meth:`arun` (async)."""

    def run(self) -> object: ...

    def arun(self) -> Coroutine[Any, Any, object]: ...


@dataclass(slots=True)
class Out:
    """Chunks for the consumer of a stream (the drivers yield them; the answer is None)."""

    items: list[Any]


Steps = Generator[Wait | Out, Any, T]


@dataclass(slots=True)
class Claim:
    """Take ``route``'s recovery probe for ``lease_s`` seconds; answered with a bool."""

    health: HealthStore
    route: str
    now: float
    lease_s: float

    def run(self) -> bool:
        return self.health.claim_probe(self.route, self.now, self.lease_s)

    async def arun(self) -> bool:
        return await self.health.aclaim_probe(self.route, self.now, self.lease_s)


@dataclass(slots=True)
class Admit:
    """Ask ``route``'s breaker to admit an attempt; answered with (admission, transition)."""

    health: HealthStore
    route: str
    now: float
    config: BreakerConfig
    lease_s: float

    def run(self) -> object:
        return self.health.admit(self.route, self.now, self.config, lease_s=self.lease_s)

    async def arun(self) -> object:
        return await self.health.aadmit(self.route, self.now, self.config, lease_s=self.lease_s)


@dataclass(slots=True)
class Settle:
    """Wait until a shared store has shared what the call just decided (``settle``, the
    store's ``asettle``). A sync call's store shared it before the decision returned."""

    settle: Callable[[], Awaitable[None]]

    def run(self) -> None:
        return None

    async def arun(self) -> None:
        await self.settle()


@dataclass(slots=True)
class Sleep:
    """Wait out a backoff on the call's clock."""

    clock: Clock
    seconds: float

    def run(self) -> None:
        self.clock.sleep(self.seconds)

    async def arun(self) -> None:
        await self.clock.async_sleep(self.seconds)


# The adapter's code runs with the attempt's span current (``context``), so its HTTP spans nest
# under it; None runs it as it is. Made current with attach/detach written out, not a context
# manager: every attempt and every chunk of a stream passes here.


@dataclass(slots=True)
class Invoke:
    """Run the adapter's function on an attempt; answered with its value. Async code is held
    to the attempt's limits by cancelling it; sync code gets them as ``attempt.timeout``."""

    fn: Callable[[Attempt], Any]  # a value (sync), an awaitable of one (async)
    attempt: Attempt
    context: Context | None
    limits: Limits

    def run(self) -> object:
        if self.context is None:
            return self.fn(self.attempt)
        token = attach(self.context)
        try:
            return self.fn(self.attempt)
        finally:
            detach(token)

    async def arun(self) -> object:
        limit, seconds = self.limits(True)
        if self.context is None:
            return await bounded(self.fn(self.attempt), limit, seconds)
        token = attach(self.context)
        try:
            return await bounded(self.fn(self.attempt), limit, seconds)
        finally:
            detach(token)


@dataclass(slots=True)
class Open:
    """Start the adapter's stream on an attempt; answered with its (async) iterator."""

    fn: Callable[[Attempt], Any]
    attempt: Attempt
    context: Context | None

    def run(self) -> object:
        if self.context is None:
            return iter(self.fn(self.attempt))
        token = attach(self.context)
        try:
            return iter(self.fn(self.attempt))
        finally:
            detach(token)

    async def arun(self) -> object:
        if self.context is None:
            return aiter(self.fn(self.attempt))
        token = attach(self.context)
        try:
            return aiter(self.fn(self.attempt))
        finally:
            detach(token)


@dataclass(slots=True)
class Pull:
    """The upstream's next chunk, or :data:`END`. Async waits are cut at the soonest limit;
    a sync wait cannot be pre-empted, so a chunk that came after its limit is a timeout
    (``late`` raises it)."""

    upstream: Any
    context: Context | None
    committed: bool
    limits: Limits
    late: Callable[[bool], None]

    def run(self) -> object:
        if self.context is None:
            chunk = next(self.upstream, END)
        else:
            token = attach(self.context)
            try:
                chunk = next(self.upstream, END)
            finally:
                detach(token)
        if chunk is not END:
            self.late(self.committed)
        return chunk

    async def arun(self) -> object:
        limit, seconds = self.limits(self.committed)
        if self.context is None:
            return await bounded(anext(self.upstream, END), limit, seconds)
        token = attach(self.context)
        try:
            return await bounded(anext(self.upstream, END), limit, seconds)
        finally:
            detach(token)


@dataclass(slots=True)
class Close:
    """Close the upstream of a failed attempt; a broken upstream must not mask the failure."""

    upstream: object

    def run(self) -> None:
        close = getattr(self.upstream, "close", None)
        if close is not None:
            with contextlib.suppress(Exception):
                close()

    async def arun(self) -> None:
        aclose = getattr(self.upstream, "aclose", None)
        if aclose is not None:
            with contextlib.suppress(Exception):
                await aclose()


class LaneFailed(Exception):
    """A :class:`Race` lane's upstream raised ``error``; the other lanes pull on."""

    def __init__(self, lane: Lane, error: BaseException) -> None:
        super().__init__(lane, error)
        self.lane = lane
        self.error = error


class Lane:
    """One upstream of a hedged stream, pulled apart from the call's own waits: its next chunk
    is fetched in a task (async) or a thread (sync), so a wait that ends first (the hedge's
    time, another lane's chunk) leaves this pull running for the next :class:`Race`."""

    __slots__ = ("_abandoned", "_lock", "_pending", "_pulling", "context", "upstream")

    def __init__(self, upstream: Any, context: Context | None) -> None:
        self.upstream = upstream
        self.context = context
        # async: the task of the next chunk; sync: True from a pull's start until a Race took
        # its chunk from the inbox.
        self._pending: Any = None
        self._pulling = False  # sync: a thread is inside next() (the upstream is running)
        self._abandoned = False
        self._lock = threading.Lock()

    def _pull_sync(self, into: queue.SimpleQueue[tuple[Lane, bool, Any]]) -> None:
        """One ``next()`` in a thread, in this lane's context; an abandoned lane closes its
        upstream itself once the pull returns (it cannot be closed while running)."""

        def pull() -> None:
            token = attach(self.context) if self.context is not None else None
            try:
                item: tuple[Lane, bool, Any] = (self, True, next(self.upstream, END))
            except BaseException as exc:
                item = (self, False, exc)
            finally:
                if token is not None:
                    detach(token)
            with self._lock:
                self._pulling = False
                abandoned = self._abandoned
                if not abandoned:
                    into.put(item)
            if abandoned:
                _close_quietly(self.upstream)

        self._pending = self._pulling = True
        run = contextvars.copy_context().run
        threading.Thread(target=run, args=(pull,), daemon=True, name="swerve-hedge").start()

    def _abandon_sync(self) -> None:
        with self._lock:
            self._abandoned = True
            pulling = self._pulling
        if not pulling:
            _close_quietly(self.upstream)

    def _pull_async(self) -> asyncio.Future[Any]:
        if self._pending is None:
            token = attach(self.context) if self.context is not None else None
            try:  # the task copies the context current now: the attempt's span
                self._pending = asyncio.ensure_future(anext(self.upstream, END))
            finally:
                if token is not None:
                    detach(token)
        return cast("asyncio.Future[Any]", self._pending)


def _close_quietly(upstream: object) -> None:
    close = getattr(upstream, "close", None)
    if close is not None:
        with contextlib.suppress(Exception):
            close()


@dataclass(slots=True)
class Race:
    """The next chunk of whichever lane has one first: answered with ``(lane, chunk)``; a lane
    whose upstream failed raises :class:`LaneFailed`. Past ``seconds`` it is a timeout of
    ``limit`` (an :class:`AttemptTimeout`), or, with no limit, :data:`HEDGE_DUE`."""

    lanes: list[Lane]
    limit: str | None
    seconds: float | None
    inbox: queue.SimpleQueue[tuple[Lane, bool, Any]]

    def run(self) -> object:
        for lane in self.lanes:
            if lane._pending is None:  # else its pull runs, or its chunk waits in the inbox
                lane._pull_sync(self.inbox)
        try:
            if self.seconds is None:
                lane, ok, got = self.inbox.get()
            else:
                lane, ok, got = self.inbox.get(timeout=max(self.seconds, 0.0))
        except queue.Empty:
            return self._timed_out()
        lane._pending = None
        if not ok:
            raise LaneFailed(lane, got)
        return lane, got

    async def arun(self) -> object:
        pending = {lane._pull_async(): lane for lane in self.lanes}
        seconds = None if self.seconds is None else max(self.seconds, 0.0)
        done, _ = await asyncio.wait(pending, timeout=seconds, return_when="FIRST_COMPLETED")
        if not done:
            return self._timed_out()
        # The first lane in order among those done: deterministic when both came at once.
        lane = next(lane for future, lane in pending.items() if future in done)
        future = lane._pending
        lane._pending = None
        error = future.exception()
        if error is not None:
            raise LaneFailed(lane, error)
        return lane, future.result()

    def _timed_out(self) -> object:
        if self.limit is None:
            return HEDGE_DUE
        raise AttemptTimeout(self.limit, max(self.seconds or 0.0, 0.0))


@dataclass(slots=True)
class Abandon:
    """Stop a lane that lost its race: its pending pull is cancelled (async) or left to end by
    itself (sync: a blocked ``next()`` cannot be interrupted; the lane closes its upstream when
    it returns), and its upstream closed."""

    lane: Lane

    def run(self) -> None:
        self.lane._abandon_sync()

    async def arun(self) -> None:
        lane = self.lane
        lane._abandoned = True
        task, lane._pending = lane._pending, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
        aclose = getattr(lane.upstream, "aclose", None)
        if aclose is not None:
            with contextlib.suppress(Exception):
                await aclose()


async def bounded(awaitable: Awaitable[T], limit: str | None, seconds: float | None) -> T:
    """Await ``awaitable`` for at most ``seconds``; past them it is an :class:`AttemptTimeout`."""
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
            # How late the timer fired is the evidence of a starved process (read only here,
            # off the healthy path): a loop busy elsewhere could not have read the answer.
            when = scope.when()
            late = asyncio.get_running_loop().time() - when if when is not None else 0.0
            raise AttemptTimeout(limit, seconds, late_s=max(late, 0.0)) from None
        raise


class _Cursor:
    """Where a driver is in ``steps``: the next thing to wait on, given the last answer or
    error. The drivers below differ only in how they wait and how they hand chunks on."""

    __slots__ = ("_result", "_steps", "answer", "error")

    def __init__(self, steps: Steps[Any], result: list[Any] | None) -> None:
        self._steps = steps
        self._result = result
        self.answer: object = None
        self.error: BaseException | None = None

    def next(self) -> Wait | Out | None:
        """The next thing to wait on, or None when the steps are done."""
        answer, error, self.answer, self.error = self.answer, self.error, None, None
        try:
            return self._steps.send(answer) if error is None else self._steps.throw(error)
        except StopIteration as done:
            if self._result is not None:
                self._result.append(done.value)
            return None


def drive_sync(steps: Steps[T], result: list[T] | None = None) -> Iterator[Any]:
    """Run ``steps`` with blocking calls, yielding its output; its value goes to ``result``."""
    cursor = _Cursor(steps, result)
    while (ask := cursor.next()) is not None:
        try:
            if isinstance(ask, Out):
                yield from ask.items
            else:
                cursor.answer = ask.run()
        except BaseException as exc:  # the consumer's close() included: the steps decide
            cursor.error = exc


async def drive_async(steps: Steps[T], result: list[T] | None = None) -> AsyncIterator[Any]:
    """:func:`drive_sync`, awaiting each wait."""
    cursor = _Cursor(steps, result)
    while (ask := cursor.next()) is not None:
        try:
            if isinstance(ask, Out):
                for item in ask.items:
                    yield item
            else:
                cursor.answer = await ask.arun()
        except BaseException as exc:  # the consumer's aclose() included: the steps decide
            cursor.error = exc


def run_sync(steps: Steps[T]) -> T:
    """Run steps that produce no output (a unary call) to their value, blocking.

    :func:`drive_sync` with its output dropped, written out: every unary call runs it."""
    answer: object = None
    error: BaseException | None = None
    while True:
        try:
            ask = steps.send(answer) if error is None else steps.throw(error)
        except StopIteration as done:
            value: T = done.value  # typed here, not through cast(): a call per call
            return value
        answer = error = None
        try:
            if type(ask) is Invoke:  # Invoke.run, written out: every attempt makes one
                if ask.context is None:
                    answer = ask.fn(ask.attempt)
                else:
                    token = attach(ask.context)
                    try:
                        answer = ask.fn(ask.attempt)
                    finally:
                        detach(token)
            elif not isinstance(ask, Out):
                answer = ask.run()
        except BaseException as exc:  # the steps decide
            error = exc


async def run_async(steps: Steps[T]) -> T:
    """:func:`run_sync`, awaiting each wait."""
    answer: object = None
    error: BaseException | None = None
    while True:
        try:
            ask = steps.send(answer) if error is None else steps.throw(error)
        except StopIteration as done:
            value: T = done.value  # typed here, not through cast(): a call per call
            return value
        answer = error = None
        if isinstance(ask, Out):
            continue
        try:
            answer = await ask.arun()
        except BaseException as exc:  # the steps decide
            error = exc
