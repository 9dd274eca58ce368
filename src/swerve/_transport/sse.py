"""Server-sent events parsed without I/O: split at blank lines, bounded, read for meaning."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .upstream import ResponseTooLarge, Wire

if TYPE_CHECKING:
    from .._engine.results import PartKind


_Usage = tuple[int | None, int | None, tuple[str, ...]]
"""Input tokens, output tokens and finish reasons a body or event reports (None: not said)."""


@dataclass(slots=True)
class _Event:
    """One server-sent event: its raw bytes (passed on untouched) and what it means."""

    raw: bytes
    part: PartKind | None = None
    finish: bool = False
    error: Mapping[str, object] | None = None
    malformed: bool = False
    usage: _Usage | None = None


_LINE_END = re.compile(rb"\r\n|\r|\n")
_TEXT_LINE_END = re.compile(r"\r\n|\r|\n")  # SSE's only line ends (not str.splitlines's)
_BOM = b"\xef\xbb\xbf"


class _SSEParser:
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

    def feed(self, data: bytes) -> list[_Event]:
        buf = self._buf
        buf += data
        if not self._started:
            if len(buf) < len(_BOM) and _BOM.startswith(bytes(buf)):
                return []  # too little to tell a BOM from data yet
            self._started = True
            if buf.startswith(_BOM):
                del buf[: len(_BOM)]
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

    def flush(self) -> list[_Event]:
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
            message = _obj(payload.get("message"))
            return _count(_obj(message.get("usage")), "input_tokens"), None, ()
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
    return (
        first if type(first) is int else None,
        second if type(second) is int else None,
        reasons,
    )


def _interpret(wire: Wire, raw: bytes) -> _Event:
    """What an event means on its wire: content (of which kind), the finish, an error, or
    data that is not JSON (the upstream broke the protocol: the attempt fails)."""
    name = None
    data_lines = []
    for line in _TEXT_LINE_END.split(raw.decode("utf-8", "replace")):
        if line.startswith("event:"):
            name = line[6:].strip()
        elif line.startswith("data:"):
            data_lines.append(line[5:].lstrip())
    data = "\n".join(data_lines)
    event = _Event(raw)
    if wire == "openai" and data.strip() == "[DONE]":
        event.finish = True
        return event
    try:
        payload = json.loads(data) if data else None
    except (ValueError, RecursionError):  # nested too deeply to read is not JSON to swerve
        event.malformed = True
        return event
    if not isinstance(payload, dict):
        return event
    if name == "error" or "error" in payload:
        event.error = payload
        return event
    event.usage = _usage(wire, payload)
    if wire == "anthropic":
        kind = payload.get("type")
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
    choices = payload.get("choices")
    for choice in choices if isinstance(choices, list) else ():
        choice = _obj(choice)
        # A finish_reason ends the answer; several compatible servers never send [DONE].
        # (The usage chunk that may follow still reaches the client: the stream goes on.)
        if choice.get("finish_reason") not in (None, "error"):
            event.finish = True
        delta = _obj(choice.get("delta"))
        if delta.get("content"):
            event.part = "text"
        elif delta.get("tool_calls"):
            event.part = "tool_call"
        elif (
            delta.get("reasoning")
            or delta.get("reasoning_content")
            or delta.get("reasoning_details")
        ):
            event.part = "reasoning"
    return event
