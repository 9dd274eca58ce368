"""Minimal OpenAI-wire calls over real httpx for engine tests (the httpx transport comes later)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx

from swerve import Attempt, StreamSpec
from swerve._failures import InStreamError
from swerve.testing import FakeProvider

DONE: dict[str, Any] = {"done": True}


def body(attempt: Attempt, stream: bool = False) -> dict[str, Any]:
    return {
        "model": attempt.route.model,
        "messages": [{"role": "user", "content": "hi"}],
        "stream": stream,
    }


def url(fake: FakeProvider, attempt: Attempt) -> str:
    return f"{fake.url(attempt.route.provider)}/v1/chat/completions"


def complete(client: httpx.Client, fake: FakeProvider, attempt: Attempt) -> str:
    response = client.post(url(fake, attempt), json=body(attempt), timeout=attempt.timeout or 10)
    response.raise_for_status()
    data = response.json()
    if "error" in data:
        raise InStreamError(data)
    return str(data["choices"][0]["message"]["content"])


async def acomplete(client: httpx.AsyncClient, fake: FakeProvider, attempt: Attempt) -> str:
    response = await client.post(url(fake, attempt), json=body(attempt))
    response.raise_for_status()
    return str(response.json()["choices"][0]["message"]["content"])


def _event(line: str) -> dict[str, Any] | None:
    if not line.startswith("data:"):
        return None
    data = line[5:].strip()
    if data == "[DONE]":
        return DONE
    chunk: dict[str, Any] = json.loads(data)
    if "error" in chunk:
        raise InStreamError(chunk)
    return chunk


def chunks(client: httpx.Client, fake: FakeProvider, attempt: Attempt) -> Iterator[dict[str, Any]]:
    timeout = httpx.Timeout(10, read=attempt.read_timeout or 10)
    with client.stream("POST", url(fake, attempt), json=body(attempt, True), timeout=timeout) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            if (event := _event(line)) is not None:
                yield event


async def achunks(
    client: httpx.AsyncClient, fake: FakeProvider, attempt: Attempt
) -> AsyncIterator[dict[str, Any]]:
    async with client.stream("POST", url(fake, attempt), json=body(attempt, True)) as r:
        r.raise_for_status()
        async for line in r.aiter_lines():
            if (event := _event(line)) is not None:
                yield event


def _part(chunk: dict[str, Any]) -> Any:
    for choice in chunk.get("choices", []):
        delta = choice.get("delta", {})
        if delta.get("content"):
            return "text"
        if delta.get("tool_calls"):
            return "tool_call"
    return None


def _finish(chunk: dict[str, Any]) -> bool:
    """``[DONE]``, or a chunk with a finish reason: a stream that said it finished has."""
    if chunk is DONE:
        return True
    return any(c.get("finish_reason") not in (None, "error") for c in chunk.get("choices", []))


SPEC: StreamSpec[dict[str, Any]] = StreamSpec(part=_part, is_finish=_finish)


def text(chunks: list[Any]) -> str:
    out = []
    for chunk in chunks:
        if isinstance(chunk, dict):
            for choice in chunk.get("choices", []):
                out.append(choice.get("delta", {}).get("content") or "")
    return "".join(out)
