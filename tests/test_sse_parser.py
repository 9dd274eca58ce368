"""The transport's SSE parser: every line ending SSE allows, any cut into reads, in one pass."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from swerve.httpx import ResponseTooLarge, _SSEParser

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
