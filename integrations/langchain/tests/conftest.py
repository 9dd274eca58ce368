"""Fixtures for the LangChain adapter's tests: the fake provider, real route models pointed
at it, a real OTel SDK with in-memory exporters, and an injected clock (no real sleeping)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest
from langchain_core.messages import AIMessage
from lc_support import F, Otel, P, chat_anthropic, chat_openai, seed_config
from swerve_langchain import FailoverChatModel

from swerve import Failover, FallbackConfig, MemoryHealth
from swerve.testing import FakeClock, FakeProvider, Fault, Reply


class Mode:
    """One way to call a chat model, the suite's one harness for it: sync or async (``sync``),
    whole or streamed (``stream``), i.e. ``invoke``, ``ainvoke``, ``stream`` or ``astream``.

    The shape of the main suite's ``tests/_drive.Mode`` (a ``mode`` fixture, a test body
    written once): there the fixture is sync/async and each call names its entry point; here
    LangChain's four entry points are the modes, each answering one aggregated message.
    Calls are awaited on the session's one loop (LangChain caches async clients per base URL),
    so the sync modes block it, as they would anywhere."""

    NAMES = ("invoke", "ainvoke", "stream", "astream")
    UNARY = ("invoke", "ainvoke")  # for ``parametrize("mode", ..., indirect=True)``
    STREAMED = ("stream", "astream")

    def __init__(self, name: str) -> None:
        if name not in self.NAMES:
            raise ValueError(f"a mode is one of {self.NAMES}, got {name!r}")
        self.name = name
        self.sync = not name.startswith("a")
        self.stream = name.endswith("stream")

    def __repr__(self) -> str:
        return self.name

    async def call(self, model: Any, value: Any = "hi", **kwargs: Any) -> AIMessage:
        """One call of ``model`` in this mode; a stream's chunks are added into one message."""
        if self.name == "invoke":
            return model.invoke(value, **kwargs)  # type: ignore[no-any-return]
        if self.name == "ainvoke":
            return await model.ainvoke(value, **kwargs)  # type: ignore[no-any-return]
        if self.name == "stream":
            chunks = list(model.stream(value, **kwargs))
        else:
            chunks = [c async for c in model.astream(value, **kwargs)]
        total = chunks[0]
        for chunk in chunks[1:]:
            total = total + chunk
        return total  # type: ignore[no-any-return]


@pytest.fixture(params=Mode.NAMES)
def mode(request: pytest.FixtureRequest) -> Mode:
    """Each of the four modes; a test that takes fewer parametrizes ``mode`` indirectly with
    :attr:`Mode.UNARY` or :attr:`Mode.STREAMED`."""
    return Mode(request.param)


@pytest.fixture(scope="session")
def fake_server() -> Iterator[FakeProvider]:
    """One fake provider for the session: one port, so the HTTP clients LangChain caches per
    base URL stay valid from test to test (a recycled port would hand a new test a cached
    client of an old one)."""
    with FakeProvider() as server:
        yield server


@pytest.fixture
def fake(fake_server: FakeProvider) -> Iterator[FakeProvider]:
    for provider in ("primary", "fallback"):
        fake_server.script(provider, [])
        fake_server.set_fault(provider, Fault.ok())
    fake_server.set_reply("primary", Reply(text="from primary"))
    fake_server.set_reply("fallback", Reply(text="from fallback", usage=(7, 3)))
    fake_server.reset_counts()
    yield fake_server
    for provider in ("primary", "fallback", "stall"):  # release what a test left hanging
        fake_server.script(provider, [])
        fake_server.set_fault(provider, Fault.ok())


@pytest.fixture
def otel() -> Iterator[Otel]:
    recorder = Otel()
    yield recorder
    recorder.shutdown()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def health() -> MemoryHealth:
    return MemoryHealth()


@pytest.fixture
def make_failover(otel: Otel, clock: FakeClock, health: MemoryHealth) -> Callable[..., Failover]:
    def make(config: FallbackConfig | None = None, **kwargs: Any) -> Failover:
        params: dict[str, Any] = {
            "health": health,
            "telemetry": otel.telemetry,
            "clock": clock,  # its random() is 1.0: backoff without jitter
            # No classifiers: the adapter adds its own to a ready Failover.
        }
        params.update(kwargs)
        return Failover(config if config is not None else seed_config(), **params)

    return make


@pytest.fixture
def model(fake: FakeProvider, make_failover: Callable[..., Failover]) -> FailoverChatModel:
    """ChatOpenAI on the primary route, ChatAnthropic on the fallback; the seed's config."""
    return FailoverChatModel(
        routes={P: chat_openai(fake, "primary"), F: chat_anthropic(fake, "fallback")},
        primary=P,
        failover=make_failover(seed_config(max_retries=1)),
    )


@pytest.fixture(scope="session")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="session", autouse=True)
async def _one_event_loop(anyio_backend: str) -> AsyncIterator[None]:
    """Keep one event loop for the whole session: LangChain caches async HTTP clients per
    base URL, and a client's connections belong to the loop that opened them."""
    return
