"""What the fake provider answers (:class:`Reply`) and how it misbehaves (:class:`Fault`)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

__all__ = ["ErrorStyle", "Fault", "FaultKind", "Reply", "ToolCall", "describe"]

ErrorStyle = Literal["openrouter", "openai", "anthropic"]
"""Shape of an error sent inside a 200 stream (see :meth:`Fault.error_before_content`)."""

FaultKind = Literal[
    "ok",
    "status",
    "context_overflow",
    "reset",
    "reset_after",
    "hang",
    "error_before_content",
    "error_after",
    "drop_after",
    "no_finish",
    "no_done",
    "malformed_before_content",
    "malformed_after",
    "echo_headers",
    "slow",
    "cut_after_bytes",
    "bad_chunking",
    "content_type",
    "gzip",
    "dribble",
]

_STYLES: tuple[ErrorStyle, ...] = ("openrouter", "openai", "anthropic")


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A tool call the fake model makes: ``ToolCall("get_weather", {"city": "Oslo"})``.

    ``arguments`` is sent as the call's JSON arguments (OpenAI ``function.arguments``,
    Anthropic ``tool_use.input``); ``id`` is generated per response when None.
    """

    name: str
    arguments: Mapping[str, object]
    id: str | None = None

    def __post_init__(self) -> None:
        # The server thread serialises these; a bad value must fail here, in the test.
        if not isinstance(self.name, str) or not self.name:
            raise TypeError(f"ToolCall(): name must be a non-empty str, got {self.name!r}")
        if not isinstance(self.arguments, Mapping):
            raise TypeError(
                f"ToolCall(): arguments must be a mapping such as {{'city': 'Oslo'}}, "
                f"got {type(self.arguments).__name__}"
            )
        try:
            json.dumps(dict(self.arguments))
        except (TypeError, ValueError) as exc:
            raise TypeError(f"ToolCall(): arguments must be JSON-serialisable: {exc}") from None
        if self.id is not None and (not isinstance(self.id, str) or not self.id):
            raise TypeError(f"ToolCall(): id must be a non-empty str or None, got {self.id!r}")


@dataclass(frozen=True, slots=True)
class Reply:
    """What a provider answers when no fault gets in the way: its standing reply
    (``FakeProvider.set_reply``) or one step of a ``FakeProvider.script``.

    ``text=None`` means ``"hello from <provider>"``; pass ``""`` for no text at all (a pure
    tool-call turn). ``tool_calls`` (a list of :class:`ToolCall`) end the turn with
    ``finish_reason: "tool_calls"`` / ``stop_reason: "tool_use"``. ``reasoning`` is sent as
    signed reasoning (Anthropic ``thinking`` block with a ``signature``; OpenRouter
    ``reasoning`` + ``reasoning_details`` on the OpenAI wire). ``usage`` is
    ``(input_tokens, output_tokens)``; ``cached`` is ``(cache_read, cache_write)``: how many of
    the input tokens were read from, and written to, the prompt cache.
    """

    text: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    reasoning: str | None = None
    usage: tuple[int, int] = (10, 5)
    cached: tuple[int, int] = (0, 0)

    def __post_init__(self) -> None:
        if self.text is not None and not isinstance(self.text, str):
            raise TypeError(f"Reply(): text must be a str or None, got {describe(self.text)}")
        if self.reasoning is not None and not isinstance(self.reasoning, str):
            raise TypeError(
                f"Reply(): reasoning must be a str or None, got {describe(self.reasoning)}"
            )
        if isinstance(self.tool_calls, ToolCall | str | bytes | Mapping) or not isinstance(
            self.tool_calls, Iterable
        ):
            raise TypeError(
                "Reply(): tool_calls must be a list of ToolCall, e.g. "
                f"[ToolCall('get_weather', {{'city': 'Oslo'}})], got {describe(self.tool_calls)}"
            )
        # Accept a list for convenience; keep the stored value immutable.
        calls = tuple(self.tool_calls)
        for i, call in enumerate(calls):
            if not isinstance(call, ToolCall):
                raise TypeError(
                    f"Reply(): tool_calls[{i}] must be a ToolCall, got {describe(call)}"
                )
        object.__setattr__(self, "tool_calls", calls)
        for field, shape in (
            ("usage", "(input_tokens, output_tokens)"),
            ("cached", "(cache_read, cache_write)"),
        ):
            given: object = getattr(self, field)
            counts = tuple(given) if isinstance(given, tuple | list) else ()
            if len(counts) != 2 or not all(
                isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in counts
            ):
                raise TypeError(
                    f"Reply(): {field} must be {shape}, two ints >= 0, got {describe(given)}"
                )
            object.__setattr__(self, field, counts)


@dataclass(frozen=True, slots=True)
class Fault:
    """How one request on a provider fails. Build it with the constructors, not directly.

    Every fault is served in the shape of the wire the request came in on (OpenAI chat
    completions or Anthropic messages), and of JSON or SSE as the request asked.
    """

    kind: FaultKind = "ok"
    code: int = 503
    retry_after: float | str | None = None
    retry_after_ms: int | None = None
    body: str | Mapping[str, object] | None = None
    after: int = 0
    style: ErrorStyle = "openrouter"
    first_token_s: float = 0.0
    per_chunk_s: float = 0.0
    in_stream: bool = False
    content_type: str | None = None
    size: int = 0

    @classmethod
    def ok(cls) -> Fault:
        """No fault: the reply is served normally."""
        return cls()

    @classmethod
    def status(
        cls,
        code: int,
        retry_after: float | str | None = None,
        retry_after_ms: int | None = None,
        body: str | Mapping[str, object] | None = None,
    ) -> Fault:
        """An HTTP error response with the wire's real error body.

        OpenAI: ``{"error": {"message", "type", "param", "code"}}``. Anthropic:
        ``{"type": "error", "error": {"type", "message"}}`` with the type the real API uses
        for the status (529 ``overloaded_error``, 429 ``rate_limit_error``, 5xx ``api_error``,
        400 ``invalid_request_error``, 401 ``authentication_error``, ...). ``retry_after``
        (seconds, or a str such as an HTTP date, sent verbatim) sets ``Retry-After``;
        ``retry_after_ms`` sets ``retry-after-ms``. ``body`` replaces the body: a mapping is
        sent as JSON, a str as-is with ``text/html`` (a gateway's error page).
        """
        return cls(
            "status", code=code, retry_after=retry_after, retry_after_ms=retry_after_ms, body=body
        )

    @classmethod
    def context_overflow(cls) -> Fault:
        """400 with the wire's real "prompt too long" error (never worth a swap).

        OpenAI: code ``context_length_exceeded``, "This model's maximum context length is
        ...". Anthropic: ``invalid_request_error``, "prompt is too long: 250000 tokens >
        200000 maximum".
        """
        return cls("context_overflow", code=400)

    @classmethod
    def reset(cls) -> Fault:
        """Read the request, then reset the connection (RST) without any response."""
        return cls("reset")

    @classmethod
    def reset_after(cls, n: int) -> Fault:
        """Stream ``n`` content chunks, then reset the connection (RST).

        A non-stream request is reset before any response.
        """
        return cls("reset_after", after=n)

    @classmethod
    def hang(cls) -> Fault:
        """Read the request and never answer.

        The request is released (connection closed, no response) when the provider's fault
        changes, when the server stops, or after 120 s at most.
        """
        return cls("hang")

    @classmethod
    def error_before_content(cls, style: ErrorStyle, code: int = 503) -> Fault:
        """A 200 SSE stream whose error arrives before any content, then the stream ends.

        ``"openrouter"``: after the role delta, a ``chat.completion.chunk`` carrying
        ``"error": {"code", "message"}`` and ``finish_reason: "error"`` (what OpenRouter
        really sends). ``"openai"``: a bare ``data: {"error": {...}}`` chunk. ``"anthropic"``:
        ``event: error`` with ``{"type": "error", "error": {"type": "overloaded_error", ...}}``
        right after ``message_start`` (``rate_limit_error`` for 429, ``api_error`` for 500).
        A non-stream request gets the error as a 200 JSON body (OpenRouter does that too).
        """
        return cls("error_before_content", code=code, style=_check_style(style))

    @classmethod
    def error_after(cls, n: int, style: ErrorStyle, code: int = 503) -> Fault:
        """Like :meth:`error_before_content`, but after ``n`` content chunks."""
        return cls("error_after", code=code, after=n, style=_check_style(style))

    @classmethod
    def drop_after(cls, n: int) -> Fault:
        """Stream ``n`` content chunks, then close the connection cleanly (FIN) mid-body.

        No finish chunk, no ``[DONE]`` / ``message_stop``, and no end of the chunked body,
        so httpx raises ``RemoteProtocolError`` (incomplete chunked read). A non-stream
        request gets its headers and half its body.
        """
        return cls("drop_after", after=n)

    @classmethod
    def no_finish(cls) -> Fault:
        """Stream all content, then end the body without the finish events.

        No ``finish_reason`` chunk, usage chunk or ``[DONE]`` (OpenAI); no ``message_delta``
        or ``message_stop`` (Anthropic). The HTTP body itself ends properly, so only a
        client that checks for the finish signal notices. A non-stream request gets a body
        whose ``finish_reason`` / ``stop_reason`` is null.
        """
        return cls("no_finish")

    @classmethod
    def no_done(cls) -> Fault:
        """Stream all content and the finish information, but not the terminator.

        OpenAI: the ``finish_reason`` chunk (and the usage chunk when ``include_usage`` asked
        for it), no ``data: [DONE]``, as several OpenAI-compatible servers do. Anthropic:
        ``message_delta`` with its ``stop_reason`` and usage, no ``message_stop``. The answer
        is complete and the HTTP body ends properly. A non-stream request gets a normal body.
        """
        return cls("no_done")

    @classmethod
    def malformed_before_content(cls) -> Fault:
        """A 200 SSE stream with an event whose data is not JSON before any content.

        The undecodable event (``data: {"choices": [``, truncated; on Anthropic a truncated
        ``content_block_delta``) comes right after the role delta / ``message_start``; the
        rest of the stream follows as usual and ends properly, so only a client that decodes
        every event notices. A non-stream request gets a 200 JSON body cut in half (its
        ``Content-Length`` matches what is sent: the HTTP response itself is whole).
        """
        return cls("malformed_before_content")

    @classmethod
    def malformed_after(cls, n: int) -> Fault:
        """Like :meth:`malformed_before_content`, but the undecodable event comes after ``n``
        content chunks (before the finish events if the reply has fewer)."""
        return cls("malformed_after", after=n)

    @classmethod
    def echo_headers(cls, code: int = 400, *, in_stream: bool = False, after: int = 0) -> Fault:
        """An upstream that echoes the request headers it received, credentials included.

        ``in_stream=False``: HTTP ``code`` with the wire's real error body, whose message is
        ``"received headers: {...}"`` (the headers as JSON, verbatim), and ``x-echo-<name>``
        response headers repeating the received ``authorization``, ``x-api-key`` and
        ``api-key`` values. ``in_stream=True``: a 200 SSE stream whose error event carries
        that message (OpenRouter's error chunk on the OpenAI wire, ``event: error`` on
        Anthropic) before any content, right after the role delta / ``message_start``, or
        after ``after`` content chunks; a non-stream request gets the error as a 200 JSON
        body. For testing that secrets do not reach the client.
        """
        return cls("echo_headers", code=code, in_stream=in_stream, after=after)

    @classmethod
    def slow(cls, first_token_s: float = 0.0, per_chunk_s: float = 0.0) -> Fault:
        """Wait ``first_token_s`` before the first content chunk and ``per_chunk_s`` between
        the following ones (each wait capped at 120 s; stop() interrupts them).

        A non-stream response is delayed by ``first_token_s`` as a whole.
        """
        return cls("slow", first_token_s=first_token_s, per_chunk_s=per_chunk_s)

    @classmethod
    def cut_after_bytes(cls, n: int) -> Fault:
        """Send the response head and the first ``n`` bytes of the body, then close the
        connection (FIN): a drop at any byte offset, inside an event or between two.

        A stream's bytes go out as one HTTP chunk with no end of the chunked body; a whole body
        promises its full ``Content-Length``. ``n`` at or past the body's length sends it all
        (and a stream its chunked end).
        """
        if n < 0:
            raise ValueError(f"cut_after_bytes needs n >= 0, got {n}")
        return cls("cut_after_bytes", after=n)

    @classmethod
    def bad_chunking(cls, after: int = 0) -> Fault:
        """Stream ``after`` content chunks, then a chunk whose size line is not hexadecimal,
        then close: a chunked-encoding error. A non-stream request gets a body sent chunked
        with the same broken size line."""
        return cls("bad_chunking", after=after)

    @classmethod
    def wrong_content_type(cls, content_type: str = "text/html; charset=utf-8") -> Fault:
        """The usual reply (JSON or SSE, as asked) labelled with ``content_type`` instead."""
        return cls("content_type", content_type=content_type)

    @classmethod
    def gzip(cls, pad: int = 0) -> Fault:
        """The usual reply with ``Content-Encoding: gzip``; ``pad`` > 0 makes it a bomb.

        A whole body gets ``pad`` spaces of JSON whitespace after its object; a stream gets an
        SSE comment line of ``pad`` spaces before its first event. Spaces compress about
        1000:1, and the server compresses as it sends, so a large ``pad`` costs it little.
        """
        if pad < 0:
            raise ValueError(f"gzip needs pad >= 0, got {pad}")
        return cls("gzip", size=pad)

    @classmethod
    def dribble(cls, interval_s: float) -> Fault:
        """The usual reply sent one byte every ``interval_s`` (a stream as one-byte chunks, a
        whole body under its full ``Content-Length``). stop() interrupts it."""
        if interval_s < 0:
            raise ValueError(f"dribble needs interval_s >= 0, got {interval_s}")
        return cls("dribble", per_chunk_s=interval_s)


def _check_style(style: str) -> ErrorStyle:
    for known in _STYLES:
        if style == known:
            return known
    raise ValueError(f"unknown error style {style!r}; expected one of {_STYLES}")


def describe(value: object) -> str:
    """``value`` for a message: its type and a short repr (``int 503``, ``Fault(kind=...``)."""
    name, text = type(value).__name__, repr(value)
    text = text if len(text) <= 40 else text[:37] + "..."
    return text if text.startswith(name) else f"{name} {text}"
