"""The two failovers, as an app calls them: LangChain's ``FailoverChatModel`` over two
``ChatOpenAI`` routes, and the openai SDK over the failover transport; both on the fake
provider (each route is served by the fake provider named like its provider)."""

from __future__ import annotations

from typing import Any, Literal

import httpx2
import openai
from langchain_openai import ChatOpenAI
from pydantic import SecretStr
from swerve_langchain import FailoverChatModel

from swerve import Failover
from swerve.httpx import AsyncFailoverTransport, FailoverTransport, Upstream
from swerve.testing import FakeProvider

from .conftest import FALLBACK, PRIMARY

MODEL = "gpt-5-mini"
MESSAGES: list[dict[str, str]] = [{"role": "user", "content": "Say hello."}]


def _provider(route: str) -> str:
    return route.split("/", 1)[0]


def chat_model(
    fake: FakeProvider, failover: Failover, mid_stream: Literal["error", "restart"] = "error"
) -> FailoverChatModel:
    def route(name: str) -> ChatOpenAI:
        return ChatOpenAI(
            base_url=f"{fake.url(_provider(name))}/v1",
            api_key=SecretStr(f"sk-nesting-{_provider(name)}-0123456789"),
            model=MODEL,
            max_retries=0,
        )

    return FailoverChatModel(
        routes={PRIMARY: route(PRIMARY), FALLBACK: route(FALLBACK)},
        primary=PRIMARY,
        failover=failover,
        mid_stream=mid_stream,
    )


def _upstreams(fake: FakeProvider) -> dict[str, Upstream]:
    return {
        route: Upstream(
            f"{fake.url(_provider(route))}/v1",
            api_key=f"sk-nesting-{_provider(route)}-0123456789",
            model=MODEL,
        )
        for route in (PRIMARY, FALLBACK)
    }


def sdk_client(fake: FakeProvider, failover: Failover, *, is_async: bool = False) -> Any:
    """An ``openai.OpenAI`` (``AsyncOpenAI`` when ``is_async``) over the failover transport."""
    transport, http, sdk = (
        (AsyncFailoverTransport, httpx2.AsyncClient, openai.AsyncOpenAI)
        if is_async
        else (FailoverTransport, httpx2.Client, openai.OpenAI)
    )
    return sdk(
        base_url="http://swerve.invalid/v1",
        api_key="unused",
        max_retries=0,
        http_client=http(transport=transport(upstreams=_upstreams(fake), failover=failover)),
    )
