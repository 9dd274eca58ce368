"""The seam between the engine's decisions and everything that waits, for sync and async alike.

A call is written once, as a generator (:data:`Steps`) that yields what it waits on: the
health store's answer (a probe :class:`Claim`, a breaker :class:`Admit`), the adapter's
function (:class:`Invoke`), its stream (:class:`Open`, :class:`Pull`, :class:`Close`), a
backoff (:class:`Sleep`), or output for the consumer (:class:`Out`). The sync drivers answer
with the blocking call, the async drivers await its async twin, so a shared store (Redis)
never blocks an event loop and no decision is written twice (stamina's one retrying object
with thin sync and async drivers is the model). An error raised while waiting is thrown into
the generator where it waited, as if the call had been made there.
"""

from __future__ import annotations

import asyncio
import contextlib
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
    "Admit",
    "Claim",
    "Close",
    "Invoke",
    "Open",
    "Out",
    "Pull",
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

Limits = Callable[[bool], tuple[str | None, float | None]]
"""``committed -> (limit, seconds)``: the limit that ends soonest for the next wait."""


class Wait(Protocol):
    """Something a call waits on, answered by :meth:`run` (sync) or :meth:`arun` (async)."""

    def run(self) -> object: ...

    def arun(self) -> Coroutine[Any, Any, object]: ...


@dataclass(frozen=True, slots=True)
class Out:
    """Chunks for the consumer of a stream (the drivers yield them; the answer is None)."""

    items: list[Any]


Steps = Generator[Wait | Out, Any, T]


@dataclass(frozen=True, slots=True)
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


@dataclass(frozen=True, slots=True)
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


@dataclass(frozen=True, slots=True)
class Settle:
    """Wait until a shared store has shared what the call just decided (``settle``, the
    store's ``asettle``). A sync call's store shared it before the decision returned."""

    settle: Callable[[], Awaitable[None]]

    def run(self) -> None:
        return None

    async def arun(self) -> None:
        await self.settle()


@dataclass(frozen=True, slots=True)
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


@dataclass(frozen=True, slots=True)
class Invoke:
    """Run the adapter's function on an attempt; answered with its value. Async code is held
    to the attempt's limits by cancelling it; sync code gets them as ``attempt.timeout``."""

    fn: Callable[[Attempt], object]
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
            return await bounded(cast(Awaitable[object], self.fn(self.attempt)), limit, seconds)
        token = attach(self.context)
        try:
            return await bounded(cast(Awaitable[object], self.fn(self.attempt)), limit, seconds)
        finally:
            detach(token)


@dataclass(frozen=True, slots=True)
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


@dataclass(frozen=True, slots=True)
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


@dataclass(frozen=True, slots=True)
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
            return cast(T, done.value)
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
            return cast(T, done.value)
        answer = error = None
        if isinstance(ask, Out):
            continue
        try:
            answer = await ask.arun()
        except BaseException as exc:  # the steps decide
            error = exc
