"""One attempt's response, without I/O: everything the transports make of what they read.

The sync and async transports (:mod:`swerve.httpx`) only move bytes: send, read, close,
blocking or awaited. :class:`Receiving` is one attempt of a routed request: the request
:mod:`.routing` built for it, the limits its reads are held to, how its body is decoded and
completed, and its SSE events (the parser is here too). When swerve gives up, or a stream fails
after its output began, what the client gets is made here, redacted of every configured secret.
"""

from __future__ import annotations

import json
import re
import time
import zlib
from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from json.scanner import make_scanner
from operator import attrgetter
from typing import TYPE_CHECKING, Any, ClassVar, cast

import httpx

from .._engine.results import Attempt, Batch, MidStreamError, PartKind, StreamSpec
from .._engine.streams import AsyncFailoverStream, FailoverStream
from .._engine.timing import CallTime
from .._failures import (
    AttemptTimeout,
    CircuitOpenError,
    IncompleteStreamError,
    InStreamError,
    MalformedStreamError,
)
from .._telemetry.redact import REDACTED, scrub
from .flavour import Flavour, Headers, Request, Response, flavour_of
from .io_bound import Bound, held
from .upstream import (
    ATTEMPTS_HEADER,
    REQUESTED_HEADER,
    ROUTE_HEADER,
    SWERVE_PREFIX,
    ResponseTooLarge,
    Upstream,
    UpstreamStatusError,
    Wire,
)

if TYPE_CHECKING:
    from .routing import Exchange

__all__ = [
    "AUTH_HEADERS",
    "SCAN_JSON",
    "SPEC",
    "Chunk",
    "Event",
    "Receiving",
    "SSEParser",
    "given_up",
    "respond",
    "scrubbed",
    "scrubbing",
    "secrets_of",
]

_ERROR_BODY_LIMIT = 64 * 1024

_PIECE = 64 * 1024  # the most one step of decompression may produce
_POOL_GRACE_S = 1.0  # see _graced
# httpx's timeout errors, by the phase of its timeout config each one enforces.
_PHASES = {
    "ConnectTimeout": "connect",
    "ReadTimeout": "read",
    "WriteTimeout": "write",
    "PoolTimeout": "pool",
}
_ENDS = ("deadline", "attempt")  # the limits of an attempt's own end (attempt.timeout)


def _graced(request: Request, limit: float) -> None:
    """An async send on a clamped transport waits for a pool slot a little past its limit.

    The engine stops waiting for it at the limit anyway, and every socket operation it would
    make after that fails at once; but a pool timeout that fires just as a clamped neighbour
    frees its connection (both at the same limit, in a burst) races httpcore 1.0 into keeping
    a connection assigned to the timed-out request, never connected, for good
    (encode/httpcore#1093). Given the slot instead, the send fails its connect and the
    connection is dropped. A sync send is not cut by the engine: its pool wait stays within
    the limit.
    """
    timeout = request.extensions.get("timeout")
    if isinstance(timeout, dict) and timeout.get("pool") == limit:
        timeout["pool"] = limit + _POOL_GRACE_S


class Receiving:
    """One attempt of an exchange: the request it sends, and what becomes of its response as
    the transport reads it (time limits, the size limit, decoding, SSE events)."""

    __slots__ = (
        "_body",
        "_heads",
        "_inflater",
        "_named",
        "_reader",
        "asked",
        "attempt",
        "bound",
        "clamped",
        "flavour",
        "inner",
        "limits",
        "request",
        "route",
        "routing",
        "stream",
        "sync",
        "whole",
    )

    def __init__(self, exchange: Exchange, attempt: Attempt, stream: bool) -> None:
        routing = self.routing = exchange.routing
        assert exchange.plan is not None
        exchange.tried = attempt
        self.attempt = attempt
        self.route = attempt.route.name
        self.sync = exchange.sync
        self.stream = stream
        self.asked = exchange.request  # as the client sent it: its own timeouts
        self.flavour: Flavour = exchange.flavour
        # The call's limits, on its clock (None for an attempt made outside a call): ``limits``
        # is what a sync attempt checks after every read (async, the engine cuts); ``bound``
        # what the attempt's socket operations are clamped to (both modes).
        time = attempt.time
        if time is None or (attempt.timeout is None and attempt.read_timeout is None):
            self.limits: CallTime | None = None
            self.bound: Bound | None = None
        elif self.sync:
            self.limits = self.bound = time
        else:
            self.limits, self.bound = None, _Until(time)
        self.request = routing.build(exchange.request, exchange.plan, attempt, self.flavour)
        upstream = routing.upstreams[self.route]
        self.inner = (
            upstream.transport
            if upstream.transport is not None
            else routing.inner(exchange.request, self.route, exchange.cache, exchange.sync)
        )
        self.clamped = id(self.inner) in routing.clamped
        if self.clamped and not self.sync and attempt.timeout is not None:
            _graced(self.request, attempt.timeout)
        self.whole = False  # the response itself holds the body, read at once
        self._inflater: Any = None
        self._reader: _Reader | None = None
        self._named = False  # the response's model and id told the attempt (streams)
        self._body = bytearray()
        self._heads: _Heads | None = None  # the response's, read once (see _described)

    def ran_out(self, error: BaseException) -> AttemptTimeout | None:
        """For an attempt that ``error`` ended: the limit of swerve's that an httpx timeout
        enforced (swerve hands its limits to httpx as timeouts, and clamps its sockets to
        them), so the client learns which limit ran out; None for any other error."""
        time = self.attempt.time
        if (
            self.bound is None
            or time is None
            or not isinstance(error, self.flavour.TimeoutException)
        ):
            return None
        # A unary attempt never waits for its first token.
        committed = not self.stream or (self._reader is not None and self._reader.committed)
        return _ran_out(time, committed) or self._handed(error, time, committed)

    def _handed(
        self, error: BaseException, time: CallTime, committed: bool
    ) -> AttemptTimeout | None:
        """The limit httpx was handed as the timeout of the phase that ran out, when the call's
        clock did not see it pass (an injected clock, which real sockets do not keep to);
        None when that phase's timeout was the client's own (as short as swerve's, or shorter)."""
        phase = _PHASES.get(type(error).__name__)
        given = self.asked.extensions.get("timeout")
        cut = self.request.extensions.get("timeout")
        if phase is None or not isinstance(cut, dict) or cut.get(phase) is None:
            return None
        own = given.get(phase) if isinstance(given, dict) else None
        if own is not None and own <= cut[phase]:
            return None
        # A read waits for the soonest limit; every other phase for the attempt's own end.
        ends = [e for e in time.ends(committed) if phase == "read" or e[1] in _ENDS]
        end, name, since = min(ends)
        return AttemptTimeout(name, max(end - since, 0.0))

    def arrived(self) -> None:
        """The response head is in: headers that came too late are a timeout too."""
        if self.limits is not None:
            self.limits.check_soonest(self.limits.committed)

    def at_once(self, response: Response) -> bool:
        """Whether the body may be read whole in one read: its declared, unencoded length is
        within the size limit, and no time limit wants checking between reads (none, or the
        inner transport's sockets keep to them themselves)."""
        # A body already in memory (a canned response: httpx reads one built with content=)
        # takes no time to read, so no time limit wants checking between its pieces.
        if (
            self.limits is None
            or self.clamped
            or isinstance(response.stream, self.flavour.ByteStream)
        ):
            heads = self._heads = _described(response.headers)
            length = heads[1]
            self.whole = (
                length is not None
                and length.isdigit()
                and int(length) <= self.routing.limit
                and heads[2] is None
            )
        return self.whole

    def reads(self, response: Response) -> Any:
        """The body's reads, (async) iterable: raw where swerve inflates a gzip body itself, a
        bounded piece at a time (httpx would inflate a whole network read at once, and a small
        read of a gzip bomb is gigabytes)."""
        encoding = str(response.headers.get("content-encoding", "")).strip().lower()
        raw = encoding in ("gzip", "x-gzip")
        if raw:
            self._inflater = zlib.decompressobj(32 + zlib.MAX_WBITS)  # gzip or zlib header
        if not self.sync:  # async reads are cut by the engine
            return response.aiter_raw() if raw else response.aiter_bytes()
        reads = response.iter_raw() if raw else response.iter_bytes()
        return reads if self.bound is None else held(reads, self.bound)

    def add(self, data: bytes) -> None:
        """One read of a whole body, kept within the time and size limits."""
        for piece in self._decoded(data):
            if self.limits is not None:
                self.limits.check_soonest(True)
            self._body += piece
            if len(self._body) > self.routing.limit:
                raise ResponseTooLarge(f"the upstream body exceeded {self.routing.limit} bytes")

    def content(self) -> bytes:
        return bytes(self._body)

    def head(self, response: Response) -> _Head:
        """The status line and headers the client gets if this attempt's stream is served."""
        headers = _returned(response.headers)
        headers += _served_by(self.attempt)
        return _Head(response.status_code, headers)

    def streams(self, response: Response) -> bool:
        """Whether the body is an SSE stream, to read event by event (else it is read whole)."""
        if not _is_stream(response):
            return False
        self._reader = self._reader_of(response)
        return True

    def last(self, response: Response, content: bytes) -> Event:
        """A stream request answered with a whole body (an error, or a server ignoring
        ``stream``): one final chunk, checked as one."""
        self.whole = False  # the chunk carries the body: the response is not handed on
        self.complete(response, content)  # checked like a non-stream body
        return Event(content, part="other", finish=True)

    def batches(self, data: bytes) -> Iterator[Batch[Event]]:
        """The SSE events one read of the stream completes, each checked and within the time
        limits, as one batch for the engine (none, if the read completes none). An error that
        cuts the read short is raised once the events before it went out, as they came."""
        reader, limits = self._reader, self.limits
        assert reader is not None
        batch: Batch[Event] = Batch()
        try:
            for piece in self._decoded(data):
                if limits is not None:
                    limits.check_soonest(reader.committed)
                events = reader.parser.feed(piece)
                if events and limits is not None:
                    limits.received()  # the stall limit counts from these events (one instant)
                for event in events:
                    # checked() and _reported() only where they have something to do: once
                    # the content began, most events are content, nothing to keep or tell.
                    if not reader.committed or event.error is not None or event.malformed:
                        reader.checked(event)
                        if limits is not None:
                            limits.committed = reader.committed
                    if event.usage is not None or (event.response is not None and not self._named):
                        self._reported(event)
                    batch.append(event)
        except Exception as exc:
            if batch:
                yield batch
            raise exc
        if batch:
            yield batch

    def end(self) -> Batch[Event]:
        """The event the stream's last bytes make, if they make one."""
        assert self._reader is not None
        return Batch(map(self._reported, self._reader.flush()))

    def _reported(self, event: Event) -> Event:
        """``event``, its token usage and finish reasons, the model and response id it names
        (if it has any) told the attempt."""
        if event.usage is not None:
            self.attempt.report_usage(*event.usage)
        if event.response is not None and not self._named:
            self.attempt.report_response(*event.response)
            self._named = True
        return event

    def _decoded(self, data: bytes) -> Iterator[bytes]:
        inflater = self._inflater
        if inflater is None:
            yield data
            return
        while data:
            try:
                piece = inflater.decompress(data, _PIECE)
            except zlib.error as exc:
                raise httpx.DecodingError(
                    f"swerve: the upstream's gzip body is corrupt ({exc})"
                ) from exc
            if piece:
                yield piece
            data = inflater.unconsumed_tail

    def complete(self, response: Response, body: bytes) -> Response:
        """A whole (non-stream) body: an error status, an error inside a 200, or a JSON body
        that does not decode, is a failure. When the response itself holds the body
        (``self.whole``: it was read at once) it is handed on as it is. The token usage and
        finish reasons a JSON body reports are told the attempt."""
        route, attempt, secrets = self.route, self.attempt, self.routing.secrets
        if response.status_code >= 400:
            headers, content = _redacted(
                secrets, _returned(response.headers), body[:_ERROR_BODY_LIMIT]
            )
            scrubbed = _response(response, response.status_code, headers, content)
            raise UpstreamStatusError(route, scrubbed, content)
        heads = self._heads
        if heads is None:
            heads = self._heads = _described(response.headers)
        content_type = heads[0]
        if b"text/event-stream" in content_type:
            self._events(response, body)
        json_body = b"json" in content_type
        if json_body or b'"error"' in body:
            # A UTF-8 body that is one JSON value, nothing around it, is read as json.loads
            # would read it, in C (as a request's is); any other (whitespace, a BOM, UTF-16,
            # not JSON) is json.loads's to read or refuse.
            try:
                text = body.decode()
                data, end = SCAN_JSON(text, 0)
                read = end == len(text)
            except Exception:
                read = False
            if not read:
                try:
                    data = json.loads(body)
                except (ValueError, RecursionError):
                    if json_body:
                        raise _Malformed(route, _replay(secrets, response, body)) from None
                    data = None
            if isinstance(data, dict) and data.get("error") and not data.get("choices"):
                replay = _replay(secrets, response, body)
                if replay[2] != body:  # an echoed secret: the engine reads the redacted error
                    data = json.loads(replay[2])
                raise _ErrorInBody(data, route, replay)
            if isinstance(data, dict) and attempt.observed:  # else nothing reads them
                if usage := _usage(self.routing.upstreams[route].wire, data):
                    attempt.report_usage(*usage)
                # _answered(), written out: every healthy body comes here.
                model, rid = data.get("model"), data.get("id")
                attempt.report_response(
                    model if type(model) is str else None, rid if type(rid) is str else None
                )
        if self.whole:  # already read and within the limit: hand it on as it is, with swerve's
            held = response.headers  # headers instead of any the upstream sent by the name
            if heads[3]:
                for name in [k for k in held if k.lower().startswith(SWERVE_PREFIX)]:
                    del held[name]
            # _served_by's headers, set as text (written out: every healthy call sets them).
            served, requested = attempt.route.name, attempt.requested.name
            held[ROUTE_HEADER] = served
            held[ATTEMPTS_HEADER] = str(attempt.number)
            if requested != served:
                held[REQUESTED_HEADER] = requested
            return response
        returned = _returned(response.headers)
        returned += _served_by(attempt)
        return _response(response, response.status_code, returned, body)

    def _events(self, response: Response, body: bytes) -> None:
        """A whole body that is an SSE stream (a request that did not ask for one answered
        with one): read event by event as a stream is, so an error event is the route's
        failure, its echoed keys redacted, and never reaches the client unread."""
        reader = self._reader_of(response)
        try:
            for event in [*reader.feed(body), *reader.flush()]:
                self._reported(event)
        except (_ErrorInBody, _Malformed) as exc:
            exc.replay = _replay(
                self.routing.secrets, response, body
            )  # if swerve gives up: the whole body
            raise

    def _reader_of(self, response: Response) -> _Reader:
        parser = SSEParser(self.routing.upstreams[self.route].wire, self.routing.limit)
        return _Reader(self.route, response, parser, self.routing.secrets)


# -- server-sent events ------------------------------------------------------------------------

_Usage = tuple[int | None, int | None, tuple[str, ...], int | None, int | None]
"""Input tokens, output tokens, finish reasons, cache-read and cache-write input tokens a body
or event reports (None: not said)."""
_Response = tuple[str | None, str | None]
"""The model and the response id a body or event names (None: not said)."""


@dataclass(slots=True)
class Event:
    """One server-sent event: its raw bytes (passed on untouched) and what it means."""

    raw: bytes
    part: PartKind | None = None
    finish: bool = False
    error: Mapping[str, object] | None = None
    malformed: bool = False
    usage: _Usage | None = None
    response: _Response | None = None


_LINE_END = re.compile(rb"\r\n|\r|\n")
_TEXT_LINE_END = re.compile(r"\r\n|\r|\n")  # SSE's only line ends (not str.splitlines's)
_BOM = b"\xef\xbb\xbf"
SCAN_JSON = make_scanner(cast(Any, json.JSONDecoder()))  # typeshed wants a scanner: any context
"""``json.loads``'s own scanner, called without its Python wrapper: ``(value, end)`` of the JSON
value at an index, in C. Whatever it cannot read whole is ``json.loads``'s, for its error."""


class SSEParser:
    """Splits a byte stream into events at blank lines, bounded in size, in one pass.

    Lines end in CRLF, LF or a lone CR, as the SSE format allows. Each read is scanned once,
    so a stream costs time in proportion to its length, however it is cut into reads.
    """

    def __init__(self, wire: Wire, limit: int) -> None:
        self.wire = wire
        self.limit = limit
        self._buf = bytearray()  # bytes not yet split into lines
        self._scanned = 0  # how much of _buf is known to hold no line end: never rescanned
        self._event = bytearray()  # the lines of the event being read, as received
        self._started = False  # a BOM may open the stream, and only the stream

    def feed(self, data: bytes) -> list[Event]:
        buf = self._buf
        if not self._started:
            buf += data
            if len(buf) < len(_BOM) and _BOM.startswith(bytes(buf)):
                return []  # too little to tell a BOM from data yet
            self._started = True
            if buf.startswith(_BOM):
                del buf[: len(_BOM)]
            data = bytes(buf)
            buf.clear()
        if not buf and not self._event and b"\r" not in data:
            return self._whole(data)
        buf += data
        events = []
        start = 0
        for match in _LINE_END.finditer(buf, self._scanned):
            end = match.end()
            if match.group() == b"\r" and end == len(buf):
                break  # a CR at the end of a read may be the first half of a CRLF
            line = buf[start : match.start()]
            self._event += buf[start:end]
            start = end
            # Checked per event, so whether an event is too large never depends on the reads.
            if len(self._event) > self.limit:
                raise ResponseTooLarge(f"an SSE event exceeded {self.limit} bytes")
            if not line and self._event.strip():  # a blank line dispatches the event
                events.append(_interpret(self.wire, bytes(self._event)))
                self._event.clear()
            elif not line:
                self._event.clear()  # blank lines between events: nothing to dispatch
        del buf[:start]
        self._scanned = len(buf) - 1 if buf.endswith(b"\r") else len(buf)
        if len(self._event) + len(buf) > self.limit:
            raise ResponseTooLarge(f"an SSE event exceeded {self.limit} bytes")
        return events

    def _whole(self, data: bytes) -> list[Event]:
        """:meth:`feed` of a read that begins an event and holds no CR (most reads): its lines
        end in LF only, so its events end at the first blank line, found in C, not a line at
        a time. What follows the last whole event goes to the line by line reader."""
        events = []
        pos, size, limit = 0, len(data), self.limit
        while True:
            while pos < size and data[pos] == 10:  # blank lines between events: no event
                pos += 1
            end = data.find(b"\n\n", pos) + 2
            if end == 1:
                break
            if end - pos > limit:
                raise ResponseTooLarge(f"an SSE event exceeded {limit} bytes")
            raw = data[pos:end]
            if raw.strip():  # an event of blank space alone is none
                events.append(_interpret(self.wire, raw))
            pos = end
        if pos < size:
            if size - pos > limit:
                raise ResponseTooLarge(f"an SSE event exceeded {limit} bytes")
            self._buf += data[pos:]
            self._scanned = 0
        return events

    def flush(self) -> list[Event]:
        raw = bytes(self._event + self._buf)
        self._event.clear()
        self._buf.clear()
        self._scanned = 0
        return [_interpret(self.wire, raw)] if raw.strip() else []


def _obj(value: object) -> Mapping[str, Any]:
    """``value`` if it is a JSON object, else an empty one: a part of a chunk in an unexpected
    shape means nothing to swerve (the client, which reads it too, decides what it is)."""
    return value if isinstance(value, dict) else {}


def _count(usage: Mapping[str, Any], key: str) -> int | None:
    value = usage.get(key)
    return value if type(value) is int else None


def _usage(wire: Wire, payload: Mapping[str, Any]) -> _Usage | None:
    """The token usage and finish reasons a JSON body or an SSE event's data reports, if any.

    OpenAI: ``usage`` (the final chunk's, when ``stream_options.include_usage`` asked for it)
    and each choice's ``finish_reason``. Anthropic: a message's ``usage`` and ``stop_reason``;
    in a stream, ``message_start`` gives the input tokens (its output count is a
    placeholder), ``message_delta`` the output tokens and the stop reason.
    """
    if wire == "anthropic":
        kind = payload.get("type")
        if kind == "message_start":
            started = _obj(_obj(payload.get("message")).get("usage"))
            return (
                _count(started, "input_tokens"),
                None,
                (),
                _count(started, "cache_read_input_tokens"),
                _count(started, "cache_creation_input_tokens"),
            )
        if kind == "message_delta":
            payload = {**payload, **_obj(payload.get("delta"))}
        elif kind != "message":
            return None
        usage, keys = _obj(payload.get("usage")), ("input_tokens", "output_tokens")
        reason = payload.get("stop_reason")
        reasons: tuple[str, ...] = (reason,) if isinstance(reason, str) else ()
    else:
        # Written out (no helpers, no generator): every healthy body and event comes here.
        given = payload.get("usage")
        usage = given if isinstance(given, dict) else {}
        keys = ("prompt_tokens", "completion_tokens")
        choices = payload.get("choices")
        found: list[str] = []
        if isinstance(choices, list):
            for c in choices:
                if isinstance(c, dict) and isinstance(r := c.get("finish_reason"), str):
                    found.append(r)
        reasons = tuple(found)
    if not usage and not reasons:
        return None
    first, second = usage.get(keys[0]), usage.get(keys[1])
    if wire == "anthropic":
        read, write = usage.get("cache_read_input_tokens"), usage.get("cache_creation_input_tokens")
    else:
        details = usage.get("prompt_tokens_details")
        read = details.get("cached_tokens") if isinstance(details, dict) else None
        write = None
    return (
        first if type(first) is int else None,
        second if type(second) is int else None,
        reasons,
        read if type(read) is int else None,
        write if type(write) is int else None,
    )


def _answered(payload: Mapping[str, Any]) -> _Response:
    """The model and response id a JSON body (either wire), an OpenAI chunk or Anthropic's
    ``message_start`` names; anything that is not a string is not said."""
    if payload.get("type") == "message_start":
        payload = _obj(payload.get("message"))
    model, rid = payload.get("model"), payload.get("id")
    return (model if type(model) is str else None, rid if type(rid) is str else None)


def _data(raw: bytes) -> tuple[str | None, str]:
    """An event's name (its last ``event:`` line) and its data (its ``data:`` lines joined)."""
    name = None
    data_lines = []
    for line in _TEXT_LINE_END.split(raw.decode("utf-8", "replace")):
        if line.startswith("event:"):
            name = line[6:].strip()
        elif line.startswith("data:"):
            data_lines.append(line[5:].lstrip())
    return name, "\n".join(data_lines)


def _interpret(wire: Wire, raw: bytes) -> Event:
    """What an event means on its wire: content (of which kind), the finish, an error, or
    data that is not JSON (the upstream broke the protocol: the attempt fails)."""
    name = None
    if raw.startswith(b"data:") and raw.endswith(b"\n\n") and raw.count(b"\n") == 2:
        # Most events: one data line, LF-ended (no CR anywhere: count and ends say so): the
        # loop below would find just that.
        data = raw[5:-2].decode("utf-8", "replace").lstrip()
        if "\r" in data:  # a lone CR ends a line too: the loop reads it
            data = _data(raw)[1]
    else:
        name, data = _data(raw)
    event = Event(raw)
    if wire == "openai" and data.strip() == "[DONE]":
        event.finish = True
        return event
    try:
        # json.loads, its Python wrapper left out (an event's data is read per event): what
        # the scanner cannot read whole (whitespace around it, an error) is json.loads's.
        try:
            payload, end = SCAN_JSON(data, 0)
            if end != len(data):
                payload = json.loads(data)
        except (ValueError, StopIteration):
            payload = json.loads(data) if data else None
    except (ValueError, RecursionError):  # nested too deeply to read is not JSON to swerve
        event.malformed = True
        return event
    if not isinstance(payload, dict):
        return event
    if name == "error" or "error" in payload:
        event.error = payload
        return event
    if wire == "anthropic":
        event.usage = _usage(wire, payload)
        kind = payload.get("type")
        if kind == "message_start":
            event.response = _answered(payload)
        # message_delta carries the stop reason: the answer is complete, message_stop or not.
        if kind == "message_stop" or (
            kind == "message_delta" and _obj(payload.get("delta")).get("stop_reason")
        ):
            event.finish = True
        elif kind == "content_block_delta":
            delta = _obj(payload.get("delta"))
            dtype = delta.get("type")
            if dtype == "text_delta" and delta.get("text"):
                event.part = "text"
            elif dtype in ("thinking_delta", "signature_delta"):
                event.part = "reasoning"
            elif dtype == "input_json_delta":
                event.part = "tool_call"
        elif (
            kind == "content_block_start"
            and _obj(payload.get("content_block")).get("type") == "tool_use"
        ):
            event.part = "tool_call"
        return event
    # _answered(payload), written out for a chunk (on every one: the reader keeps the first).
    if payload.get("type") == "message_start":
        event.response = _answered(payload)
    else:
        model, rid = payload.get("model"), payload.get("id")
        event.response = (model if type(model) is str else None, rid if type(rid) is str else None)
    choices = payload.get("choices")
    reasons = False  # whether a choice says how it finished (then _usage has something to say)
    for choice in choices if isinstance(choices, list) else ():
        if not isinstance(choice, dict):  # _obj(), written out here and below: per chunk
            continue
        # A finish_reason ends the answer; several compatible servers never send [DONE].
        # (The usage chunk that may follow still reaches the client: the stream goes on.)
        reason = choice.get("finish_reason")
        if reason is not None:
            reasons = reasons or isinstance(reason, str)
            if reason != "error":
                event.finish = True
        said = choice.get("delta")
        if not isinstance(said, dict):
            continue
        if said.get("content"):
            event.part = "text"
        elif said.get("tool_calls"):
            event.part = "tool_call"
        elif (
            said.get("reasoning") or said.get("reasoning_content") or said.get("reasoning_details")
        ):
            event.part = "reasoning"
    # _usage() has nothing to say of a chunk without usage or a finish reason: most of them.
    if reasons or payload.get("usage"):
        event.usage = _usage(wire, payload)
    return event


# -- the chunks an attempt's stream hands the engine ------------------------------------------

AUTH_HEADERS = frozenset({"authorization", "x-api-key", "api-key"})
# Upstream.headers whose values are secrets (redacted wherever an upstream echoes them).
_SECRET_NAME = re.compile(r"auth|key|token|secret|passw|cookie|session|signature", re.IGNORECASE)
# The body is decoded before the client sees it, so these would describe it wrongly.
_NOT_RETURNED = frozenset({b"content-encoding", b"content-length", b"transfer-encoding"})
_SWERVE_RAW = SWERVE_PREFIX.encode()
_RAW = attrgetter("raw")  # an event's bytes, as the upstream sent them
# Shorter "keys" (a placeholder such as "test" for a local server) are no secret, and replacing
# them everywhere would mangle the body they are scrubbed from.
_MIN_SECRET = 8
_REDACTED_BYTES = REDACTED.encode()
# How far apart httpx's timers (socket timeouts, from a read's start) and swerve's check (after
# the read returns) may see one limit end.
_TIMER_SLACK_S = 0.05


@dataclass(slots=True)
class _Head:
    """The status line and headers of the attempt whose body follows: no output, no finish."""

    status: int
    headers: list[tuple[bytes, bytes]]
    part: ClassVar[PartKind | None] = None
    finish: ClassVar[bool] = False


Chunk = _Head | Event | Batch[Event]

# The transport hands every chunk on as it comes and never reads partial output back: keeping
# none of it is what lets a long stream pass through in constant memory. Both kinds of chunk
# carry ``part`` and ``finish``: the engine reads them per event with a C getter, no Python call.
SPEC: StreamSpec[Chunk] = StreamSpec(
    part=attrgetter("part"), is_finish=attrgetter("finish"), keep_partial=False
)


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
        self, route: str, response: Response, parser: SSEParser, secrets: tuple[str, ...]
    ) -> None:
        self.route = route
        self.parser = parser
        self.secrets = secrets
        self.status = response.status_code
        self.headers = _returned(response.headers)
        self.raw: list[bytes] = []
        self.held = 0  # the bytes of raw: bounded like one event, so memory is constant
        self.committed = False

    def feed(self, data: bytes) -> Iterator[Event]:
        # One at a time: events before an error event in the same read still go out first.
        for event in self.parser.feed(data):
            yield self.checked(event)

    def flush(self) -> Iterator[Event]:
        for event in self.parser.flush():
            yield self.checked(event)

    def checked(self, event: Event) -> Event:
        """``event``, kept for a replay until the content begins; an error event, or data that
        is not JSON, raised as the attempt's failure (redacted)."""
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


_Heads = tuple[bytes, bytes | None, bytes | None, bool]
"""A response's ``Content-Type`` (empty when absent), ``Content-Length`` and
``Content-Encoding`` (None when absent), as bytes, and whether it has an ``x-swerve-*``
header."""


def _described(headers: Headers) -> _Heads:
    """What swerve reads of a response's headers, in one pass over the raw ones: a lookup by
    name walks and decodes them all, each time. A name given twice reads as ``Headers.get``
    gives it, the values joined by ``", "``."""
    kind = length = encoding = None
    marked = False
    for k, v in headers.raw:
        name = k.lower()
        if name == b"content-type":
            kind = v if kind is None else kind + b", " + v
        elif name == b"content-length":
            length = v if length is None else length + b", " + v
        elif name == b"content-encoding":
            encoding = v if encoding is None else encoding + b", " + v
        elif name.startswith(_SWERVE_RAW):
            marked = True
    return kind or b"", length, encoding, marked


def _returned(headers: Headers) -> list[tuple[bytes, bytes]]:
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
    route = attempt.route.name
    headers = [(ROUTE_HEADER, route), (ATTEMPTS_HEADER, str(attempt.number))]
    requested = attempt.requested.name
    if requested != route:
        headers.append((REQUESTED_HEADER, requested))
    return [(k.encode(), v.encode()) for k, v in headers]


def _response(
    like: object, status: int, headers: list[tuple[bytes, bytes]], content: bytes
) -> Response:
    return flavour_of(like).Response(status, headers=headers, content=content)


def secrets_of(upstream: Upstream) -> tuple[str, ...]:
    """The credentials swerve itself sends to ``upstream``, longest first (so a header value
    that contains the key goes whole), each also as it reads inside a JSON string."""
    key = upstream.api_key or ""
    found = {key}
    for name, value in upstream.headers.items():
        if name.lower() in AUTH_HEADERS or _SECRET_NAME.search(name) or (key and key in value):
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


def _is_stream(response: Response) -> bool:
    """An SSE body to read event by event (an error status is read whole)."""
    return response.status_code < 400 and "text/event-stream" in response.headers.get(
        "content-type", ""
    )


# -- secrets out of everything an upstream echoes ---------------------------------------------


def scrubbed(exc: BaseException, secrets: tuple[str, ...]) -> BaseException:
    """``exc`` with every configured secret taken out of its message and notes (in place:
    it keeps its type and traceback), before the engine, the spans or the client see it."""
    if not secrets:
        return exc
    for error in _causes(exc):
        if any(isinstance(a, str) and _has_secret(a, secrets) for a in error.args):
            error.args = tuple(scrub(a, secrets) if isinstance(a, str) else a for a in error.args)
        notes = getattr(error, "__notes__", None)
        if isinstance(notes, list):
            notes[:] = [scrub(n, secrets) if isinstance(n, str) else n for n in notes]
    return exc


@contextmanager
def scrubbing(secrets: tuple[str, ...]) -> Iterator[None]:
    """An attempt's error, with every configured secret taken out before the engine, the
    spans or the client see it (the same exception, in place)."""
    try:
        yield
    except Exception as exc:
        scrubbed(exc, secrets)
        raise


def _replay(secrets: tuple[str, ...], response: Response, body: bytes) -> _Replay:
    headers, content = _redacted(secrets, _returned(response.headers), body)
    return response.status_code, headers, content


def _causes(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and what it was raised from or during, bounded and cycle-safe."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen and len(seen) < 16:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def _has_secret(text: str, secrets: tuple[str, ...]) -> bool:
    return any(s in text for s in secrets)


# -- what the client gets ---------------------------------------------------------------------


def given_up(exchange: Exchange, error: Exception) -> Response:
    """After swerve gave up: what the client would have received without it, less the keys
    swerve added, plus swerve's headers (the route it came from, the attempts made, as a
    served response has); or the error its own stack would have raised."""
    request, secrets, started = exchange.request, exchange.routing.secrets, exchange.started
    served = _served_by(exchange.tried) if exchange.tried is not None else []
    if isinstance(error, UpstreamStatusError):
        headers, content = _redacted(secrets, _returned(error.response.headers), error.content)
        return _response(request, error.status_code, headers + served, content)
    if isinstance(error, _ErrorInBody | _Malformed):
        status, headers, content = error.replay
        headers, content = _redacted(secrets, headers, content)
        return flavour_of(request).Response(status, headers=headers + served, content=content)
    module = flavour_of(request)
    if isinstance(error, IncompleteStreamError):
        raise module.RemoteProtocolError(
            f"swerve: the upstream stream ended without its finish event ({error})", request=request
        ) from error
    client_error = _client_error(scrubbed(error, secrets), module, request, started)
    if client_error is error:
        raise error
    raise client_error from error


def respond(exchange: Exchange, head: object, stream: Any) -> Response:
    """The response to a stream request, once its first content is in: its status line and
    headers now, its body from ``stream``."""
    assert isinstance(head, _Head)
    module, secrets = exchange.flavour, exchange.routing.secrets
    body = _byte_stream(module, exchange.sync, stream, secrets, exchange.started)
    return module.Response(head.status, headers=head.headers, stream=body)


def _client_error(
    error: BaseException, module: Flavour, request: Request | None, started: float
) -> BaseException:
    """What the client's own stack raises for ``error``: swerve's time limits as its flavour's
    ``ReadTimeout``, an open breaker as its ``ConnectError`` (no request was sent), an
    over-large body as its ``DecodingError``, httpx errors re-made in its flavour. So
    ``except httpx.HTTPError`` (or ``httpx2``'s) and the SDKs' ``APITimeoutError`` /
    ``APIConnectionError`` handling catch them. swerve's own words stay in the message and the
    notes; the original is the new error's ``__cause__``."""
    out: BaseException
    if isinstance(error, AttemptTimeout):
        # The transport's own clock: the engine's figure for a deadline is the wait it granted.
        elapsed = max(time.monotonic() - started, 0.0)
        out = module.ReadTimeout(
            f"swerve: the {error.limit.replace('_', ' ')} time limit ran out "
            f"({elapsed:.3g}s into the request)",
            request=request,
        )
    elif isinstance(error, CircuitOpenError):
        out = module.ConnectError(f"swerve: {error}; no request was sent", request=request)
    elif isinstance(error, ResponseTooLarge):
        out = _too_large_class(module)(str(error), request=request)
    else:
        return _flavoured(error, module)
    for note in getattr(error, "__notes__", ()):
        out.add_note(note)
    return out


_TOO_LARGE: dict[str, type] = {}


def _too_large_class(module: Flavour) -> type:
    """:class:`ResponseTooLarge` that is also ``module.DecodingError``."""
    cls = _TOO_LARGE.get(module.__name__)
    if cls is None:
        cls = _TOO_LARGE[module.__name__] = type(
            "ResponseTooLarge", (ResponseTooLarge, module.DecodingError), {}
        )
        cls.__module__ = ResponseTooLarge.__module__  # swerve.httpx, where it is documented
    return cls


def _ending(
    error: MidStreamError, module: Flavour, secrets: tuple[str, ...], started: float
) -> bytes:
    """When a stream fails after its output began: the last bytes the client gets, or (raised)
    the error it gets, in its flavour.

    An error event: passed on, less swerve's keys, and the stream ends (the SDK raises its own
    error from it, as it would). A truncated or undecodable stream is never a silent success:
    a protocol error. A transport error, or one of swerve's time limits: as its stack raises it.
    """
    cause = error.__cause__ or error
    route = str(error.route)
    if isinstance(cause, _ErrorInBody):
        return _redacted(secrets, [], cause.raw)[1]
    if isinstance(cause, InStreamError):
        return b""
    surfaced: BaseException = scrubbed(cause, secrets)
    if isinstance(cause, IncompleteStreamError):
        surfaced = httpx.RemoteProtocolError(
            f"swerve: the stream from {route} ended without its finish event"
        )
    elif isinstance(cause, MalformedStreamError):
        surfaced = httpx.RemoteProtocolError(
            f"swerve: the stream from {route} sent an event that is not JSON"
        )
    raise _client_error(surfaced, module, None, started) from error


_STREAM_CLASSES: dict[tuple[str, bool], type] = {}


def _byte_stream(
    module: Flavour, sync: bool, source: Any, secrets: tuple[str, ...], started: float
) -> Any:
    """A response body of the client's flavour (httpx or httpx2) fed by the failover stream."""
    key = (module.__name__, sync)
    cls = _STREAM_CLASSES.get(key)
    if cls is None:
        cls = _STREAM_CLASSES[key] = (
            type("SwerveStream", (_SyncBody, module.SyncByteStream), {})
            if sync
            else type("SwerveAsyncStream", (_AsyncBody, module.AsyncByteStream), {})
        )
    return cls(source, secrets, module, started)


class _Body:
    """A response body fed by a failover stream; how it ends after its output began."""

    def __init__(
        self, source: Any, secrets: tuple[str, ...], module: Flavour, started: float
    ) -> None:
        self.source = source
        self.secrets = secrets
        self.module = module
        self.started = started

    def _ending(self, error: MidStreamError) -> bytes:
        return _ending(error, self.module, self.secrets, self.started)


class _SyncBody(_Body):
    source: FailoverStream[Chunk]

    def __iter__(self) -> Iterator[bytes]:
        try:
            for chunk in self.source:
                if type(chunk) is Batch:
                    yield b"".join(map(_RAW, chunk))  # one read's events, as they came
                elif isinstance(chunk, Event):
                    yield chunk.raw
        except MidStreamError as exc:
            yield self._ending(exc)

    def close(self) -> None:
        self.source.close()


class _AsyncBody(_Body):
    source: AsyncFailoverStream[Chunk]

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self.source:
                if type(chunk) is Batch:
                    yield b"".join(map(_RAW, chunk))  # one read's events, as they came
                elif isinstance(chunk, Event):
                    yield chunk.raw
        except MidStreamError as exc:
            yield self._ending(exc)

    async def aclose(self) -> None:
        await self.source.aclose()


def _flavoured(error: BaseException, module: Flavour) -> BaseException:
    """httpx errors re-made in the client's flavour, so an httpx2 client sees httpx2 errors."""
    if isinstance(error, httpx.HTTPError) and module.__name__ != "httpx":
        cls = getattr(module, type(error).__name__, None)
        if isinstance(cls, type) and issubclass(cls, Exception):
            return cls(str(error))
    return error
