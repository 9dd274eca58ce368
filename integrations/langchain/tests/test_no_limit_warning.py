"""A fixed config with no time limit over route models with no timeout of their own warns at
construction (``SwerveTimeoutWarning``, once per wrapper), and the README's example, which
sets ``attempt_timeout_s``, ends a sync call on a hung primary within it, on the fallback.

The route models are built as the README builds them (ChatOpenAI over OpenRouter's API,
ChatAnthropic), pointed at 127.0.0.1: LangChain builds their clients with no timeout at all,
so with no limit in the config a provider that hangs would hold the call indefinitely.
"""

from __future__ import annotations

import socket
import time
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from langchain_anthropic import ChatAnthropic
from langchain_core.prompts import ChatPromptTemplate
from langchain_openai import ChatOpenAI
from lc_support import ANSWERING_LIMIT_S, chat_openrouter
from pydantic import SecretStr
from swerve_langchain import FailoverChatModel, SwerveTimeoutWarning, with_failover
from test_sync_limits import raw_chat

from swerve import Failover, FallbackConfig, MemoryHealth
from swerve.testing import FakeProvider

PRIMARY = "openrouter/anthropic/claude-sonnet-5"
FALLBACK = "anthropic/claude-sonnet-5"
README_FALLBACKS = {PRIMARY: FALLBACK}
LIMIT = ANSWERING_LIMIT_S  # it bounds the fallback's attempt too
MARGIN = 3.0  # an upper bound, never a measurement: the point is "not indefinitely"
PROMPT = ChatPromptTemplate.from_messages([("user", "{question}")])
SCHEMA = {"title": "Answer", "type": "object", "properties": {"answer": {"type": "string"}}}


def readme_openai(base_url: str, **kw: Any) -> ChatOpenAI:
    # The README's primary, its OpenRouter URL swapped for a local one.
    return ChatOpenAI(
        base_url=base_url, model="anthropic/claude-sonnet-5",
        api_key=SecretStr("test-key"), max_retries=0, **kw,
    )  # fmt: skip


def readme_anthropic(base_url: str, **kw: Any) -> ChatAnthropic:
    # The README's fallback; its key, as there, from $ANTHROPIC_API_KEY (set by the fixture).
    return ChatAnthropic(model="claude-sonnet-5", base_url=base_url, max_retries=0, **kw)  # type: ignore[call-arg]


@pytest.fixture
def hung_url() -> Iterator[str]:
    """A server on 127.0.0.1 that takes every connection (the kernel completes the handshake
    for the listen backlog) and never answers."""
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    try:
        yield f"http://127.0.0.1:{server.getsockname()[1]}/v1"
    finally:
        server.close()


@pytest.fixture
def readme_routes(fake: FakeProvider, monkeypatch: pytest.MonkeyPatch) -> Callable[..., Any]:
    """``readme_routes(primary_url=None, **kw)``: the README's two route models (``kw``, e.g.
    ``timeout=``, on both); the fallback answers from the fake provider."""
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")

    def routes(primary_url: str | None = None, **kw: Any) -> dict[str, Any]:
        return {
            PRIMARY: readme_openai(primary_url or f"{fake.url('primary')}/v1", **kw),
            FALLBACK: readme_anthropic(fake.url("fallback"), **kw),
        }

    return routes


def readme_model(routes: dict[str, Any], config: FallbackConfig | None) -> FailoverChatModel:
    return FailoverChatModel(routes=routes, primary=PRIMARY, config=config, health=MemoryHealth())


def chain(routes: dict[str, Any], config: FallbackConfig | None) -> Any:
    runnables = {route: PROMPT | model for route, model in routes.items()}
    return with_failover(runnables, PRIMARY, config, MemoryHealth())


def limit_warnings(build: Callable[[], Any]) -> tuple[Any, list[warnings.WarningMessage]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        built = build()
    return built, [w for w in caught if issubclass(w.category, SwerveTimeoutWarning)]


# --- the warning ---------------------------------------------------------------------------------
def test_the_readme_config_without_a_limit_warns_once_naming_the_routes(
    readme_routes: Callable[..., Any],
) -> None:
    config = FallbackConfig(fallbacks=README_FALLBACKS)
    model, warned = limit_warnings(lambda: readme_model(readme_routes(), config))
    assert len(warned) == 1
    message = str(warned[0].message)
    assert f"{PRIMARY} (ChatOpenAI), {FALLBACK} (ChatAnthropic)" in message
    assert "no time limit (attempt_timeout_s, deadline_s)" in message
    assert "never give up" in message  # what a hang costs
    assert 'Set attempt_timeout_s in the FallbackConfig (docs/langchain.md, "Limits")' in message
    assert warned[0].filename == __file__  # it points at the caller's construction

    # Once per wrapper: the copies share its engine and say nothing again.
    _, again = limit_warnings(
        lambda: (
            model.bind_tools([]),
            model.with_primary(FALLBACK),
            model.with_structured_output(SCHEMA, method="json_schema"),
        )
    )
    assert again == []


def test_with_failover_without_a_limit_warns_once_naming_the_routes(
    readme_routes: Callable[..., Any],
) -> None:
    config = FallbackConfig(fallbacks=README_FALLBACKS)
    _, warned = limit_warnings(lambda: chain(readme_routes(), config))
    assert len(warned) == 1
    # A runnable has no timeout swerve can read, whatever models it holds.
    message = str(warned[0].message)
    assert f"{PRIMARY} (RunnableSequence), {FALLBACK} (RunnableSequence)" in message
    assert "attempt_timeout_s" in message
    assert warned[0].filename == __file__


def test_only_the_routes_without_a_timeout_are_named(
    fake: FakeProvider, readme_routes: Callable[..., Any]
) -> None:
    routes = readme_routes()
    routes[FALLBACK] = readme_anthropic(fake.url("fallback"), timeout=30)
    routes["custom/fake-model"] = raw_chat(fake, "fallback")  # a model swerve cannot read
    routes["openrouter/anthropic/claude-fake"] = chat_openrouter(fake, "fallback")
    config = FallbackConfig(fallbacks=README_FALLBACKS)
    _, warned = limit_warnings(lambda: readme_model(routes, config))
    assert len(warned) == 1
    message = str(warned[0].message)
    assert (
        f"own: {PRIMARY} (ChatOpenAI), custom/fake-model (RawHttpChat), "
        "openrouter/anthropic/claude-fake (ChatOpenRouter)."
    ) in message


NO_WARNING: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    # name: (the config's arguments, the route models' own arguments)
    "attempt_timeout_s": ({"attempt_timeout_s": 60}, {}),
    "deadline_s": ({"deadline_s": 120}, {}),
    "every_model_has_a_timeout": ({}, {"timeout": 30}),
    # max_swaps=0: calls pass straight through, swerve adds nothing (a limit included).
    "pass_through": ({"max_swaps": 0}, {}),
}


@pytest.mark.parametrize("wrapper", ["chat_model", "with_failover"])
@pytest.mark.parametrize("case", list(NO_WARNING))
def test_no_warning_with_a_limit_or_a_timeout_on_every_route(
    case: str, wrapper: str, readme_routes: Callable[..., Any]
) -> None:
    config_kw, model_kw = NO_WARNING[case]
    config = FallbackConfig(fallbacks=README_FALLBACKS, **config_kw)
    routes = readme_routes(**model_kw)
    if wrapper == "chat_model":
        _, warned = limit_warnings(lambda: readme_model(routes, config))
    else:  # the models themselves as the runnables: their timeouts are read
        _, warned = limit_warnings(lambda: with_failover(routes, PRIMARY, config, MemoryHealth()))
    assert warned == []


def test_a_timeout_bound_on_the_route_counts(
    fake: FakeProvider, readme_routes: Callable[..., Any]
) -> None:
    routes = {route: model.bind(timeout=30) for route, model in readme_routes().items()}
    routes["openrouter/anthropic/claude-fake"] = chat_openrouter(fake, "fallback", timeout=30_000)
    config = FallbackConfig(fallbacks=README_FALLBACKS)
    _, warned = limit_warnings(lambda: readme_model(routes, config))
    assert warned == []


def test_no_warning_when_the_config_comes_from_the_environment(
    readme_routes: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    # config=None is read from $SWERVE_FALLBACK_CONFIG per call: nothing to judge yet.
    monkeypatch.delenv("SWERVE_FALLBACK_CONFIG", raising=False)
    _, warned = limit_warnings(lambda: readme_model(readme_routes(), None))
    assert warned == []
    _, warned = limit_warnings(lambda: chain(readme_routes(), None))
    assert warned == []


def test_the_readme_models_have_no_timeout_of_their_own(readme_routes: Callable[..., Any]) -> None:
    # What the warning says a hang costs: LangChain hands the SDKs timeout=None, which turns
    # their 600 s default off (the request waits for as long as the connection is open).
    routes = readme_routes()
    assert routes[PRIMARY].root_client.timeout is None
    assert routes[FALLBACK]._client.timeout is None


# --- the README's example, with its limit ------------------------------------------------------
@pytest.mark.parametrize("mode", ["invoke", "stream"])
def test_the_readme_example_ends_a_sync_call_on_a_hung_primary_within_its_limit(
    mode: str, fake: FakeProvider, hung_url: str, readme_routes: Callable[..., Any],
    make_failover: Callable[..., Failover],
) -> None:  # fmt: skip
    config = FallbackConfig(fallbacks=README_FALLBACKS, attempt_timeout_s=LIMIT)
    routes = readme_routes(primary_url=hung_url)
    # Built as the README builds it: config= warns of nothing.
    _, warned = limit_warnings(lambda: readme_model(routes, config))
    assert warned == []
    # The same config on the suite's injected clock and in-memory store.
    model = FailoverChatModel(routes=routes, primary=PRIMARY, failover=make_failover(config))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        started = time.monotonic()
        if mode == "invoke":
            message = model.invoke("Hello")
        else:
            chunks = list(model.stream("Hello"))
            message = chunks[0]
            for chunk in chunks[1:]:
                message += chunk
        took = time.monotonic() - started
    assert took < LIMIT + MARGIN
    assert message.text == "from fallback"
    assert message.response_metadata["swerve"]["served"] == FALLBACK
    assert message.response_metadata["swerve"]["swaps"] == 1
    assert fake.requests("fallback") == 1
    # The openai SDK's own timeout (swerve's limit, handed to it) ended the hung request: no
    # thread was abandoned.
    assert [w for w in caught if issubclass(w.category, SwerveTimeoutWarning)] == []
