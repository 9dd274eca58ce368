"""Who answered, on every output: ``response_metadata["swerve"]`` on the messages
``with_failover`` returns (and on the raw message of ``include_raw=True`` structured output),
and the ``swerve.result`` custom event for outputs that carry no metadata (a str, a dict, a
pydantic object)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate
from lc_support import P, chat_openai, seed_config
from pydantic import BaseModel
from swerve_langchain import RESULT_EVENT, FailoverChatModel, with_failover
from test_chat_model import MODES, run

from swerve import Failover
from swerve.testing import FakeProvider, Fault, Reply

B = "fallback/fake-model-large"
PROMPT = ChatPromptTemplate.from_messages([("user", "{question}")])
SWAPPED = {"requested": P, "served": B, "retries": 0, "swaps": 1}


class Answer(BaseModel):
    answer: str


class Results(BaseCallbackHandler):
    """The data of every ``swerve.result`` event the run's callbacks see."""

    def __init__(self) -> None:
        self.seen: list[dict[str, Any]] = []

    def on_custom_event(self, name: str, data: Any, **kwargs: Any) -> None:
        if name == RESULT_EVENT:
            self.seen.append(data)


@pytest.fixture
def failover(make_failover: Callable[..., Failover]) -> Failover:
    return make_failover(seed_config(fallbacks={P: B}))


def routes(fake: FakeProvider, tail: Any = None) -> dict[str, Any]:
    chains = {P: PROMPT | chat_openai(fake, "primary"),
              B: PROMPT | chat_openai(fake, "fallback", "fake-model-large")}  # fmt: skip
    return {r: c | tail for r, c in chains.items()} if tail is not None else chains


def chat_model(fake: FakeProvider, failover: Failover) -> FailoverChatModel:
    fallback = chat_openai(fake, "fallback", "fake-model-large")
    return FailoverChatModel(
        routes={P: chat_openai(fake, "primary"), B: fallback}, primary=P, failover=failover
    )


@pytest.mark.anyio
@pytest.mark.parametrize("mode", MODES)
async def test_with_failover_messages_name_who_answered(
    mode: str, fake: FakeProvider, failover: Failover
) -> None:
    chain = with_failover(routes(fake), P, failover=failover)
    fake.script("primary", [Fault.status(503)])
    out = await run(chain, mode, {"question": "hi"})
    assert out.text == "from fallback"
    assert out.response_metadata["swerve"] == SWAPPED


@pytest.mark.anyio
@pytest.mark.parametrize("mode", MODES)
async def test_other_outputs_get_the_result_event(
    mode: str, fake: FakeProvider, failover: Failover
) -> None:
    chain = with_failover(routes(fake, StrOutputParser()), P, failover=failover)
    fake.script("primary", [Fault.status(503)])
    results = Results()
    config: Any = {"callbacks": [results]}
    value = {"question": "hi"}
    if mode == "invoke":
        out = chain.invoke(value, config)
    elif mode == "ainvoke":
        out = await chain.ainvoke(value, config)
    elif mode == "stream":
        out = "".join(chain.stream(value, config))  # str chunks: no summary chunk among them
    else:
        out = "".join([c async for c in chain.astream(value, config)])
    assert out == "from fallback"
    assert results.seen == [SWAPPED]


@pytest.mark.anyio
async def test_the_result_event_shows_in_astream_events(
    fake: FakeProvider, failover: Failover
) -> None:
    chain = with_failover(routes(fake, StrOutputParser()), P, failover=failover)
    events = [e async for e in chain.astream_events({"question": "hi"}, version="v2")]
    (result,) = [e for e in events if e["event"] == "on_custom_event"]
    assert result["name"] == "swerve.result"
    assert result["data"] == {"requested": P, "served": P, "retries": 0, "swaps": 0}


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ["invoke", "ainvoke"])
async def test_include_raw_structured_output_names_who_answered(
    mode: str, fake: FakeProvider, failover: Failover
) -> None:
    model = chat_model(fake, failover)
    fake.set_reply("fallback", Reply(text='{"answer": "yes"}'))
    fake.script("primary", [Fault.status(503)])
    structured = model.with_structured_output(Answer, method="json_mode", include_raw=True)
    results = Results()
    config: Any = {"callbacks": [results]}
    if mode == "invoke":
        out = structured.invoke("hi", config)
    else:
        out = await structured.ainvoke("hi", config)
    assert out["parsed"] == Answer(answer="yes")
    assert out["raw"].response_metadata["swerve"] == SWAPPED
    assert results.seen == [SWAPPED]


@pytest.mark.anyio
async def test_a_parsed_object_is_named_by_the_result_event(
    fake: FakeProvider, failover: Failover
) -> None:
    model = chat_model(fake, failover)
    fake.set_reply("fallback", Reply(text='{"answer": "yes"}'))
    fake.script("primary", [Fault.status(503)])
    results = Results()
    out = model.with_structured_output(Answer, method="json_mode").invoke(
        "hi", {"callbacks": [results]}
    )
    assert out == Answer(answer="yes")  # a pydantic object: no metadata of its own
    assert results.seen == [SWAPPED]
