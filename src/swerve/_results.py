"""What the engine hands over and hands back: the attempt a function runs, the result of a
call and its attempt records, how a stream's chunks are read, and the stream's own signals."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, Literal, TypeVar

from ._failures import Failure
from ._routes import Route

__all__ = [
    "Attempt",
    "AttemptRecord",
    "MidStreamError",
    "PartKind",
    "Result",
    "StreamReset",
    "StreamSpec",
    "passthrough",
]

T = TypeVar("T")
C = TypeVar("C")
PartKind = Literal["text", "reasoning", "tool_call", "other"]


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


def passthrough(requested: Route, value: T) -> Result[T]:
    """The result of a call swerve let straight through: one unrecorded attempt."""
    return Result(value, requested, requested, ())


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
