"""What a failure means, through the failover transport under the real openai SDK (over httpx2),
sync and async from one body (the ``mode`` fixture, tests/_drive.py): a hang costs one timeout,
an overflow follows its own map, a content filter is retried nowhere, and the end of a cooldown
lets exactly one request through."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx2
import openai
import pytest

from swerve import Failover, FallbackConfig
from swerve.httpx import FailoverTransport, Upstream
from swerve.testing import FakeClock, FakeProvider, Fault

from ._drive import MESSAGES, Mode, OpenAI
from .conftest import Otel

OR, BK, BIG = "openrouter/anthropic/claude-sonnet-5", "backup/claude-sonnet-5", "openrouter/big"
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


FAKE_PROVIDERS = ("openrouter", "backup", "big")  # the ``fake`` fixture answers "from <name>"


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


def texts(sdk: OpenAI, n: int = 1, *, stream: bool = False, model: str = OR) -> list[str]:
    """``n`` completions at once; each answer's text (the fake says who answered)."""
    if stream:
        answers = sdk.create_many(n, model=model, messages=MESSAGES, stream=True)
        return ["".join(c.choices[0].delta.content or "" for c in a if c.choices) for a in answers]
    answers = sdk.create_many(n, model=model, messages=MESSAGES)
    return [done.choices[0].message.content or "" for done in answers]


@pytest.fixture
def sdk(mode: Mode, fake: FakeProvider) -> Callable[[Failover], OpenAI]:
    """The openai SDK over httpx2 over the failover transport, sync (threads) or async
    (tasks), for a given Failover."""

    def make(failover: Failover) -> OpenAI:
        http = mode.client(upstreams(fake), failover=failover, module=httpx2)
        return mode.openai(http, api_key="unused")

    return make


@pytest.mark.parametrize("stream", [False, True])
def test_a_hang_costs_one_timeout(
    sdk: Any, make_failover: Any, fake: FakeProvider, otel: Otel, stream: bool
) -> None:
    client = sdk(make_failover(config(attempt_timeout_s=1)))
    fake.set_fault("openrouter", Fault.hang())
    assert texts(client, stream=stream) == ["from backup"]
    assert fake.requests("openrouter") == 1
    assert [e["swerve.reason"] for _, e in otel.events("swerve.swap")] == ["timeout"]


@pytest.mark.parametrize("stream", [False, True])
def test_an_overflow_goes_to_the_larger_model_without_cooling_the_route(
    sdk: Any, make_failover: Any, fake: FakeProvider, clock: FakeClock, otel: Otel, stream: bool
) -> None:
    failover = make_failover(config(fallbacks_by_failure={"context_overflow": {OR: BIG}}))
    client = sdk(failover)
    fake.script("openrouter", [Fault.context_overflow()])
    assert texts(client, stream=stream) == ["from big"]
    assert fake.received("big")[0]["model"] == "big-model"
    assert fake.requests("backup") == 0
    assert [e["swerve.reason"] for _, e in otel.events("swerve.swap")] == ["context_overflow"]
    assert OR not in failover.health.unavailable(clock.now)
    assert texts(client, stream=stream) == ["from openrouter"]


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
        texts(client)
    assert info.value.code == "content_filter"
    assert (fake.requests("openrouter"), fake.requests("backup")) == (1, 0)


def test_the_end_of_a_cooldown_lets_one_request_through(
    sdk: Any, make_failover: Any, fake: FakeProvider, clock: FakeClock, otel: Otel
) -> None:
    client = sdk(make_failover(config(cooldown_s=10, cooldown_max_s=40)))
    fake.set_fault("openrouter", Fault.status(503))
    assert texts(client) == ["from backup"]
    fake.reset_counts()
    clock.advance(10)
    assert texts(client, 50) == ["from backup"] * 50
    assert fake.requests("openrouter") == 1  # one probe, not retried
    fake.set_fault("openrouter", Fault.ok())
    clock.advance(20)  # the failed probe doubled the cooldown
    assert texts(client) + texts(client, 5) == ["from openrouter"] * 6
    outcomes = [e["swerve.probe.outcome"] for _, e in otel.events("swerve.probe")]
    assert outcomes == ["failure", "success"]
