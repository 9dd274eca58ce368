"""What a failure means, through the failover transport under the real openai SDK (over httpx2),
sync and async from one body: a hang costs one timeout, an overflow follows its own map, a
content filter is retried nowhere, and the end of a cooldown lets exactly one request through."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx2
import openai
import pytest

from swerve import Failover, FallbackConfig
from swerve.httpx import AsyncFailoverTransport, FailoverTransport, Upstream
from swerve.testing import FakeClock, FakeProvider, Fault, Reply

from .conftest import Otel

OR, BK, BIG = "openrouter/anthropic/claude-sonnet-5", "backup/claude-sonnet-5", "openrouter/big"
MESSAGES = [{"role": "user", "content": "hi"}]
CONTENT_FILTER = Fault.status(
    400,
    body={
        "error": {
            "message": "The prompt was filtered due to triggering the content management policy.",
            "type": "invalid_request_error",
            "param": "prompt",
            "code": "content_filter",
        }
    },
)


@pytest.fixture
def fake() -> Iterator[FakeProvider]:
    with FakeProvider() as server:
        for name in ("openrouter", "backup", "big"):
            server.set_reply(name, Reply(text=f"from {name}"))
        yield server


def upstreams(fake: FakeProvider) -> dict[str, Upstream]:
    return {
        OR: Upstream(f"{fake.url('openrouter')}/v1", api_key="sk-or-test"),
        BK: Upstream(f"{fake.url('backup')}/v1", api_key="sk-backup-test"),
        BIG: Upstream(f"{fake.url('big')}/v1", api_key="sk-or-test", model="big-model"),
    }


def config(**kw: Any) -> FallbackConfig:
    params: dict[str, Any] = {"fallbacks": {OR: BK}, "jitter": False, "max_retries": 2}
    params.update(kw)
    return FallbackConfig(**params)


class SDK:
    """The openai SDK over the failover transport, sync (threads) or async (tasks)."""

    def __init__(self, mode: str, fake: FakeProvider, failover: Failover) -> None:
        self.mode = mode
        self.runner = asyncio.Runner()
        if mode == "sync":
            transport: Any = FailoverTransport(upstreams(fake), failover=failover)
            self.sync = openai.OpenAI(
                base_url="http://swerve.invalid/v1", api_key="unused", max_retries=0,
                http_client=httpx2.Client(transport=transport),
            )  # fmt: skip
        else:
            transport = AsyncFailoverTransport(upstreams(fake), failover=failover)
            self.async_ = openai.AsyncOpenAI(
                base_url="http://swerve.invalid/v1", api_key="unused", max_retries=0,
                http_client=httpx2.AsyncClient(transport=transport),
            )  # fmt: skip

    def close(self) -> None:
        if self.mode == "sync":
            self.sync.close()
        else:
            self.runner.run(self.async_.close())
        self.runner.close()

    def texts(self, n: int = 1, *, stream: bool = False, model: str = OR) -> list[str]:
        """``n`` completions at once; each answer's text (the fake says who answered)."""
        if self.mode == "sync":

            def one() -> str:
                if stream:
                    chunks = self.sync.chat.completions.create(
                        model=model,
                        messages=MESSAGES,
                        stream=True,  # type: ignore[arg-type]
                    )
                    return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
                done = self.sync.chat.completions.create(model=model, messages=MESSAGES)  # type: ignore[arg-type]
                return done.choices[0].message.content or ""

            if n == 1:
                return [one()]
            with ThreadPoolExecutor(n) as pool:
                return list(pool.map(lambda _: one(), range(n)))

        async def aone() -> str:
            if stream:
                chunks = await self.async_.chat.completions.create(
                    model=model,
                    messages=MESSAGES,
                    stream=True,  # type: ignore[arg-type]
                )
                parts = [c.choices[0].delta.content or "" async for c in chunks if c.choices]
                return "".join(parts)
            done = await self.async_.chat.completions.create(model=model, messages=MESSAGES)  # type: ignore[arg-type]
            return done.choices[0].message.content or ""

        async def run() -> list[str]:
            return list(await asyncio.gather(*(aone() for _ in range(n))))

        return self.runner.run(run())


@pytest.fixture(params=["sync", "async"])
def mode(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def sdk(mode: str, fake: FakeProvider, request: pytest.FixtureRequest) -> Iterator[Any]:
    made: list[SDK] = []

    def make(failover: Failover) -> SDK:
        made.append(SDK(mode, fake, failover))
        return made[-1]

    yield make
    for client in made:
        client.close()


@pytest.mark.parametrize("stream", [False, True])
def test_a_hang_costs_one_timeout(
    sdk: Any, make_failover: Any, fake: FakeProvider, otel: Otel, stream: bool
) -> None:
    client = sdk(make_failover(config(attempt_timeout_s=1)))
    fake.set_fault("openrouter", Fault.hang())
    assert client.texts(stream=stream) == ["from backup"]
    assert fake.requests("openrouter") == 1
    assert [e["swerve.reason"] for _, e in otel.events("swerve.swap")] == ["timeout"]


@pytest.mark.parametrize("stream", [False, True])
def test_an_overflow_goes_to_the_larger_model_without_cooling_the_route(
    sdk: Any, make_failover: Any, fake: FakeProvider, clock: FakeClock, otel: Otel, stream: bool
) -> None:
    failover = make_failover(config(fallbacks_by_failure={"context_overflow": {OR: BIG}}))
    client = sdk(failover)
    fake.script("openrouter", [Fault.context_overflow()])
    assert client.texts(stream=stream) == ["from big"]
    assert fake.received("big")[0]["model"] == "big-model"
    assert fake.requests("backup") == 0
    assert [e["swerve.reason"] for _, e in otel.events("swerve.swap")] == ["context_overflow"]
    assert OR not in failover.health.unavailable(clock.now)
    assert client.texts(stream=stream) == ["from openrouter"]


def test_a_failure_kind_map_to_a_route_it_cannot_serve_is_refused_when_built(
    fake: FakeProvider, make_failover: Any
) -> None:
    kinds = {"context_overflow": {OR: "openrouter/unknown"}}
    with pytest.raises(ValueError, match="falls back to openrouter/unknown, which has no Upstream"):
        FailoverTransport(
            upstreams(fake), failover=make_failover(config(fallbacks_by_failure=kinds))
        )
    anthropic = {**upstreams(fake), "anthropic/big": Upstream(fake.url("big"), wire="anthropic")}
    kinds = {"context_overflow": {OR: "anthropic/big"}}
    with pytest.raises(ValueError, match="does not translate between wires"):
        FailoverTransport(anthropic, failover=make_failover(config(fallbacks_by_failure=kinds)))


def test_a_content_filter_is_retried_nowhere(
    sdk: Any, make_failover: Any, fake: FakeProvider
) -> None:
    client = sdk(make_failover(config(fallback_on=frozenset({400, 429, 503}))))
    fake.set_fault("openrouter", CONTENT_FILTER)
    with pytest.raises(openai.BadRequestError) as info:
        client.texts()
    assert info.value.code == "content_filter"
    assert (fake.requests("openrouter"), fake.requests("backup")) == (1, 0)


def test_the_end_of_a_cooldown_lets_one_request_through(
    sdk: Any, make_failover: Any, fake: FakeProvider, clock: FakeClock, otel: Otel
) -> None:
    client = sdk(make_failover(config(cooldown_s=10, cooldown_max_s=40)))
    fake.set_fault("openrouter", Fault.status(503))
    assert client.texts() == ["from backup"]
    fake.reset_counts()
    clock.advance(10)
    assert client.texts(50) == ["from backup"] * 50
    assert fake.requests("openrouter") == 1  # one probe, not retried
    fake.set_fault("openrouter", Fault.ok())
    clock.advance(20)  # the failed probe doubled the cooldown
    assert client.texts() + client.texts(5) == ["from openrouter"] * 6
    outcomes = [e["swerve.probe.outcome"] for _, e in otel.events("swerve.probe")]
    assert outcomes == ["failure", "success"]
