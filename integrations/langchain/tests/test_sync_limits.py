"""swerve's time limits hold in sync code too, whatever the route models' own timeouts.

Route models are built as the docs build them (no ``timeout=``): LangChain then hands the
openai and anthropic SDKs no timeout at all, so they would wait for a provider that hangs
for as long as it hangs. Sync calls get a per-request timeout where
the SDK takes one (ChatOpenAI, ChatAnthropic, ChatOpenRouter); any other model, and any
runnable, is waited for in a worker thread abandoned at the limit, with a
``SwerveTimeoutWarning``. Every case hangs the primary and asserts that the call ends within
the limit plus a generous margin, on the fallback. Hangs go to the fake provider's "stall"
provider (released when the test ends), so a request left hanging takes no other test's
scripted fault.
"""

from __future__ import annotations

import json
import time
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import openai
import pytest
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langchain_core.prompts import ChatPromptTemplate
from lc_support import ANSWERING_LIMIT_S, chat_anthropic, chat_openai, chat_openrouter, seed_config
from swerve_langchain import FailoverChatModel, SwerveTimeoutWarning, with_failover
from test_chat_model import MODES, run

from swerve import Failover, MidStreamError
from swerve._engine.clock import SYSTEM_CLOCK
from swerve.testing import FakeProvider, Fault, Reply

FALLBACK = "fallback/fake-model-large"
LIMIT = ANSWERING_LIMIT_S  # it bounds the fallback's attempt too
MARGIN = 3.0  # an upper bound, never a measurement: the point is "not 600 s"


class RawHttpChat(BaseChatModel):
    """A hand-written chat model over httpx, with no timeout swerve could set (and none of
    its own: ``timeout=None``). Its async calls are LangChain's defaults: the sync ones in an
    executor."""

    base_url: str
    model: str = "fake-model"

    @property
    def _llm_type(self) -> str:
        return "raw-http-chat"

    def _body(self, messages: list[BaseMessage], stream: bool) -> dict[str, Any]:
        turns = [{"role": "user", "content": str(m.content)} for m in messages]
        return {"model": self.model, "messages": turns, "stream": stream}

    def _generate(
        self, messages: list[BaseMessage], stop: list[str] | None = None, run_manager: Any = None,
        **kwargs: Any,
    ) -> ChatResult:  # fmt: skip
        url, body = f"{self.base_url}/chat/completions", self._body(messages, False)
        with httpx.Client(timeout=None) as client:
            response = client.post(url, json=body)
        response.raise_for_status()
        text = response.json()["choices"][0]["message"]["content"]
        return ChatResult(generations=[ChatGeneration(message=AIMessage(content=text))])

    def _stream(
        self, messages: list[BaseMessage], stop: list[str] | None = None, run_manager: Any = None,
        **kwargs: Any,
    ) -> Iterator[ChatGenerationChunk]:  # fmt: skip
        body = self._body(messages, True)
        with (
            httpx.Client(timeout=None) as client,
            client.stream("POST", f"{self.base_url}/chat/completions", json=body) as response,
        ):
            response.raise_for_status()
            for line in response.iter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                choices = json.loads(line[6:]).get("choices") or [{}]
                text = (choices[0].get("delta") or {}).get("content") or ""
                yield ChatGenerationChunk(message=AIMessageChunk(content=text))


def raw_chat(fake: FakeProvider, provider: str, model: str = "fake-model") -> RawHttpChat:
    return RawHttpChat(base_url=f"{fake.url(provider)}/v1", model=model)


# name: (model part of the route, factory(fake, provider), whether swerve can set its timeout)
FAMILIES: dict[str, tuple[str, Callable[[FakeProvider, str], Any], bool]] = {
    "openai": ("fake-model", lambda f, p: chat_openai(f, p), True),
    "anthropic": ("claude-fake", lambda f, p: chat_anthropic(f, p), True),
    "openrouter": ("anthropic/claude-fake", lambda f, p: chat_openrouter(f, p), True),
    "custom": ("fake-model", raw_chat, False),
}


def hung_model(
    fake: FakeProvider, make_failover: Callable[..., Failover], family: str,
    clock: Any = "fake", **limits: Any,
) -> FailoverChatModel:  # fmt: skip
    model_name, factory, _ = FAMILIES[family]
    route = f"stall/{model_name}"
    config = seed_config(fallbacks={route: FALLBACK}, **limits)
    wiring = {} if clock == "fake" else {"clock": clock}
    fallback = chat_openai(fake, "fallback", "fake-model-large")
    return FailoverChatModel(
        routes={route: factory(fake, "stall"), FALLBACK: fallback},
        primary=route,
        failover=make_failover(config, **wiring),
    )


async def timed(call: Any) -> tuple[Any, float, list[warnings.WarningMessage]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        started = time.monotonic()
        value = await call
        return value, time.monotonic() - started, caught


def timeout_warnings(caught: list[warnings.WarningMessage]) -> list[str]:
    return [str(w.message) for w in caught if issubclass(w.category, SwerveTimeoutWarning)]


@pytest.mark.anyio
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("family", list(FAMILIES))
async def test_a_hung_primary_swaps_within_the_attempt_limit(
    family: str, mode: str, fake: FakeProvider, make_failover: Callable[..., Failover]
) -> None:
    model = hung_model(fake, make_failover, family, attempt_timeout_s=LIMIT)
    fake.script("stall", [Fault.hang()])
    message, took, caught = await timed(run(model, mode))
    assert took < LIMIT + MARGIN
    assert message.text == "from fallback"
    assert message.response_metadata["swerve"]["served"] == FALLBACK
    assert fake.requests("fallback") == 1
    warned = timeout_warnings(caught)
    if mode in ("invoke", "stream") and not FAMILIES[family][2]:
        # swerve could only stop waiting: it says so, naming the model and the route.
        assert len(warned) == 1
        assert "RawHttpChat of route stall/fake-model" in warned[0]
        assert "attempt time limit" in warned[0]
    else:
        assert warned == []  # the SDK's own timeout ended the request (or async cancelled it)


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ["invoke", "stream"])
async def test_the_call_deadline_bounds_a_sync_attempt(
    mode: str, fake: FakeProvider, make_failover: Callable[..., Failover]
) -> None:
    # No attempt limit: the call's deadline is what ends the hung attempt, and the call (on
    # the real clock: the deadline has passed when the fallback's turn comes).
    model = hung_model(fake, make_failover, "openai", deadline_s=LIMIT, clock=SYSTEM_CLOCK)
    fake.script("stall", [Fault.hang()])
    started = time.monotonic()
    # invoke: the SDK's own timeout error; a stream: swerve's (a TimeoutError), as in async.
    with pytest.raises((openai.APITimeoutError, TimeoutError)):
        await run(model, mode)
    assert time.monotonic() - started < LIMIT + MARGIN
    assert fake.requests("fallback") == 0  # no time was left for it


@pytest.mark.anyio
@pytest.mark.parametrize("family", list(FAMILIES))
async def test_a_sync_stream_holds_the_first_token_limit(
    family: str, fake: FakeProvider, make_failover: Callable[..., Failover]
) -> None:
    model = hung_model(fake, make_failover, family, first_token_timeout_s=LIMIT)
    fake.script("stall", [Fault.slow(first_token_s=30)])
    message, took, _ = await timed(run(model, "stream"))
    assert took < LIMIT + MARGIN
    assert message.text == "from fallback"


@pytest.mark.anyio
@pytest.mark.parametrize("family", ["openai", "custom"])
async def test_a_sync_stream_holds_the_stall_limit(
    family: str, fake: FakeProvider, make_failover: Callable[..., Failover]
) -> None:
    # The first chunk comes at once, the next never (within the test): a stall after content.
    model = hung_model(fake, make_failover, family, stall_timeout_s=LIMIT)
    fake.script("stall", [Fault.slow(per_chunk_s=30)])
    started = time.monotonic()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SwerveTimeoutWarning)
        with pytest.raises(MidStreamError) as info:
            await run(model, "stream")
    assert time.monotonic() - started < LIMIT + MARGIN
    assert info.value.failure.kind.value == "timeout"
    assert info.value.partial  # output had reached the consumer before the stall


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ["invoke", "stream"])
async def test_a_route_models_own_shorter_timeout_is_kept(
    mode: str, fake: FakeProvider, make_failover: Callable[..., Failover]
) -> None:
    # swerve allows 30 s; the model's own 0.3 s is the smaller, and it still applies.
    route = "stall/fake-model"
    model = FailoverChatModel(
        routes={route: chat_openai(fake, "stall", timeout=0.3),
                FALLBACK: chat_openai(fake, "fallback", "fake-model-large")},
        primary=route,
        failover=make_failover(seed_config(fallbacks={route: FALLBACK}, attempt_timeout_s=30)),
    )  # fmt: skip
    fake.script("stall", [Fault.hang()])
    message, took, _ = await timed(run(model, mode))
    assert took < 0.3 + MARGIN
    assert message.text == "from fallback"


PROMPT = ChatPromptTemplate.from_messages([("user", "{question}")])


@pytest.mark.anyio
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("family", ["openai", "custom"])
async def test_with_failover_holds_the_attempt_limit(
    family: str, mode: str, fake: FakeProvider, make_failover: Callable[..., Failover]
) -> None:
    model_name, factory, _ = FAMILIES[family]
    route = f"stall/{model_name}"
    chain = with_failover(
        {route: PROMPT | factory(fake, "stall"),
         FALLBACK: PROMPT | chat_openai(fake, "fallback", "fake-model-large")},
        route,
        failover=make_failover(seed_config(fallbacks={route: FALLBACK}, attempt_timeout_s=LIMIT)),
    )  # fmt: skip
    fake.script("stall", [Fault.hang()])
    out, took, caught = await timed(run(chain, mode, {"question": "hi"}))
    assert took < LIMIT + MARGIN
    assert out.text == "from fallback"
    assert out.response_metadata["swerve"]["served"] == FALLBACK
    warned = timeout_warnings(caught)
    # A runnable has no timeout swerve can set: a sync attempt is abandoned, with a warning.
    assert len(warned) == (1 if mode in ("invoke", "stream") else 0)
    if warned:
        assert f"the runnable of route {route}" in warned[0]


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ["invoke", "stream"])
async def test_structured_output_holds_the_attempt_limit(
    mode: str, fake: FakeProvider, make_failover: Callable[..., Failover]
) -> None:
    model = hung_model(fake, make_failover, "openai", attempt_timeout_s=LIMIT)
    fake.set_reply("fallback", Reply(text='{"answer": "yes"}'))
    schema = {"title": "Answer", "type": "object", "properties": {"answer": {"type": "string"}}}
    structured = model.with_structured_output(schema, method="json_mode")
    # The first structured call of a process imports LangChain's parsers (~1 s on a busy
    # machine): warm them up outside the fallback's limit, on both entry points (a CI
    # run once timed out the fallback of the first invoke after a stream had warmed up).
    warm = chat_openai(fake, "fallback", "fake-model-large").with_structured_output(
        schema, method="json_mode"
    )
    assert list(warm.stream("hi"))[-1] == {"answer": "yes"}
    assert warm.invoke("hi") == {"answer": "yes"}
    fake.script("stall", [Fault.hang()])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SwerveTimeoutWarning)
        started = time.monotonic()
        out = structured.invoke("hi") if mode == "invoke" else list(structured.stream("hi"))[-1]
    assert time.monotonic() - started < LIMIT + MARGIN
    assert out == {"answer": "yes"}
