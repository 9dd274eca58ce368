"""Fixtures for the LangChain adapter's tests: the fake provider, real route models pointed
at it, a real OTel SDK with in-memory exporters, and an injected clock (no real sleeping)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest
from lc_support import F, Otel, P, chat_anthropic, chat_openai, seed_config
from swerve_langchain import FailoverChatModel

from swerve import Failover, FallbackConfig, MemoryHealth
from swerve.testing import FakeClock, FakeProvider, Fault, Reply


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
