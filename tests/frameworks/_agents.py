"""What the framework tests share: two routes on the fake provider, the three ways the primary
fails, the model's two turns (a tool call, then the answer), and the transport over them."""

from __future__ import annotations

from dataclasses import dataclass, field

from swerve import Failover, FallbackConfig, MemoryHealth
from swerve.httpx import AsyncFailoverTransport, FailoverTransport, Upstream
from swerve.testing import FakeProvider, Fault, Reply, ToolCall

from .._drive import ANSWERING_LIMIT_S

MODEL = "gpt-fake"
PRIMARY, FALLBACK = f"primary/{MODEL}", f"fallback/{MODEL}"
ANSWER = "It is sunny in Oslo."
QUESTION = "What is the weather in Oslo?"
SWERVE_URL = "http://swerve.invalid/v1"  # where the clients send: the transport routes by model

# Short limits, for the hang only: a hung primary costs the test at most this much real time.
# They bound the fallback's attempts too (see ANSWERING_LIMIT_S), so the other faults go
# without: a loaded machine cannot time out a fallback that answers.
FIRST_TOKEN_S = ATTEMPT_S = ANSWERING_LIMIT_S
HANG_LIMITS = {"first_token_timeout_s": FIRST_TOKEN_S, "attempt_timeout_s": ATTEMPT_S}

# How the primary fails; the stream error is a non-stream request's 200 JSON error body.
FAULTS = {
    "503": Fault.status(503),
    "hang": Fault.hang(),
    "stream-error": Fault.error_before_content("openai"),
}


def config(fault: str) -> FallbackConfig:
    """For an outage by ``fault`` (a name in FAULTS). No retries: the primary gets exactly one
    request, and no backoff is waited."""
    hang = fault == "hang"
    return FallbackConfig(
        fallbacks={PRIMARY: FALLBACK},
        max_retries=0,
        attempt_timeout_s=ATTEMPT_S if hang else None,
        first_token_timeout_s=FIRST_TOKEN_S if hang else None,
    )


def failover(fault: str) -> Failover:
    return Failover(config(fault), health=MemoryHealth())


def provider(route: str) -> str:
    return route.split("/", 1)[0]


@dataclass
class Weather:
    """The agent's one tool; counts its runs (never twice across a swap)."""

    calls: list[str] = field(default_factory=list)

    def __call__(self, city: str) -> str:
        self.calls.append(city)
        return f"sunny in {city}"


def script_outage(fake: FakeProvider, fault: str, final: Reply | None = None) -> None:
    """The primary fails once; the fallback calls the tool, then answers."""
    fake.script("primary", [FAULTS[fault]])
    fake.set_fault("primary", Fault.status(500))  # a second request would show in the counts
    fake.script(
        "fallback",
        [
            Reply(text="", tool_calls=[ToolCall("get_weather", {"city": "Oslo"})]),
            final if final is not None else Reply(text=ANSWER),
        ],
    )


def assert_served_by_fallback(fake: FakeProvider, weather: Weather) -> None:
    # The primary is cooled down by its failure: the tool turn's follow-up skips it.
    assert weather.calls == ["Oslo"]
    assert fake.requests("primary") == 1
    assert fake.requests("fallback") == 2
    assert fake.remaining("fallback") == 0
    assert [body["model"] for body in fake.received("fallback")] == [MODEL, MODEL]
    # The answer turn carries the tool's result.
    last = fake.received("fallback")[1]["messages"][-1]
    assert last["role"] == "tool" and last["content"] == "sunny in Oslo", last


def upstreams(fake: FakeProvider) -> dict[str, Upstream]:
    return {
        route: Upstream(f"{fake.url(provider(route))}/v1", api_key="sk-test", model=MODEL)
        for route in (PRIMARY, FALLBACK)
    }


def transport(fake: FakeProvider, fault: str) -> FailoverTransport:
    return FailoverTransport(upstreams(fake), failover=failover(fault))


def async_transport(fake: FakeProvider, fault: str) -> AsyncFailoverTransport:
    return AsyncFailoverTransport(upstreams(fake), failover=failover(fault))
