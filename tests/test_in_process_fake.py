"""The fake provider's in-process transports (``FakeProvider.transport`` and
``async_transport``): they send what the served fake sends, byte for byte, and refuse the
faults only a socket can serve.

Every test runs sync (``httpx.Client``) and async (``httpx.AsyncClient``): the ``mode``
fixture, tests/_drive.py.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from swerve.testing import FakeProvider, Fault, Reply

from ._drive import Client, Mode

IN_PROCESS = "http://fake.invalid"  # any host: the transports route on the path


@pytest.fixture
def fake() -> Iterator[FakeProvider]:
    """A fake never served: only its in-process transports answer."""
    provider = FakeProvider()
    provider.set_reply("primary", Reply(text="from primary"))
    yield provider
    provider.stop()


def in_process(mode: Mode, fake: FakeProvider) -> Client:
    return mode.client(transport=fake.transport() if mode.sync else fake.async_transport())


# --- the in-process fake sends what the served one does --------------------------------------
_IDS = re.compile(rb'"(id|created)": ?("[^"]*"|\d+)')


def _request(stream: bool) -> dict[str, Any]:
    return {"model": "model-a", "messages": [{"role": "user", "content": "hi"}], "stream": stream}


Sent = tuple[int | None, str | None, bytes, str]
# A hang or a slow first token outlasts the read timeout; anything else is well within it, even
# on a loaded machine (0.1 s, as this test had in test_engine.py, once timed out a plain 503).
_TIMEOUT = httpx.Timeout(5, read=0.5)


def _sent(client: Client, url: str, stream: bool) -> Sent:
    """Status, Retry-After, body (ids and times blanked) and how the read ended."""
    status, retry_after, got, end = None, None, b"", "whole"
    try:
        with client.stream(
            "POST", f"{url}/v1/chat/completions", json=_request(stream), timeout=_TIMEOUT
        ) as response:
            status, retry_after = response.status_code, response.headers.get("retry-after")
            for piece in response.iter_bytes():
                got += piece
    except httpx.HTTPError as exc:
        end = type(exc).__name__
    return status, retry_after, _IDS.sub(b"", got), end


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
@pytest.mark.parametrize(
    "fault",
    [
        Fault.ok(),
        Fault.status(503),
        Fault.status(429, retry_after=300),
        Fault.context_overflow(),
        Fault.error_before_content("openrouter", 503),
        Fault.error_after(1, "openai", 502),
        Fault.drop_after(2),
        Fault.no_finish(),
        Fault.no_done(),
        Fault.malformed_before_content(),
        Fault.hang(),
        Fault.slow(first_token_s=2.0),  # stop() cuts the served pause short
    ],
    ids=lambda f: f.kind,
)
def test_the_in_process_fake_sends_what_the_served_one_does(
    mode: Mode, fake: FakeProvider, fault: Fault, stream: bool
) -> None:
    """The in-process transports, against the served fake, through sync and async clients."""
    with FakeProvider() as served:
        served.set_reply("primary", Reply(text="from primary"))
        fake.set_fault("primary", fault)
        served.set_fault("primary", fault)
        near, far = in_process(mode, fake), mode.client()
        got = _sent(near, f"{IN_PROCESS}/primary", stream)
        assert got == _sent(far, served.url("primary"), stream)
        assert fake.received("primary") == served.received("primary")


@pytest.mark.parametrize("anthropic", [False, True], ids=["openai", "anthropic"])
@pytest.mark.parametrize("fault", [Fault.ok(), Fault.status(503)], ids=lambda f: f.kind)
def test_the_models_list_is_the_served_ones(
    mode: Mode, fake: FakeProvider, fault: Fault, anthropic: bool
) -> None:
    headers = {"anthropic-version": "2023-06-01"} if anthropic else {}
    with FakeProvider() as served:
        fake.set_fault("primary", fault)
        served.set_fault("primary", fault)
        near = in_process(mode, fake).get(f"{IN_PROCESS}/primary/v1/models", headers=headers)
        far = mode.client().get(f"{served.url('primary')}/v1/models", headers=headers)
    assert (near.status_code, near.json()) == (far.status_code, far.json())
    assert fake.requests("primary") == 0  # a probe is no completion request


def test_an_unknown_path_is_a_404_and_records_nothing(mode: Mode, fake: FakeProvider) -> None:
    client = in_process(mode, fake)
    assert client.post(f"{IN_PROCESS}/primary/v1/embeddings", json={}).status_code == 404
    assert client.get(f"{IN_PROCESS}/primary/v1/nothing").status_code == 404
    assert fake.requests("primary") == 0


def test_a_request_the_api_would_refuse_is_a_400_and_takes_no_step(
    mode: Mode, fake: FakeProvider
) -> None:
    fake.script("primary", [Fault.status(503)])
    client = in_process(mode, fake)
    bad = client.post(f"{IN_PROCESS}/primary/v1/chat/completions", content=b"not json")
    assert bad.status_code == 400
    assert fake.received("primary") == [{"_raw": "not json"}]
    assert fake.remaining("primary") == 1


@pytest.mark.parametrize(
    "fault",
    [
        Fault.reset(),
        Fault.reset_after(1),
        Fault.cut_after_bytes(10),
        Fault.bad_chunking(),
        Fault.wrong_content_type(),
        Fault.gzip(),
        Fault.dribble(0.01),
        Fault.echo_headers(),
    ],
    ids=lambda f: f.kind,
)
def test_a_fault_that_needs_a_socket_is_refused(
    mode: Mode, fake: FakeProvider, fault: Fault
) -> None:
    fake.set_fault("primary", fault)
    client = in_process(mode, fake)
    with pytest.raises(NotImplementedError, match=f"Fault.{fault.kind} needs a socket"):
        client.post(f"{IN_PROCESS}/primary/v1/chat/completions", json=_request(False))
    assert fake.requests("primary") == 1  # it arrived: the fault, not the request, is refused


def test_stop_releases_a_hung_request(mode: Mode, fake: FakeProvider) -> None:
    """A hang lasts until ``stop()`` (or a new fault), then hangs up without a word."""
    fake.set_fault("primary", Fault.hang())
    client = in_process(mode, fake)
    url = f"{IN_PROCESS}/primary/v1/chat/completions"
    ended: list[str] = []

    def stop_once_it_hangs() -> None:
        assert fake.wait_for_requests("primary", 1, timeout=10)
        fake.stop()

    stopper = threading.Thread(target=stop_once_it_hangs)
    stopper.start()
    try:
        client.post(url, json=_request(False), timeout=httpx.Timeout(5, read=60))
    except httpx.RemoteProtocolError as exc:
        ended.append(type(exc).__name__)
    finally:
        stopper.join()
    assert ended == ["RemoteProtocolError"]
