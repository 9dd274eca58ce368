"""Failover streams: what a stream decides, written once, and its sync and async faces.

A stream's attempts are :data:`~swerve._engine.steps.Steps` like a unary call's, plus the chunks:
held back until the attempt commits (its first content chunk), then passed through. The
sync and async classes only drive those steps.
"""

from __future__ import annotations

import contextlib
import queue
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, TypeVar

from .._failures import AttemptTimeout, IncompleteStreamError
from .._telemetry.decisions import StreamRestarted
from .call import ABORTS, Call, Parked
from .clock import SYSTEM_CLOCK, Clock
from .policy import GiveUp, Retry
from .results import (
    Attempt,
    AttemptRecord,
    Batch,
    MidStreamError,
    Result,
    StreamReset,
    StreamSpec,
)
from .routes import Route
from .steps import (
    END,
    HEDGE_DUE,
    Abandon,
    Close,
    Lane,
    LaneFailed,
    Open,
    Out,
    Pull,
    Race,
    Sleep,
    Steps,
    drive_async,
    drive_sync,
)

__all__ = ["AsyncFailoverStream", "FailoverStream", "MidStream"]

T = TypeVar("T")
C = TypeVar("C")
MidStream = Literal["error", "restart"]
# A passthrough stream has no limits of its own and no context to attach.


def _no_limits(_: bool) -> tuple[str | None, float | None]:
    return None, None


def _never_late(_: bool) -> None:
    return None


@dataclass
class _StreamState(Generic[C]):
    """One attempt's chunks: held back until the attempt commits, then passed through."""

    spec: StreamSpec[C]
    live: bool
    # Whether the parts delivered are counted: only a restart discards them (an "error"
    # stream surfaces a failure after content, and a whole one discards nothing).
    restarts: bool = False
    buffer: list[C] = field(default_factory=list)
    delivered: list[C] = field(default_factory=list)  # only with spec.keep_partial
    delivered_parts: Counter[str] = field(default_factory=Counter)
    committed: bool = False
    finished: bool = False

    def feed(self, chunk: C, run: Call) -> list[C]:
        """What to hand the consumer now that ``chunk`` arrived."""
        if isinstance(chunk, Batch):
            return self._feed_batch(chunk, run)
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

    def _feed_batch(self, batch: Batch[C], run: Call) -> list[C]:
        """:meth:`feed` of each chunk of ``batch`` in turn, the batch held and handed on whole."""
        spec = self.spec
        if spec.is_finish is not None and not self.finished:
            self.finished = any(map(spec.is_finish, batch))
        whole: Any = batch  # handed on as one chunk (typed so, not through a cast() call)
        if self.committed:
            return self._deliver([whole])
        self.buffer.append(whole)
        if self.live and any(map(spec.part, batch)):
            self.committed = True
            run.committed()
            out, self.buffer = self.buffer, []
            return self._deliver(out)
        return []

    def _deliver(self, chunks: list[C]) -> list[C]:
        if self.restarts:
            self.delivered_parts.update(self._parts(chunks))
        if self.spec.keep_partial:
            for chunk in chunks:
                if isinstance(chunk, Batch):
                    self.delivered.extend(chunk)
                else:
                    self.delivered.append(chunk)
        return chunks

    def _parts(self, chunks: list[C]) -> Iterator[str]:
        """The part of each chunk that carries one, a batch's chunk by chunk."""
        part = self.spec.part
        for chunk in chunks:
            if isinstance(chunk, Batch):
                yield from filter(None, map(part, chunk))
            elif (kind := part(chunk)) is not None:
                yield kind

    def end(self) -> list[C]:
        if self.spec.is_finish is not None and not self.finished:
            raise IncompleteStreamError("stream ended without its finish signal")
        out, self.buffer = self.buffer, []
        return out

    def discarded(self, including_delivered: bool) -> Counter[str]:
        counts: Counter[str] = Counter(self._parts(self.buffer))
        return counts + self.delivered_parts if including_delivered else counts


class _StreamBase(Generic[C]):
    """Everything a failover stream decides, as steps; the sync and async faces drive them.

    ``fn(attempt)`` returns the upstream's chunks (an iterable for the sync face, an async
    iterable for the async one). ``open_call`` begins the call when the consumer first asks
    for a chunk (None: swerve is off, and the stream passes straight through).
    """

    def __init__(
        self,
        open_call: Callable[[], Call | None],
        requested: Route,
        fn: Callable[[Attempt], object],
        spec: StreamSpec[C],
        mid_stream: MidStream,
        live: bool,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self._open_call = open_call
        self._clock = clock
        self.requested = requested
        self._fn = fn
        self._spec = spec
        self._mid_stream = mid_stream
        self._live = live
        self._run: Call | None = None
        self._state = self._fresh_state()
        self._reset: StreamReset | None = None
        self._passed: tuple[AttemptRecord, ...] = ()  # a passthrough's one attempt, once it ended
        self._racing: list[Lane] = []  # the lanes of a hedge race not settled yet
        self.route: Route | None = None
        """The route whose output is being (or was) delivered."""
        self._gen: Any = self._drive(self._steps())  # the subclass's driver: sync or async

    # The sync or async driver of the steps (set by each subclass).
    _drive: Callable[[Steps[None]], Any]

    @property
    def attempts(self) -> tuple[AttemptRecord, ...]:
        return tuple(self._run.records) if self._run else self._passed

    def result(self, value: T) -> Result[T]:
        """``value`` as the result of this stream's call (once the stream has ended)."""
        if self._run is None:
            return Result(value, self.requested, self.requested, self._passed)
        return self._run.result(value)

    def _steps(self) -> Steps[None]:
        run = self._run = self._open_call()
        if run is None:
            # The passthrough's steps are written here, not delegated to with ``yield from``:
            # a consumer's close() thrown into a delegating generator closes the delegate, which
            # then could not yield the Close that ends its upstream.
            self.route = requested = self.requested
            t0 = self._clock.monotonic()
            source = yield Open(self._fn, Attempt(requested, requested), None)
            pull = Pull(source, None, True, _no_limits, _never_late)
            try:
                while (chunk := (yield pull)) is not END:
                    yield Out([chunk])
            except BaseException as exc:
                if self._abandoned(exc, source):
                    raise
                yield Close(source)  # a consumer that stops early closes the source
                raise
            # Only the one attempt's record is kept, for attempts and result().
            duration = self._clock.monotonic() - t0
            self._passed = (AttemptRecord(requested, 1, 0, 0, "success", None, duration),)
            return
        try:
            yield from run.start()
            while True:
                attempt = self._begin(run)
                upstream: object = None
                try:
                    yield from run.admit()
                    upstream = yield Open(self._fn, attempt, run.attempt_context)
                    ended = False
                    if (after := run.hedge_after()) is not None:
                        upstream, ended = yield from self._race(run, upstream, after)
                    while not ended:
                        chunk = yield Pull(
                            upstream,
                            run.attempt_context,
                            self._state.committed,
                            run.time.next_limit,
                            run.time.check_limits,
                        )
                        if chunk is END:
                            break
                        if out := self._chunk(run, chunk):
                            yield Out(out)
                    if out := self._end():
                        yield Out(out)
                except BaseException as exc:
                    if self._abandoned(exc, upstream):
                        raise
                    if self._racing:  # a race that ended in this error: every lane stops
                        lanes, self._racing = self._racing, []
                        for lane in lanes:
                            yield Abandon(lane)
                    else:
                        yield Close(upstream)
                    if self._whole(exc):
                        # A consumer that closed the stream takes no more chunks.
                        if not isinstance(exc, GeneratorExit) and (out := self._end()):
                            yield Out(out)
                        self._succeeded(run)
                        return
                    delay = run.time.wait((yield from self._failed(run, exc)))
                    if delay:
                        yield Sleep(run.clock, delay)
                    continue
                self._succeeded(run)
                return
        except BaseException as exc:
            run.finish_error(exc)
            raise

    def _race(self, run: Call, upstream: object, after: float) -> Steps[tuple[object, bool]]:
        """Until the attempt's content begins: its chunks pulled in a lane, and ``after``
        seconds into it a hedge, the same request on the route a swap would go to, in a second
        lane. The lane whose content begins first serves the call (its upstream is returned,
        with whether it ended already); the other is closed. A lane that fails while the other
        races on ends as a failed attempt (its route cooled down if it qualifies)."""
        inbox: queue.SimpleQueue[Any] = queue.SimpleQueue()
        first = Lane(upstream, run.attempt_context)
        lanes = self._racing = [first]
        states = {first: self._state}
        parked: dict[Lane, Parked] = {}  # the lane whose attempt is not the call's current one
        due: float | None = after
        while True:
            limit, seconds = run.time.next_limit(False)
            if due is not None and (seconds is None or due - run.time.in_attempt() < seconds):
                limit, seconds = None, due - run.time.in_attempt()
            try:
                got = yield Race(list(lanes), limit, seconds, inbox)
            except LaneFailed as failed:
                lane = failed.lane
                if len(lanes) == 1:
                    raise failed.error from None  # the call's own failure: it decides
                lanes.remove(lane)
                (other,) = lanes
                if lane in parked:
                    run.lane_failed(parked.pop(lane), failed.error)
                else:  # the current attempt failed: the parked one becomes current
                    mine = run.park()
                    run.resume(parked.pop(other))
                    run.lane_failed(mine, failed.error)
                    self._state = states[other]
                yield Abandon(lane)
                continue
            except AttemptTimeout as timeout:
                for lane, attempt in list(parked.items()):  # as late as the current one
                    run.lane_failed(attempt, timeout)
                    del parked[lane]
                raise
            if got is HEDGE_DUE:
                due = None  # one hedge an attempt
                hedged = run.hedge(after)
                if hedged is None:
                    continue
                try:
                    yield from run.admit()
                    source = yield Open(self._fn, run.attempt, run.attempt_context)
                except Exception as exc:  # the hedge never started: the primary races alone
                    mine = run.park()
                    run.resume(hedged)
                    run.lane_failed(mine, exc)
                    continue
                lane = Lane(source, run.attempt_context)
                parked[first] = hedged
                lanes.append(lane)
                states[lane] = self._state = self._fresh_state()
                continue
            lane, chunk = got
            if lane in parked:  # the other lane's chunk: its attempt becomes current
                mine = run.park()
                run.resume(parked.pop(lane))
                parked[next(other for other in lanes if other is not lane)] = mine
                self._state = states[lane]
            if chunk is not END:
                out = self._chunk(run, chunk)
                if not self._state.committed:
                    continue
            else:
                out = []
            # This lane's content began (or its stream ended): it serves the call.
            for other, attempt in parked.items():
                run.hedge_won(attempt, hedge=other is first)
                yield Abandon(other)
            self._racing = []
            if out:
                yield Out(out)
            return lane.upstream, chunk is END

    def _abandoned(self, exc: BaseException, upstream: object) -> bool:
        """Whether ``exc`` closes these steps directly, not through their driver: a stream
        dropped without ``close()`` is a reference cycle (the stream holds its driver, whose
        steps hold the stream), and the garbage collector may close the steps first. Nothing
        may be yielded then (a generator that yields on close is an error Python prints), so
        the upstream is closed here if it can be without awaiting (an async one is finalized
        by the event loop's own hooks), and the call ends as aborted."""
        if not isinstance(exc, GeneratorExit):
            return False
        gen = self._gen
        if getattr(gen, "gi_running", False) or getattr(gen, "ag_running", False):
            return False  # the driver threw it: the consumer's close(), the steps decide
        close = getattr(upstream, "close", None)
        if close is not None:
            with contextlib.suppress(Exception):
                close()
        return True

    def _begin(self, run: Call) -> Attempt:
        self._state = self._fresh_state()
        return run.begin()

    def _fresh_state(self) -> _StreamState[C]:
        """An attempt's stream state (only a restart counts the parts it delivered)."""
        return _StreamState(self._spec, self._live, self._mid_stream == "restart")

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

    def _chunk(self, run: Call, chunk: C) -> list[C | StreamReset]:
        run.time.received()
        return self._release(self._state.feed(chunk, run))

    def _end(self) -> list[C | StreamReset]:
        return self._release(self._state.end())

    def _whole(self, exc: BaseException) -> bool:
        """Whether the answer was whole when ``exc`` broke the stream: its finish signal had
        arrived (a finish reason, a stop reason), so all that was lost is a terminator such
        as ``[DONE]`` or ``message_stop``. That is a success, not a failure of the route."""
        state = self._state
        if isinstance(exc, GeneratorExit):  # the consumer stopped reading after the whole answer
            return state.finished and state.committed
        return state.finished and not isinstance(exc, ABORTS)

    def _failed(self, run: Call, exc: BaseException) -> Steps[float]:
        """Decide after a failure: the wait before the next attempt, or raise to surface."""
        state = self._state
        if state.committed and (self._mid_stream == "error" or isinstance(exc, ABORTS)):
            if isinstance(exc, ABORTS):
                yield from run.failed(exc)
                raise exc
            raise run.failed_mid_stream(exc, tuple(state.delivered)) from exc
        failed_route = run.current
        decision = yield from run.failed(exc, state.discarded(including_delivered=state.committed))
        if isinstance(decision, GiveUp):
            if state.committed:  # restart mode with nowhere to restart: as in "error" mode
                failure = run.records[-1].failure or run.classify(exc)
                error = MidStreamError(failed_route, run.requested, failure, tuple(state.delivered))
                raise error from exc
            raise exc
        if state.committed:  # restart mode: the consumer has to drop what it got
            self._reset = StreamReset(failed_route, run.current)
            run.telemetry.emit(StreamRestarted(str(failed_route), str(run.current)), run.span)
        return decision.delay if isinstance(decision, Retry) else 0.0

    def _succeeded(self, run: Call) -> None:
        run.finish_ok(None, run.succeeded())


class FailoverStream(_StreamBase[C], Iterator[C | StreamReset]):
    """The chunks of a failover stream (see :meth:`Failover.stream`); iterate once."""

    _drive = staticmethod(drive_sync)

    def __next__(self) -> C | StreamReset:
        return next(self._gen)  # type: ignore[no-any-return]

    def __iter__(self) -> FailoverStream[C]:
        return self

    def close(self) -> None:
        """Stop early: closes the upstream stream and ends the spans."""
        self._gen.close()

    def __enter__(self) -> FailoverStream[C]:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


class AsyncFailoverStream(_StreamBase[C], AsyncIterator[C | StreamReset]):
    """The chunks of an async failover stream (see :meth:`Failover.astream`)."""

    _drive = staticmethod(drive_async)

    def __init__(
        self, *args: Any, ready: Callable[[], Awaitable[object]] | None = None, **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        # Awaited once before the first decision (a shared store's first sync): the opener is
        # sync and must never block the loop, so the wait happens here.
        self._ready = ready

    async def __anext__(self) -> C | StreamReset:
        if self._ready is not None:
            ready, self._ready = self._ready, None
            await ready()
        return await self._gen.__anext__()  # type: ignore[no-any-return]

    def __aiter__(self) -> AsyncFailoverStream[C]:
        return self

    async def aclose(self) -> None:
        """Stop early: closes the upstream stream and ends the spans."""
        await self._gen.aclose()

    async def __aenter__(self) -> AsyncFailoverStream[C]:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.aclose()
