"""What the wire said, reported on the attempt (issue 22): the model name a route's model
sends and the server it sends to, the model the provider said answered and its response id,
and the usage with its cache tokens. Real ChatOpenAI / ChatAnthropic against the fake
provider, each mode, read back from a real :class:`swerve.Attempt` (the spans do not carry
these facts yet)."""

from __future__ import annotations

from typing import Any

import pytest
from conftest import Mode
from langchain_anthropic import ChatAnthropic
from langchain_core.messages import AIMessageChunk, BaseMessage, HumanMessage
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.runnables import RunnableLambda
from langchain_openai import ChatOpenAI
from lc_support import chat_anthropic, chat_openai, chat_openrouter
from pydantic import BaseModel
from swerve_langchain._chunks import report_response
from swerve_langchain._route_model import RouteModel, WireTarget
from swerve_langchain._runnable import EffectWatcher

from swerve import Attempt, Route
from swerve.testing import FakeProvider, Reply

pytestmark = pytest.mark.anyio
# The route's model part is not the model's own name: what is reported must be the latter.
ROUTE = Route.parse("primary/alias")
HI: list[BaseMessage] = [HumanMessage("hi")]


class Answer(BaseModel):
    answer: str


def _attempt() -> Attempt:
    return Attempt(ROUTE, ROUTE)


def _server(fake: FakeProvider) -> tuple[str, int]:
    return "127.0.0.1", fake.port


async def _run(model: Any, mode: Mode) -> Attempt:
    """One attempt of ``model`` as the chat wrapper makes it, in ``mode``."""
    rm = RouteModel.resolve(ROUTE, model)
    attempt = _attempt()
    if mode.name == "invoke":
        rm.generate(HI, None, {}, attempt)
    elif mode.name == "ainvoke":
        await rm.agenerate(HI, None, {}, attempt)
    elif mode.name == "stream":
        assert list(rm.stream(HI, None, {}, attempt))
    else:
        assert [c async for c in rm.astream(HI, None, {}, attempt)]
    return attempt


async def test_openai_route_reports_what_the_wire_said(fake: FakeProvider, mode: Mode) -> None:
    fake.set_reply("primary", Reply(text="hi there", usage=(10, 5), cached=(4, 0)))
    attempt = await _run(chat_openai(fake, "primary", stream_usage=True), mode)
    assert attempt.request_model == "fake-model"
    assert attempt.server == _server(fake)
    assert attempt.response_model == "fake-model"
    # ChatOpenAI's stream chunks do not carry the completion's id; its whole answers do.
    if mode.stream:
        assert attempt.response_id is None
    else:
        assert (attempt.response_id or "").startswith("chatcmpl-")
    usage = attempt.usage
    assert (usage.input_tokens, usage.output_tokens, usage.finish_reasons) == (10, 5, ("stop",))
    assert (usage.cache_read_tokens, usage.cache_write_tokens) == (4, None)


async def test_anthropic_route_reports_what_the_wire_said(fake: FakeProvider, mode: Mode) -> None:
    fake.set_reply("fallback", Reply(text="hi there", usage=(10, 5), cached=(4, 2)))
    attempt = await _run(chat_anthropic(fake, "fallback"), mode)
    assert attempt.request_model == "claude-fake"
    assert attempt.server == _server(fake)
    assert attempt.response_model == "claude-fake"  # the stream's first chunk names it
    assert attempt.usage.finish_reasons == ("end_turn",)
    if mode.stream:  # langchain-anthropic drops message_start's id and usage from its chunks
        assert attempt.response_id is None
        return
    assert (attempt.response_id or "").startswith("msg_")
    usage = attempt.usage
    assert (usage.cache_read_tokens, usage.cache_write_tokens) == (4, 2)
    assert usage.input_tokens == 16  # LangChain counts the cached input in


async def test_a_bound_model_kwarg_is_the_model_sent(fake: FakeProvider, mode: Mode) -> None:
    model = chat_openai(fake, "primary").bind(model="fake-model-large")
    attempt = await _run(model, mode)
    assert attempt.request_model == "fake-model-large"
    assert attempt.response_model == "fake-model-large"  # the fake answers as the one asked


@pytest.mark.parametrize("mode", Mode.STREAMED, indirect=True)
async def test_a_route_that_does_not_stream_reports_its_whole_answer(
    fake: FakeProvider, mode: Mode
) -> None:
    attempt = await _run(chat_openai(fake, "primary", disable_streaming=True), mode)
    assert (attempt.response_id or "").startswith("chatcmpl-")
    assert attempt.response_model == "fake-model"


async def test_langchains_own_run_ids_are_not_the_response_id(fake: FakeProvider) -> None:
    model = chat_openai(fake, "primary")
    chunks = list(model.stream("hi"))
    assert all((c.id or "").startswith(("run-", "lc_run-")) for c in chunks)
    attempt = _attempt()
    for chunk in chunks:
        report_response(attempt, chunk)
    assert (attempt.response_id, attempt.response_model) == (None, "fake-model")
    # A message id the provider gave (as the Responses API's chunks carry) is reported.
    report_response(attempt, AIMessageChunk(content="", id="resp_abc"))
    assert attempt.response_id == "resp_abc"


async def test_the_first_response_report_holds(fake: FakeProvider) -> None:
    attempt = _attempt()
    first = chat_openai(fake, "primary").invoke("hi")
    second = chat_anthropic(fake, "fallback").invoke("hi")
    report_response(attempt, first)
    report_response(attempt, second)
    assert attempt.response_model == "fake-model"
    assert attempt.response_id == first.response_metadata["id"]


@pytest.mark.parametrize("mode", Mode.NAMES, indirect=True)
async def test_a_runnable_attempts_model_runs_report_the_wire(
    fake: FakeProvider, mode: Mode
) -> None:
    """with_failover's watcher reads what the chat models that ran in the attempt answered."""
    fake.set_reply("fallback", Reply(text="hi there", usage=(10, 5), cached=(4, 2)))
    attempt = _attempt()
    watched = {"callbacks": [EffectWatcher(attempt)]}
    await mode.call(chat_anthropic(fake, "fallback"), config=watched)
    assert attempt.response_model == "claude-fake"
    assert attempt.usage.finish_reasons == ("end_turn",)
    if not mode.stream:
        assert (attempt.response_id or "").startswith("msg_")
        assert (attempt.usage.cache_read_tokens, attempt.usage.cache_write_tokens) == (4, 2)


def test_a_runnable_route_finds_the_model_it_calls(fake: FakeProvider) -> None:
    model = chat_openai(fake, "primary")
    prompt = ChatPromptTemplate.from_messages([("user", "{question}")])
    expected = WireTarget("fake-model", _server(fake))
    for runnable in (
        model,
        model.bind(temperature=0),
        model.with_structured_output(Answer),
        model.with_structured_output(Answer, include_raw=True),
        prompt | model.bind(temperature=0),
    ):
        assert WireTarget.find(runnable) == expected, runnable
    assert WireTarget.find(RunnableLambda(lambda x: x)) == WireTarget()
    attempt = _attempt()
    WireTarget().tell(attempt)  # nothing known: the route's model, no server
    assert (attempt.request_model, attempt.server) == ("alias", None)


@pytest.fixture
def no_env_urls(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OPENAI_BASE_URL", "OPENAI_API_BASE", "ANTHROPIC_API_URL", "ANTHROPIC_BASE_URL"):
        monkeypatch.delenv(name, raising=False)


@pytest.mark.usefixtures("no_env_urls")
@pytest.mark.parametrize(
    ("kind", "base_url", "server"),
    [
        (ChatOpenAI, None, ("api.openai.com", 443)),
        (ChatOpenAI, "http://gw.local/v1", ("gw.local", 80)),
        (ChatOpenAI, "https://gw:8443/v1", ("gw", 8443)),
        (ChatAnthropic, None, ("api.anthropic.com", 443)),
        (ChatAnthropic, "http://gw.local:8080", ("gw.local", 8080)),
    ],
)
def test_the_server_comes_from_the_base_url(
    kind: Any, base_url: str | None, server: tuple[str, int]
) -> None:
    url: dict[str, Any] = {"base_url": base_url} if base_url else {}
    model = kind(api_key="k", model="m", **url)
    assert WireTarget.of(model) == WireTarget("m", server)


def test_openrouter_names_its_model_and_server(fake: FakeProvider) -> None:
    target = WireTarget.of(chat_openrouter(fake, "primary"))
    assert target == WireTarget("anthropic/claude-fake", _server(fake))
