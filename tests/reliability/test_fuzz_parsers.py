"""Fuzzing the parsers that read what an upstream sends: the transport's SSE parser and event
interpretation (both wires), failure classification, and Retry-After.

Each property states its bound and reports how many inputs it tried. The example counts are
the CI form; ``$SWERVE_SOAK_S`` scales them up.
"""

from __future__ import annotations

import email.utils
import itertools
import json
import math
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from swerve import FallbackConfig
from swerve._engine.policy import Retry, Swap, decide
from swerve._failures import (
    KNOWN_ERROR_TYPES,
    RETRY_AFTER_MAX_S,
    AttemptTimeout,
    CircuitOpenError,
    Failure,
    FailureKind,
    IncompleteStreamError,
    InStreamError,
    MalformedStreamError,
    classify,
    parse_retry_after,
    status_kind,
)
from swerve._transport.reading import Event as _Event
from swerve._transport.reading import SSEParser as _SSEParser
from swerve.httpx import ResponseTooLarge

from ._measure import DEADLINE, fuzz

Report = Callable[..., None]

# An example that takes longer than this is a hang or a quadratic path: every input here is
# parsed in well under a millisecond when nothing is wrong.


# --- the SSE parser ---------------------------------------------------------------------------

WIRES = st.sampled_from(["openai", "anthropic"])
BIG = 1 << 24  # a limit no generated stream reaches


def parse(wire: str, data: bytes, cuts: list[int], limit: int = BIG) -> list[tuple[Any, ...]]:
    """The events of ``data`` read in pieces cut at ``cuts``, as comparable tuples."""
    parser = _SSEParser(wire, limit)  # type: ignore[arg-type]
    events: list[_Event] = []
    last = 0
    for cut in [*sorted(c % (len(data) + 1) for c in cuts), len(data)]:
        events += parser.feed(data[last:cut])
        last = cut
    events += parser.flush()
    return [(e.raw, e.part, e.finish, e.error, e.malformed) for e in events]


def _deep(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


# Bytes that mean something to SSE, a line-ending soup, JSON fragments, nested JSON both within
# and beyond the decoder's recursion limit, and noise.
sse_tokens = st.one_of(
    st.sampled_from(
        [
            b"data: ",
            b"data:",
            b"data",
            b"event: error",
            b"event: message_stop",
            b"event:",
            b": keep-alive",
            b"id: 7",
            b"retry: 10",
            b"\n",
            b"\r",
            b"\r\n",
            b"\n\n",
            b"\r\r",
            b"\r\n\r\n",
            b"[DONE]",
            b" ",
            b"\xef\xbb\xbf",
            b"\xc2\x85",  # NEL
            b"\xe2\x80\xa8",  # U+2028
            b"\xff\xfe",
            b'{"choices": [{"delta": {"content": "hi"}, "finish_reason": null}]}',
            b'{"choices": [{"delta": {}, "finish_reason": "stop"}]}',
            b'{"error": {"code": 503, "message": "down"}}',
            b'{"type": "content_block_delta", "delta": {"type": "text_delta", "text": "x"}}',
            b'{"type": "message_delta", "delta": {"stop_reason": "end_turn"}}',
            b'{"type": "error", "error": {"type": "overloaded_error"}}',
            b"{",
            b"}",
            b'"',
            b"1" * 5000,  # more digits than Python converts to an int
        ]
    ),
    st.integers(0, 3000).map(_deep),
    st.binary(max_size=24),
)
sse_soup = st.lists(sse_tokens, max_size=40).map(b"".join)
cuts = st.lists(st.integers(0, 1 << 30), max_size=24)


def test_sse_any_bytes_any_cuts_same_events_nothing_escapes(soak_s: float, figure: Report) -> None:
    tried = 0

    @fuzz(soak_s, 400)
    @given(wire=WIRES, data=sse_soup, cuts=cuts)
    def prop(wire: str, data: bytes, cuts: list[int]) -> None:
        nonlocal tried
        tried += 1
        # No limit is reached: nothing may escape, and the cuts must not matter.
        assert parse(wire, data, cuts) == parse(wire, data, [])

    prop()
    figure(
        "SSE parser: arbitrary bytes (CR/LF/CRLF, nested and broken JSON) in arbitrary reads",
        "0 exceptions escaped, 0 results that depend on the cuts",
        measured=f"{tried} inputs, 0 escaped, 0 cut-dependent",
    )


def test_sse_limit_refuses_only_with_response_too_large(soak_s: float, figure: Report) -> None:
    tried = refused = 0

    @fuzz(soak_s, 300)
    @given(wire=WIRES, data=sse_soup, cuts=cuts, limit=st.integers(1, 3000))
    def prop(wire: str, data: bytes, cuts: list[int], limit: int) -> None:
        nonlocal tried, refused
        tried += 1
        try:
            events = parse(wire, data, cuts, limit)
        except ResponseTooLarge:  # the one documented refusal
            refused += 1
            return
        # Whenever reads in pieces pass, one read passes and says the same.
        assert parse(wire, data, [], limit) == events

    prop()
    figure(
        "SSE parser under a size limit: arbitrary bytes in arbitrary reads",
        "only ResponseTooLarge escapes",
        measured=f"{tried} inputs, {refused} refused with ResponseTooLarge, 0 other escapes",
    )


# Well-formed streams whose every event has a known meaning: (lines, (part, finish, error)).
_text = st.text(min_size=1, max_size=30)
_nested = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner),
    max_leaves=12,
)
# Content large enough to span many reads, now and then.
_huge = st.sampled_from([0, 0, 0, 0, 70_000])

Meaning = tuple[str | None, bool, bool]


@st.composite
def openai_event(draw: st.DrawFn) -> tuple[str | None, object, Meaning]:
    kind = draw(st.sampled_from(["text", "tool", "reasoning", "finish", "usage", "error", "done"]))
    extra = {"x_meta": draw(_nested)}
    choice: dict[str, object] = {"index": 0, "finish_reason": None}
    if kind == "done":
        return None, "[DONE]", (None, True, False)
    if kind == "error":
        code = draw(st.sampled_from([429, 500, 503, "503", "rate_limit_exceeded"]))
        return None, {"error": {"code": code, "message": draw(_text)}, **extra}, (None, False, True)
    if kind == "usage":
        return None, {"choices": [], "usage": {"total_tokens": 3}, **extra}, (None, False, False)
    if kind == "finish":
        reason = draw(st.sampled_from(["stop", "length", "tool_calls", "content_filter"]))
        choice |= {"delta": {}, "finish_reason": reason}
        return None, {"choices": [choice], **extra}, (None, True, False)
    if kind == "text":
        choice["delta"] = {"content": draw(_text) + "x" * draw(_huge)}
        return None, {"choices": [choice], **extra}, ("text", False, False)
    if kind == "tool":
        choice["delta"] = {"tool_calls": [{"index": 0, "function": {"arguments": draw(_text)}}]}
        return None, {"choices": [choice], **extra}, ("tool_call", False, False)
    choice["delta"] = {"reasoning": draw(_text)}
    return None, {"choices": [choice], **extra}, ("reasoning", False, False)


@st.composite
def anthropic_event(draw: st.DrawFn) -> tuple[str | None, object, Meaning]:
    kind = draw(
        st.sampled_from(
            [
                *("start", "block", "tool", "text", "thinking", "signature", "json", "ping"),
                *("delta", "stop", "error"),
            ]
        )
    )
    meta = draw(_nested)
    none: Meaning = (None, False, False)
    if kind == "start":
        return "message_start", {"type": "message_start", "message": {"meta": meta}}, none
    if kind == "block":
        block = {"type": "text", "text": ""}
        return "content_block_start", {"type": "content_block_start", "content_block": block}, none
    if kind == "tool":
        block = {"type": "tool_use", "id": "t", "name": "f", "input": {}}
        payload = {"type": "content_block_start", "content_block": block}
        return "content_block_start", payload, ("tool_call", False, False)
    if kind in ("text", "thinking", "signature", "json"):
        delta = {
            "text": {"type": "text_delta", "text": draw(_text) + "x" * draw(_huge)},
            "thinking": {"type": "thinking_delta", "thinking": draw(_text)},
            "signature": {"type": "signature_delta", "signature": draw(_text)},
            "json": {"type": "input_json_delta", "partial_json": draw(_text)},
        }[kind]
        part = {"text": "text", "json": "tool_call"}.get(kind, "reasoning")
        payload = {"type": "content_block_delta", "index": 0, "delta": delta, "meta": meta}
        return "content_block_delta", payload, (part, False, False)
    if kind == "ping":
        return "ping", {"type": "ping"}, none
    if kind == "delta":
        payload = {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "meta": meta}
        return "message_delta", payload, (None, True, False)
    if kind == "stop":
        return "message_stop", {"type": "message_stop"}, (None, True, False)
    error = {"type": draw(st.sampled_from(["overloaded_error", "api_error"])), "message": "m"}
    return "error", {"type": "error", "error": error}, (None, False, True)


NEWLINES = st.sampled_from(["\n", "\r", "\r\n"])


@st.composite
def sse_stream(draw: st.DrawFn, wire: str) -> tuple[bytes, list[Meaning]]:
    """A stream whose events each have a known meaning, each with its own line ending, with
    comments, ids and extra blank lines between them, its JSON on one or several data lines."""
    events = draw(st.lists(openai_event() if wire == "openai" else anthropic_event(), max_size=8))
    out: list[str] = []
    for name, payload, _ in events:
        nl = draw(NEWLINES)
        lines = [": keep-alive"] if draw(st.booleans()) else []
        if draw(st.booleans()):
            lines.append(f"id: {draw(st.integers(0, 99))}")
        if name is not None:
            lines.append(f"event: {name}")
        if isinstance(payload, str):
            text = payload
        else:
            # ASCII JSON: see the report on U+2028 / NEL inside a data line.
            text = json.dumps(payload, indent=draw(st.sampled_from([None, 1])))
        lines += [f"data:{draw(st.sampled_from(['', ' ']))}{line}" for line in text.split("\n")]
        # A run of blank lines after an event is one separator; each ends as the event did,
        # so a CR is never followed by the LF of a different blank line (that is one CRLF).
        out.append("".join(line + nl for line in lines) + nl * draw(st.integers(1, 3)))
    data = "".join(out)
    if data and draw(st.booleans()):
        data = data.rstrip("\r\n")  # the last event ends with the stream, not a blank line
    return data.encode(), [meaning for _, _, meaning in events]


@st.composite
def wire_and_stream(draw: st.DrawFn) -> tuple[str, bytes, list[Meaning]]:
    wire = draw(WIRES)
    data, meanings = draw(sse_stream(wire))
    return wire, data, meanings


def test_sse_well_formed_streams_mean_what_they_say(soak_s: float, figure: Report) -> None:
    tried = events_read = 0

    @fuzz(soak_s, 300)
    @given(case=wire_and_stream(), cuts=cuts)
    def prop(case: tuple[str, bytes, list[Meaning]], cuts: list[int]) -> None:
        nonlocal tried, events_read
        tried += 1
        wire, data, meanings = case
        got = parse(wire, data, cuts)
        assert [(part, finish, error is not None) for _, part, finish, error, _ in got] == meanings
        assert not any(malformed for *_, malformed in got)
        events_read += len(got)

    prop()
    figure(
        "SSE parser: well-formed streams, both wires, mixed CR/LF/CRLF, nested JSON, huge lines",
        "every event read with its meaning (content kind, finish, error), whatever the cuts",
        measured=f"{tried} streams, {events_read} events, 0 misread",
    )


# --- failure classification -------------------------------------------------------------------

SWERVE_WORDS = frozenset({"timeout", "breaker_open", "incomplete", "malformed"})
KIND_WORDS = frozenset(k.value for k in FailureKind)
CANARY = "sk-canary-0123456789abcdef"


def _class_name(cls: type) -> str:
    name = cls.__qualname__
    return name if cls.__module__ == "builtins" else f"{cls.__module__}.{name}"


def in_vocabulary(error_type: str, classes: set[str]) -> bool:
    """``error.type`` is a status, an allow-listed provider word, a kind, one of swerve's own
    words, or the class name of an exception that was classified: never provider text."""
    if error_type.isascii() and error_type.isdigit():
        return 100 <= int(error_type) <= 599
    return error_type in KNOWN_ERROR_TYPES | KIND_WORDS | SWERVE_WORDS | classes


provider_words = st.one_of(
    st.sampled_from(sorted(KNOWN_ERROR_TYPES)),
    st.sampled_from(["OVERLOADED_ERROR", "context_length_exceeded ", CANARY, "x" * 200]),
    st.text(max_size=40),
)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=10,
)
error_objects = st.fixed_dictionaries(
    {},
    optional={
        "code": st.one_of(st.integers(), provider_words, st.sampled_from(["503", " 429 "])),
        "type": provider_words,
        "message": st.one_of(st.text(max_size=60), st.just(f"your key {CANARY} is bad")),
        "metadata": st.fixed_dictionaries({"raw": st.text(max_size=40)}),
    },
)
payloads = st.one_of(
    st.fixed_dictionaries({"error": error_objects}),
    st.fixed_dictionaries({"type": st.just("error"), "error": error_objects}),
    error_objects,
    st.dictionaries(
        st.sampled_from(["error", "code", "message", "choices", "finish_reason"]), json_values
    ),
)
retry_after_values = st.one_of(
    st.sampled_from(
        ["-5", "NaN", "inf", "99999999999", "1.5", "\u0663", "Mon, 01 Jan 1900 00:00:00 GMT"]
    ),
    st.text(max_size=12),
)
header_maps = st.dictionaries(
    st.sampled_from(["retry-after", "Retry-After-Ms", "content-type", "x-request-id"]),
    retry_after_values,
    max_size=3,
)
# What can travel in a real HTTP header (httpx refuses anything else when building one).
wire_headers = st.dictionaries(
    st.sampled_from(["retry-after", "Retry-After-Ms", "content-type", "x-request-id"]),
    st.sampled_from(["-5", "NaN", "inf", "99999999999", "1.5", "Mon, 01 Jan 1900 00:00:00 GMT"])
    | st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=12),
    max_size=3,
)
bodies = st.one_of(
    st.none(),
    payloads.map(lambda p: json.dumps(p, default=str).encode()),
    payloads,
    st.binary(max_size=64),
    st.text(max_size=64),
    st.integers(0, 3000).map(lambda d: ("[" * d).encode()),  # nested past the decoder's limit
)
statuses = st.one_of(st.integers(100, 599), st.integers(), st.none(), st.text(max_size=4))
class_names = st.one_of(
    st.sampled_from(
        [
            *("APIStatusError", "APIConnectionError", "APITimeoutError", "ReadTimeout"),
            *("ConnectError", "RemoteProtocolError", "CancelledError", "RateLimitError", "Weird"),
        ]
    ),
    # Any name Python can give a class: no NUL, no lone surrogate (type() encodes it as UTF-8).
    st.text(
        st.characters(exclude_characters="\x00", exclude_categories=["Cs"]), min_size=1, max_size=20
    ),
)
bases: list[type[BaseException]] = [
    Exception,
    ConnectionError,
    TimeoutError,
    OSError,
    ValueError,
    KeyboardInterrupt,
]


def _response(status: int, body: object, headers: dict[str, str]) -> httpx.Response:
    content = body if isinstance(body, bytes) else json.dumps(body, default=str).encode()
    request = httpx.Request("POST", "https://upstream.test/v1/chat/completions")
    return httpx.Response(status, content=content, headers=headers, request=request)


@st.composite
def exceptions(draw: st.DrawFn) -> tuple[BaseException, set[str]]:
    """An exception (with a cause chain) shaped like httpx's, an SDK's, or nothing known."""
    made: set[str] = set()
    chain: list[BaseException] = []
    for _ in range(draw(st.integers(1, 3))):
        cls = type(draw(class_names), (draw(st.sampled_from(bases)),), {})
        made.add(_class_name(cls))
        exc = cls(draw(st.one_of(st.text(max_size=60), st.just(f"Bearer {CANARY}"))))
        for attr, value in draw(
            st.dictionaries(
                st.sampled_from(["status_code", "body", "response", "headers"]),
                st.one_of(statuses, bodies, header_maps),
                max_size=3,
            )
        ).items():
            setattr(exc, attr, value)
        if draw(st.booleans()):
            status = draw(st.integers(100, 599))
            exc.response = _response(status, draw(payloads), draw(wire_headers))  # type: ignore[attr-defined]
        chain.append(exc)
    for outer, inner in itertools.pairwise(chain):
        outer.__cause__ = inner
    swerve_own = draw(
        st.sampled_from(
            [
                None,
                AttemptTimeout("stall", 3.0),
                CircuitOpenError("a/b"),
                IncompleteStreamError("no [DONE]"),
                MalformedStreamError("not JSON"),
            ]
        )
    )
    if swerve_own is not None:
        chain[-1].__context__ = swerve_own
    return chain[0], made


def _check(failure: Failure, classes: set[str]) -> None:
    assert isinstance(failure.kind, FailureKind)
    assert in_vocabulary(failure.error_type, classes), failure.error_type
    assert CANARY not in failure.error_type
    assert len(failure.message) <= 300
    assert failure.code is None or len(failure.code) <= 64
    ra = failure.retry_after
    assert ra is None or (math.isfinite(ra) and 0 <= ra <= RETRY_AFTER_MAX_S)


def test_classify_any_exception_any_response_any_payload(soak_s: float, figure: Report) -> None:
    tried = 0

    @fuzz(soak_s, 400)
    @given(
        case=st.one_of(
            exceptions(),
            payloads.map(lambda p: (p, set())),
            payloads.map(lambda p: (InStreamError(p), set())),
            st.tuples(st.integers(100, 599), bodies, wire_headers).map(
                lambda t: (_response(t[0], t[1], t[2]), set())
            ),
            json_values.map(lambda v: (v, set())),
        ),
        in_stream=st.booleans(),
    )
    def prop(case: tuple[object, set[str]], in_stream: bool) -> None:
        nonlocal tried
        tried += 1
        error, classes = case
        _check(classify(error, in_stream=in_stream), classes)

    prop()
    figure(
        "failure classification: random exceptions, chains, statuses, bodies, headers, payloads",
        "0 exceptions escaped; error.type always a status, allow-listed word, kind or class",
        measured=f"{tried} inputs, 0 escaped, 0 free-text error.type",
    )


def test_in_stream_error_events_classify_within_the_vocabulary(
    soak_s: float, figure: Report
) -> None:
    """Every error event the SSE parser reports classifies, in-stream, within the vocabulary."""
    tried = 0

    @fuzz(soak_s, 200)
    @given(wire=WIRES, payload=payloads, named=st.booleans(), cuts=cuts)
    def prop(wire: str, payload: dict[str, object], named: bool, cuts: list[int]) -> None:
        nonlocal tried
        tried += 1
        data = (b"event: error\n" if named else b"") + b"data: " + json.dumps(payload).encode()
        for _, _, _, error, _ in parse(wire, data + b"\n\n", cuts):
            if error is not None:
                failure = classify(InStreamError(error))
                assert failure.in_stream
                _check(failure, set())

    prop()
    figure(
        "in-stream error events (both wires) through classification",
        "0 exceptions escaped; error.type within the vocabulary",
        measured=f"{tried} events, 0 escaped",
    )


@pytest.mark.parametrize("status", [-1, 0, 99, 600, 10**30])
def test_status_kind_of_any_integer(status: int) -> None:
    assert status_kind(status) is FailureKind.UNKNOWN


# --- Retry-After -----------------------------------------------------------------------------

NOW = 1_700_000_000.0


def _http_date(when: datetime) -> str:
    return email.utils.format_datetime(when, usegmt=True)


GARBAGE = [
    "-5",
    "-0",
    "NaN",
    "nan",
    "inf",
    "-inf",
    "Infinity",
    "1e3",
    "0x10",
    "1_000",
    "",
    " ",
    "\u0663",  # ARABIC-INDIC DIGIT THREE: float() reads it as 3
    "\uff13",  # FULLWIDTH DIGIT THREE
    "\u00b2",  # SUPERSCRIPT TWO
    "9" * 400,
    "99999999999",
    "Mon, 01 Jan 1900 00:00:00 GMT",
    "Fri, 31 Dec 9999 23:59:59 GMT",
    "Thu, 01 Jan 1970 00:00:00 GMT",
    "Wed, 21 Oct 2015 07:28:00",
    "Sat, 32 Foo 2020 99:99:99 GMT",
    "soon",
]
retry_values = st.one_of(
    st.sampled_from(GARBAGE),
    st.integers(-(10**20), 10**20).map(str),
    st.floats().map(str),
    st.datetimes(
        min_value=datetime(1, 1, 1), max_value=datetime(9999, 12, 31), timezones=st.just(UTC)
    ).map(_http_date),
    st.text(max_size=30),
    st.integers(-(10**20), 10**20),  # a caller's mapping may hold numbers
    st.floats(),
    st.none(),
)
retry_headers = st.dictionaries(
    st.sampled_from(
        ["retry-after", "Retry-After", "RETRY-AFTER", "retry-after-ms", "Retry-After-Ms"]
    ),
    retry_values,
    max_size=3,
)


def test_retry_after_is_none_or_finite_non_negative_and_bounded(
    soak_s: float, figure: Report
) -> None:
    tried = 0

    @fuzz(soak_s, 500)
    @given(headers=retry_headers, now=st.one_of(st.none(), st.floats(0, 4e9)))
    def prop(headers: dict[str, object], now: float | None) -> None:
        nonlocal tried
        tried += 1
        value = parse_retry_after(headers, now=now)  # type: ignore[arg-type]
        assert value is None or (math.isfinite(value) and 0 <= value <= RETRY_AFTER_MAX_S)

    prop()
    figure(
        "Retry-After parsing: seconds, ms, HTTP dates and garbage",
        f"None, or finite within [0, {RETRY_AFTER_MAX_S:g}] s",
        measured=f"{tried} header sets, 0 out of bounds",
    )


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"retry-after": "-5"}, 0.0),  # a delay in the past is "now"
        ({"retry-after": "NaN"}, None),
        ({"retry-after": "inf"}, None),
        ({"retry-after": "1e3"}, None),  # not delay-seconds
        ({"retry-after": "\u0663"}, None),  # a Unicode digit is not an HTTP digit
        ({"retry-after-ms": "\uff13\uff10"}, None),
        ({"retry-after": "99999999999"}, RETRY_AFTER_MAX_S),  # B6: capped at parse
        ({"retry-after-ms": "9" * 400}, RETRY_AFTER_MAX_S),
        ({"retry-after": "Mon, 01 Jan 1900 00:00:00 GMT"}, 0.0),
        ({"retry-after": "Fri, 31 Dec 9999 23:59:59 GMT"}, RETRY_AFTER_MAX_S),
        ({"retry-after": 12}, 12.0),
        ({"retry-after": float("nan")}, None),
        ({"retry-after": True}, None),
    ],
)
def test_retry_after_garbage(headers: dict[str, object], expected: float | None) -> None:
    assert parse_retry_after(headers, now=NOW) == expected  # type: ignore[arg-type]


@given(
    seconds=st.integers(0, 10**12),
    ms=st.booleans(),
    spaces=st.sampled_from(["", " ", "\t"]),
)
@settings(max_examples=100, deadline=DEADLINE, database=None)
def test_retry_after_delay_seconds_read_exactly_up_to_the_cap(
    seconds: int, ms: bool, spaces: str
) -> None:
    header = "retry-after-ms" if ms else "retry-after"
    value = parse_retry_after({header: f"{spaces}{seconds}{spaces}"})
    expected = seconds / 1000 if ms else float(seconds)
    assert value == min(expected, RETRY_AFTER_MAX_S)


def test_a_huge_retry_after_never_waits_or_cools_past_the_config(
    soak_s: float, figure: Report
) -> None:
    """B6 on the parse side: whatever Retry-After says, the policy never waits longer than
    ``retry_after_max_s`` on the route, and the cooldown it could feed is capped at parse."""
    tried = 0
    config = FallbackConfig(
        fallbacks={"a/m": "b/m"}, retry_after_max_s=60, cooldown_s=10, cooldown_max_s=30
    )

    @fuzz(soak_s, 200)
    @given(headers=retry_headers)
    def prop(headers: dict[str, object]) -> None:
        nonlocal tried
        tried += 1
        retry_after = parse_retry_after(headers, now=NOW)  # type: ignore[arg-type]
        failure = Failure(FailureKind.RATE_LIMITED, status=429, retry_after=retry_after)
        decision = decide(config, failure, requested="a/m", current="a/m", retries=0, swaps=0)
        if isinstance(decision, Retry):
            assert 0 <= decision.delay <= config.retry_after_max_s
        elif retry_after is not None and retry_after > config.retry_after_max_s:
            assert isinstance(decision, Swap)  # too long to wait here: the sibling serves

    prop()
    # The engine cools a route for min(retry_after, cooldown_max_s) (tests/test_engine.py);
    # the parse bound keeps the number it is handed finite even before that.
    assert parse_retry_after({"retry-after": "99999999999"}) == RETRY_AFTER_MAX_S
    figure(
        "Retry-After through the policy (B6)",
        "a same-route wait never exceeds retry_after_max_s; parse never returns past a week",
        measured=f"{tried} header sets, 0 waits past the cap",
    )
