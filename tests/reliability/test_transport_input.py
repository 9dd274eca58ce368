"""Nothing from the upstream is trusted: what it sends, and how slowly, cannot outlast a call's
bound, crash the transport, grow memory without end, or carry a key to the client; and what
the client sends that swerve does not route (a streamed body) reaches the upstream untouched.

Real httpx / httpx2 clients and the openai SDK, sync and async, over the failover transport,
against a raw HTTP upstream on 127.0.0.1 (``_raw_upstream``: what the fake provider cannot
send). Where a real socket must dribble, the limits are under a second and every loop is
bounded.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import socket
import time
import tracemalloc
from collections.abc import Iterator
from typing import Any

import httpx
import httpx2
import openai
import pytest

from swerve import Failover, FallbackConfig, MemoryHealth
from swerve._engine.results import StreamSpec
from swerve.httpx import AsyncFailoverTransport, FailoverTransport, ResponseTooLarge, Upstream

from .._drive import ANSWERING_LIMIT_S
from ._raw_upstream import (
    RawUpstream,
    Received,
    answer,
    chat_sse,
    dribbled_head,
    head,
    raw_upstream,
    wait_until,
)
from .conftest import Report

P, B = "prim/model-a", "back/model-b"
KEY_P, KEY_B = "sk-input-primary-0123456789abcdef", "sk-input-backup-0123456789abcdef"
CHAT = "http://swerve.invalid/v1/chat/completions"
MESSAGES = [{"role": "user", "content": "hi"}]
MODES = ["sync", "async"]
# Thread start-up and a loaded 2-CPU CI box (20 async calls at once ran 0.83 s past their
# deadline there). A dribbled head takes ~9 s whole, so limit + 2.5 s still proves the cut.
SLACK_S = 2.5


def config(**kw: Any) -> FallbackConfig:
    params: dict[str, Any] = {
        "fallbacks": {P: B},
        "max_retries": 0,
        "jitter": False,
        "cooldown_s": 0.0,
        "breaker": {"enabled": False},
    }
    params.update(kw)
    return FallbackConfig(**params)


def ups(server: RawUpstream) -> dict[str, Upstream]:
    return {
        P: Upstream(f"{server.url}/prim/v1", api_key=KEY_P),
        B: Upstream(f"{server.url}/back/v1", api_key=KEY_B),
    }


@contextlib.contextmanager
def client(mode: str, server: RawUpstream, cfg: FallbackConfig, **kw: Any) -> Iterator[Any]:
    """A ``Caller`` over a transport of ``mode``; the transport closed after."""
    caller = Caller(mode, ups(server), cfg, **kw)
    try:
        yield caller
    finally:
        caller.close()


class Caller:
    """One httpx client, sync or async, over the failover transport: calls return what the
    client saw (the response read whole, or the error)."""

    def __init__(self, mode: str, upstreams: dict[str, Upstream], cfg: FallbackConfig, **kw: Any):
        self.mode = mode
        self.runner = asyncio.Runner()
        failover = Failover(cfg, MemoryHealth())
        if mode == "sync":
            self.transport: Any = FailoverTransport(upstreams, failover=failover, **kw)
            self.client: Any = httpx.Client(transport=self.transport, timeout=30)
        else:

            async def make() -> Any:
                self.transport = AsyncFailoverTransport(upstreams, failover=failover, **kw)
                return httpx.AsyncClient(transport=self.transport, timeout=30)

            self.client = self.runner.run(make())

    def close(self) -> None:
        if self.mode == "sync":
            self.client.close()
        else:
            self.runner.run(self.client.aclose())
        self.runner.close()

    def post(self, url: str, **kw: Any) -> httpx.Response | BaseException:
        try:
            if self.mode == "sync":
                response: httpx.Response = self.client.post(url, **kw)
                return response
            return self.runner.run(self.client.post(url, **kw))  # type: ignore[no-any-return]
        except Exception as exc:
            return exc

    def chat(self, stream: bool = False, **kw: Any) -> httpx.Response | BaseException:
        body = {"model": P, "messages": MESSAGES, **({"stream": True} if stream else {})}
        return self.post(CHAT, json=body, **kw)

    def gather(self, count: int, **body: Any) -> list[httpx.Response | BaseException]:
        """``count`` chat calls at once (async only)."""
        assert self.mode == "async"
        payload = {"model": P, "messages": MESSAGES, **body}

        async def run() -> list[httpx.Response | BaseException]:
            calls = (self.client.post(CHAT, json=payload) for _ in range(count))
            return list(await asyncio.gather(*calls, return_exceptions=True))

        return self.runner.run(run())


def text_of(response: httpx.Response) -> str:
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        out = []
        for line in response.text.splitlines():
            if line.startswith("data:") and line[5:].strip() != "[DONE]":
                for choice in json.loads(line[5:]).get("choices") or ():
                    out.append((choice.get("delta") or {}).get("content") or "")
        return "".join(out)
    return str(response.json()["choices"][0]["message"]["content"])


# --- 1. a dribbled response head is bounded by the call's own clock -----------------------------
@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize("mode", MODES)
def test_a_dribbled_head_ends_at_the_deadline(figure: Report, mode: str, stream: bool) -> None:
    """Status line and headers one byte per 20 ms (a 400-byte pad: ~10 s): every read is
    quick, the head never ends in time. The deadline (0.8 s) ends the call, swapped to a
    fallback that dribbles too: the client's ReadTimeout, naming swerve's limit."""
    deadline = 0.8
    with (
        raw_upstream(prim=dribbled_head(0.02), back=dribbled_head(0.02)) as server,
        client(mode, server, config(deadline_s=deadline, attempt_timeout_s=0.5)) as c,
    ):
        t0 = time.monotonic()
        out = c.chat(stream=stream)
        elapsed = time.monotonic() - t0
    assert isinstance(out, httpx.ReadTimeout), out
    assert "swerve: the deadline time limit ran out" in str(out)
    assert elapsed < deadline + SLACK_S, elapsed
    figure(
        f"dribbled response head ({mode}, {'stream' if stream else 'json'})",
        f"ReadTimeout by deadline_s={deadline}s + {SLACK_S}s (the head alone would take ~10 s)",
        measured=f"{elapsed:.2f}s",
    )


@pytest.mark.parametrize("mode", MODES)
def test_a_dribbled_head_swaps_at_the_attempt_limit(figure: Report, mode: str) -> None:
    limit = ANSWERING_LIMIT_S  # it bounds the backup's answer too
    with (
        raw_upstream(prim=dribbled_head(0.02), back=answer("from the backup")) as server,
        client(mode, server, config(attempt_timeout_s=limit)) as c,
    ):
        t0 = time.monotonic()
        out = c.chat()
        elapsed = time.monotonic() - t0
    assert isinstance(out, httpx.Response) and out.status_code == 200, out
    assert text_of(out) == "from the backup"
    assert elapsed < limit + SLACK_S, elapsed
    figure(
        f"dribbled head, swapped ({mode})",
        f"the fallback's answer within attempt_timeout_s={limit}s + {SLACK_S}s",
        measured=f"{elapsed:.2f}s",
    )


@pytest.mark.parametrize("mode", MODES)
def test_a_dribbled_head_through_the_openai_sdk(figure: Report, mode: str) -> None:
    deadline = 0.6
    with raw_upstream(prim=dribbled_head(0.02), back=dribbled_head(0.02)) as server:
        cfg = config(deadline_s=deadline)
        failover = Failover(cfg, MemoryHealth())
        kw: dict[str, Any] = {"base_url": "http://swerve.invalid/v1", "api_key": "unused"}
        t0 = time.monotonic()
        with pytest.raises(openai.APITimeoutError):
            if mode == "sync":
                transport = FailoverTransport(ups(server), failover=failover)
                with httpx2.Client(transport=transport) as http:
                    sdk = openai.OpenAI(max_retries=0, http_client=http, **kw)
                    sdk.chat.completions.create(model=P, messages=MESSAGES)  # type: ignore[arg-type]
            else:

                async def run() -> None:
                    transport = AsyncFailoverTransport(ups(server), failover=failover)
                    async with httpx2.AsyncClient(transport=transport) as http:
                        sdk = openai.AsyncOpenAI(max_retries=0, http_client=http, **kw)
                        await sdk.chat.completions.create(model=P, messages=MESSAGES)  # type: ignore[arg-type]

                asyncio.run(run())
        elapsed = time.monotonic() - t0
    assert elapsed < deadline + SLACK_S, elapsed
    figure(
        f"dribbled head through the openai SDK ({mode})",
        f"APITimeoutError within deadline_s={deadline}s + {SLACK_S}s",
        measured=f"{elapsed:.2f}s",
    )


def _pool_states(transport: Any) -> list[str]:
    states = []
    for inner in transport._inner.values():
        pool = getattr(inner, "_pool", None)
        states += [repr(c) for c in getattr(pool, "connections", ())]
    return states


def test_async_sends_cut_by_the_deadline_hold_no_connection(figure: Report) -> None:
    """20 calls at once against heads that dribble: every call ends at its deadline, and so
    does every send it left running (no connection held, before aclose())."""
    deadline, count = 0.5, 20
    with (
        raw_upstream(prim=dribbled_head(0.02), back=dribbled_head(0.02)) as server,
        client("async", server, config(deadline_s=deadline)) as c,
    ):
        t0 = time.monotonic()
        outs = c.gather(count)
        elapsed = time.monotonic() - t0
        assert all(isinstance(o, httpx.ReadTimeout) for o in outs), outs
        # The sends end by themselves at the limit; allow the event loop a moment to run them.
        settled = c.runner.run(_settled(c.transport))
        held = _pool_states(c.transport)
        served = wait_until(lambda: server.open_connections == 0, timeout=2.0)
        assert settled, f"{len(c.transport._left)} sends still running"
        assert not held, held
        assert served, f"{server.open_connections} connections still open at the upstream"
    assert elapsed < deadline + SLACK_S
    figure(
        "async sends cut by the deadline, dribbling heads",
        f"{count} calls end by deadline_s={deadline}s + {SLACK_S}s; 0 sends or connections "
        "left before aclose()",
        measured=f"{elapsed:.2f}s; 0 left",
    )


async def _settled(transport: Any) -> bool:
    for _ in range(50):  # at most 1 s
        if not transport._left and not _pool_states(transport):
            return True
        await asyncio.sleep(0.02)
    return False


def test_a_transport_of_the_users_own_httpx_class_is_clamped_too() -> None:
    """An ``Upstream.transport`` that is httpx's own HTTPTransport gets the same clamp."""
    deadline = 0.6
    with raw_upstream(prim=dribbled_head(0.02), back=dribbled_head(0.02)) as server:
        upstreams = {
            P: Upstream(f"{server.url}/prim/v1", transport=httpx.HTTPTransport()),
            B: Upstream(f"{server.url}/back/v1", transport=httpx.HTTPTransport()),
        }
        caller = Caller("sync", upstreams, config(deadline_s=deadline))
        try:
            t0 = time.monotonic()
            out = caller.chat()
            elapsed = time.monotonic() - t0
        finally:
            caller.close()
    assert isinstance(out, httpx.ReadTimeout), out
    assert elapsed < deadline + SLACK_S, elapsed


# --- 2. header values that are not ASCII pass as httpx passes them ------------------------------
ODD = [("x-msg", "Überlastet".encode()), ("x-latin", b"caf\xe9")]


def _odd_bytes(response: httpx.Response) -> dict[bytes, bytes]:
    return {k.lower(): v for k, v in response.headers.raw if k.lower() in (b"x-msg", b"x-latin")}


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize("mode", MODES)
def test_header_values_that_are_not_ascii(figure: Report, mode: str, stream: bool) -> None:
    extra: list[tuple[str, str | bytes]] = list(ODD)
    want = {k.encode(): v for k, v in ODD}
    outcomes = []
    # A 200 with them: served as it came.
    with (
        raw_upstream(prim=answer("primary", extra=extra), back=answer("backup")) as server,
        client(mode, server, config()) as c,
    ):
        out = c.chat(stream=stream)
        assert isinstance(out, httpx.Response) and out.status_code == 200, out
        assert text_of(out) == "primary" and _odd_bytes(out) == want
        outcomes.append("200 served")
    # A 503 with them: swapped, as any 503.
    with (
        raw_upstream(
            prim=answer("x", extra=extra, status=503), back=answer("backup", extra=extra)
        ) as server,
        client(mode, server, config()) as c,
    ):
        out = c.chat(stream=stream)
        assert isinstance(out, httpx.Response) and out.status_code == 200, out
        assert text_of(out) == "backup" and out.headers["x-swerve-route"] == B
        outcomes.append("503 swapped")
        # Given up (pinned, no swap): the client gets the 503 itself, headers as they came.
        out = c.chat(stream=stream, headers={"x-swerve-route": P})
        assert isinstance(out, httpx.Response) and out.status_code == 503, out
        assert _odd_bytes(out) == want
        outcomes.append("503 handed on")
    figure(
        f"non-ASCII header values ({mode}, {'stream' if stream else 'json'})",
        "served, swapped and handed on as httpx reads them; no crash",
        measured=", ".join(outcomes),
    )


@pytest.mark.parametrize("mode", MODES)
def test_header_values_that_are_not_ascii_through_the_openai_sdk(mode: str) -> None:
    extra: list[tuple[str, str | bytes]] = list(ODD)
    with raw_upstream(
        prim=answer("x", extra=extra, status=503), back=answer("ok", extra=extra)
    ) as s:
        failover = Failover(config(), MemoryHealth())
        kw: dict[str, Any] = {"base_url": "http://swerve.invalid/v1", "api_key": "unused"}
        if mode == "sync":
            with httpx2.Client(transport=FailoverTransport(ups(s), failover=failover)) as http:
                sdk = openai.OpenAI(max_retries=0, http_client=http, **kw)
                raw = sdk.chat.completions.with_raw_response.create(model=P, messages=MESSAGES)  # type: ignore[arg-type]
                headers, text = raw.headers, raw.parse().choices[0].message.content
        else:

            async def run() -> tuple[Any, Any]:
                transport = AsyncFailoverTransport(ups(s), failover=failover)
                async with httpx2.AsyncClient(transport=transport) as http:
                    sdk = openai.AsyncOpenAI(max_retries=0, http_client=http, **kw)
                    raw = await sdk.chat.completions.with_raw_response.create(
                        model=P,
                        messages=MESSAGES,  # type: ignore[arg-type]
                    )
                    return raw.headers, raw.parse().choices[0].message.content

            headers, text = asyncio.run(run())
    assert text == "ok" and headers["x-swerve-route"] == B
    assert dict(headers.raw)[b"x-msg"] == "Überlastet".encode()


# --- 3. streamed request bodies pass through untouched ------------------------------------------
FILE_OBJECT = json.dumps(
    {
        "id": "file-raw",
        "object": "file",
        "bytes": 8,
        "created_at": 0,
        "filename": "batch.jsonl",
        "purpose": "batch",
        "status": "processed",
    }
).encode()


def _files(conn: socket.socket, request: Received) -> None:
    headers: list[tuple[str, str | bytes]] = [("content-type", "application/json")]
    conn.sendall(head(200, [*headers, ("content-length", str(len(FILE_OBJECT)))]) + FILE_OBJECT)


@pytest.mark.parametrize("mode", MODES)
def test_streamed_request_bodies_pass_through(figure: Report, mode: str) -> None:
    with raw_upstream(files=_files, prim=answer("p"), back=answer("b")) as server:
        url = f"{server.url}/files"
        with client(mode, server, config()) as c:
            out = c.post(url, files={"file": ("a.txt", b"multipart-bytes")})
            assert isinstance(out, httpx.Response) and out.status_code == 200, out
            got = server.received[-1]
            assert got.path == "/files" and b"multipart-bytes" in got.body
            assert got.headers["content-type"].startswith("multipart/form-data")

            if mode == "sync":
                content: Any = iter([b"generated-", b"body"])
            else:

                async def agen() -> Any:
                    for piece in (b"generated-", b"body"):
                        yield piece

                content = agen()
            out = c.post(url, content=content, headers={"x-swerve-route": P})
            assert isinstance(out, httpx.Response) and out.status_code == 200, out
            got = server.received[-1]
            assert got.body == b"generated-body"
            assert not any(k.startswith("x-swerve-") for k in got.headers)  # swerve's own
    figure(
        f"streamed request bodies ({mode})",
        "multipart files= and generator content reach the upstream intact",
        measured="2 of 2 intact",
    )


@pytest.mark.parametrize("mode", MODES)
def test_the_openai_sdks_files_create_passes_through(mode: str) -> None:
    data = b'{"custom_id": "1"}\n'
    with raw_upstream(files=_files, v1=_files, prim=answer("p"), back=answer("b")) as server:
        failover = Failover(config(), MemoryHealth())
        kw: dict[str, Any] = {"base_url": f"{server.url}/v1", "api_key": "unused"}
        upload = ("batch.jsonl", io.BytesIO(data))
        if mode == "sync":
            with httpx2.Client(transport=FailoverTransport(ups(server), failover=failover)) as h:
                made = openai.OpenAI(max_retries=0, http_client=h, **kw).files.create(
                    file=upload, purpose="batch"
                )
        else:

            async def run() -> Any:
                transport = AsyncFailoverTransport(ups(server), failover=failover)
                async with httpx2.AsyncClient(transport=transport) as h:
                    sdk = openai.AsyncOpenAI(max_retries=0, http_client=h, **kw)
                    return await sdk.files.create(file=upload, purpose="batch")

            made = asyncio.run(run())
    assert made.id == "file-raw"
    got = server.received[-1]
    assert got.path == "/v1/files" and data in got.body and b'name="purpose"' in got.body


# --- 4. events before the first content are bounded ---------------------------------------------
ROLE_ONLY = b'data: {"choices":[{"index":0,"delta":{"role":"assistant"}}]}\n\n'


def role_only_then_content(total: int, sent: list[int]) -> Any:
    """``total`` bytes of role-only deltas (no content), then content; records what it sent
    before the client hung up."""

    def serve(conn: socket.socket, request: Received) -> None:
        conn.sendall(head(200, [("content-type", "text/event-stream")]))
        piece = ROLE_ONLY * (65536 // len(ROLE_ONLY))
        count = 0
        try:
            while count < total:
                conn.sendall(piece)
                count += len(piece)
            conn.sendall(chat_sse("late content"))
        finally:
            sent.append(count)

    return serve


@pytest.mark.parametrize("mode", MODES)
def test_events_before_content_are_bounded(figure: Report, mode: str) -> None:
    limit, total = 1024 * 1024, 16 * 1024 * 1024
    sent: list[int] = []
    with (
        raw_upstream(prim=role_only_then_content(total, sent), back=answer("backup")) as server,
        client(mode, server, config(), max_body_bytes=limit) as c,
    ):
        tracemalloc.start()
        try:
            out = c.chat(stream=True)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        # As any body or event over the limit: the client's ResponseTooLarge (its flavour's
        # DecodingError), never the primary's late content after an unbounded wait.
        assert isinstance(out, ResponseTooLarge), out
        assert isinstance(out, httpx.DecodingError)
        assert "before the first content exceeded" in str(out)
        assert wait_until(lambda: len(sent) == 1)
    assert peak < 12 * limit, f"peak {peak / 2**20:.1f} MiB"
    assert max(sent) < total  # the transport stopped reading: the upstream never finished
    figure(
        f"events before the first content ({mode})",
        f"ResponseTooLarge past max_body_bytes={limit // 2**20} MiB; traced peak < 12 x the limit",
        measured=f"peak {peak / 2**20:.1f} MiB; the upstream sent "
        f"{max(sent) / 2**20:.1f} of {total // 2**20} MiB before it was dropped",
    )


# --- 5. a non-stream request answered with SSE is read, classified, redacted -------------------
def sse_error_echoing_the_key(conn: socket.socket, request: Received) -> None:
    echoed = request.headers.get("authorization", "")
    error = {"error": {"code": 503, "message": f"overloaded; you sent {echoed}"}}
    body = b"data: " + json.dumps(error).encode() + b"\n\n"
    headers: list[tuple[str, str | bytes]] = [("content-type", "text/event-stream")]
    conn.sendall(head(200, [*headers, ("content-length", str(len(body)))]) + body)


@pytest.mark.parametrize("mode", MODES)
def test_an_sse_answer_to_a_non_stream_request_is_read(figure: Report, mode: str) -> None:
    with (
        raw_upstream(prim=sse_error_echoing_the_key, back=answer("backup")) as server,
        client(mode, server, config()) as c,
    ):
        out = c.chat()
        assert isinstance(out, httpx.Response) and out.status_code == 200, out
        assert text_of(out) == "backup" and out.headers["x-swerve-route"] == B
        # Pinned: swerve gives up and hands the error stream on, the key taken out.
        given_up = c.chat(headers={"x-swerve-route": P})
        assert isinstance(given_up, httpx.Response), given_up
        assert given_up.status_code == 200
        assert KEY_P not in given_up.text and "[REDACTED]" in given_up.text
        assert "overloaded" in given_up.text
    figure(
        f"SSE error event answering a non-stream request ({mode})",
        "a failure that swaps; handed on redacted when swerve gives up",
        measured="swapped; key redacted",
    )


# --- smaller ----------------------------------------------------------------------------------
def test_an_upstream_header_of_swerves_own_is_refused() -> None:
    with pytest.raises(ValueError, match=r"'X-Swerve-Route' is one of swerve's own headers"):
        Upstream("https://example.invalid/v1", headers={"X-Swerve-Route": P})


def _chunks(_: object) -> Iterator[str]:
    yield from ("a", "b", "c")


async def _achunks(_: object) -> Any:
    for chunk in ("a", "b", "c"):
        yield chunk


@pytest.mark.parametrize("mode", MODES)
def test_an_abandoned_stream_closes_quietly(mode: str) -> None:
    """A stream dropped without close() is a reference cycle; the garbage collector may close
    its steps before their driver, as here: no "generator ignored GeneratorExit"."""
    failover = Failover(config(), MemoryHealth())
    spec: StreamSpec[str] = StreamSpec(part=lambda _: "text")
    if mode == "sync":
        stream: Any = failover.stream(P, _chunks, spec)
        assert next(stream) == "a"
        steps = stream._gen.gi_frame.f_locals["cursor"]._steps
        steps.close()  # raised RuntimeError("generator ignored GeneratorExit") before
        return

    async def run() -> None:
        stream: Any = failover.astream(P, _achunks, spec)
        assert await anext(stream) == "a"
        steps = stream._gen.ag_frame.f_locals["cursor"]._steps
        steps.close()

    asyncio.run(run())
