"""Secrets and requests through the failover transport: canary keys against upstreams that echo
the request back, scanned for in everything swerve emits or hands on; swerve's own headers and
routes never reaching a provider; the client's credentials never sent to another host; every
test server on loopback only."""

from __future__ import annotations

import asyncio
import logging
import secrets
import threading
import traceback
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import anthropic
import httpx
import httpx2
import openai
import pytest

from swerve import Failover, FallbackConfig, MemoryHealth
from swerve.httpx import AsyncFailoverTransport, FailoverTransport, Upstream
from swerve.testing import FakeClock, FakeProvider, Fault, Reply, TelemetryRecorder

from .conftest import Report

OR, BK = "openrouter/anthropic/claude-sonnet-5", "backup/claude-sonnet-5"
AN, AB = "anthropic/claude-sonnet-5", "anthropic-backup/claude-sonnet-5"
MESSAGES = [{"role": "user", "content": "hi"}]
URL = {
    "openai": "http://swerve.invalid/v1/chat/completions",
    "anthropic": "http://swerve.invalid/v1/messages",
}
# Canaries: one of the usual shape, and some that no redaction pattern can know.
CANARY = f"sk-canary-{secrets.token_hex(12)}"
ODD = f"zz_9f3{secrets.token_hex(5)}"  # short and unusual: no pattern matches it
GATEWAY = f"gw.{secrets.token_hex(6)}"  # a gateway's own secret header
CANARIES = (CANARY, ODD, GATEWAY)


def upstreams(fake: FakeProvider) -> dict[str, Upstream]:
    extra = {"x-gateway-token": GATEWAY}
    return {
        OR: Upstream(f"{fake.url('openrouter')}/v1", api_key=CANARY),
        BK: Upstream(f"{fake.url('backup')}/v1", api_key=ODD, headers=extra),
        AN: Upstream(fake.url("anthropic"), wire="anthropic", api_key=CANARY),
        AB: Upstream(fake.url("anthropic-backup"), wire="anthropic", api_key=ODD, headers=extra),
    }


CONFIG = FallbackConfig(
    fallbacks={OR: BK, AN: AB}, max_retries=1, max_swaps=1, jitter=False, cooldown_s=0.0
)


@pytest.fixture
def fake() -> Iterator[FakeProvider]:
    with FakeProvider() as server:
        yield server


def found_in(texts: list[str]) -> list[tuple[str, str]]:
    """Every (canary, where) pair: a canary found in one of ``texts``."""
    return [(c, t[:200]) for t in texts for c in CANARIES if c in t]


def logged(caplog: pytest.LogCaptureFixture) -> tuple[list[logging.LogRecord], int]:
    """The log records to scan, and how many were left out: httpcore's DEBUG trace of each
    response head as it came off the wire (an upstream that echoes keys into its response
    headers is logged there by httpcore itself, with or without swerve)."""
    keep, raw = [], 0
    for record in caplog.records:
        if record.name.startswith("httpcore") and "receive_response_headers" in record.msg:
            raw += 1
        else:
            keep.append(record)
    return keep, raw


def telemetry_texts(otel: TelemetryRecorder) -> list[str]:
    out = []
    for span in otel.finished():
        out += [span.name, str(span.status.description or "")]
        out += [f"{k}={v}" for k, v in (span.attributes or {}).items()]
        for event in span.events:
            out += [event.name, *(f"{k}={v}" for k, v in (event.attributes or {}).items())]
    for name, points in otel.metrics().items():
        out += [f"{name} {attrs}" for attrs, _ in points]
    return out


ECHOES = [
    ("status", Fault.echo_headers(503)),
    ("sse error before content", Fault.echo_headers(503, in_stream=True)),
    ("sse error after content", Fault.echo_headers(503, in_stream=True, after=1)),
]


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("flavour", ["httpx", "httpx2"])
def test_no_canary_anywhere(
    fake: FakeProvider,
    figure: Report,
    caplog: pytest.LogCaptureFixture,
    mode: str,
    flavour: str,
) -> None:
    caplog.set_level(logging.DEBUG)  # every logger, httpx's and httpcore's included
    module: Any = httpx if flavour == "httpx" else httpx2
    otel = TelemetryRecorder()
    fo = Failover(CONFIG, MemoryHealth(), telemetry=otel.telemetry, clock=FakeClock())
    texts: list[str] = []
    calls = 0
    runner = asyncio.Runner()

    async def acall(client: Any, url: str, body: dict[str, Any]) -> tuple[Any, bytes]:
        async with client.stream("POST", url, json=body) as r:
            content = b"".join([piece async for piece in r.aiter_bytes()])
            return r, content

    def call(client: Any, url: str, body: dict[str, Any]) -> None:
        try:
            if mode == "sync":
                with client.stream("POST", url, json=body) as r:
                    content = b"".join(r.iter_bytes())
            else:
                r, content = runner.run(acall(client, url, body))
            texts.append(content.decode("utf-8", "replace"))
            texts.extend(f"{k}: {v}" for k, v in r.headers.multi_items())
        except Exception as exc:
            texts.extend(traceback.format_exception(exc))

    if mode == "sync":
        client: Any = module.Client(transport=FailoverTransport(upstreams(fake), failover=fo))
    else:
        transport = AsyncFailoverTransport(upstreams(fake), failover=fo)
        client = runner.run(_make_async(module, transport))
    try:
        for wire, (route, providers) in {
            "openai": (OR, ("openrouter", "backup")),
            "anthropic": (AN, ("anthropic", "anthropic-backup")),
        }.items():
            for _, fault in ECHOES:
                for provider in providers:
                    fake.set_fault(provider, fault)
                for stream in (False, True):
                    body: dict[str, Any] = {"model": route, "messages": MESSAGES}
                    if stream:
                        body["stream"] = True
                    call(client, URL[wire], body)
                    calls += 1
        # The upstreams did receive the canaries: the scan would find them were they let out.
        received = str(fake.received_headers("openrouter")) + str(fake.received_headers("backup"))
        assert CANARY in received and ODD in received and GATEWAY in received
    finally:
        if mode == "sync":
            client.close()
        else:
            runner.run(client.aclose())
        runner.close()
    texts += telemetry_texts(otel)
    records, raw_heads = logged(caplog)
    texts += [r.getMessage() for r in records]
    texts += [r.exc_text or "" for r in records]
    texts += ["".join(traceback.format_exception(*r.exc_info)) for r in records if r.exc_info]
    otel.shutdown()
    leaks = found_in(texts)
    assert not leaks, leaks
    figure(
        f"canary keys echoed back by every upstream ({flavour}, {mode})",
        "0 found in bodies, headers, exceptions, tracebacks, spans, events, metrics, logs",
        measured=f"{calls} calls, {len(texts)} texts scanned, 0 canaries found "
        f"({raw_heads} httpcore DEBUG traces of upstream response heads not scanned)",
    )


async def _make_async(module: Any, transport: Any) -> Any:
    return module.AsyncClient(transport=transport)


@pytest.mark.parametrize("in_stream", [False, True], ids=["status", "sse"])
def test_no_canary_through_the_sdks(
    fake: FakeProvider, figure: Report, caplog: pytest.LogCaptureFixture, in_stream: bool
) -> None:
    """The SDKs' errors (message, body, response) carry no canary, sync and async."""
    caplog.set_level(logging.DEBUG)
    otel = TelemetryRecorder()
    fo = Failover(CONFIG, MemoryHealth(), telemetry=otel.telemetry, clock=FakeClock())
    fault = Fault.echo_headers(503, in_stream=in_stream)
    for provider in ("openrouter", "backup", "anthropic", "anthropic-backup"):
        fake.set_fault(provider, fault)
    texts: list[str] = []

    def keep(exc: BaseException) -> None:
        texts.extend(traceback.format_exception(exc))
        texts.append(str(getattr(exc, "body", "")))
        response = getattr(exc, "response", None)
        if response is not None:
            texts.append(response.text)
            texts.extend(f"{k}: {v}" for k, v in response.headers.multi_items())

    oa = openai.OpenAI(
        base_url="http://swerve.invalid/v1", api_key="unused", max_retries=0,
        http_client=httpx2.Client(transport=FailoverTransport(upstreams(fake), failover=fo)),
    )  # fmt: skip
    an = anthropic.Anthropic(
        base_url="http://swerve.invalid", api_key="unused", max_retries=0,
        http_client=httpx2.Client(transport=FailoverTransport(upstreams(fake), failover=fo)),
    )  # fmt: skip
    # An error event is an error only in a stream (a JSON body with one is the SDK's to read).
    streams = (True,) if in_stream else (False, True)
    for stream in streams:
        with pytest.raises(openai.APIError) as info:
            out = oa.chat.completions.create(model=OR, messages=MESSAGES, stream=stream)  # type: ignore[call-overload]
            if stream:
                list(out)
        keep(info.value)
        with pytest.raises(anthropic.APIError) as info2:
            out2 = an.messages.create(model=AN, messages=MESSAGES, max_tokens=8, stream=stream)  # type: ignore[call-overload]
            if stream:
                list(out2)
        keep(info2.value)

    async def run_async() -> None:
        aoa = openai.AsyncOpenAI(
            base_url="http://swerve.invalid/v1", api_key="unused", max_retries=0,
            http_client=httpx2.AsyncClient(
                transport=AsyncFailoverTransport(upstreams(fake), failover=fo)),
        )  # fmt: skip
        try:
            out = await aoa.chat.completions.create(model=OR, messages=MESSAGES, stream=True)  # type: ignore[arg-type]
            async for _ in out:
                pass
        except openai.APIError as exc:
            keep(exc)
        else:
            raise AssertionError("the echo should have failed the call")
        await aoa.close()

    asyncio.run(run_async())
    oa.close()
    an.close()
    texts += telemetry_texts(otel) + [r.getMessage() for r in logged(caplog)[0]]
    otel.shutdown()
    leaks = found_in(texts)
    assert not leaks, leaks
    figure(
        f"canary keys through the openai and anthropic SDKs ({'sse' if in_stream else 'status'})",
        "0 found in the SDK errors, their bodies and responses, spans, metrics, logs",
        measured=f"{2 * len(streams) + 1} calls, {len(texts)} texts scanned, 0 canaries found",
    )


# --- requests that leave the process -------------------------------------------------------------
class _Capture(BaseHTTPRequestHandler):
    """Records every request's headers; answers 200 with an empty JSON object."""

    seen: list[dict[str, str]]

    def _answer(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        self.rfile.read(length)
        self.server.seen.append({k.lower(): v for k, v in self.headers.items()})  # type: ignore[attr-defined]
        body = b'{"object": "list", "data": []}'
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = _answer

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def capture() -> Iterator[Any]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Capture)
    server.seen = []  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.01})
    thread.start()
    yield server
    server.shutdown()
    server.server_close()
    thread.join()


OVERRIDES = {"x-swerve-failover": "off", "x-swerve-route": OR, "x-swerve-other": "mine"}


@pytest.mark.parametrize("flavour", ["httpx", "httpx2"])
def test_override_headers_never_reach_a_provider(
    fake: FakeProvider, capture: Any, figure: Report, flavour: str
) -> None:
    module: Any = httpx if flavour == "httpx" else httpx2
    base = f"http://127.0.0.1:{capture.server_address[1]}/v1"
    transport = FailoverTransport(upstreams(fake), CONFIG)
    with module.Client(transport=transport) as client:
        # Passed through: a GET, an unconfigured model, a list body, a body that is not JSON.
        client.get(f"{base}/models", headers=OVERRIDES)
        other = {"model": "other-model", "messages": MESSAGES}
        client.post(f"{base}/chat/completions", json=other, headers={"x-swerve-other": "mine"})
        client.post(f"{base}/chat/completions", json=[1, 2], headers={"x-swerve-other": "mine"})
        client.post(f"{base}/anything", content=b"{oops", headers={"x-swerve-other": "mine"})
        # Routed: off, pinned, and plain.
        body = {"model": OR, "messages": MESSAGES}
        for name, value in OVERRIDES.items():
            r = client.post(URL["openai"], json=body, headers={name: value})
            assert r.status_code == 200
    sent = capture.seen + fake.received_headers("openrouter")
    assert len(capture.seen) == 4 and len(sent) == 7
    leaked = [h for h in sent for k in h if k.startswith("x-swerve-")]
    assert not leaked, leaked
    figure(
        f"x-swerve-* headers on requests leaving the process ({flavour})",
        "0 reach a provider (pass-through and routed)",
        measured=f"{len(sent)} requests received upstream, 0 with an x-swerve-* header",
    )


def test_an_unconfigured_pinned_route_is_refused(fake: FakeProvider, capture: Any) -> None:
    port = capture.server_address[1]
    transport = FailoverTransport(upstreams(fake), CONFIG)
    body = {"model": OR, "messages": MESSAGES}
    with httpx.Client(transport=transport) as client:
        for pin in (f"127.0.0.1:{port}/x", f"http://127.0.0.1:{port}/v1", "other/model", "x"):
            r = client.post(URL["openai"], json=body, headers={"x-swerve-route": pin})
            assert r.status_code == 400, pin
            assert f"pinned route {pin!r} has no Upstream" in r.json()["error"]["message"]
    assert capture.seen == [] and fake.requests("openrouter") == 0  # nothing was sent anywhere


def test_base_urls_match_on_path_segments(fake: FakeProvider) -> None:
    """A URL that only shares a prefix with an upstream's base URL is not that upstream's."""
    ups = {OR: Upstream(f"{fake.url('openrouter')}/v1", api_key=CANARY)}
    body = {"model": "anthropic/claude-sonnet-5", "messages": MESSAGES}  # the upstream's model
    with httpx.Client(
        transport=FailoverTransport(ups, CONFIG.model_copy(update={"fallbacks": {}}))
    ) as c:
        r = c.post(f"{fake.url('openrouter')}/v1-other/chat/completions", json=body)
        assert r.status_code == 404  # passed through as addressed: the fake knows no /v1-other
        r = c.post(f"{fake.url('openrouter')}/v1/chat/completions", json=body)
        assert r.status_code == 200  # the upstream itself: routed, with its key
    headers = fake.received_headers("openrouter")
    assert len(headers) == 1 and headers[0]["authorization"] == f"Bearer {CANARY}"


def test_the_clients_own_key_never_goes_to_another_host(fake: FakeProvider, figure: Report) -> None:
    # Upstreams without api_key: the client authenticates itself.
    ups = {
        OR: Upstream(f"{fake.url('openrouter')}/v1"),
        BK: Upstream(f"{fake.url('backup')}/v1".replace("127.0.0.1", "localhost")),
    }
    fake.set_fault("openrouter", Fault.status(503))
    own = {"authorization": f"Bearer {CANARY}", "cookie": "session=abc", "x-api-key": ODD}
    body = {"model": "anthropic/claude-sonnet-5", "messages": MESSAGES}
    config = FallbackConfig(fallbacks={OR: BK}, max_retries=0, jitter=False)
    with httpx.Client(transport=FailoverTransport(ups, config)) as client:
        # Addressed to the primary itself (its base URL): its key goes there, and nowhere else.
        r = client.post(f"{fake.url('openrouter')}/v1/chat/completions", json=body, headers=own)
        assert r.status_code == 200
        # Addressed to swerve: the key belongs to no upstream, so none gets it.
        body["model"] = OR
        r = client.post(URL["openai"], json=body, headers=own)
        assert r.status_code == 200
    primary, backup = fake.received_headers("openrouter"), fake.received_headers("backup")
    assert primary[0]["authorization"] == f"Bearer {CANARY}" and primary[0]["x-api-key"] == ODD
    assert all("authorization" not in h and "x-api-key" not in h for h in primary[1:])
    assert all("authorization" not in h and "cookie" not in h for h in backup), backup
    assert len(backup) == 2
    figure(
        "the client's own credentials, on a swap to another host",
        "never sent to a host the client did not address",
        measured=f"{len(primary) + len(backup)} requests upstream; credentials reached only "
        "the addressed host",
    )


def _listening(port: int) -> list[str]:
    """Local addresses listening on ``port`` (IPv4 and IPv6), from the kernel's own tables."""
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        path = Path(table)
        if not path.exists():
            continue
        for line in path.read_text().splitlines()[1:]:
            fields = line.split()
            address, state = fields[1], fields[3]
            host, _, hexport = address.partition(":")
            if int(hexport, 16) == port and state == "0A":  # LISTEN
                found.append(host)
    return found


def test_the_fake_provider_listens_on_loopback_only(fake: FakeProvider, figure: Report) -> None:
    hosts = _listening(fake.port)
    if not Path("/proc/net/tcp").exists():
        pytest.skip("no /proc/net/tcp here to read the listening address from")
    assert hosts == ["0100007F"], hosts  # 127.0.0.1, and nothing else (no 0.0.0.0, no ::)
    assert fake.url("p").startswith("http://127.0.0.1:")
    figure("fake provider's listening address", "127.0.0.1 only", measured="127.0.0.1 only")


def test_prompt_and_completion_text_never_reach_telemetry_or_logs(
    fake: FakeProvider, figure: Report, caplog: pytest.LogCaptureFixture
) -> None:
    # swerve has no switch that records message content: a call's text, asked and answered,
    # through a swap, appears in none of its spans, events, metrics or log lines.
    caplog.set_level(logging.DEBUG)
    prompt, answer = f"prompt-{secrets.token_hex(8)}", f"answer-{secrets.token_hex(8)}"
    fake.set_fault("openrouter", Fault.status(503))
    fake.set_reply("backup", Reply(text=answer))
    otel = TelemetryRecorder()
    fo = Failover(CONFIG, MemoryHealth(), telemetry=otel.telemetry, clock=FakeClock())
    bodies = []
    with httpx.Client(transport=FailoverTransport(upstreams(fake), failover=fo)) as client:
        for stream in (False, True):
            body = {"model": OR, "messages": [{"role": "user", "content": prompt}]}
            with client.stream("POST", URL["openai"], json={**body, "stream": stream}) as r:
                bodies.append(r.read().decode())
    assert all(answer in b for b in bodies)  # the client got the text: it was there to leak
    assert any(prompt in str(m) for m in fake.received("backup"))  # it was sent, and swapped
    texts = telemetry_texts(otel) + [r.getMessage() for r in logged(caplog)[0]]
    otel.shutdown()
    assert any("swap" in t for t in texts)  # the scan covers a call that failed over
    leaks = [t[:120] for t in texts if prompt in t or answer in t]
    assert not leaks, leaks
    figure(
        "prompt and completion text in telemetry and logs (no opt-in exists)",
        "0 occurrences",
        measured=f"{len(texts)} texts scanned after 2 swapped calls, 0 found",
    )
