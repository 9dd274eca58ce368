"""A live failover stream of chat chunks as the caller sees it: each restart announced, the
new route's first chunk marked, and the tokens of an ``invoke()`` collected."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

from langchain_core.outputs import ChatGenerationChunk
from langchain_core.utils.utils import LC_ID_PREFIX

from swerve import StreamReset

from ._common import RESET_KEY, ANotify, Notify

__all__ = ["arelay", "collect", "relay"]


def relay(
    stream: Iterator[ChatGenerationChunk | StreamReset], notify: Notify
) -> Iterator[ChatGenerationChunk]:
    """The chunks of ``stream``; each reset is announced and marks the next chunk."""
    marks = _Marks()
    for item in stream:
        if isinstance(item, StreamReset):
            notify(item)
        yield from marks.see(item)


async def arelay(
    stream: AsyncIterator[ChatGenerationChunk | StreamReset], notify: ANotify
) -> AsyncIterator[ChatGenerationChunk]:
    """Async :func:`relay`."""
    marks = _Marks()
    async for item in stream:
        if isinstance(item, StreamReset):
            await notify(item)
        for chunk in marks.see(item):
            yield chunk


class _Marks:
    """Marks the first chunk of the route a stream restarted on."""

    def __init__(self) -> None:
        self._reset: StreamReset | None = None

    def see(self, item: ChatGenerationChunk | StreamReset) -> tuple[ChatGenerationChunk, ...]:
        """The chunks to pass on for ``item``: none for a reset."""
        if isinstance(item, StreamReset):
            self._reset = item
            return ()
        if self._reset is not None:
            meta = dict(item.message.response_metadata)
            meta[RESET_KEY] = [
                {"route_from": str(self._reset.route), "route_to": str(self._reset.next_route)}
            ]
            item.message.response_metadata = meta
            self._reset = None
        return (item,)


def collect(chunk: ChatGenerationChunk, chunks: list[ChatGenerationChunk], run_id: Any) -> None:
    """Keep a token of a live ``invoke()`` for the message it returns."""
    if RESET_KEY in chunk.message.response_metadata:
        chunks.clear()  # the message returned holds only the route that completed
    if chunk.message.id is None:
        chunk.message.id = f"{LC_ID_PREFIX}-{run_id}"
    chunks.append(chunk)
