"""The reliability suite's faults through the LangChain adapter: the primary's connection
dropped at every byte offset of a short answer, on both wires (ChatOpenAI on the OpenAI chat
completions wire, ChatAnthropic on the Anthropic messages wire), in every mode (invoke,
ainvoke, stream, astream), with a ChatOpenAI fallback.

The fake provider's ``Fault.cut_after_bytes(n)`` sends the response head and the first ``n``
bytes of the body, then closes the connection. For every ``n`` from 0 to the body's length:

- every call ends, within the attempt bound (``ATTEMPT_S``): no hang;
- it ends with the fallback's whole answer, or (a stream whose content had reached the
  consumer) a ``MidStreamError`` whose partial output is a prefix of the primary's answer, or
  with the primary's whole answer (the cut came after the answer was complete);
- the fallback's answer is never mixed with the primary's partial output;
- the outcomes are ordered by the offset: fallback answers up to the first content byte,
  mid-stream errors after it, the primary's answer once the body is complete. A non-stream
  body is all or nothing: every cut short of its end is a swap.

astream, the path agents take, is cut at every offset; invoke, ainvoke and stream at every
7th offset (and the last two) in the short run, at every offset when ``$SWERVE_SOAK_S`` > 0.

This folder cannot use tests/reliability's ``figure`` fixture, so each bound is an assertion
with its figure in the message; the figure is printed (``-s`` shows it) and, when
``$SWERVE_RELIABILITY_REPORT`` is set, appended to ``<that path>.langchain.jsonl``, which
bench/reliability.py merges into docs/reliability.md.
"""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from lc_support import chat_anthropic, chat_openai, seed_config
from swerve_langchain import FailoverChatModel

from swerve import Failover, MemoryHealth, MidStreamError
from swerve.testing import FakeProvider, Fault, Reply

FALLBACK = "fallback/fake-model-large"
PRIMARY_TEXT = "alpha beta gamma"
FALLBACK_TEXT = "from fallback"
ATTEMPT_S = 5.0  # the bound on any one attempt: a cut that hung would end here, and fail
MODES = ("invoke", "ainvoke", "stream", "astream")
WIRES: dict[str, tuple[str, Callable[[FakeProvider], Any], str]] = {
    # wire: (route, route model factory, path of the wire's endpoint)
    "openai": ("cut/fake-model", lambda f: chat_openai(f, "cut"), "v1/chat/completions"),
    "anthropic": ("cut/claude-fake", lambda f: chat_anthropic(f, "cut"), "v1/messages"),
}
ORDER = {"fallback": 0, "mid_stream": 1, "primary": 2}
# astream, the path agents take, is cut at every offset; the other modes every STRIDE-th
# offset in a short run, every offset when $SWERVE_SOAK_S asks for the long run.
SOAK = float(os.environ.get("SWERVE_SOAK_S", "").strip() or 0) > 0
STRIDE = 1 if SOAK else 7


async def outcome(model: FailoverChatModel, mode: str) -> tuple[str, str]:
    """Run one call; return (outcome, text the consumer saw)."""
    if mode in ("invoke", "ainvoke"):
        message = model.invoke("hi") if mode == "invoke" else await model.ainvoke("hi")
        text = message.text
        served = message.response_metadata["swerve"]["served"]
        assert (served == FALLBACK) == (text == FALLBACK_TEXT), (served, text)
        return ("fallback" if served == FALLBACK else "primary"), text
    seen: list[str] = []
    try:
        if mode == "stream":
            for chunk in model.stream("hi"):
                seen.append(chunk.text)
        else:
            async for chunk in model.astream("hi"):
                seen.append(chunk.text)
    except MidStreamError as exc:
        partial = exc.partial  # output had reached the consumer (else it would be a swap)
        return ("mid_stream" if partial else "empty mid-stream error"), "".join(seen)
    text = "".join(seen)
    return ("fallback" if text == FALLBACK_TEXT else "primary"), text


def body_length(fake: FakeProvider, path: str) -> int:
    """The byte length of the body the primary sends for the request the model last made."""
    request = fake.received("cut")[-1]
    fake.set_fault("cut", Fault.ok())
    r = httpx.post(f"{fake.url('cut')}/{path}", json=request, headers={"anthropic-version": "1"})
    assert r.status_code == 200, r.text
    return len(r.content)


@pytest.mark.anyio
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("wire", list(WIRES))
async def test_connection_dropped_at_every_byte_offset(
    wire: str, mode: str, fake: FakeProvider, make_failover: Callable[..., Failover],
    health: MemoryHealth,
) -> None:  # fmt: skip
    route, factory, path = WIRES[wire]
    fake.set_reply("cut", Reply(text=PRIMARY_TEXT))
    config = seed_config(fallbacks={route: FALLBACK}, attempt_timeout_s=ATTEMPT_S)
    model = FailoverChatModel(
        routes={route: factory(fake), FALLBACK: chat_openai(fake, "fallback", "fake-model-large")},
        primary=route,
        failover=make_failover(config),
    )
    try:
        fake.set_fault("cut", Fault.ok())
        kind, text = await outcome(model, mode)
        assert (kind, text) == ("primary", PRIMARY_TEXT)
        length = body_length(fake, path)
        results: list[tuple[int, str, str]] = []
        slowest = 0.0
        step = 1 if mode == "astream" else STRIDE
        for n in sorted({*range(0, length + 1, step), length - 1, length}):
            health.clear()  # each offset starts on the primary (a cut cools it down)
            fake.set_fault("cut", Fault.cut_after_bytes(n))
            t0 = time.monotonic()
            kind, text = await outcome(model, mode)
            slowest = max(slowest, time.monotonic() - t0)
            results.append((n, kind, text))
    finally:
        fake.set_fault("cut", Fault.ok())

    counts = Counter(kind for _, kind, _ in results)
    figure = (
        f"{wire} {mode}: {len(results)} offsets (0..{length} bytes, every {step}): "
        + ", ".join(f"{counts[k]} {k}" for k in ORDER)
        + f"; slowest call {slowest:.2f}s (bound {ATTEMPT_S:g}s); 0 mixed answers"
    )
    print(figure)
    report = os.environ.get("SWERVE_RELIABILITY_REPORT", "").strip()
    if report:
        line = {
            "test": "integrations/langchain/tests/test_reliability_faults.py::"
            f"test_connection_dropped_at_every_byte_offset[{wire}-{mode}]",
            "what": f"connection dropped at every byte offset, {wire} wire, {mode}",
            "bound": f"fallback's whole answer or a mid-stream error, never mixed; no call "
            f"over {ATTEMPT_S:g}s",
            "measured": figure.split(": ", 1)[1],
        }
        with Path(f"{report}.langchain.jsonl").open("a") as f:  # noqa: ASYNC230 - a test's figure
            f.write(json.dumps(line) + "\n")
    assert slowest < ATTEMPT_S, figure
    odd = [(n, kind) for n, kind, _ in results if kind not in ORDER]
    assert not odd, ("a mid-stream error with no output: it should have been a swap", odd)
    for n, kind, text in results:
        if kind == "fallback":
            assert text == FALLBACK_TEXT, (n, text, figure)
        elif kind == "primary":
            assert text == PRIMARY_TEXT, (n, text, figure)
        else:
            assert PRIMARY_TEXT.startswith(text) and FALLBACK_TEXT not in text, (n, text, figure)
    kinds = [ORDER[kind] for _, kind, _ in results]
    assert kinds == sorted(kinds), ("outcomes out of order", [(n, k) for n, k, _ in results])
    assert results[-1][1] == "primary" and results[0][1] == "fallback", figure
    if mode in ("invoke", "ainvoke"):
        assert counts == {"fallback": len(results) - 1, "primary": 1}, figure
    else:
        assert counts["mid_stream"] >= 1, figure
        # a cut after the finish reason, losing only [DONE] or message_stop, is a whole answer
        assert counts["primary"] > 1, figure
