"""A stream's events one network read at a time: the transport hands the engine each read's
events as one batch, and the client gets them as one piece, as the upstream sent them.

The engine reads a batch chunk by chunk (the first with a part commits the attempt, a finish
anywhere in it finishes the stream, discarded parts count each chunk), so what a failover
decides never depends on how the upstream's bytes were cut into reads. In-process (engine)
and over httpx (transport), sync and async.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from swerve import (
    Attempt,
    FallbackConfig,
    MemoryHealth,
    MidStreamError,
    StreamReset,
    StreamSpec,
)
from swerve._engine.results import Batch
from swerve.httpx import ROUTE_HEADER, AsyncFailoverTransport, FailoverTransport, Upstream

from ._drive import Mode, in_process_fake, in_process_mode
from .conftest import FakeClock, Otel

fake, mode = in_process_fake, in_process_mode

P, F = "primary/model-a", "fallback/model-b"
SPEC: StreamSpec[dict[str, Any]] = StreamSpec(
    part=lambda c: c.get("part"), is_finish=lambda c: bool(c.get("finish"))
)
ROLE, FINISH = {"part": None}, {"part": None, "finish": True}


def text(word: str) -> dict[str, Any]:
    return {"part": "text", "text": word}


def config(**kw: Any) -> FallbackConfig:
    return FallbackConfig(fallbacks={P: F}, max_retries=0, max_swaps=1, jitter=False, **kw)


# -- the engine -------------------------------------------------------------------------------


def test_a_batch_commits_at_its_first_content_and_goes_on_whole(
    make_failover: Any, mode: Mode
) -> None:
    reads = [Batch([ROLE]), Batch([ROLE, text("one"), text("two")]), Batch([text("three"), FINISH])]

    def chunks(attempt: Attempt) -> Iterator[Any]:
        yield from reads

    out: list[Any] = []
    stream = mode.stream(make_failover(config()), fn=chunks, spec=SPEC, out=out)
    # Held back until the content began, then each read handed on as the same one batch.
    assert out == reads and all(type(c) is Batch for c in out)
    assert str(stream.route) == P


def test_a_finish_inside_a_batch_finishes_the_stream(make_failover: Any, mode: Mode) -> None:
    def chunks(attempt: Attempt) -> Iterator[Any]:
        yield Batch([text("one"), FINISH, {"part": None}])  # a terminator after the finish

    out: list[Any] = []
    mode.stream(make_failover(config()), fn=chunks, spec=SPEC, out=out)
    assert [c["part"] for c in out[0]] == ["text", None, None]


def test_a_batch_without_content_is_held_and_a_failure_swaps_invisibly(
    make_failover: Any, mode: Mode, otel: Otel
) -> None:
    def chunks(attempt: Attempt) -> Iterator[Any]:
        if attempt.route.name == P:
            yield Batch([ROLE, ROLE])
            raise ConnectionResetError("reset before content")
        yield Batch([text("from fallback"), FINISH])

    out: list[Any] = []
    stream = mode.stream(make_failover(config()), fn=chunks, spec=SPEC, out=out)
    assert [c["text"] for batch in out for c in batch if c.get("part")] == ["from fallback"]
    assert str(stream.route) == F


def test_discarded_parts_count_each_chunk_of_a_batch(
    make_failover: Any, mode: Mode, otel: Otel
) -> None:
    first = Batch([ROLE, text("one"), text("two"), {"part": "reasoning"}])

    def chunks(attempt: Attempt) -> Iterator[Any]:
        if attempt.route.name == P:
            yield first
            raise ConnectionResetError("reset mid-stream")
        yield Batch([text("again"), FINISH])

    out: list[Any] = []
    mode.stream(make_failover(config()), fn=chunks, spec=SPEC, mid_stream="restart", out=out)
    assert out[0] is first and isinstance(out[1], StreamReset)
    (discarded,) = otel.events("swerve.partial_discarded")
    assert discarded[1]["swerve.discarded.text"] == 2
    assert discarded[1]["swerve.discarded.reasoning"] == 1


def test_a_failure_after_a_batch_keeps_its_chunks_as_the_partial_output(
    make_failover: Any, mode: Mode
) -> None:
    def chunks(attempt: Attempt) -> Iterator[Any]:
        yield Batch([ROLE, text("one"), text("two")])
        raise ConnectionResetError("reset mid-stream")

    with pytest.raises(MidStreamError) as info:
        mode.stream(make_failover(config()), fn=chunks, spec=SPEC)
    # The partial output is the chunks, not the batches they came in.
    assert [c.get("text") for c in info.value.partial] == [None, "one", "two"]


# -- the transport ----------------------------------------------------------------------------

OR, BK = "openrouter/m", "backup/m"


def _event(payload: dict[str, Any] | str) -> bytes:
    data = payload if isinstance(payload, str) else json.dumps(payload)
    return f"data: {data}\n\n".encode()


def _delta(content: str | None = None, finish: str | None = None) -> bytes:
    delta = {"content": content} if content is not None else {"role": "assistant"}
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    return _event({"id": "r", "object": "chat.completion.chunk", "model": "m", "choices": [choice]})


class _Reads(httpx.SyncByteStream, httpx.AsyncByteStream):
    """A response body that arrives in exactly these reads."""

    def __init__(self, reads: list[bytes]) -> None:
        self.reads = reads

    def __iter__(self) -> Iterator[bytes]:
        yield from self.reads

    async def __aiter__(self) -> Any:
        for read in self.reads:
            yield read


def _upstreams(reads: dict[str, list[bytes]]) -> dict[str, Upstream]:
    def served(name: str) -> Upstream:
        def handler(request: httpx.Request) -> httpx.Response:
            headers = {"content-type": "text/event-stream"}
            return httpx.Response(200, headers=headers, stream=_Reads(reads[name]))

        return Upstream(
            f"http://{name}.invalid/v1", api_key="k", transport=httpx.MockTransport(handler)
        )

    return {OR: served("or"), BK: served("bk")}


def _pieces(mode: Mode, reads: dict[str, list[bytes]], clock: FakeClock) -> tuple[list[bytes], Any]:
    """The pieces the client's ``iter_raw`` gets, and the response's headers."""
    cfg = FallbackConfig(fallbacks={OR: BK}, max_retries=0, jitter=False)
    body = {"model": OR, "stream": True, "messages": [{"role": "user", "content": "hi"}]}
    url = "http://swerve.invalid/v1/chat/completions"
    if mode.sync:
        transport = FailoverTransport(_upstreams(reads), cfg, health=MemoryHealth(clock=clock))
        with (
            httpx.Client(transport=transport) as client,
            client.stream("POST", url, json=body) as response,
        ):
            return list(response.iter_raw()), response.headers

    async def read() -> tuple[list[bytes], Any]:
        transport = AsyncFailoverTransport(_upstreams(reads), cfg, health=MemoryHealth(clock=clock))
        async with (
            httpx.AsyncClient(transport=transport) as client,
            client.stream("POST", url, json=body) as response,
        ):
            return [piece async for piece in response.aiter_raw()], response.headers

    return mode.run(read())  # type: ignore[no-any-return]


def test_the_client_gets_one_piece_per_upstream_read(mode: Mode, clock: FakeClock) -> None:
    first = _delta() + _delta("one") + _delta("two")
    second = _delta("three") + _delta(finish="stop") + _event("[DONE]")
    pieces, headers = _pieces(mode, {"or": [first, second], "bk": []}, clock)
    assert pieces == [first, second]
    assert headers[ROUTE_HEADER] == OR


def test_an_event_cut_across_reads_goes_out_with_the_read_that_ends_it(
    mode: Mode, clock: FakeClock
) -> None:
    one, two = _delta("one"), _delta("two")
    reads = [_delta() + one[:10], one[10:] + two, _delta(finish="stop") + _event("[DONE]")]
    pieces, _ = _pieces(mode, {"or": reads, "bk": []}, clock)
    # The role event was held back (no content yet), then handed on as the read it came in.
    assert pieces == [_delta(), one + two, reads[2]]


def test_an_error_event_in_a_read_before_content_swaps_invisibly(
    mode: Mode, clock: FakeClock
) -> None:
    error = _event({"error": {"message": "overloaded", "code": 503}})
    fallback = _delta("from backup") + _delta(finish="stop") + _event("[DONE]")
    pieces, headers = _pieces(mode, {"or": [_delta() + error], "bk": [fallback]}, clock)
    assert pieces == [fallback]
    assert headers[ROUTE_HEADER] == BK


def test_events_before_an_error_in_the_same_read_reach_the_client_first(
    mode: Mode, clock: FakeClock
) -> None:
    error = _event({"error": {"message": "overloaded", "code": 503}})
    pieces, _ = _pieces(mode, {"or": [_delta("one") + _delta("two") + error], "bk": []}, clock)
    # The content went out as it came; then the upstream's error event ends the stream.
    assert pieces == [_delta("one") + _delta("two"), error]
