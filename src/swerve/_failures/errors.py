"""The exceptions that say how an attempt failed: raised by a user's ``fn`` (UpstreamError), by
adapters reading a stream, and by swerve's own limits (a timeout, an open breaker)."""

from __future__ import annotations

from collections.abc import Mapping

__all__ = [
    "AttemptTimeout",
    "CircuitOpenError",
    "InStreamError",
    "IncompleteStreamError",
    "MalformedStreamError",
    "UpstreamError",
]


class UpstreamError(Exception):
    """Raise this from a hand-written ``fn`` to say how the upstream failed.

    ``UpstreamError(503)`` classifies exactly as an HTTP 503 would (its kind, ``error.type``
    ``"503"``, the statuses in ``fallback_on``); ``retry_after`` is read like a Retry-After
    header (negative is 0, at most a week, then capped by the config); ``code`` and
    ``message`` are read like an error body's (``code="overloaded_error"`` without a status
    counts as a 529, a message saying the prompt is too long is a context overflow).
    """

    def __init__(
        self,
        status: int | None = None,
        *,
        retry_after: float | None = None,
        message: str = "",
        code: str | None = None,
    ) -> None:
        if status is not None and (
            not isinstance(status, int) or isinstance(status, bool) or not 100 <= status <= 599
        ):
            raise ValueError(f"UpstreamError status must be 100-599, not {status!r}")
        self.status = status
        self.retry_after = retry_after
        self.message = message
        self.code = code
        default = f"upstream error {status}" if status is not None else "upstream error"
        super().__init__(message or default)


class InStreamError(Exception):
    """An error payload found inside a stream (usually a 200 one); adapters raise it.

    ``payload`` is the decoded JSON of the error event or chunk, e.g. OpenRouter's
    ``{"error": {"code": 503, "message": "..."}}`` or Anthropic's
    ``{"type": "error", "error": {"type": "overloaded_error", ...}}``.
    """

    def __init__(self, payload: Mapping[str, object], *, route: str | None = None) -> None:
        self.payload = payload
        self.route = route
        super().__init__(f"error inside the stream{f' of {route}' if route else ''}")


class IncompleteStreamError(Exception):
    """A stream ended without its finish signal (``[DONE]``, ``message_stop``, ...)."""


class MalformedStreamError(Exception):
    """A stream chunk or event that cannot be decoded: the upstream broke its protocol.

    A ``transport``-kind failure, like a reset: retried or swapped before content, restarted
    after content in restart mode.
    """


class AttemptTimeout(TimeoutError):
    """An attempt ran out of one of its time limits.

    ``limit`` is one of ``"attempt"``, ``"first_token"``, ``"stall"``, ``"deadline"``.
    ``late_s`` is how much later than its limit the timer fired (async waits only): a timer
    that fires far too late shows the process was starved (CPU saturated, the event loop
    blocked), and such a timeout says nothing about the route (:attr:`starved`).
    """

    def __init__(self, limit: str, seconds: float, *, late_s: float = 0.0) -> None:
        self.limit = limit
        self.seconds = seconds
        self.late_s = late_s
        super().__init__(f"{limit} timeout after {seconds:g}s")

    @property
    def starved(self) -> bool:
        """Whether the timer fired later than a quarter of the wait it ended (and 50 ms): for
        at least that share of the attempt's time this process could not have read an answer,
        so the route is not blamed (no cooldown, not counted by its breaker)."""
        return self.late_s > max(STARVED_SHARE * self.seconds, STARVED_MIN_S)


STARVED_SHARE = 0.25
STARVED_MIN_S = 0.05


class CircuitOpenError(Exception):
    """swerve did not try the route because its circuit breaker is open."""

    def __init__(self, route: str) -> None:
        self.route = route
        super().__init__(f"circuit breaker open for route {route}")
