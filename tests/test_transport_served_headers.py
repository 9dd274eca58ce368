"""Who answered, on the transport's responses; which of swerve's limits ran out, sync as async;
and the failure note without a tracer.

Every test runs over ``FailoverTransport`` and ``AsyncFailoverTransport`` (the ``mode``
fixture, tests/_drive.py), with real httpx / httpx2 clients and the real openai and anthropic
SDKs against the fake provider.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import httpx2
import pytest
from opentelemetry import metrics, trace

from swerve import Failover, FallbackConfig, MemoryHealth, Telemetry
from swerve.httpx import ATTEMPTS_HEADER, REQUESTED_HEADER, ROUTE_HEADER, Upstream
from swerve.testing import FakeProvider, Fault, Reply

from ._drive import AB, AN, BK, MESSAGES, OR, SWERVE, Client, Mode
from ._drive import TRANSPORT_CONFIG as CONFIG
from .conftest import FakeClock

CHAT = f"{SWERVE}/v1/chat/completions"


# The ``fake`` fixture (tests/conftest.py) serves these, each answering "from <name>".
FAKE_PROVIDERS = ("openrouter", "backup", "anthropic", "anthropic-backup")


def upstreams(fake: FakeProvider) -> dict[str, Upstream]:
    return {
        OR: Upstream(f"{fake.url('openrouter')}/v1", api_key="sk-or-0123456789"),
        BK: Upstream(f"{fake.url('backup')}/v1", api_key="sk-bk-0123456789"),
        AN: Upstream(fake.url("anthropic"), wire="anthropic", api_key="sk-an-0123456789"),
        AB: Upstream(fake.url("anthropic-backup"), wire="anthropic", api_key="sk-ab-0123456789"),
    }


def swerve_headers(headers: Any) -> dict[str, str]:
    return {k.lower(): v for k, v in headers.items() if k.lower().startswith("x-swerve-")}


def served(route: str, attempts: int, requested: str | None = None) -> dict[str, str]:
    out = {ROUTE_HEADER: route, ATTEMPTS_HEADER: str(attempts)}
    if requested is not None:
        out[REQUESTED_HEADER] = requested
    return out


def post(client: Client, stream: bool, route: str = OR) -> tuple[int, dict[str, str], str]:
    """Status, swerve's headers and the text of one chat call (streamed or not)."""
    body = {"model": route, "messages": MESSAGES, "stream": stream}
    if not stream:
        r = client.post(CHAT, json=body)
        text = r.json()["choices"][0]["message"]["content"] if r.status_code == 200 else r.text
        return r.status_code, swerve_headers(r.headers), text
    with client.stream("POST", CHAT, json=body) as r:
        parts = []
        for line in r.iter_lines():
            if line.startswith("data:") and "[DONE]" not in line:
                for choice in json.loads(line[5:]).get("choices", []):
                    parts.append(choice["delta"].get("content") or "")
        return r.status_code, swerve_headers(r.headers), "".join(parts)


# --- plain clients ------------------------------------------------------------------------------
@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_every_response_names_the_route_that_answered_and_the_attempts(
    mode: Mode, module: Any, fake: FakeProvider, failover: Failover, stream: bool
) -> None:
    with mode.client(upstreams(fake), failover=failover, module=module) as c:
        assert post(c, stream) == (200, served(OR, 1), "from openrouter")
        fake.script("openrouter", [Fault.status(503)] * 2)
        assert post(c, stream) == (200, served(BK, 3, requested=OR), "from backup")
        # openrouter is cooling: the next call starts on the backup, in one attempt.
        assert post(c, stream) == (200, served(BK, 1, requested=OR), "from backup")


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_a_response_swerve_gave_up_on_names_its_route_and_the_attempts(
    mode: Mode, module: Any, fake: FakeProvider, failover: Failover, stream: bool
) -> None:
    fake.set_fault("openrouter", Fault.status(503))
    fake.set_fault("backup", Fault.status(500))
    with mode.client(upstreams(fake), failover=failover, module=module) as c:
        status, headers, _ = post(c, stream)
    assert (status, headers) == (500, served(BK, 4, requested=OR))


def test_an_in_stream_error_swerve_gave_up_on_names_its_route_too(
    mode: Mode, module: Any, fake: FakeProvider, failover: Failover
) -> None:
    fake.set_fault("openrouter", Fault.error_before_content("openrouter", 503))
    fake.set_fault("backup", Fault.error_before_content("openrouter", 503))
    with mode.client(upstreams(fake), failover=failover, module=module) as c:
        status, headers, _ = post(c, stream=True)
    assert (status, headers) == (200, served(BK, 4, requested=OR))


def test_pinned_and_unswerved_requests_name_their_one_attempt(
    mode: Mode, fake: FakeProvider, failover: Failover
) -> None:
    body = {"model": OR, "messages": MESSAGES}
    with mode.client(upstreams(fake), failover=failover) as c:
        r = c.post(CHAT, json=body, headers={"x-swerve-failover": "off"})
        assert swerve_headers(r.headers) == served(OR, 1)
        r = c.post(CHAT, json=body, headers={ROUTE_HEADER: BK})  # pinned: the header echoes it
        assert swerve_headers(r.headers) == served(BK, 1)
        # A request that is not swerve's is passed through untouched: no headers added.
        r = c.post(f"{fake.url('openrouter')}/v1/other", json={"model": "not-a-route"})
        assert swerve_headers(r.headers) == {}


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_an_upstream_cannot_forge_swerves_headers(
    mode: Mode, fake: FakeProvider, make_failover: Any, stream: bool
) -> None:
    forged = {ROUTE_HEADER: "evil/route", ATTEMPTS_HEADER: "99", "x-swerve-other": "1"}

    def upstream(request: httpx.Request) -> httpx.Response:
        if b'"stream": true' in request.content:
            events = (
                b'data: {"choices": [{"index": 0, "delta": {"content": "hi"}}]}\n\n'
                b'data: {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}\n\n'
                b"data: [DONE]\n\n"
            )
            headers = {"content-type": "text/event-stream", **forged}
            return httpx.Response(200, headers=headers, content=events)
        body = {"choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}}]}
        return httpx.Response(200, headers=forged, json=body)

    ups = {OR: Upstream("http://upstream.invalid/v1", transport=httpx.MockTransport(upstream))}
    fo = make_failover(FallbackConfig(max_retries=0))
    with mode.client(ups, failover=fo) as c:
        status, headers, text = post(c, stream)
    assert (status, headers, text) == (200, served(OR, 1), "hi")


# --- the SDKs' raw-response APIs ----------------------------------------------------------------
def test_openai_sdk_reads_them_from_the_raw_response(
    mode: Mode, fake: FakeProvider, failover: Failover
) -> None:
    sdk = mode.openai(mode.client(upstreams(fake), failover=failover, module=httpx2)).sdk
    fake.script("openrouter", [Fault.status(503)] * 2)
    create = sdk.chat.completions.with_raw_response.create

    def call(**kwargs: Any) -> tuple[dict[str, str], str]:
        async def acall() -> tuple[dict[str, str], str]:
            raw = await create(model=OR, messages=MESSAGES, **kwargs)
            parsed = raw.parse()  # openai's async raw response parses without awaiting
            if kwargs.get("stream"):
                text = "".join(
                    [c.choices[0].delta.content or "" async for c in parsed if c.choices]
                )
            else:
                text = parsed.choices[0].message.content
            return swerve_headers(raw.headers), text

        if not mode.sync:
            return mode.run(acall())  # type: ignore[no-any-return]
        raw = create(model=OR, messages=MESSAGES, **kwargs)
        parsed = raw.parse()
        if kwargs.get("stream"):
            text = "".join(c.choices[0].delta.content or "" for c in parsed if c.choices)
        else:
            text = parsed.choices[0].message.content
        return swerve_headers(raw.headers), text

    assert call() == (served(BK, 3, requested=OR), "from backup")
    assert call(stream=True) == (served(BK, 1, requested=OR), "from backup")
    failover.health.clear()
    assert call(stream=True) == (served(OR, 1), "from openrouter")


def test_anthropic_sdk_reads_them_from_the_raw_response(
    mode: Mode, fake: FakeProvider, failover: Failover
) -> None:
    sdk = mode.anthropic(mode.client(upstreams(fake), failover=failover, module=httpx2)).sdk
    fake.set_fault("anthropic", Fault.status(529))
    create = sdk.messages.with_raw_response.create
    kwargs: dict[str, Any] = {"model": AN, "max_tokens": 64, "messages": MESSAGES}

    def call(stream: bool) -> tuple[dict[str, str], str]:
        async def acall() -> tuple[dict[str, str], str]:
            raw = await create(**kwargs, stream=stream)
            parsed = await raw.parse()
            if stream:
                events = [e async for e in parsed]
                text = "".join(e.delta.text for e in events if e.type == "content_block_delta")
            else:
                text = parsed.content[0].text
            return swerve_headers(raw.headers), text

        if not mode.sync:
            return mode.run(acall())  # type: ignore[no-any-return]
        raw = create(**kwargs, stream=stream)
        parsed = raw.parse()
        if stream:
            events = list(parsed)
            text = "".join(e.delta.text for e in events if e.type == "content_block_delta")
        else:
            text = parsed.content[0].text
        return swerve_headers(raw.headers), text

    assert call(stream=False) == (served(AB, 3, requested=AN), "from anthropic-backup")
    failover.health.clear()
    fake.set_fault("anthropic", Fault.error_before_content("anthropic"))
    assert call(stream=True) == (served(AB, 3, requested=AN), "from anthropic-backup")


# --- which of swerve's limits ran out, sync as async --------------------------------------------
@pytest.mark.parametrize(
    ("limit", "stream", "words"),
    [
        ({"deadline_s": 0.3}, False, "deadline"),
        ({"attempt_timeout_s": 0.2}, False, "attempt"),
        ({"attempt_timeout_s": 0.2}, True, "attempt"),
        ({"first_token_timeout_s": 0.2}, True, "first token"),
        ({"stall_timeout_s": 0.2}, False, "stall"),
    ],
)
def test_the_client_learns_which_limit_ran_out(
    mode: Mode, module: Any, fake: FakeProvider, make_failover: Any,
    limit: dict[str, float], stream: bool, words: str,
) -> None:  # fmt: skip
    fake.set_fault("openrouter", Fault.hang())
    fake.set_fault("backup", Fault.hang())
    fo = make_failover(CONFIG.model_copy(update={"max_retries": 0, **limit}), health=MemoryHealth())
    with (
        mode.client(upstreams(fake), failover=fo, module=module) as c,
        pytest.raises(module.ReadTimeout) as info,
    ):
        post(c, stream)
    assert str(info.value).startswith(f"swerve: the {words} time limit ran out ("), info.value
    assert any("attempts:" in note for note in info.value.__notes__)


def test_a_stall_after_content_names_the_stall_limit(
    mode: Mode, fake: FakeProvider, make_failover: Any
) -> None:
    fake.set_reply("openrouter", Reply(text="one two three four"))
    fake.set_fault("openrouter", Fault.slow(per_chunk_s=1.0))
    fo = make_failover(CONFIG.model_copy(update={"stall_timeout_s": 0.2}), health=MemoryHealth())
    with (
        mode.client(upstreams(fake), failover=fo) as c,
        pytest.raises(httpx.ReadTimeout, match=r"^swerve: the stall time limit ran out"),
    ):
        post(c, stream=True)


def test_the_clients_own_shorter_timeout_stays_its_own(
    mode: Mode, fake: FakeProvider, make_failover: Any
) -> None:
    fake.set_fault("openrouter", Fault.hang())
    fake.set_fault("backup", Fault.hang())
    fo = make_failover(CONFIG.model_copy(update={"max_retries": 0, "deadline_s": 30}))
    transport = mode.transport(upstreams(fake), failover=fo)
    raw_cls = httpx.Client if mode.sync else httpx.AsyncClient
    with (
        Client(mode, raw_cls(transport=transport, timeout=0.2), httpx) as c,
        pytest.raises(httpx.ReadTimeout) as info,
    ):
        post(c, stream=False)
    assert not str(info.value).startswith("swerve:")  # httpx's own limit, not one of swerve's


def test_a_first_token_limit_does_not_bound_a_whole_json_answer(
    mode: Mode, fake: FakeProvider, make_failover: Any
) -> None:
    # The first-token limit is a stream's: a non-stream answer that takes longer is no timeout.
    fake.set_fault("openrouter", Fault.slow(first_token_s=2.0))
    fo = make_failover(CONFIG.model_copy(update={"first_token_timeout_s": 1.0}))
    with mode.client(upstreams(fake), failover=fo) as c:
        assert post(c, stream=False) == (200, served(OR, 1), "from openrouter")
        # A stream is held to it: it swaps past the slow first token.
        assert post(c, stream=True) == (200, served(BK, 2, requested=OR), "from backup")


# --- the note reaches the client without a tracer -----------------------------------------------
def test_the_failure_note_reaches_the_client_without_a_tracer(
    mode: Mode, fake: FakeProvider, clock: FakeClock
) -> None:
    untraced = Telemetry(trace.NoOpTracerProvider(), metrics.NoOpMeterProvider())
    fake.set_fault("openrouter", Fault.hang())
    fake.set_fault("backup", Fault.hang())
    config = CONFIG.model_copy(update={"max_retries": 0, "attempt_timeout_s": 0.2})
    fo = Failover(config, health=MemoryHealth(), telemetry=untraced)
    with mode.client(upstreams(fake), failover=fo) as c, pytest.raises(httpx.ReadTimeout) as info:
        post(c, stream=False)
    assert info.value.__notes__ == [f"swerve: requested {OR}; attempts: {OR}#1, {BK}#2"]
    # A response swerve gave up on carries what the note would say in its headers.
    fake.set_fault("openrouter", Fault.status(503))
    fake.set_fault("backup", Fault.status(503))
    fo = Failover(CONFIG, health=MemoryHealth(), telemetry=untraced, clock=clock)
    with mode.client(upstreams(fake), failover=fo) as c:
        assert post(c, stream=False)[:2] == (503, served(BK, 4, requested=OR))
