"""What the docs leave to the reader, filled in for the test: the names a block uses but does
not define (``BASE_URLS``, ``MESSAGES``, ``primary_model``...), per document."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from langchain_anthropic import ChatAnthropic
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from pydantic import SecretStr

from swerve import FallbackConfig
from swerve.testing import FakeProvider

__all__ = ["API_KEY_VARS", "placeholders"]

# Keys the blocks read from the environment; the fake provider accepts any key.
API_KEY_VARS = ("OPENROUTER_API_KEY", "TOGETHER_API_KEY", "ANTHROPIC_API_KEY", "OPENAI_API_KEY")

PRIMARY = "openrouter/anthropic/claude-sonnet-5"
FALLBACK = "anthropic/claude-sonnet-5"


@tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"


def _readme(fake: FakeProvider) -> dict[str, Any]:
    return {
        # The quickstart's provider -> OpenAI-compatible base URL.
        "BASE_URLS": {name: f"{fake.url(name)}/v1" for name in ("openrouter", "anthropic")},
        "MESSAGES": [{"role": "user", "content": "Hello"}],
    }


def _langchain(fake: FakeProvider) -> dict[str, Any]:
    # Real URLs, as a reader writes them: the redirect sends them to the fake provider.
    primary_model = ChatOpenAI(
        base_url="https://openrouter.ai/api/v1",
        model="anthropic/claude-sonnet-5",
        api_key=SecretStr("test-key"),
        max_retries=0,
    )
    return {
        "prompt": ChatPromptTemplate.from_template("{question}"),
        "primary_model": primary_model,
        "fallback_model": ChatAnthropic(model="claude-sonnet-5", max_retries=0),  # type: ignore[call-arg]
        "config": FallbackConfig(fallbacks={PRIMARY: FALLBACK, FALLBACK: PRIMARY}),
        "tools": [get_weather],
    }


def _langchain_readme(fake: FakeProvider) -> dict[str, Any]:
    # The page writes the route models as ``ChatOpenAI(..., max_retries=0)``: the reader's own
    # arguments are filled in here, with the real URLs the redirect sends to the fake provider.
    def chat_openai(*_: Any, **kwargs: Any) -> ChatOpenAI:
        return ChatOpenAI(
            base_url="https://openrouter.ai/api/v1",
            model="anthropic/claude-sonnet-5",
            api_key=SecretStr("test-key"),
            **kwargs,
        )

    def chat_anthropic(*_: Any, **kwargs: Any) -> ChatAnthropic:
        return ChatAnthropic(model="claude-sonnet-5", **kwargs)  # type: ignore[call-arg]

    return {"ChatOpenAI": chat_openai, "ChatAnthropic": chat_anthropic}


_BY_DOCUMENT: dict[str, Callable[[FakeProvider], dict[str, Any]]] = {
    "README.md": _readme,
    "langchain.md": _langchain,
    "integrations/langchain/README.md": _langchain_readme,
}


def placeholders(document_name: str, fake: FakeProvider) -> dict[str, Any]:
    fill = _BY_DOCUMENT.get(document_name)
    return fill(fake) if fill is not None else {}
