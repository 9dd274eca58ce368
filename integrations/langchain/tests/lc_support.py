"""Helpers shared by the adapter's tests (imported as a plain module: this folder is on
sys.path, and no other test folder has a module of this name)."""

from __future__ import annotations

from typing import Any

import httpx
import openrouter
from langchain_anthropic import ChatAnthropic
from langchain_openai import ChatOpenAI
from langchain_openrouter import ChatOpenRouter

from swerve import FallbackConfig
from swerve.testing import FakeClock as FakeClock  # re-exported for the tests
from swerve.testing import FakeProvider, TelemetryRecorder

# Routes: the provider segment is the fake provider's name for it.
P = "primary/fake-model"
F = "fallback/claude-fake"
OPENAI_FALLBACK = "fallback/fake-model-large"

# A real-time limit that also bounds a healthy fallback (its whole answer, its first token):
# one second. A loaded 2-CPU CI box has cut a fallback's ordinary answer at 0.5 s. The hanging
# side still waits its limit out.
ANSWERING_LIMIT_S = 1.0


def seed_config(**kw: Any) -> FallbackConfig:
    params: dict[str, Any] = {
        "fallbacks": {P: F, F: P},
        "jitter": False,
        "cooldown_s": 60,
        "max_retries": 0,
    }
    params.update(kw)
    return FallbackConfig(**params)


def chat_openai(
    fake: FakeProvider, provider: str, model: str = "fake-model", **kw: Any
) -> ChatOpenAI:
    return ChatOpenAI(
        base_url=f"{fake.url(provider)}/v1", api_key="test", model=model, max_retries=0, **kw
    )


def chat_anthropic(
    fake: FakeProvider, provider: str, model: str = "claude-fake", **kw: Any
) -> ChatAnthropic:
    return ChatAnthropic(
        base_url=fake.url(provider), api_key="test", model=model, max_retries=0, **kw
    )


def chat_openrouter(
    fake: FakeProvider, provider: str, model: str = "anthropic/claude-fake", **kw: Any
) -> ChatOpenRouter:
    client = openrouter.OpenRouter(
        api_key="test",
        server_url=f"{fake.url(provider)}/v1",
        client=httpx.Client(),
        async_client=httpx.AsyncClient(),
    )
    return ChatOpenRouter(
        base_url=f"{fake.url(provider)}/v1", api_key="test", model=model, max_retries=0,
        client=client, **kw,
    )  # fmt: skip


# The clock and the telemetry recorder are swerve's own public test helpers.
Otel = TelemetryRecorder
