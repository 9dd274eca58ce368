"""Scripted reply sequences on the fake provider: ``FakeProvider.script`` with Reply and Fault
steps, driven by the real openai, anthropic and openrouter SDKs (sync and async, stream and
not) and by swerve's own engine, over real sockets."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import openrouter
import pytest

import swerve.testing
from swerve import Failover, FallbackConfig, MemoryHealth
from swerve.testing import FakeClock, FakeProvider, Fault, Reply, ToolCall

OPENAI = "/v1/chat/completions"
ANTHROPIC = "/v1/messages"
WEATHER = ToolCall("get_weather", {"city": "Oslo"}, id="call_weather_1")
TOOL_TURN = Reply(text="", tool_calls=[WEATHER])
FINAL = Reply(text="It is sunny in Oslo.")


@pytest.fixture
def fake() -> Iterator[FakeProvider]:
    with FakeProvider() as server:
        server.set_reply("p", Reply(text="standing reply"))
        yield server


@pytest.fixture(scope="module")
def http() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=5) as client:
        yield client


def body(model: str = "m", **extra: Any) -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "user", "content": "hi"}], **extra}


def openai_text(response: httpx.Response) -> str:
    if response.status_code != 200:
        return str(response.status_code)
    return str(response.json()["choices"][0]["message"]["content"])


# -- a real tool loop on every wire the fake speaks, with each SDK ----------------------------


@dataclass
class Turn:
    text: str = ""
    calls: list[tuple[str, str, dict[str, Any]]] = field(default_factory=list)  # id, name, args


class Loop:
    """One SDK's side of a tool loop: ask with the history, then append the model's tool call
    and the tool's result in the wire's own shape."""

    model: str

    def __init__(self) -> None:
        self.history: list[dict[str, Any]] = [{"role": "user", "content": "Weather in Oslo?"}]

    def ask(self, stream: bool) -> Turn:
        raise NotImplementedError

    async def ask_async(self, stream: bool) -> Turn:
        raise NotImplementedError

    def answer_tools(self, turn: Turn) -> None:
        raise NotImplementedError

    async def aclose(self) -> None:
        """Close the clients inside the test's event loop (not later, from the GC)."""
        raise NotImplementedError


class OpenAILoop(Loop):
    model = "gpt-fake"

    def __init__(self, fake: FakeProvider) -> None:
        super().__init__()
        url = f"{fake.url('p')}/v1"
        self.client = openai.OpenAI(base_url=url, api_key="test", max_retries=0)
        self.aclient = openai.AsyncOpenAI(base_url=url, api_key="test", max_retries=0)

    def _request(self, stream: bool) -> dict[str, Any]:
        return {"model": self.model, "messages": self.history, "stream": stream}

    def ask(self, stream: bool) -> Turn:
        if not stream:
            return _openai_message(self.client.chat.completions.create(**self._request(False)))
        turn = _OpenAIChunks()
        for chunk in self.client.chat.completions.create(**self._request(True)):
            turn.add(chunk.choices[0].delta if chunk.choices else None)
        return turn.turn()

    async def ask_async(self, stream: bool) -> Turn:
        if not stream:
            response = await self.aclient.chat.completions.create(**self._request(False))
            return _openai_message(response)
        turn = _OpenAIChunks()
        async for chunk in await self.aclient.chat.completions.create(**self._request(True)):
            turn.add(chunk.choices[0].delta if chunk.choices else None)
        return turn.turn()

    def answer_tools(self, turn: Turn) -> None:
        calls = [
            {"id": i, "type": "function", "function": {"name": n, "arguments": json.dumps(a)}}
            for i, n, a in turn.calls
        ]
        self.history.append({"role": "assistant", "content": None, "tool_calls": calls})
        for call_id, _, args in turn.calls:
            result = f"sunny in {args['city']}"
            self.history.append({"role": "tool", "tool_call_id": call_id, "content": result})

    async def aclose(self) -> None:
        self.client.close()
        await self.aclient.close()


def _openai_message(response: Any) -> Turn:
    message = response.choices[0].message
    calls = [
        (c.id, c.function.name, json.loads(c.function.arguments)) for c in message.tool_calls or []
    ]
    content = message.content
    return Turn(content if isinstance(content, str) else "", calls)


class _OpenAIChunks:
    """Reassembles streamed deltas (the openai and openrouter SDKs' chunks look alike)."""

    def __init__(self) -> None:
        self.text = ""
        self.calls: dict[int, list[str]] = {}  # index -> [id, name, arguments]

    def add(self, delta: Any) -> None:
        if delta is None:
            return
        if isinstance(delta.content, str):
            self.text += delta.content
        for call in delta.tool_calls or []:
            slot = self.calls.setdefault(call.index, ["", "", ""])
            slot[0] = call.id or slot[0]
            slot[1] = call.function.name or slot[1]
            slot[2] += call.function.arguments or ""

    def turn(self) -> Turn:
        calls = [(i, n, json.loads(a)) for i, n, a in self.calls.values()]
        return Turn(self.text, calls)


class OpenRouterLoop(OpenAILoop):
    """The OpenRouter SDK (its own client and models) on the OpenAI wire, Claude behind it."""

    model = "anthropic/claude-fake"

    def __init__(self, fake: FakeProvider) -> None:
        Loop.__init__(self)
        self.http, self.ahttp = httpx.Client(), httpx.AsyncClient()
        self.router = openrouter.OpenRouter(
            api_key="test",
            server_url=f"{fake.url('p')}/v1",
            client=self.http,
            async_client=self.ahttp,
        )

    async def aclose(self) -> None:
        self.http.close()
        await self.ahttp.aclose()

    def ask(self, stream: bool) -> Turn:
        if not stream:
            return _openai_message(self.router.chat.send(**self._request(False)))
        turn = _OpenAIChunks()
        with self.router.chat.send(**self._request(True)) as events:
            for chunk in events:
                turn.add(chunk.choices[0].delta if chunk.choices else None)
        return turn.turn()

    async def ask_async(self, stream: bool) -> Turn:
        if not stream:
            return _openai_message(await self.router.chat.send_async(**self._request(False)))
        turn = _OpenAIChunks()
        async with await self.router.chat.send_async(**self._request(True)) as events:
            async for chunk in events:
                turn.add(chunk.choices[0].delta if chunk.choices else None)
        return turn.turn()


class AnthropicLoop(Loop):
    model = "claude-fake"

    def __init__(self, fake: FakeProvider) -> None:
        super().__init__()
        url = fake.url("p")
        self.client = anthropic.Anthropic(base_url=url, api_key="test", max_retries=0)
        self.aclient = anthropic.AsyncAnthropic(base_url=url, api_key="test", max_retries=0)

    def _request(self) -> dict[str, Any]:
        return {"model": self.model, "messages": self.history, "max_tokens": 100}

    def ask(self, stream: bool) -> Turn:
        if not stream:
            return _anthropic_message(self.client.messages.create(**self._request()))
        with self.client.messages.stream(**self._request()) as events:
            return _anthropic_message(events.get_final_message())

    async def ask_async(self, stream: bool) -> Turn:
        if not stream:
            return _anthropic_message(await self.aclient.messages.create(**self._request()))
        async with self.aclient.messages.stream(**self._request()) as events:
            return _anthropic_message(await events.get_final_message())

    def answer_tools(self, turn: Turn) -> None:
        uses = [{"type": "tool_use", "id": i, "name": n, "input": a} for i, n, a in turn.calls]
        self.history.append({"role": "assistant", "content": uses})
        results = [
            {"type": "tool_result", "tool_use_id": i, "content": f"sunny in {a['city']}"}
            for i, _, a in turn.calls
        ]
        self.history.append({"role": "user", "content": results})

    async def aclose(self) -> None:
        self.client.close()
        await self.aclient.close()


def _anthropic_message(message: Any) -> Turn:
    text = "".join(b.text for b in message.content if b.type == "text")
    calls = [(b.id, b.name, dict(b.input)) for b in message.content if b.type == "tool_use"]
    return Turn(text, calls)


LOOPS = {"openai": OpenAILoop, "anthropic": AnthropicLoop, "openrouter": OpenRouterLoop}


def check_tool_loop(fake: FakeProvider, loop: Loop, turns: list[Turn]) -> None:
    tool_turn, final, after = turns
    assert tool_turn.text == ""
    assert tool_turn.calls == [("call_weather_1", "get_weather", {"city": "Oslo"})]
    assert final == Turn("It is sunny in Oslo.")
    assert after == Turn("standing reply")  # the script ran out: the standing reply again
    assert fake.remaining("p") == 0
    # The second request carried the tool's result back, in the wire's own shape.
    second = json.dumps(fake.received("p")[1]["messages"])
    assert "sunny in Oslo" in second and "call_weather_1" in second


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize("wire", list(LOOPS))
def test_a_scripted_tool_loop_on_every_wire(fake: FakeProvider, wire: str, stream: bool) -> None:
    loop = LOOPS[wire](fake)
    fake.script("p", [TOOL_TURN, FINAL])
    try:
        turns = [loop.ask(stream)]
        loop.answer_tools(turns[0])
        turns += [loop.ask(stream), loop.ask(stream)]
    finally:
        asyncio.run(loop.aclose())
    check_tool_loop(fake, loop, turns)


@pytest.mark.anyio
@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize("wire", list(LOOPS))
async def test_a_scripted_tool_loop_on_every_wire_async(
    fake: FakeProvider, wire: str, stream: bool
) -> None:
    loop = LOOPS[wire](fake)
    fake.script("p", [TOOL_TURN, FINAL])
    try:
        turns = [await loop.ask_async(stream)]
        loop.answer_tools(turns[0])
        turns += [await loop.ask_async(stream), await loop.ask_async(stream)]
    finally:
        await loop.aclose()
    check_tool_loop(fake, loop, turns)


def test_reply_steps_carry_reasoning_and_usage(fake: FakeProvider, http: httpx.Client) -> None:
    fake.script("p", [Reply(text="ok", reasoning="think first", usage=(30, 2))] * 2)
    chat = http.post(fake.url("p") + OPENAI, json=body()).json()
    assert chat["usage"] == {"prompt_tokens": 30, "completion_tokens": 2, "total_tokens": 32}
    assert chat["choices"][0]["message"]["reasoning"] == "think first"
    message = http.post(fake.url("p") + ANTHROPIC, json=body()).json()
    assert message["content"][0]["type"] == "thinking"
    assert (message["usage"]["input_tokens"], message["usage"]["output_tokens"]) == (30, 2)


# -- running out, mixing faults and replies -----------------------------------------------------


def test_steps_mix_faults_and_replies_then_the_standing_fault_and_reply(
    fake: FakeProvider, http: httpx.Client
) -> None:
    fake.set_fault("p", Fault.status(429))
    fake.script(
        "p",
        [
            Fault.status(503),
            Reply(text="first"),  # a Reply step is served with no fault, not the standing 429
            Fault.ok(),  # a Fault step is served on the standing reply
            Reply(text="second"),
        ],
    )
    url = fake.url("p") + OPENAI
    assert fake.remaining("p") == 4
    got = [openai_text(http.post(url, json=body())) for _ in range(6)]
    assert got == ["503", "first", "standing reply", "second", "429", "429"]
    assert fake.remaining("p") == 0
    fake.set_fault("p", Fault.ok())
    assert openai_text(http.post(url, json=body())) == "standing reply"


def test_a_fault_step_breaks_a_stream_and_the_retry_gets_the_next_reply(
    fake: FakeProvider,
) -> None:
    fake.script("p", [Fault.error_after(1, "openrouter"), Reply(text="second try")])
    client = openai.OpenAI(base_url=f"{fake.url('p')}/v1", api_key="test", max_retries=0)
    hi = [{"role": "user", "content": "hi"}]
    text = ""
    with pytest.raises(openai.APIError, match="Service Unavailable"):  # the error chunk
        for chunk in client.chat.completions.create(model="m", messages=hi, stream=True):
            text += chunk.choices[0].delta.content or "" if chunk.choices else ""
    assert text == "standing"  # one content chunk of the standing reply came first
    again = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
    assert again.choices[0].message.content == "second try"


def test_empty_script_and_invalid_requests_consume_no_step(
    fake: FakeProvider, http: httpx.Client
) -> None:
    url = fake.url("p") + ANTHROPIC
    fake.script("p", [Reply(text="scripted")])
    assert http.post(url, json={"messages": []}).status_code == 400  # no model: rejected first
    assert http.post(url, json=body()).json()["content"][0]["text"] == "scripted"
    fake.script("p", [Reply(text="never served")])
    fake.script("p", [])  # clears it
    assert fake.remaining("p") == 0
    assert http.post(url, json=body()).json()["content"][0]["text"] == "standing reply"


# -- per provider and per model (a route is provider/model) ------------------------------------


def test_scripts_are_per_provider(fake: FakeProvider, http: httpx.Client) -> None:
    fake.script("a", [Reply(text="a1"), Reply(text="a2")])
    fake.script("b", [Fault.status(503), Reply(text="b2")])
    got = [openai_text(http.post(fake.url(p) + OPENAI, json=body())) for p in ("a", "b", "b", "a")]
    assert got == ["a1", "503", "b2", "a2"]
    assert (fake.remaining("a"), fake.remaining("b")) == (0, 0)


def test_scripts_are_per_model_and_come_before_the_provider_script(
    fake: FakeProvider, http: httpx.Client
) -> None:
    url = fake.url("p") + OPENAI
    fake.script("p", [Reply(text="any model 1"), Reply(text="any model 2")])
    fake.script("p", [Fault.status(503), Reply(text="big 2")], model="big")
    fake.script("p", [Reply(text="small 1")], model="small")
    assert (fake.remaining("p"), fake.remaining("p", model="big")) == (2, 2)
    order = ["big", "small", "small", "other", "big", "big", "small"]
    got = [openai_text(http.post(url, json=body(m))) for m in order]
    assert got == [
        "503",  # big's own script
        "small 1",  # small's own script
        "any model 1",  # small's script ran out: the provider's script is next
        "any model 2",  # a model without a script takes the provider's
        "big 2",
        "standing reply",  # every script ran out
        "standing reply",
    ]
    # Replacing one model's script leaves the others alone; [] clears it.
    fake.script("p", [Reply(text="big again")], model="big")
    fake.script("p", [Reply(text="small again")], model="small")
    fake.script("p", [], model="small")
    assert openai_text(http.post(url, json=body("small"))) == "standing reply"
    assert openai_text(http.post(url, json=body("big"))) == "big again"


def test_failover_between_two_models_of_one_provider(fake: FakeProvider) -> None:
    # Two routes on one provider, told apart by their model: only the first one's script fails.
    fake.script("p", [Fault.status(503), Fault.status(503)], model="gpt-a")
    fake.script("p", [Reply(text="from b")], model="gpt-b")
    client = openai.OpenAI(base_url=f"{fake.url('p')}/v1", api_key="test", max_retries=0)

    def complete(attempt: Any) -> str:
        response = client.chat.completions.create(
            model=attempt.route.model, messages=[{"role": "user", "content": "hi"}]
        )
        return str(response.choices[0].message.content)

    clock = FakeClock()
    failover = Failover(
        FallbackConfig(fallbacks={"p/gpt-a": "p/gpt-b"}, max_retries=1),
        health=MemoryHealth(clock=clock),
        clock=clock,
    )
    result = failover.call("p/gpt-a", complete)
    assert (str(result.route), result.value) == ("p/gpt-b", "from b")
    assert [b["model"] for b in fake.received("p")] == ["gpt-a", "gpt-a", "gpt-b"]


# -- concurrency: each step is served exactly once ---------------------------------------------


def test_concurrent_requests_each_take_one_step(fake: FakeProvider) -> None:
    steps = [Reply(text=f"step {i}") for i in range(40)]
    fake.script("p", steps)
    seen: list[str] = []
    lock = threading.Lock()

    def worker() -> None:
        with httpx.Client(timeout=5) as client:
            for _ in range(6):
                text = openai_text(client.post(fake.url("p") + OPENAI, json=body()))
                with lock:
                    seen.append(text)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert len(seen) == 48
    assert sorted(t for t in seen if t != "standing reply") == sorted(s.text or "" for s in steps)
    assert seen.count("standing reply") == 8


@pytest.mark.anyio
async def test_concurrent_async_requests_each_take_one_step(fake: FakeProvider) -> None:
    fake.script("p", [Reply(text=f"step {i}") for i in range(20)], model="m")
    client = openai.AsyncOpenAI(base_url=f"{fake.url('p')}/v1", api_key="test", max_retries=0)

    async def ask() -> str:
        response = await client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hi"}]
        )
        return str(response.choices[0].message.content)

    texts = await asyncio.gather(*(ask() for _ in range(20)))
    assert sorted(texts) == sorted(f"step {i}" for i in range(20))
    assert fake.remaining("p", model="m") == 0
    await client.close()


# -- bad input is refused at the call -----------------------------------------------------------


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (
            lambda f: f.script("p", Reply(text="x")),
            TypeError,
            "script(): steps must be a list of Fault or Reply, e.g. "
            "[Fault.status(503), Reply(text='hi')], got Reply(",
        ),
        (
            lambda f: f.script("p", {"text": "x"}),
            TypeError,
            "script(): steps must be a list of Fault or Reply",
        ),
        (
            lambda f: f.script("p", [Reply(text="x"), "final answer"]),
            TypeError,
            "script(): steps[1] must be a Fault or a Reply, e.g. Fault.status(503) "
            "or Reply(text='hi'), got str 'final answer'",
        ),
        (
            lambda f: f.script("p", [Reply()], model=3),
            TypeError,
            "script(): model must be a str (the request body's model) or None, got int 3",
        ),
        (
            lambda f: f.script("p", [Reply()], model=""),
            ValueError,
            "script(): model must not be empty; pass None for every model",
        ),
        (
            lambda f: f.remaining("p", model=b"m"),
            TypeError,
            "remaining(): model must be a str",
        ),
    ],
)
def test_bad_script_input_is_refused_and_nothing_is_stored(
    fake: FakeProvider, http: httpx.Client, call: Any, error: type[Exception], message: str
) -> None:
    fake.script("p", [Reply(text="kept")])
    with pytest.raises(error) as info:
        call(fake)
    assert str(info.value).startswith(message), str(info.value)
    got = [openai_text(http.post(fake.url("p") + OPENAI, json=body())) for _ in range(2)]
    assert got == ["kept", "standing reply"]


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: Reply(text=5), "Reply(): text must be a str or None, got int 5"),
        (lambda: Reply(reasoning=b"x"), "Reply(): reasoning must be a str or None, got bytes"),
        (lambda: Reply(tool_calls=WEATHER), "Reply(): tool_calls must be a list of ToolCall"),
        (
            lambda: Reply(tool_calls=[{"name": "f"}]),
            "Reply(): tool_calls[0] must be a ToolCall, got dict",
        ),
        (lambda: Reply(usage=(1,)), "Reply(): usage must be (input_tokens, output_tokens)"),
        (lambda: Reply(usage=(1, -2)), "Reply(): usage must be (input_tokens, output_tokens)"),
        (lambda: ToolCall("", {}), "ToolCall(): name must be a non-empty str, got ''"),
        (lambda: ToolCall("f", '{"a": 1}'), "ToolCall(): arguments must be a mapping"),
        (lambda: ToolCall("f", {"a": object()}), "ToolCall(): arguments must be JSON-serialis"),
        (lambda: ToolCall("f", {}, id=7), "ToolCall(): id must be a non-empty str or None"),
    ],
)
def test_bad_reply_or_tool_call_is_a_type_error_at_construction(build: Any, message: str) -> None:
    with pytest.raises(TypeError) as info:
        build()
    assert str(info.value).startswith(message), str(info.value)


def test_reply_takes_lists_and_stores_tuples() -> None:
    reply = Reply(tool_calls=[WEATHER], usage=[3, 4])  # type: ignore[arg-type]
    assert (reply.tool_calls, reply.usage) == ((WEATHER,), (3, 4))


# -- the docs cannot drift ----------------------------------------------------------------------


def _public_names() -> set[str]:
    """``__all__``, and the public fields, methods and attributes of its classes."""
    names = set(swerve.testing.__all__)
    recorder = swerve.testing.TelemetryRecorder()
    recorder.shutdown()
    names |= set(vars(recorder))
    for cls in (FakeProvider, Fault, Reply, ToolCall, FakeClock, swerve.testing.TelemetryRecorder):
        if dataclasses.is_dataclass(cls):
            names |= {f.name for f in dataclasses.fields(cls)}
        names |= set(vars(cls))
    return {n for n in names if not n.startswith("_")}


def test_docs_testing_md_names_every_public_name_field_and_method() -> None:
    text = (Path(__file__).resolve().parents[1] / "docs" / "testing.md").read_text()
    code = " ".join(re.findall(r"```.*?```|`[^`]+`", text, flags=re.DOTALL))
    missing = sorted(n for n in _public_names() if not re.search(rf"\b{n}\b", code))
    assert not missing, f"docs/testing.md shows none of {missing} in code"
    # And each name of __all__ in a code span of its own.
    assert all(f"`{name}" in text for name in swerve.testing.__all__)
