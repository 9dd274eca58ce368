"""The failover transport under real httpx / httpx2 clients and the real openai and anthropic
SDKs, against the fake provider: every fault, both wires, stream and not.

Every behaviour is written once and runs twice: over ``FailoverTransport`` (``httpx.Client``,
``openai.OpenAI``, ``anthropic.Anthropic``) and over ``AsyncFailoverTransport`` (their async
twins), through the ``mode`` fixture's driver (tests/_drive.py)."""

from __future__ import annotations

import json
import logging
from typing import Any

import anthropic
import httpx
import httpx2
import openai
import pytest

from swerve import Failover, FallbackConfig, MemoryHealth
from swerve.httpx import FailoverTransport, ResponseTooLarge, Upstream
from swerve.testing import FakeProvider, Fault, Reply

from ._drive import AB, AN, BK, MESSAGES, OR, Client, Mode
from ._drive import TRANSPORT_CONFIG as CONFIG
from .conftest import FakeClock, Otel

SECRETS = ("sk-or-v1-0123456789abcdefSECRET", "sk-ant-api03-BACKUPSECRETabcdef0123")


# The ``fake`` fixture (tests/conftest.py) serves these, each answering "from <name>".
FAKE_PROVIDERS = ("openrouter", "backup", "anthropic", "anthropic-backup")


def upstreams(fake: FakeProvider) -> dict[str, Upstream]:
    return {
        OR: Upstream(f"{fake.url('openrouter')}/v1", api_key=SECRETS[0]),
        BK: Upstream(f"{fake.url('backup')}/v1", api_key=SECRETS[1], model="claude-sonnet-5-b"),
        AN: Upstream(fake.url("anthropic"), wire="anthropic", api_key=SECRETS[0]),
        AB: Upstream(fake.url("anthropic-backup"), wire="anthropic", api_key=SECRETS[1]),
    }


@pytest.fixture
def client(mode: Mode, fake: FakeProvider, failover: Failover, module: Any) -> Client:
    """A plain client of either flavour (``module``), sync or async, over the failover
    transport."""
    return mode.client(upstreams(fake), failover=failover, module=module)


def openai_json(client: Client, route: str = OR, **extra: Any) -> Any:
    body = {"model": route, "messages": MESSAGES, **extra}
    return client.post("http://swerve.invalid/v1/chat/completions", json=body)


def openai_stream_text(client: Client, route: str = OR) -> str:
    body = {"model": route, "messages": MESSAGES, "stream": True}
    out = []
    with client.stream("POST", "http://swerve.invalid/v1/chat/completions", json=body) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            if line.startswith("data:") and "[DONE]" not in line:
                chunk = json.loads(line[5:])
                assert "error" not in chunk, chunk
                for choice in chunk["choices"]:
                    out.append(choice["delta"].get("content") or "")
    return "".join(out)


# --- plain clients, OpenAI wire ---------------------------------------------------------------
def test_json_call_swaps_and_rewrites_url_auth_and_model(
    client: Client, fake: FakeProvider
) -> None:
    fake.set_fault("openrouter", Fault.status(503))
    r = openai_json(client)
    assert r.status_code == 200
    assert r.json()["choices"][0]["message"]["content"] == "from backup"
    assert fake.requests("openrouter") == 2 and fake.requests("backup") == 1
    sent = fake.received("backup")[-1]
    assert sent["model"] == "claude-sonnet-5-b"  # the model's name on that upstream
    headers = fake.received_headers("backup")[-1]
    assert headers["authorization"] == f"Bearer {SECRETS[1]}"
    assert "x-swerve-route" not in headers
    assert fake.received_headers("openrouter")[-1]["authorization"] == f"Bearer {SECRETS[0]}"


@pytest.mark.parametrize(
    "fault",
    [
        Fault.status(503),
        Fault.status(429, retry_after=1),
        Fault.status(502, body="<html><body>Bad gateway</body></html>"),
        Fault.reset(),
        Fault.error_before_content("openrouter", 503),
        Fault.error_before_content("openai", 500),
        Fault.drop_after(0),
    ],
    ids=lambda f: f.kind + (f"-{f.style}" if "error" in f.kind else ""),
)
def test_stream_failures_before_content_are_invisible(
    client: Client, fake: FakeProvider, fault: Fault
) -> None:
    fake.set_fault("openrouter", fault)
    assert openai_stream_text(client) == "from backup"


@pytest.mark.parametrize("style", ["openrouter", "openai"])
def test_error_event_after_content_reaches_the_client_as_it_was(
    client: Client, fake: FakeProvider, failover: Failover, clock: FakeClock, style: str
) -> None:
    fake.set_reply("openrouter", Reply(text="one two three"))
    fake.set_fault("openrouter", Fault.error_after(1, style, 503))  # type: ignore[arg-type]
    body = {"model": OR, "messages": MESSAGES, "stream": True}
    events = []
    with client.stream("POST", "http://swerve.invalid/v1/chat/completions", json=body) as r:
        for line in r.iter_lines():
            if line.startswith("data:"):
                events.append(json.loads(line[5:]))
    assert "error" in events[-1]  # the SDK sees the provider's own error chunk
    assert OR in failover.health.unavailable(clock.now)
    assert fake.requests("backup") == 0


@pytest.mark.parametrize(
    "fault", [Fault.drop_after(2), Fault.reset_after(2)], ids=["drop", "reset"]
)
def test_drop_after_content_is_an_error_never_a_truncation(
    client: Client, fake: FakeProvider, failover: Failover, clock: FakeClock, fault: Fault
) -> None:
    fake.set_reply("openrouter", Reply(text="one two three four"))
    fake.set_fault("openrouter", fault)
    with pytest.raises(client.module.TransportError):
        openai_stream_text(client)
    assert OR in failover.health.unavailable(clock.now)


def test_no_finish_after_content_raises_a_protocol_error(
    client: Client, fake: FakeProvider, make_failover: Any
) -> None:
    # Only route: nowhere to go, and the content has started.
    fo = make_failover(FallbackConfig(max_retries=0))
    module = client.module
    fake.set_fault("openrouter", Fault.no_finish())
    with client.mode.client(upstreams(fake), failover=fo, module=module) as c:
        r = openai_json(c)  # JSON: the body is complete, only finish_reason is null
        assert r.status_code == 200
        with pytest.raises(module.RemoteProtocolError, match="ended without its finish event"):
            openai_stream_text(c)


def test_final_error_response_is_the_upstreams_own(client: Client, fake: FakeProvider) -> None:
    fake.set_fault("openrouter", Fault.status(503))
    fake.set_fault("backup", Fault.status(500))
    r = openai_json(client)
    assert r.status_code == 500
    assert r.json()["error"]["code"] in (500, "500", "server_error") or "error" in r.json()
    fake.set_fault("openrouter", Fault.context_overflow())
    r = openai_json(client)
    assert r.status_code == 400 and "maximum context length" in r.text
    assert fake.requests("backup") == 2  # the overflow never swapped


def test_hang_times_out_and_swaps(mode: Mode, fake: FakeProvider, make_failover: Any) -> None:
    # The limit ends the hang, and the healthy backup must answer within it too: 2 s leaves a
    # loaded CI machine room (at 0.5 s the backup's own answer once ran out of time).
    fo = make_failover(CONFIG.model_copy(update={"attempt_timeout_s": 2.0, "max_retries": 0}))
    fake.set_fault("openrouter", Fault.hang())
    with mode.client(upstreams(fake), failover=fo) as c:
        assert openai_stream_text(c) == "from backup"
        assert openai_json(c).status_code == 200


def test_slow_stream_still_succeeds(client: Client, fake: FakeProvider) -> None:
    fake.set_fault("openrouter", Fault.slow(first_token_s=0.05, per_chunk_s=0.01))
    assert openai_stream_text(client) == "from openrouter"


# --- overrides --------------------------------------------------------------------------------
def test_per_request_off_and_pin(client: Client, fake: FakeProvider) -> None:
    fake.set_fault("openrouter", Fault.status(503))
    body = {"model": OR, "messages": MESSAGES}
    url = "http://swerve.invalid/v1/chat/completions"
    r = client.post(url, json=body, headers={"x-swerve-failover": "off"})
    assert r.status_code == 503 and fake.requests("openrouter") == 1
    assert "x-swerve-failover" not in fake.received_headers("openrouter")[-1]
    r = client.post(url, json=body, headers={"x-swerve-route": OR})
    assert r.status_code == 503
    assert fake.requests("openrouter") == 3 and fake.requests("backup") == 0  # retried, no swap
    r = client.post(url, json=body, extensions={"swerve": {"failover": False}})
    assert r.status_code == 503 and fake.requests("openrouter") == 4


def test_requests_that_are_not_routes_pass_through(client: Client, fake: FakeProvider) -> None:
    r = client.get(f"{fake.url('openrouter')}/v1/models")
    assert r.status_code == 200
    r = client.post(
        f"{fake.url('backup')}/v1/chat/completions", json={"model": "other", "messages": MESSAGES}
    )
    assert r.status_code == 200 and fake.requests("backup") == 1


# --- construction -------------------------------------------------------------------------------
def test_cross_wire_swap_is_refused_when_built(fake: FakeProvider) -> None:
    config = FallbackConfig(fallbacks={OR: AN})
    with pytest.raises(
        ValueError, match=rf"{OR} \(openai wire\) falls back to {AN} \(anthropic wire\)"
    ):
        FailoverTransport(upstreams(fake), config)
    with pytest.raises(ValueError, match="has no Upstream"):
        FailoverTransport(upstreams(fake), FallbackConfig(fallbacks={OR: "nowhere/model"}))
    with pytest.raises(ValueError, match="'gpt' is not 'provider/model'"):
        FailoverTransport({"gpt": Upstream("http://127.0.0.1:1/v1")}, config)
    with pytest.raises(ValueError, match="wire must be"):
        Upstream("http://127.0.0.1:1/v1", wire="grpc")  # type: ignore[arg-type]
    assert SECRETS[0] not in repr(upstreams(fake)[OR])


def test_one_store_refuses_two_upstreams_under_one_route_name(
    mode: Mode, fake: FakeProvider, health: MemoryHealth
) -> None:
    """Cooldowns are keyed by route name: two live transports on one store must not send one
    name to two upstreams (another base URL, or another key), or each would cool the other."""
    ups = upstreams(fake)
    first = mode.transport(ups, config=CONFIG, health=health)
    elsewhere = {**ups, OR: Upstream("http://127.0.0.1:9/v1", api_key=SECRETS[0])}
    with pytest.raises(ValueError, match="another live transport") as info:
        mode.transport(elsewhere, config=CONFIG, health=health)
    message = str(info.value)
    assert f"route {OR} is served by http://127.0.0.1:9/v1 here" in message
    assert f"and by {ups[OR].base_url} in another live transport" in message
    assert "health=MemoryHealth()" in message
    other_key = {**ups, BK: Upstream(ups[BK].base_url, api_key="sk-another-key-0123456789")}
    with pytest.raises(ValueError, match=f"route {BK} is served by .* with another API key") as key:
        mode.transport(other_key, config=CONFIG, health=health)
    for text in (message, str(key.value)):  # a key is compared by a hash, never shown
        assert not any(s in text for s in (*SECRETS, "sk-another-key-0123456789"))
    # The same upstreams again, or other ones on another store, are fine.
    again = mode.transport(ups, config=CONFIG, health=health)
    mode.transport(elsewhere, config=CONFIG, health=MemoryHealth())
    # A closed transport serves nothing any more (close(), or aclose() for the async one).
    for transport in (first, again):
        with pytest.raises(ValueError, match="another live transport"):
            mode.transport(elsewhere, config=CONFIG, health=health)
        mode.run(transport.close() if mode.sync else transport.aclose())
    mode.transport(elsewhere, config=CONFIG, health=health)


def test_a_transport_nobody_holds_serves_nothing(mode: Mode, fake: FakeProvider) -> None:
    """Tests that build a transport per test, each on a new port, on one store: one that was
    dropped (unclosed, even in a reference cycle) does not refuse the next."""
    health = MemoryHealth()
    for port in (9, 10, 11):
        transport = mode.transport({OR: Upstream(f"http://127.0.0.1:{port}/v1")}, health=health)
        transport.cycle = transport  # only the garbage collector frees it
        del transport
    held = mode.transport({OR: Upstream(fake.url("openrouter"))}, health=health)
    with pytest.raises(ValueError, match="another live transport"):  # one still held refuses
        mode.transport({OR: Upstream("http://127.0.0.1:12/v1")}, health=health)
    assert held.failover.health is health


def test_a_refused_transport_claims_nothing(fake: FakeProvider, health: MemoryHealth) -> None:
    with pytest.raises(ValueError, match="falls back to"):
        FailoverTransport(upstreams(fake), FallbackConfig(fallbacks={OR: AN}), health=health)
    FailoverTransport({**upstreams(fake), OR: Upstream("http://127.0.0.1:9/v1")}, health=health)


# --- bad input ------------------------------------------------------------------------------------
def test_bad_input_gets_clear_errors(
    client: Client, fake: FakeProvider, make_failover: Any
) -> None:
    url = "http://swerve.invalid/v1/chat/completions"
    r = client.post(url, content=b"{not json", headers={"content-type": "application/json"})
    assert r.status_code == 400 and "not JSON" in r.json()["error"]["message"]
    r = client.post(
        url, json={"model": OR, "messages": MESSAGES}, headers={"x-swerve-route": "x/y"}
    )
    assert r.status_code == 400 and "'x/y' has no Upstream" in r.json()["error"]["message"]
    fo = make_failover(FallbackConfig(max_retries=0))
    fake.set_reply("openrouter", Reply(text="word " * 5000))
    ups = upstreams(fake)
    with client.mode.client(ups, failover=fo, max_body_bytes=4096, module=client.module) as c:
        with pytest.raises(ResponseTooLarge, match="upstream body exceeded 4096 bytes"):
            openai_json(c)
        assert openai_stream_text(c) == "word " * 5000  # a stream is bounded per event

    def endless_event(request: httpx.Request) -> httpx.Response:
        return httpx.Response(
            200, headers={"content-type": "text/event-stream"}, content=b"data: " + b"x" * 10_000
        )

    # Another upstream under the same route name: on a store of its own (one store refuses it).
    ups = {OR: Upstream("http://upstream.invalid/v1", transport=httpx.MockTransport(endless_event))}
    alone = make_failover(FallbackConfig(max_retries=0), health=MemoryHealth())
    with (
        client.mode.client(ups, failover=alone, max_body_bytes=4096) as c,
        pytest.raises(ResponseTooLarge, match="an SSE"),
    ):
        openai_stream_text(c)


def test_malformed_sse_ends_as_an_error_not_a_hang(
    mode: Mode, fake: FakeProvider, make_failover: Any
) -> None:
    fo = make_failover(FallbackConfig(max_retries=0))

    def garbage(request: httpx.Request) -> httpx.Response:
        return httpx.Response(
            200, headers={"content-type": "text/event-stream"}, content=b"data: {oops\n\nnonsense"
        )

    ups = {OR: Upstream("http://upstream.invalid/v1", transport=httpx.MockTransport(garbage))}
    # Malformed before content, and nowhere else to go: the client gets the stream up to the
    # bad event, and fails on it as it would without swerve.
    with mode.client(ups, failover=fo) as c, pytest.raises(json.JSONDecodeError):
        openai_stream_text(c)


# --- the SDKs ---------------------------------------------------------------------------------
def test_openai_sdk_stream_and_json(mode: Mode, fake: FakeProvider, failover: Failover) -> None:
    sdk = mode.openai(mode.client(upstreams(fake), failover=failover, module=httpx2))
    fake.script("openrouter", [Fault.error_before_content("openrouter", 503)] * 2)
    stream = sdk.create(model=OR, messages=MESSAGES, stream=True)
    assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices) == "from backup"
    done = sdk.create(model=OR, messages=MESSAGES)
    assert done.choices[0].message.content == "from backup"  # openrouter cooling: straight there
    fake.set_reply("backup", Reply(text="one two three"))
    fake.set_fault("backup", Fault.error_after(1, "openrouter", 502))
    with pytest.raises(openai.APIError):
        sdk.create(model=OR, messages=MESSAGES, stream=True)


def test_openai_sdk_swaps_away_from_a_reset(
    mode: Mode, fake: FakeProvider, failover: Failover
) -> None:
    sdk = mode.openai(mode.client(upstreams(fake), failover=failover, module=httpx2))
    fake.set_fault("openrouter", Fault.reset())
    done = sdk.create(model=OR, messages=MESSAGES)
    assert done.choices[0].message.content == "from backup"
    stream = sdk.create(model=OR, messages=MESSAGES, stream=True)
    assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices) == "from backup"


def test_anthropic_sdk_swaps(mode: Mode, fake: FakeProvider, failover: Failover) -> None:
    sdk = mode.anthropic(mode.client(upstreams(fake), failover=failover, module=httpx2))
    fake.set_fault("anthropic", Fault.status(529))
    message = sdk.create(model=AN, max_tokens=64, messages=MESSAGES)
    assert message.content[0].text == "from anthropic-backup"
    assert fake.received_headers("anthropic-backup")[-1]["x-api-key"] == SECRETS[1]
    fake.set_fault("anthropic", Fault.error_before_content("anthropic"))
    text = sdk.stream_text(model=AN, max_tokens=64, messages=MESSAGES)
    assert text == "from anthropic-backup"


def test_anthropic_sdk_in_stream_error_after_content(
    mode: Mode, fake: FakeProvider, failover: Failover, clock: FakeClock
) -> None:
    sdk = mode.anthropic(mode.client(upstreams(fake), failover=failover, module=httpx2))
    fake.set_fault("anthropic", Fault.error_before_content("anthropic"))
    text = sdk.stream_text(model=AN, max_tokens=64, messages=MESSAGES)
    assert text == "from anthropic-backup"
    fake.set_reply("anthropic-backup", Reply(text="one two three"))
    fake.set_fault("anthropic-backup", Fault.error_after(1, "anthropic"))
    with pytest.raises(anthropic.APIStatusError):  # the SDK's own overloaded error
        sdk.stream_text(model=AN, max_tokens=64, messages=MESSAGES)
    assert AB in failover.health.unavailable(clock.now)


# --- wire fixes through the transport ---------------------------------------------------------
def test_empty_cached_text_block_is_fixed_on_the_wire(
    mode: Mode, fake: FakeProvider, failover: Failover, otel: Otel
) -> None:
    body = {
        "model": AN,
        "max_tokens": 64,
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "a long shared prefix"},
                    {"type": "text", "text": "  ", "cache_control": {"type": "ephemeral"}},
                ],
            }
        ],
    }
    direct = httpx.post(
        f"{fake.url('anthropic')}/v1/messages", json={**body, "model": "claude-sonnet-5"}
    )
    assert (
        direct.status_code == 400
        and "cache_control cannot be set for empty text blocks" in direct.text
    )
    with mode.client(upstreams(fake), failover=failover) as c:
        r = c.post("http://swerve.invalid/v1/messages", json=body)
    assert r.status_code == 200
    sent = fake.received("anthropic")[-1]["messages"][0]["content"]
    assert sent == [
        {"type": "text", "text": "a long shared prefix", "cache_control": {"type": "ephemeral"}}
    ]
    events = [e for s in otel.finished() for e in s.events if e.name == "swerve.cache_fix"]
    assert events and events[0].attributes["swerve.cache_fix.blocks"] == 1


def test_signed_reasoning_passes_through_untouched(
    mode: Mode, fake: FakeProvider, failover: Failover
) -> None:
    details = [
        {
            "type": "reasoning.encrypted",
            "data": "opaque==",
            "index": 0,
            "format": "anthropic-claude-v1",
        }
    ]
    body = {
        "model": OR,
        "messages": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "earlier", "reasoning_details": details},
            {"role": "user", "content": "again"},
        ],
    }
    with mode.client(upstreams(fake), failover=failover) as c:
        assert c.post("http://swerve.invalid/v1/chat/completions", json=body).status_code == 200
    assert fake.received("openrouter")[-1]["messages"][1]["reasoning_details"] == details


# --- secrets ----------------------------------------------------------------------------------
def test_no_api_key_in_spans_logs_or_errors(
    mode: Mode,
    fake: FakeProvider,
    make_failover: Any,
    otel: Otel,
    caplog: pytest.LogCaptureFixture,
) -> None:
    fo = make_failover(CONFIG)
    otel.telemetry.record_messages = True
    fake.set_fault(
        "openrouter", Fault.status(401, body={"error": {"message": f"bad key {SECRETS[0]}"}})
    )
    fake.set_fault("backup", Fault.reset())
    errors = []
    with (
        caplog.at_level(logging.DEBUG),
        mode.client(upstreams(fake), failover=fo) as c,
    ):
        for attempt in range(2):
            try:
                openai_stream_text(c) if attempt else openai_json(c)
            except Exception as exc:
                errors.append(f"{exc!r} {exc} {getattr(exc, '__notes__', '')}")
        fake.set_fault("openrouter", Fault.status(503))
        fake.set_fault("backup", Fault.ok())
        assert openai_json(c).status_code == 200
    text = json.dumps(
        [
            [dict(s.attributes or {}), [dict(e.attributes or {}) for e in s.events]]
            for s in otel.finished()
        ],
        default=str,
    )
    text += caplog.text + " ".join(errors)
    for secret in SECRETS:
        assert secret not in text
        assert secret[8:24] not in text


# --- the Anthropic wire and async plain clients ---------------------------------------------------
def anthropic_stream_text(client: Client) -> str:
    body = {"model": AN, "max_tokens": 64, "messages": MESSAGES, "stream": True}
    out = []
    with client.stream("POST", "http://swerve.invalid/v1/messages", json=body) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            if line.startswith("data:"):
                event = json.loads(line[5:])
                assert event.get("type") != "error", event
                if event.get("type") == "content_block_delta":
                    out.append(event["delta"].get("text", ""))
    return "".join(out)


@pytest.mark.parametrize(
    "fault",
    [
        Fault.status(529),
        Fault.status(429, retry_after_ms=10),
        Fault.reset(),
        Fault.error_before_content("anthropic"),
        Fault.drop_after(0),
    ],
    ids=lambda f: f.kind,
)
def test_anthropic_wire_faults_before_content(
    client: Client, fake: FakeProvider, fault: Fault
) -> None:
    fake.set_fault("anthropic", fault)
    assert anthropic_stream_text(client) == "from anthropic-backup"
    body = {"model": AN, "max_tokens": 64, "messages": MESSAGES}
    r = client.post("http://swerve.invalid/v1/messages", json=body)
    assert r.status_code == 200 and r.json()["content"][0]["text"] == "from anthropic-backup"


def test_plain_clients_stream_and_json(client: Client, fake: FakeProvider) -> None:
    fake.script("openrouter", [Fault.error_before_content("openrouter")] * 2)
    fake.script("anthropic", [Fault.status(529)] * 2)
    body = {"model": OR, "messages": MESSAGES, "stream": True}
    text = []
    with client.stream("POST", "http://swerve.invalid/v1/chat/completions", json=body) as r:
        for line in r.iter_lines():
            if line.startswith("data:") and "[DONE]" not in line:
                text += [ch["delta"].get("content") or "" for ch in json.loads(line[5:])["choices"]]
    assert "".join(text) == "from backup"
    r = client.post(
        "http://swerve.invalid/v1/messages",
        json={"model": AN, "max_tokens": 8, "messages": MESSAGES},
    )
    assert r.json()["content"][0]["text"] == "from anthropic-backup"


def test_swap_to_another_provider_downgrades_the_body(
    mode: Mode, fake: FakeProvider, make_failover: Any, otel: Otel
) -> None:
    gpt = "openai/gpt-5"
    ups = {**upstreams(fake), gpt: Upstream(f"{fake.url('openai')}/v1", api_key=SECRETS[1])}
    fo = make_failover(FallbackConfig(fallbacks={OR: gpt}, max_retries=0))
    details = [{"type": "reasoning.encrypted", "data": "opaque==", "index": 0}]
    body = {
        "model": OR,
        "messages": [
            {"role": "system", "content": [
                {"type": "text", "text": "rules", "cache_control": {"type": "ephemeral"}}]},
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "earlier", "reasoning_details": details},
            {"role": "user", "content": "again"},
        ],
    }  # fmt: skip
    fake.set_fault("openrouter", Fault.status(503))
    with mode.client(ups, failover=fo) as c:
        assert c.post("http://swerve.invalid/v1/chat/completions", json=body).status_code == 200
    # Claude behind OpenRouter got the markers and the signed reasoning ...
    first = fake.received("openrouter")[-1]["messages"]
    assert first[0]["content"][0]["cache_control"] == {"type": "ephemeral"}
    assert first[2]["reasoning_details"] == details
    # ... the non-Claude target got neither, and that was reported.
    sent = fake.received("openai")[-1]["messages"]
    assert "cache_control" not in sent[0]["content"][0]
    assert "reasoning_details" not in sent[2] and sent[2]["content"] == "earlier"
    (event,) = [e for s in otel.finished() for e in s.events if e.name == "swerve.downgrade"]
    assert event.attributes is not None and event.attributes["swerve.route"] == gpt
    removed = list(event.attributes["swerve.downgrade.removed"])  # type: ignore[arg-type]
    assert any("cache_control" in r for r in removed)
    assert any("reasoning_details" in r for r in removed)


# --- streams that finished without their terminator ---------------------------------------------
def sse_data(client: Client, route: str, **extra: Any) -> list[Any]:
    """Every event's data of a stream request on ``route`` (either wire), decoded."""
    path = "/v1/messages" if route in (AN, AB) else "/v1/chat/completions"
    body = {"model": route, "max_tokens": 64, "messages": MESSAGES, "stream": True, **extra}
    with client.stream("POST", f"http://swerve.invalid{path}", json=body) as r:
        assert r.status_code == 200
        lines = [line[5:].strip() for line in r.iter_lines() if line.startswith("data:")]
    return [line if line == "[DONE]" else json.loads(line) for line in lines]


def text_of(events: list[Any]) -> str:
    """The text of decoded stream events of either wire."""
    out = []
    for event in events:
        if event == "[DONE]":
            continue
        if event.get("type") == "content_block_delta":
            out.append(event["delta"].get("text", ""))
        for choice in event.get("choices") or ():
            out.append(choice["delta"].get("content") or "")
    return "".join(out)


WIRE_ROUTES = pytest.mark.parametrize(
    ("route", "provider", "backup"),
    [(OR, "openrouter", "backup"), (AN, "anthropic", "anthropic-backup")],
    ids=["openai", "anthropic"],
)


def assert_finished_and_healthy(
    events: list[Any], route: str, failover: Failover, clock: FakeClock, otel: Otel
) -> None:
    if route == OR:
        assert "[DONE]" not in events
        assert events[-2]["choices"][0]["finish_reason"] == "stop"
        assert events[-1]["choices"] == [] and events[-1]["usage"]["total_tokens"] == 15
    else:
        assert events[-1]["type"] == "message_delta"  # and no message_stop
        assert events[-1]["delta"]["stop_reason"] == "end_turn"
    assert route not in failover.health.unavailable(clock.now)
    assert otel.events("swerve.cooldown") == []


@WIRE_ROUTES
def test_stream_that_finished_without_its_terminator_is_a_success(
    client: Client, fake: FakeProvider, failover: Failover, clock: FakeClock, otel: Otel,
    route: str, provider: str, backup: str,
) -> None:  # fmt: skip
    fake.set_fault(provider, Fault.no_done())
    events = sse_data(client, route, stream_options={"include_usage": True})
    assert text_of(events) == f"from {provider}"
    assert_finished_and_healthy(events, route, failover, clock, otel)
    assert (fake.requests(provider), fake.requests(backup)) == (1, 0)


def test_sdks_read_a_stream_without_its_terminator(
    mode: Mode, fake: FakeProvider, failover: Failover, clock: FakeClock, otel: Otel
) -> None:
    http = mode.client(upstreams(fake), failover=failover, module=httpx2)
    oai, ant = mode.openai(http), mode.anthropic(http)
    fake.set_fault("openrouter", Fault.no_done())
    fake.set_fault("anthropic", Fault.no_done())
    chunks = oai.create(
        model=OR, messages=MESSAGES, stream=True, stream_options={"include_usage": True}
    )
    assert (
        "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "from openrouter"
    )
    assert chunks[-1].usage.total_tokens == 15  # the usage chunk after the finish_reason chunk
    message = ant.final_message(model=AN, max_tokens=64, messages=MESSAGES)
    assert (message.content[0].text, message.stop_reason) == ("from anthropic", "end_turn")
    unavailable = failover.health.unavailable(clock.now)
    assert OR not in unavailable and AN not in unavailable
    assert otel.events("swerve.cooldown") == []
    assert fake.requests("backup") == fake.requests("anthropic-backup") == 0


# --- malformed data ---------------------------------------------------------------------------
@WIRE_ROUTES
def test_malformed_data_before_content_is_invisible(
    client: Client, fake: FakeProvider, route: str, provider: str, backup: str
) -> None:
    fake.set_fault(provider, Fault.malformed_before_content())
    assert text_of(sse_data(client, route)) == f"from {backup}"
    path = "/v1/messages" if route == AN else "/v1/chat/completions"
    r = client.post(
        f"http://swerve.invalid{path}", json={"model": route, "max_tokens": 8, "messages": MESSAGES}
    )
    assert r.status_code == 200
    assert f"from {backup}" in r.text  # the half-sent JSON body was swapped away too


def test_openai_sdk_stream_survives_malformed_data_before_content(
    mode: Mode, fake: FakeProvider, failover: Failover
) -> None:
    sdk = mode.openai(mode.client(upstreams(fake), failover=failover, module=httpx2))
    fake.set_fault("openrouter", Fault.malformed_before_content())
    stream = sdk.create(model=OR, messages=MESSAGES, stream=True)
    assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices) == "from backup"


@WIRE_ROUTES
def test_malformed_data_after_content_is_a_protocol_error(
    client: Client, fake: FakeProvider, failover: Failover, clock: FakeClock,
    route: str, provider: str, backup: str,
) -> None:  # fmt: skip
    fake.set_reply(provider, Reply(text="one two three"))
    fake.set_fault(provider, Fault.malformed_after(1))
    with pytest.raises(client.module.RemoteProtocolError, match="not JSON"):
        sse_data(client, route)
    assert route in failover.health.unavailable(clock.now)
    assert fake.requests(backup) == 0


@WIRE_ROUTES
def test_malformed_everywhere_hands_on_the_last_upstreams_own(
    client: Client, fake: FakeProvider, route: str, provider: str, backup: str
) -> None:
    for name in (provider, backup):
        fake.set_fault(name, Fault.malformed_before_content())
    path = "/v1/messages" if route == AN else "/v1/chat/completions"
    body = {"model": route, "max_tokens": 8, "messages": MESSAGES}
    with client.stream("POST", f"http://swerve.invalid{path}", json={**body, "stream": True}) as r:
        assert r.status_code == 200
        raw = r.read()
    *head, last = raw.decode().strip().split("\n\n")  # up to and including the bad event
    assert len(head) == 1 and last.startswith(('data: {"choices": [', "event: content_block_delta"))
    r = client.post(f"http://swerve.invalid{path}", json=body)
    assert r.status_code == 200 and r.headers["content-type"] == "application/json"
    with pytest.raises(json.JSONDecodeError):
        r.json()  # the body as it was sent, half a document


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_sdks_fail_as_without_swerve_when_every_route_is_malformed(
    mode: Mode, fake: FakeProvider, failover: Failover, stream: bool
) -> None:
    for name in ("openrouter", "backup", "anthropic", "anthropic-backup"):
        fake.set_fault(name, Fault.malformed_before_content())
    via = mode.client(upstreams(fake), failover=failover, module=httpx2)

    def undecoded(base: str, http: Client) -> list[str]:
        """What each SDK failed to decode, talking to ``base``."""
        oai = mode.openai(http, base_url=f"{base}/v1", api_key="k")
        ant = mode.anthropic(http, base_url=base, api_key="k")
        docs = []
        with pytest.raises(json.JSONDecodeError) as info:
            oai.create(model=OR, messages=MESSAGES, stream=stream)
        docs.append(info.value.doc)
        with pytest.raises(json.JSONDecodeError) as info:
            ant.create(model=AN, max_tokens=8, messages=MESSAGES, stream=stream)
        docs.append(info.value.doc)
        return docs

    with mode.client(module=httpx2) as direct, via:
        without = undecoded(fake.url("backup"), direct)  # the last upstream, without swerve
        swerved = undecoded("http://swerve.invalid", via)
    if stream:  # the same failure on the same event (a whole body differs in its ids)
        assert swerved == without


# --- keys echoed by an upstream ---------------------------------------------------------------
def no_secret(*texts: object) -> None:
    text = " ".join(map(str, texts))
    for secret in SECRETS:
        assert secret not in text


def expected_echo(fake: FakeProvider, provider: str) -> str:
    received = json.dumps(fake.received_headers(provider)[-1])
    for secret in SECRETS:
        received = received.replace(secret, "[REDACTED]")
    return f"received headers: {received}"


@WIRE_ROUTES
def test_echoed_keys_are_redacted_from_the_final_error_response(
    client: Client, fake: FakeProvider, route: str, provider: str, backup: str
) -> None:
    for name in (provider, backup):
        fake.set_fault(name, Fault.echo_headers(503))
    path = "/v1/messages" if route == AN else "/v1/chat/completions"
    r = client.post(
        f"http://swerve.invalid{path}", json={"model": route, "max_tokens": 8, "messages": MESSAGES}
    )
    assert r.status_code == 503
    last = backup if fake.requests(backup) else provider
    assert r.json()["error"]["message"] == expected_echo(fake, last)  # the rest is untouched
    echoed = "x-echo-x-api-key" if route == AN else "x-echo-authorization"
    assert r.headers[echoed] in ("[REDACTED]", "Bearer [REDACTED]")
    no_secret(r.text, r.headers)


@WIRE_ROUTES
def test_echoed_keys_are_redacted_from_a_replayed_stream(
    client: Client, fake: FakeProvider, route: str, provider: str, backup: str
) -> None:
    for name in (provider, backup):
        fake.set_fault(name, Fault.echo_headers(503, in_stream=True))
    events = sse_data(client, route)
    last = backup if fake.requests(backup) else provider
    assert events[-1]["error"]["message"] == expected_echo(fake, last)
    no_secret(events)


@WIRE_ROUTES
def test_echoed_keys_are_redacted_from_an_error_event_after_content(
    client: Client, fake: FakeProvider, route: str, provider: str, backup: str
) -> None:
    fake.set_fault(provider, Fault.echo_headers(503, in_stream=True, after=1))
    events = sse_data(client, route)
    assert text_of(events) == "from"
    assert events[-1]["error"]["message"] == expected_echo(fake, provider)
    no_secret(events)


def test_extra_auth_headers_are_redacted_too(mode: Mode, fake: FakeProvider) -> None:
    azure = "azure-0123456789abcdef-KEY"
    ups = {
        OR: Upstream(f"{fake.url('openrouter')}/v1", headers={"api-key": azure}),
        BK: Upstream(
            f"{fake.url('backup')}/v1", api_key=SECRETS[1], headers={"x-org": f"org;{SECRETS[1]}"}
        ),
    }
    fake.set_fault("openrouter", Fault.echo_headers(401))
    with mode.client(ups, config=FallbackConfig(max_retries=0)) as c:
        r = openai_json(c)
        assert r.status_code == 401 and r.headers["x-echo-api-key"] == "[REDACTED]"
        assert azure not in r.text and '\\"api-key\\": \\"[REDACTED]\\"' in r.text
        r = openai_json(c, BK)
        assert r.status_code == 200  # a success is never touched
        fake.set_fault("backup", Fault.echo_headers(401))
        r = openai_json(c, BK)
        assert '\\"x-org\\": \\"[REDACTED]\\"' in r.text
        no_secret(r.text, r.headers)


def sdk_error_texts(exc: Any) -> list[object]:
    response = getattr(exc, "response", None)
    return [
        str(exc),
        repr(exc),
        json.dumps(exc.body),
        response and response.text,
        response and response.headers,
    ]


@pytest.mark.parametrize("in_stream", [False, True], ids=["status", "in-stream"])
def test_sdk_errors_carry_no_echoed_key(
    mode: Mode, fake: FakeProvider, failover: Failover, in_stream: bool
) -> None:
    for name in ("openrouter", "backup", "anthropic", "anthropic-backup"):
        fake.set_fault(name, Fault.echo_headers(401, in_stream=in_stream))
    http = mode.client(upstreams(fake), failover=failover, module=httpx2)
    oai, ant = mode.openai(http), mode.anthropic(http)
    if in_stream:  # asked without a stream: the error comes as a 200 body, which the SDK returns
        answer = oai.create(model=OR, messages=MESSAGES)
        assert "[REDACTED]" in str(answer)
        no_secret(answer, answer.model_dump_json())
    else:
        with pytest.raises(openai.AuthenticationError) as json_error:
            oai.create(model=OR, messages=MESSAGES)
        no_secret(*sdk_error_texts(json_error.value))
    with pytest.raises(openai.APIError) as oai_error:
        oai.create(model=OR, messages=MESSAGES, stream=True)
    with pytest.raises(anthropic.APIError) as ant_error:
        ant.final_message(model=AN, max_tokens=8, messages=MESSAGES)
    for info in (oai_error, ant_error):
        texts = sdk_error_texts(info.value)
        assert "[REDACTED]" in texts[0]
        no_secret(*texts)


# --- swerve's own errors, as the client's stack raises them --------------------------------------
def test_swerves_limits_and_breaker_reach_clients_as_their_own_errors(
    mode: Mode, fake: FakeProvider, make_failover: Any
) -> None:
    fake.set_fault("openrouter", Fault.hang())
    fake.set_fault("backup", Fault.hang())
    fo = make_failover(CONFIG.model_copy(update={"deadline_s": 0.3, "max_retries": 0}))
    body = {"model": OR, "messages": MESSAGES}
    url = "http://swerve.invalid/v1/chat/completions"
    for module in (httpx, httpx2):
        with mode.client(upstreams(fake), failover=fo, module=module) as c:
            with pytest.raises(module.HTTPError) as info:  # what `except httpx.HTTPError` sees
                c.post(url, json=body)
            assert isinstance(info.value, module.ReadTimeout)
    opened = FallbackConfig(
        fallbacks={OR: BK, AN: AB}, max_retries=0, jitter=False, cooldown_s=0.0,
        breaker={"min_calls": 1},
    )  # fmt: skip
    fake.set_fault("openrouter", Fault.status(503))
    fake.set_fault("backup", Fault.status(503))
    for module in (httpx, httpx2):
        fo = make_failover(opened, health=MemoryHealth())
        with mode.client(upstreams(fake), failover=fo, module=module) as c:
            assert c.post(url, json=body).status_code == 503  # both breakers open on this
            with pytest.raises(module.ConnectError, match="circuit breaker open") as caught:
                c.post(url, json=body)
            assert "no request was sent" in str(caught.value)
            assert any("attempts:" in note for note in caught.value.__notes__)


def test_the_sdks_catch_swerves_limits_and_breaker(
    mode: Mode, fake: FakeProvider, make_failover: Any
) -> None:
    fake.set_fault("openrouter", Fault.hang())
    fake.set_fault("backup", Fault.hang())
    fake.set_fault("anthropic", Fault.hang())
    fake.set_fault("anthropic-backup", Fault.hang())
    fo = make_failover(CONFIG.model_copy(update={"deadline_s": 0.3, "max_retries": 0}))
    oa = mode.openai(mode.client(upstreams(fake), failover=fo, module=httpx2))
    an = mode.anthropic(mode.client(upstreams(fake), failover=fo, module=httpx2))
    with pytest.raises(openai.APITimeoutError):
        oa.create(model=OR, messages=MESSAGES)
    with pytest.raises(anthropic.APITimeoutError):
        an.create(model=AN, messages=MESSAGES, max_tokens=8)
    opened = FallbackConfig(
        fallbacks={OR: BK, AN: AB}, max_retries=0, jitter=False, cooldown_s=0.0,
        breaker={"min_calls": 1},
    )  # fmt: skip
    for provider in ("openrouter", "backup"):
        fake.set_fault(provider, Fault.status(503))
    fo = make_failover(opened, health=MemoryHealth())
    client = mode.openai(mode.client(upstreams(fake), failover=fo, module=httpx2))
    with pytest.raises(openai.APIStatusError):
        client.create(model=OR, messages=MESSAGES)
    with pytest.raises(openai.APIConnectionError):  # the breakers are open: nothing was sent
        client.create(model=OR, messages=MESSAGES)


def test_timeout_messages_never_show_a_negative_duration(
    mode: Mode, fake: FakeProvider, make_failover: Any
) -> None:
    fake.set_fault("openrouter", Fault.hang())
    fake.set_fault("backup", Fault.hang())
    fo = make_failover(CONFIG.model_copy(update={"deadline_s": 0.2, "max_retries": 0}))
    with (
        mode.client(upstreams(fake), failover=fo) as c,
        pytest.raises(httpx.ReadTimeout) as info,
    ):
        c.post(
            "http://swerve.invalid/v1/chat/completions",
            json={"model": OR, "messages": MESSAGES, "stream": True},
        )
    assert "-" not in str(info.value).partition("(")[2], str(info.value)


def test_a_deeply_nested_request_body_gets_a_400(client: Client, fake: FakeProvider) -> None:
    deep = b'{"model": "' + OR.encode() + b'", "messages": ' + b"[" * 100_000 + b"]" * 100_000
    deep += b"}"
    r = client.post(
        "http://swerve.invalid/v1/chat/completions",
        content=deep,
        headers={"content-type": "application/json"},
    )
    assert r.status_code == 400 and "nested too deeply" in r.json()["error"]["message"]
    # Not swerve's (another endpoint, no pin): passed through untouched, for its server to judge.
    r = client.post(f"{fake.url('openrouter')}/v1/other", content=deep)
    assert r.status_code == 404
    assert fake.requests("openrouter") == 0


def test_an_upstream_answering_with_deep_nesting_is_a_failure_not_a_crash(
    mode: Mode, fake: FakeProvider, make_failover: Any
) -> None:
    deep = "[" * 100_000 + "]" * 100_000

    def nested(request: httpx.Request) -> httpx.Response:
        if b'"stream": true' in request.content:
            event = f'data: {{"choices": {deep}}}\n\n'.encode()
            return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=event)
        body = f'{{"error": {deep}}}'.encode()
        return httpx.Response(200, headers={"content-type": "application/json"}, content=body)

    ups = {
        OR: Upstream("http://upstream.invalid/v1", transport=httpx.MockTransport(nested)),
        BK: upstreams(fake)[BK],
    }
    fo = make_failover(CONFIG.model_copy(update={"max_retries": 0}))
    with mode.client(ups, failover=fo) as c:
        assert openai_json(c).json()["choices"][0]["message"]["content"] == "from backup"
        assert openai_stream_text(c) == "from backup"
