"""One attempt's response without I/O: its chunks, replay, time limits and redaction."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from .._engine.results import Attempt, PartKind, StreamSpec
from .._engine.timing import CallTime
from .._failures import AttemptTimeout, InStreamError, MalformedStreamError
from .._telemetry.redact import REDACTED
from .flavour import flavour_of
from .sse import _Event, _interpret, _SSEParser
from .upstream import (
    ATTEMPTS_HEADER,
    REQUESTED_HEADER,
    ROUTE_HEADER,
    ResponseTooLarge,
    Upstream,
)

SWERVE_PREFIX = "x-swerve-"  # every header of this prefix is swerve's, never a provider's

_AUTH_HEADERS = frozenset({"authorization", "x-api-key", "api-key"})
# Upstream.headers whose values are secrets (redacted wherever an upstream echoes them).
_SECRET_NAME = re.compile(r"auth|key|token|secret|passw|cookie|session|signature", re.IGNORECASE)
# The body is decoded before the client sees it, so these would describe it wrongly.
_NOT_RETURNED = frozenset({b"content-encoding", b"content-length", b"transfer-encoding"})
_SWERVE_RAW = SWERVE_PREFIX.encode()
# Shorter "keys" (a placeholder such as "test" for a local server) are no secret, and replacing
# them everywhere would mangle the body they are scrubbed from.
_MIN_SECRET = 8
_REDACTED_BYTES = REDACTED.encode()
# How far apart httpx's timers (socket timeouts, from a read's start) and swerve's check (after
# the read returns) may see one limit end.
_TIMER_SLACK_S = 0.05


@dataclass(slots=True)
class _Head:
    """The status line and headers of the attempt whose body follows."""

    status: int
    headers: list[tuple[bytes, bytes]]


_Chunk = _Head | _Event


def _part_of(chunk: _Chunk) -> PartKind | None:
    return chunk.part if isinstance(chunk, _Event) else None


def _finish_of(chunk: _Chunk) -> bool:
    return isinstance(chunk, _Event) and chunk.finish


# The transport hands every chunk on as it comes and never reads partial output back: keeping
# none of it is what lets a long stream pass through in constant memory.
_SPEC: StreamSpec[_Chunk] = StreamSpec(part=_part_of, is_finish=_finish_of, keep_partial=False)


_Replay = tuple[int, list[tuple[bytes, bytes]], bytes]
"""Status, headers and body: a response as the upstream sent it, for handing on unchanged."""


class _ErrorInBody(InStreamError):
    """An error inside a 200 body or stream, with what is needed to hand it on unchanged:
    ``replay`` (status, headers, the body up to the error) if swerve gives up before output
    began, ``raw`` (the error event) if it comes after."""

    def __init__(
        self, payload: Mapping[str, object], route: str, replay: _Replay, raw: bytes = b""
    ) -> None:
        super().__init__(payload, route=route)
        self.replay = replay
        self.raw = raw


class _Malformed(MalformedStreamError):
    """A 200 body, or an SSE event's data, that is not JSON; ``replay`` as for
    :class:`_ErrorInBody`, so a client swerve gives up for fails as it would without it."""

    def __init__(self, route: str, replay: _Replay) -> None:
        super().__init__(f"{route} sent data that is not JSON")
        self.route = route
        self.replay = replay


class _Reader:
    """An attempt's SSE events, kept so that, if swerve gives up on the attempt, the client
    gets the stream exactly as the upstream sent it (up to and including its error event)."""

    def __init__(
        self, route: str, response: Any, parser: _SSEParser, secrets: tuple[str, ...]
    ) -> None:
        self.route = route
        self.parser = parser
        self.secrets = secrets
        self.status = response.status_code
        self.headers = _returned(response.headers)
        self.raw: list[bytes] = []
        self.held = 0  # the bytes of raw: bounded like one event, so memory is constant
        self.committed = False

    def feed(self, data: bytes) -> Iterator[_Event]:
        # One at a time: events before an error event in the same read still go out first.
        for event in self.parser.feed(data):
            yield self._checked(event)

    def flush(self) -> Iterator[_Event]:
        for event in self.parser.flush():
            yield self._checked(event)

    def _checked(self, event: _Event) -> _Event:
        if not self.committed:  # after content nothing is replayed: keep no copy of it
            self.raw.append(event.raw)
            self.held += len(event.raw)
            if event.part is not None:
                self.committed = True
                self.raw.clear()
            elif self.held > self.parser.limit:
                # Held for a replay (and by the engine until the attempt commits): an upstream
                # that never starts its content must not grow memory without end.
                raise ResponseTooLarge(
                    f"the events before the first content exceeded {self.parser.limit} bytes"
                )
        if event.error is None and not event.malformed:
            return event
        # What the upstream echoed must reach neither the client nor the engine (whose failure
        # ends up in spans and logs): the payload is read again from the redacted event.
        headers, content = _redacted(self.secrets, self.headers, b"".join(self.raw))
        replay = (self.status, headers, content)
        if event.error is None:
            raise _Malformed(self.route, replay)
        payload, raw = event.error, _redacted(self.secrets, [], event.raw)[1]
        if raw != event.raw:
            payload = _interpret(self.parser.wire, raw).error or {}
        raise _ErrorInBody(payload, self.route, replay, raw)


class _Until:
    """An async attempt's limits as they stood when it began, on the call's clock: what its
    socket operations are clamped to (:mod:`swerve._transport.io_bound`). The engine cuts an
    async attempt's waits itself; this end stays the attempt's own even for a send left to
    end by itself after the call has moved on to its next attempt."""

    __slots__ = ("_end", "_name", "_time")

    def __init__(self, time: CallTime) -> None:
        self._time = time
        self._name, self._end = time.soonest(time.committed)

    def left(self) -> tuple[float, str]:
        return self._end - self._time.now(), self._name


def _ran_out(time: CallTime, committed: bool) -> AttemptTimeout | None:
    """The limit of the attempt's that an httpx timeout enforced, or None when none is due (the
    client's own, shorter timeout fired). The limits were handed to httpx as its timeouts, so
    a blocking read usually ends on httpx's clock a hair before a check would see the limit
    pass: a limit that ends within that hair counts as run out."""
    now = time.now()
    due = now + _TIMER_SLACK_S
    passed = [end for end in time.ends(committed) if end[0] <= due]
    if not passed:
        return None
    _, name, since = min(passed)
    return AttemptTimeout(name, max(now - since, 0.0))


def _returned(headers: Any) -> list[tuple[bytes, bytes]]:
    """An upstream's headers as the client gets them: less those that describe the encoded
    body, and less any ``x-swerve-*`` (an upstream must not forge swerve's own). As bytes,
    the way httpx holds them: a value that is not ASCII (``x-msg: Überlastet``) passes as it
    came, never decoded and encoded again."""
    return [
        (k, v)
        for k, v in headers.raw
        if (name := k.lower()) not in _NOT_RETURNED and not name.startswith(_SWERVE_RAW)
    ]


def _served_by(attempt: Attempt) -> list[tuple[bytes, bytes]]:
    """swerve's headers on a response ``attempt`` produced: the route that answered and the
    attempts made (the attempt's number), and the route requested when it is another."""
    route = str(attempt.route)
    headers = [(ROUTE_HEADER, route), (ATTEMPTS_HEADER, str(attempt.number))]
    requested = str(attempt.requested)
    if requested != route:
        headers.append((REQUESTED_HEADER, requested))
    return [(k.encode(), v.encode()) for k, v in headers]


def _response(like: Any, status: int, headers: list[tuple[bytes, bytes]], content: bytes) -> Any:
    return flavour_of(like).Response(status, headers=headers, content=content)


def _secrets(upstream: Upstream) -> tuple[str, ...]:
    """The credentials swerve itself sends to ``upstream``, longest first (so a header value
    that contains the key goes whole), each also as it reads inside a JSON string."""
    key = upstream.api_key or ""
    found = {key}
    for name, value in upstream.headers.items():
        if name.lower() in _AUTH_HEADERS or _SECRET_NAME.search(name) or (key and key in value):
            found.add(value)
            found.add(value.partition(" ")[2])  # the token after "Bearer ", "Basic "...
    found |= {json.dumps(s)[1:-1] for s in found}
    return tuple(sorted((s for s in found if len(s) >= _MIN_SECRET), key=len, reverse=True))


def _redacted(
    secrets: tuple[str, ...], headers: list[tuple[bytes, bytes]], content: bytes
) -> tuple[list[tuple[bytes, bytes]], bytes]:
    """``headers`` and ``content`` with every one of ``secrets`` replaced by ``[REDACTED]``,
    and nothing else changed: an upstream that echoes the request (credentials and all) in
    its error must not hand the client, and its logs, the keys swerve added."""
    for secret in secrets:
        encoded = secret.encode()
        if encoded in content:
            content = content.replace(encoded, _REDACTED_BYTES)
        headers = [(k, v.replace(encoded, _REDACTED_BYTES)) for k, v in headers]
    return headers, content


def _is_stream(response: Any) -> bool:
    """An SSE body to read event by event (an error status is read whole)."""
    return response.status_code < 400 and "text/event-stream" in response.headers.get(
        "content-type", ""
    )
