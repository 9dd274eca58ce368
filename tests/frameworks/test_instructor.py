"""instructor's recipe (docs/frameworks.md), as written, in its pinned environment (openai<3:
tests/frameworks/_envs.py), with the primary failing: the fallback's reply is the validated
object, and instructor asked once (its max_retries re-asks only on a validation error)."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from swerve.testing import FakeProvider, Fault, Reply, ToolCall

from . import _envs

# Each fault, and the reason swerve's swap warning gives for it.
FAULTS = {
    "503": (Fault.status(503), "unavailable"),
    "hang": (Fault.hang(), "timeout"),  # ended by the recipe's attempt_timeout_s
    "error-in-200-stream": (Fault.error_before_content("openai"), "unavailable"),
}
WEATHER = {"city": "Oslo", "forecast": "sunny"}

# The async client, streamed, run after the recipe on the names it defined; its transport has
# its own health store, so it meets the failing primary itself (the recipe's call cooled it
# down in the process-wide one).
ASYNC_STREAMED = """
import asyncio
from swerve import MemoryHealth
from swerve.httpx import AsyncFailoverTransport

async def streamed():
    transport = AsyncFailoverTransport(upstreams, config, health=MemoryHealth())
    aclient = instructor.from_openai(openai.AsyncOpenAI(
        base_url="http://swerve.invalid/v1", api_key="unused", max_retries=0,
        http_client=httpx.AsyncClient(transport=transport)))
    partials = aclient.chat.completions.create_partial(
        model="openai/gpt-4o-mini", response_model=Weather, max_retries=1,
        messages=[{"role": "user", "content": "The weather in Oslo?"}])
    last = None
    async for partial in partials:
        last = partial
    print(last.model_dump_json())

asyncio.run(streamed())
"""


@pytest.fixture
def fake() -> Iterator[FakeProvider]:
    with FakeProvider() as fake:
        # instructor's structured output is a forced tool call carrying the model's fields.
        fake.set_reply("openrouter", Reply(text="", tool_calls=[ToolCall("Weather", WEATHER)]))
        yield fake


def _run(fake: FakeProvider, fault: Fault, program: str, reason: str) -> list[dict[str, str]]:
    """The recipe's printed objects, after checking that each swap had the fault's reason."""
    done = _envs.run("instructor", program, fake.port, **_envs.recipe_env(fault))
    assert done.returncode == 0, done.stderr
    swaps = [line for line in done.stderr.splitlines() if "switched model" in line]
    assert swaps, done.stderr
    assert all(line.endswith(f"({reason})") for line in swaps), done.stderr
    return [json.loads(line) for line in done.stdout.splitlines()]


@pytest.mark.parametrize(("fault", "reason"), FAULTS.values(), ids=FAULTS.keys())
def test_sync_structured_output_from_the_fallback(
    fake: FakeProvider, fault: Fault, reason: str
) -> None:
    fake.set_fault("openai", fault)
    assert _run(fake, fault, _envs.recipe("instructor"), reason) == [WEATHER]
    # One request each: the primary's failure, the fallback's answer; instructor re-asked none.
    assert fake.requests("openai") == fake.requests("openrouter") == 1
    (asked,) = fake.received("openrouter")
    assert asked["model"] == "openai/gpt-4o-mini"  # the fallback's name for the model
    assert asked["tools"][0]["function"]["name"] == "Weather"


@pytest.mark.parametrize(("fault", "reason"), FAULTS.values(), ids=FAULTS.keys())
def test_async_streamed_partials_from_the_fallback(
    fake: FakeProvider, fault: Fault, reason: str
) -> None:
    fake.set_fault("openai", fault)
    program = _envs.recipe("instructor") + ASYNC_STREAMED
    assert _run(fake, fault, program, reason) == [WEATHER, WEATHER]
    # The recipe's call, then the streamed one: each failed once on the primary, then was
    # answered by the fallback, with no re-ask.
    assert fake.requests("openai") == fake.requests("openrouter") == 2
    assert [body.get("stream") for body in fake.received("openai")] == [None, True]
    assert [body.get("stream") for body in fake.received("openrouter")] == [None, True]
