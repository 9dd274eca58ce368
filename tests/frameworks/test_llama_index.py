"""LlamaIndex's recipe (docs/frameworks.md), as written, in its pinned environment (openai<3:
tests/frameworks/_envs.py), with the primary failing: a FunctionAgent (async, streamed) and the
LLM's sync tool call both answer from the fallback, and the tool runs once."""

from __future__ import annotations

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
TOOL_TURN = Reply(text="", tool_calls=[ToolCall("get_weather", {"city": "Oslo"})])
ANSWER = "It is sunny in Oslo."

# The sync path, run after the recipe on the names it defined: LlamaIndex's agents are async
# only, so the LLM's own sync tool call (predict_and_call runs the tool it picks). Its transport
# has its own health store, so it meets the failing primary itself.
SYNC_TOOL_CALL = """
from llama_index.core.tools import FunctionTool
from swerve import MemoryHealth

calls.clear()
sync_llm = OpenAI(
    model="gpt-4o-mini", api_base="https://api.openai.com/v1", max_retries=0,
    http_client=httpx.Client(
        transport=FailoverTransport(upstreams, config, health=MemoryHealth())))
print(sync_llm.predict_and_call([FunctionTool.from_defaults(get_weather)],
                                "The weather in Oslo?").response, calls)
"""


@pytest.fixture
def fake() -> Iterator[FakeProvider]:
    with FakeProvider() as fake:
        yield fake


def _run(fake: FakeProvider, fault: Fault, program: str, reason: str) -> list[str]:
    """The recipe's printed lines, after checking that each swap had the fault's reason."""
    done = _envs.run("llama-index", program, fake.port, **_envs.recipe_env(fault))
    assert done.returncode == 0, done.stderr
    swaps = [line for line in done.stderr.splitlines() if "switched model" in line]
    assert swaps, done.stderr
    assert all(line.endswith(f"({reason})") for line in swaps), done.stderr
    return done.stdout.splitlines()


@pytest.mark.parametrize(("fault", "reason"), FAULTS.values(), ids=FAULTS.keys())
def test_async_streamed_agent_from_the_fallback(
    fake: FakeProvider, fault: Fault, reason: str
) -> None:
    fake.script("openrouter", [TOOL_TURN, Reply(text=ANSWER)])
    fake.set_fault("openai", fault)
    assert _run(fake, fault, _envs.recipe("llama-index"), reason) == [f"{ANSWER} ['Oslo']"]
    # The primary failed the first turn and cooled down; the fallback served both turns.
    assert fake.requests("openai") == 1
    assert fake.requests("openrouter") == 2 and fake.remaining("openrouter") == 0
    first, second = fake.received("openrouter")
    assert first["stream"] is True and first["model"] == "openai/gpt-4o-mini"
    assert second["messages"][-1] == {
        "role": "tool",
        "content": "sunny in Oslo",
        "tool_call_id": second["messages"][-2]["tool_calls"][0]["id"],
    }


@pytest.mark.parametrize(("fault", "reason"), FAULTS.values(), ids=FAULTS.keys())
def test_sync_tool_call_from_the_fallback(fake: FakeProvider, fault: Fault, reason: str) -> None:
    fake.script("openrouter", [TOOL_TURN, Reply(text=ANSWER), TOOL_TURN])
    fake.set_fault("openai", fault)
    lines = _run(fake, fault, _envs.recipe("llama-index") + SYNC_TOOL_CALL, reason)
    assert lines == [f"{ANSWER} ['Oslo']", "sunny in Oslo ['Oslo']"]
    # The agent's first turn and the sync call each failed once on the primary.
    assert fake.requests("openai") == 2
    assert fake.requests("openrouter") == 3 and fake.remaining("openrouter") == 0
    assert fake.received("openrouter")[2].get("stream") in (None, False)
