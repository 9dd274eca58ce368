"""A call's time: its deadline, the current attempt's limits, and the waits they allow."""

from __future__ import annotations

import math
import time
from collections.abc import Iterator

from .._failures import AttemptTimeout
from .clock import Clock, SystemClock
from .config import FallbackConfig

__all__ = ["CallTime"]


class CallTime:
    """When the call began, when its attempt began and its last chunk came, on the call's
    monotonic clock; and from those, the limit that ends soonest."""

    __slots__ = (
        "_clock",
        "_config",
        "_last",
        "_mono",
        "_offset",
        "attempt_t0",
        "committed",
        "deadline",
        "first_token_s",
        "last_chunk",
        "t0",
    )

    def __init__(self, config: FallbackConfig, clock: Clock, bound_s: float | None = None) -> None:
        """``bound_s``: ``config.call_bound_s``, when the caller keeps it per config."""
        self._config = config
        self._clock = clock
        # The system clock is read directly: every reading is on the hot path.
        self._mono = time.monotonic if type(clock) is SystemClock else clock.monotonic
        self._offset = 0.0
        self._last = self._mono()
        if not math.isfinite(self._last):
            self._last = 0.0
        self.t0 = self.attempt_t0 = self.last_chunk = self._last
        # Whether the current attempt's content began (a unary attempt's never waits for it):
        # the first-token limit is over. Kept for readers of the limits outside the engine
        # (the transport's socket clamps), which have no StreamState to ask.
        self.committed = False
        # The current stream attempt's first-token limit (the config's, or one learned for its
        # route: begin_attempt sets it).
        self.first_token_s: float | None = None
        self.deadline = self.t0 + (config.call_bound_s if bound_s is None else bound_s)

    def fork(self) -> CallTime:
        """A second clock for an attempt that runs beside the current one (a hedge): the same
        call (its start, deadline and clock), its own attempt times once it begins."""
        other = CallTime.__new__(CallTime)
        for name in CallTime.__slots__:
            setattr(other, name, getattr(self, name))
        return other

    def now(self) -> float:
        """The call's monotonic time, which never goes back: a clock that steps back (a broken
        or injected ``Clock``) continues from the latest time seen, so no limit of the call is
        extended by the step; a reading that is not a number counts as no time passing."""
        now = self._mono() + self._offset
        if now >= self._last:
            self._last = now
            return now
        if math.isfinite(now):  # stepped back: carry on from where the call had got to
            self._offset += self._last - now
        return self._last

    def in_call(self) -> float:
        return self.now() - self.t0

    def in_attempt(self) -> float:
        return self.now() - self.attempt_t0

    def begin_attempt(
        self, stream: bool = True, first_token_s: float | None = None
    ) -> tuple[float | None, float | None]:
        """Start the clock of a new attempt; its ``(timeout, read_timeout)`` for the client.
        The first-token limit (``first_token_s``) is a stream's: a unary attempt's reads are
        not held to it."""
        # now(), written out for a clock that did not step back: every attempt begins here.
        now = self._mono() + self._offset
        if now >= self._last:
            self._last = now
        else:
            now = self.now()
        self.attempt_t0 = self.last_chunk = now
        self.committed = not stream
        self.first_token_s = first = first_token_s if stream else None
        c = self._config
        end = self.deadline  # the attempt's own end: the deadline or its limit, if sooner
        if c.attempt_timeout_s is not None:
            end = min(end, now + c.attempt_timeout_s)
        soonest = end  # the next wait's end: the first-token and stall limits too
        if first is not None:
            soonest = min(soonest, now + first)
        if c.stall_timeout_s is not None:
            soonest = min(soonest, now + c.stall_timeout_s)
        return max(end - now, 0.0), max(soonest - now, 0.0)

    def received(self) -> None:
        """A chunk arrived: the stall limit counts from now."""
        self.last_chunk = self.now()

    def _limits(self, committed: bool) -> Iterator[tuple[str, float]]:
        """Absolute (monotonic) ends of the limits that apply to the next wait."""
        c = self._config
        yield "deadline", self.deadline
        if c.attempt_timeout_s is not None:
            yield "attempt", self.attempt_t0 + c.attempt_timeout_s
        if not committed and self.first_token_s is not None:
            yield "first_token", self.attempt_t0 + self.first_token_s
        if c.stall_timeout_s is not None:
            yield "stall", self.last_chunk + c.stall_timeout_s

    def next_limit(self, committed: bool) -> tuple[str | None, float | None]:
        """The limit that ends soonest for the next wait, and the seconds left until it (the
        first of equal ones, in :meth:`_limits`' order)."""
        name, end = self.soonest(committed)
        return name, end - self.now()

    def soonest(self, committed: bool) -> tuple[str, float]:
        """The limit that ends soonest for the next wait and its (monotonic) end: the first of
        equal ones, in :meth:`_limits`' order."""
        c = self._config
        name, end = "deadline", self.deadline
        if c.attempt_timeout_s is not None and self.attempt_t0 + c.attempt_timeout_s < end:
            name, end = "attempt", self.attempt_t0 + c.attempt_timeout_s
        if (
            not committed
            and self.first_token_s is not None
            and self.attempt_t0 + self.first_token_s < end
        ):
            name, end = "first_token", self.attempt_t0 + self.first_token_s
        if c.stall_timeout_s is not None and self.last_chunk + c.stall_timeout_s < end:
            name, end = "stall", self.last_chunk + c.stall_timeout_s
        return name, end

    def left(self) -> tuple[float, str]:
        """The seconds until the current attempt's soonest limit ends, and its name: what the
        transport clamps each socket operation of a sync attempt to."""
        name, end = self.soonest(self.committed)
        return end - self.now(), name

    def ends(self, committed: bool) -> list[tuple[float, str, float]]:
        """Every limit of the next wait: its end, its name, and when its time began."""
        return [
            (end, name, self.last_chunk if name == "stall" else self.attempt_t0)
            for name, end in self._limits(committed)
        ]

    def check_soonest(self, committed: bool) -> None:
        """A read that came after the soonest of the attempt's limits is a timeout of that
        limit: the one an async wait would have been cut at."""
        name, end = self.soonest(committed)
        # now(), written out for a clock that did not step back: a sync attempt checks after
        # every read.
        now = self._mono() + self._offset
        if now >= self._last:
            self._last = now
        else:
            now = self.now()
        if now > end:
            since = self.last_chunk if name == "stall" else self.attempt_t0
            raise AttemptTimeout(name, now - since)

    def check_limits(self, committed: bool) -> None:
        """Sync streams cannot be pre-empted: a chunk that came too late counts as a timeout."""
        now = self.now()
        for limit, end in self._limits(committed):
            if now > end:
                raise AttemptTimeout(limit, now - self.attempt_t0)

    def remaining(self) -> float:
        return self.deadline - self.now()

    def wait(self, delay: float) -> float:
        """The wait before the next attempt: the policy's, within ``[0, remaining()]``, so a
        delay that is not finite (an overflowing backoff) can neither sleep forever nor fail
        inside the sleep and mask the upstream error."""
        if not math.isfinite(delay) or delay <= 0:
            return 0.0
        return min(delay, max(self.remaining(), 0.0))
