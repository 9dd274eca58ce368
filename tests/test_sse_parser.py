"""The transport's SSE parser: every line ending SSE allows, any cut into reads, in one pass."""

from __future__ import annotations

import itertools
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from swerve._transport.reading import SSEParser as _SSEParser
from swerve.httpx import ResponseTooLarge

CHUNK = {"choices": [{"index": 0, "delta": {"content": "hi"}, "finish_reason": None}]}
FINISH = {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}


def stream(newline: str, n: int = 3) -> bytes:
    events = [f"data: {json.dumps(CHUNK)}" for _ in range(n)] + [f"data: {json.dumps(FINISH)}"]
    return "".join(e + newline * 2 for e in events).encode() + f"data: [DONE]{newline * 2}".encode()


def parse(data: bytes, cuts: list[int], limit: int = 1 << 20) -> list[tuple[str | None, bool]]:
    parser = _SSEParser("openai", limit)
    events = []
    last = 0
    for cut in [*sorted(c % (len(data) + 1) for c in cuts), len(data)]:
        events += parser.feed(data[last:cut])
        last = max(last, cut)
    events += parser.flush()
    return [(e.part, e.finish) for e in events]


EXPECTED = [("text", False)] * 3 + [(None, True), (None, True)]


@pytest.mark.parametrize("newline", ["\n", "\r\n", "\r"])
def test_every_line_ending_sse_allows(newline: str) -> None:
    assert parse(stream(newline), []) == EXPECTED


@given(newline=st.sampled_from(["\n", "\r\n", "\r"]), cuts=st.lists(st.integers(0, 10_000)))
def test_any_cut_into_reads_gives_the_same_events(newline: str, cuts: list[int]) -> None:
    assert parse(stream(newline), cuts) == EXPECTED


def test_events_pass_through_byte_for_byte() -> None:
    data = stream("\r\n")
    parser = _SSEParser("openai", 1 << 20)
    raw = b"".join(e.raw for e in parser.feed(data) + parser.flush())
    assert raw == data


def test_many_events_in_one_read() -> None:
    # 80k events in a single read: all of them, in order (it once took minutes: quadratic).
    events = parse(stream("\n", n=80_000), [])
    assert len(events) == 80_002 and events[-1] == (None, True)


def test_an_event_over_the_limit_is_refused_however_it_arrives() -> None:
    big = b"data: " + b"x" * 5000
    parser = _SSEParser("openai", 4096)
    with pytest.raises(ResponseTooLarge):
        for i in range(0, len(big), 100):
            parser.feed(big[i : i + 100])


def events_of(wire: str, data: bytes, read: int = 0) -> list[tuple[str | None, bool, bool]]:
    parser = _SSEParser(wire, 1 << 24)  # type: ignore[arg-type]
    reads = [data[i : i + read] for i in range(0, len(data), read)] if read else [data]
    events = [e for chunk in reads for e in parser.feed(chunk)] + parser.flush()
    return [(e.part, e.finish, e.malformed) for e in events]


@pytest.mark.parametrize("separator", ["\u2028", "\u2029", "\x85", "\x0b", "\x1c"])
def test_only_cr_and_lf_end_a_line(separator: str) -> None:
    # JSON writers that do not escape non-ASCII send these raw inside a string: still content
    chunk = {"choices": [{"delta": {"content": f"a{separator}b"}}]}
    data = f"data: {json.dumps(chunk, ensure_ascii=False)}\n\n".encode()
    assert events_of("openai", data) == [("text", False, False)]


@pytest.mark.parametrize(
    ("wire", "payload"),
    [
        ("openai", {"choices": 5}),
        ("openai", {"choices": ["x"]}),
        ("openai", {"choices": [{"delta": "x", "finish_reason": None}]}),
        ("anthropic", {"type": "content_block_delta", "delta": [1]}),
        ("anthropic", {"type": "message_delta", "delta": "x"}),
        ("anthropic", {"type": "content_block_start", "content_block": "x"}),
    ],
)
def test_a_chunk_of_an_unexpected_shape_is_passed_on_meaning_nothing(
    wire: str, payload: object
) -> None:
    data = f"data: {json.dumps(payload)}\n\n".encode()
    assert events_of(wire, data) == [(None, False, False)]


def test_a_whole_event_over_the_limit_in_one_read_is_refused_too() -> None:
    event = b"data: " + b"x" * 5000 + b"\n\n"
    for reads in ([event], [event[i : i + 100] for i in range(0, len(event), 100)]):
        parser = _SSEParser("openai", 4096)
        with pytest.raises(ResponseTooLarge):
            for chunk in reads:
                parser.feed(chunk)


def test_a_long_line_over_many_reads_arrives_whole() -> None:
    # 2 MB in 1 KB reads: each read is scanned once (it was rescanned from the line's start)
    text = "y" * (2 << 20)
    data = f'data: {{"choices": [{{"delta": {{"content": "{text}"}}}}]}}\n\n'.encode()
    parser = _SSEParser("openai", 4 << 20)
    events = [e for i in range(0, len(data), 1024) for e in parser.feed(data[i : i + 1024])]
    assert [(e.part, len(e.raw)) for e in events] == [("text", len(data))]


@pytest.mark.parametrize("read", [0, 1, 2])
def test_a_bom_opening_the_stream_is_skipped(read: int) -> None:
    data = b"\xef\xbb\xbf" + stream("\n")
    assert [(p, f) for p, f, _ in events_of("openai", data, read)] == EXPECTED


# -- however the bytes come, the events are the line-by-line reader's -----------------------

_LINE = ('data: {"a": 1}', "data: [DONE]", "data: x", "event: error", ": keep-alive", " ", "")
_END = ("\n", "\r\n", "\r")


def _reference(data: bytes, limit: int) -> list[bytes] | str:
    """The raw events of ``data`` by SSE's rules, a line at a time (CRLF, LF or a lone CR end
    a line; a blank line dispatches an event unless it holds blank space alone), or
    "too large" where an event (or the unfinished rest) grows past ``limit``."""
    lines: list[bytes] = []
    rest, i = b"", 0
    while i < len(data):
        cr, lf = data.find(b"\r", i), data.find(b"\n", i)
        ends = [e for e in (cr, lf) if e >= 0]
        if not ends:
            rest = data[i:]
            break
        end = min(ends)
        stop = end + 2 if data[end : end + 2] == b"\r\n" else end + 1
        lines.append(data[i:stop])
        i = stop
    events, event = [], b""
    for line in lines:
        event += line
        if len(event) > limit:
            return "too large"
        if line.strip(b"\r\n") == b"":
            if event.strip():
                events.append(event)
            event = b""
    if len(event + rest) > limit:
        return "too large"
    if (event + rest).strip():
        events.append(event + rest)
    return events


def _read(data: bytes, cuts: list[int], limit: int) -> list[bytes] | str:
    parser = _SSEParser("openai", limit)
    events = []
    last = 0
    try:
        for cut in [*sorted(c % (len(data) + 1) for c in cuts), len(data)]:
            events += parser.feed(data[last:cut])
            last = max(last, cut)
        events += parser.flush()
    except ResponseTooLarge:
        return "too large"
    return [e.raw for e in events]


@settings(max_examples=600, deadline=None)
@given(
    lines=st.lists(st.tuples(st.sampled_from(_LINE), st.sampled_from(_END)), max_size=40),
    cuts=st.lists(st.integers(0, 2_000), max_size=8),
    limit=st.sampled_from([24, 64, 1 << 20]),
)
def test_any_stream_cut_any_way_gives_the_line_by_line_events(
    lines: list[tuple[str, str]], cuts: list[int], limit: int
) -> None:
    data = "".join(line + end for line, end in lines).encode()
    assert _read(data, cuts, limit) == _reference(data, limit)


def test_every_short_stream_in_one_or_two_reads_gives_the_line_by_line_events() -> None:
    tokens = [line + end for line in _LINE for end in _END]
    for a, b, c in itertools.product(tokens, repeat=3):
        data = (a + b + c).encode()
        for limit in (24, 1 << 20):
            expected = _reference(data, limit)
            assert _read(data, [], limit) == expected, data
            assert _read(data, [len(data) // 2], limit) == expected, data
