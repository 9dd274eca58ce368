"""What the engine hands over and hands back: the attempt a function runs, the result of a
call and its attempt records, how a stream's chunks are read, and the stream's own signals."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Generic, Literal, TypeVar

from .._failures import Failure
from .routes import Route

if TYPE_CHECKING:
    from .timing import CallTime

__all__ = [
    "Attempt",
    "AttemptRecord",
    "Batch",
    "CooldownLearned",
    "MidStreamError",
    "PartKind",
    "Result",
    "SkippedRoute",
    "StreamReset",
    "StreamSpec",
    "Usage",
    "passthrough",
]

T = TypeVar("T")
C = TypeVar("C")
D = TypeVar("D")
PartKind = Literal["text", "reasoning", "tool_call", "other"]
CooldownLearned = Literal["this_failover", "elsewhere"]
"""Who learned the cooldown (or opened the breaker) a call walked past: this Failover, or
someone else sharing its health store (another Failover in the process, another process
through Redis, an operator)."""


class Attempt:
    """One call on one route, handed to the function swerve runs.

    ``timeout`` is the time this attempt may still take (the attempt limit and the call's
    deadline, whichever is sooner) and ``read_timeout`` the longest wait for the next chunk.
    Hand the client :meth:`timeout_or` rather than ``timeout``: it keeps the client's own
    default when the config sets no limit (in async code swerve also enforces the limits
    itself). Call :meth:`record_effect` when something happened that must not happen twice
    (a tool ran): a failure after that surfaces instead of being retried. An adapter that can
    read the provider's token usage or finish reasons hands them to :meth:`report_usage`.

    ``limited``: whether ``timeout`` is a limit the config set (``attempt_timeout_s`` or
    ``deadline_s``), rather than only the generous bound swerve derives for every call.
    ``time``: the call's limits on its clock, which ``timeout`` and ``read_timeout`` were read
    from (None for an attempt made outside a call); a transport holds its reads to them.
    """

    __slots__ = (
        "_cache_read_tokens",
        "_cache_write_tokens",
        "_effects",
        "_finish_reasons",
        "_input_tokens",
        "_limited",
        "_output_tokens",
        "_usage",
        "number",
        "observed",
        "read_timeout",
        "request_model",
        "requested",
        "response_id",
        "response_model",
        "retry",
        "route",
        "server",
        "swap",
        "time",
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
        *,
        limited: bool = True,
        time: CallTime | None = None,
        observed: bool = True,
    ) -> None:
        self.route = route
        self.requested = requested
        self.number = number
        self.retry = retry
        self.swap = swap
        self.timeout = timeout
        self.read_timeout = read_timeout
        self._limited = limited
        self.time = time
        self.observed = observed
        """Whether what the attempt is told (:meth:`report_usage`, :meth:`report_response`)
        goes anywhere: a span or a measurement reads it. An adapter may skip reading what
        nobody reads (a call with neither a tracer nor a meter provider)."""
        self._effects: list[str] = []
        self._input_tokens: int | None = None
        self._output_tokens: int | None = None
        self._finish_reasons: list[str] = []
        self._cache_read_tokens: int | None = None
        self._cache_write_tokens: int | None = None
        self._usage: Usage | None = None  # usage, made once until the next report
        # What the wire said (report_request, report_response): plain attributes, read on
        # every call's end.
        self.request_model: str = route.model
        """The model name sent on the wire, as reported; the route's model until then."""
        self.response_model: str | None = None
        """The model the provider said answered, if it said."""
        self.response_id: str | None = None
        """The provider's id of the response, if it said."""
        self.server: tuple[str, int | None] | None = None
        """The server this attempt sent to (address, port), if the adapter reported it."""

    def timeout_or(self, default: D) -> float | D:
        """swerve's limit for this attempt when there is one (``timeout``: 0.0 once it has
        passed, never negative), else ``default`` unchanged.

        ``client.post(..., timeout=attempt.timeout_or(httpx.USE_CLIENT_DEFAULT))``: ``None``
        would turn httpx's own timeout off, so a hanging provider would hang the call. With no
        ``attempt_timeout_s`` or ``deadline_s`` the client's default bounds each attempt, as
        the call's derived bound assumes it does.
        """
        if self.timeout is None or not self._limited:
            return default
        return self.timeout

    @property
    def first_token_timeout(self) -> float | None:
        """How long this stream attempt may wait for its first content chunk, from its start:
        ``first_token_timeout_s``, or the limit learned for its route when that is
        ``"adaptive"``; None for none (and for a unary attempt)."""
        return self.time.first_token_s if self.time is not None else None

    def record_effect(self, what: str = "effect") -> None:
        self._effects.append(what)

    @property
    def effects(self) -> tuple[str, ...]:
        return tuple(self._effects)

    def report_usage(
        self,
        input_tokens: int | None = None,
        output_tokens: int | None = None,
        finish_reasons: Iterable[str] = (),
        cache_read_tokens: int | None = None,
        cache_write_tokens: int | None = None,
    ) -> None:
        """What the provider said about this attempt, as the adapter reads it: a token count
        given replaces the one before (providers report running totals), and each finish
        reason is added (one per choice). ``cache_read_tokens``/``cache_write_tokens``: the
        input tokens read from, and written to, the provider's prompt cache. The attempt's
        span carries them when it ends, and a failed attempt's tokens count as what failover
        cost."""
        if input_tokens is not None:
            self._input_tokens = input_tokens
        if output_tokens is not None:
            self._output_tokens = output_tokens
        if cache_read_tokens is not None:
            self._cache_read_tokens = cache_read_tokens
        if cache_write_tokens is not None:
            self._cache_write_tokens = cache_write_tokens
        self._finish_reasons.extend(finish_reasons)
        self._usage = None

    @property
    def usage(self) -> Usage:
        # Read by the attempt's end, the call's span and its measurements: made once.
        usage = self._usage
        if usage is None:
            usage = self._usage = Usage(
                self._input_tokens,
                self._output_tokens,
                tuple(self._finish_reasons),
                self._cache_read_tokens,
                self._cache_write_tokens,
            )
        return usage

    def report_request(
        self,
        model: str | None = None,
        server_address: str | None = None,
        server_port: int | None = None,
    ) -> None:
        """What this attempt asked for on the wire: the model name it sent (a route's name
        need not be the provider's: ``Upstream(model=...)``, a LangChain model's own
        ``model``) and the server it sent to. Telemetry names these, not the route's parts."""
        if model is not None:
            self.request_model = model
        if server_address is not None:
            self.server = (server_address, server_port)

    def report_response(self, model: str | None = None, response_id: str | None = None) -> None:
        """What the provider said it answered with: the model that answered (often a dated
        version of the one asked for) and the response's id. The first report of each holds."""
        if model is not None and self.response_model is None:
            self.response_model = model
        if response_id is not None and self.response_id is None:
            self.response_id = response_id

    def __repr__(self) -> str:
        return (
            f"Attempt(route={self.route}, number={self.number}, "
            f"retry={self.retry}, swap={self.swap})"
        )


@dataclass(frozen=True, slots=True)
class Usage:
    """The tokens and finish reasons an attempt reported (None, empty: not known)."""

    input_tokens: int | None = None
    output_tokens: int | None = None
    finish_reasons: tuple[str, ...] = ()
    cache_read_tokens: int | None = None
    cache_write_tokens: int | None = None


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
class SkippedRoute:
    """A degraded route a call walked past (at its start or on a swap), and who learned the
    cooldown or open breaker that made it skip (:data:`CooldownLearned`)."""

    route: Route
    learned: CooldownLearned


@dataclass(frozen=True, slots=True)
class Result(Generic[T]):
    """A call's value, the route that answered, the route asked for, every attempt, and the
    degraded routes it walked past."""

    value: T
    route: Route
    requested: Route
    attempts: tuple[AttemptRecord, ...]
    skipped: tuple[SkippedRoute, ...] = ()

    @property
    def retries(self) -> int:
        return sum(1 for a in self.attempts if a.retry > 0)

    @property
    def swaps(self) -> int:
        return max((a.swap for a in self.attempts), default=0)


def passthrough(requested: Route, value: T, duration_s: float) -> Result[T]:
    """The result of a call swerve let straight through: its one attempt, a success on the
    requested route (no span, no metric: only the record the caller reads)."""
    record = AttemptRecord(requested, 1, 0, 0, "success", None, duration_s)
    return Result(value, requested, requested, (record,))


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


class Batch(list[C], Generic[C]):
    """Chunks that came in together (one network read of a stream), handed to the engine as
    one: it reads each by the :class:`StreamSpec` in order (the first with a part commits the
    attempt, a finish anywhere finishes it, the discarded parts count each) and hands the batch
    on whole, so a read's events cost one pass through the engine, not one each."""

    __slots__ = ()


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
