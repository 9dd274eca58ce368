"""A fake LLM provider server with fault injection, for testing failover configurations.

``FakeProvider`` serves named providers on 127.0.0.1, each speaking the OpenAI chat
completions and the Anthropic messages wire (JSON and SSE). Replies are set per provider
with :class:`Reply`; failures are injected per provider with :class:`Fault` (HTTP statuses,
resets, hangs, errors inside 200 streams, truncated, unterminated, undecodable and slow
streams, errors that echo the credentials), either as a standing fault or in a script of
faults and replies consumed one request at a time (per provider, or per model on it), for
failover and tool-loop tests::

    with FakeProvider() as fake:
        fake.script("primary", [Fault.status(503), Fault.error_before_content("openrouter")])
        fake.set_reply("fallback", Reply(text="served by fallback"))
        fake.script("agent", [Reply(text="", tool_calls=[ToolCall("search", {"q": "x"})]),
                              Reply(text="final answer")])
        client = openai.OpenAI(base_url=f"{fake.url('primary')}/v1", api_key="test")

The server needs only the standard library. Without it, ``fake.transport()`` and
``fake.async_transport()`` are httpx transports that answer in this process, as
``httpx.MockTransport`` does, for every fault but those about the connection and its bytes.
Under pytest, the ``fake_provider`` fixture yields a started instance. :class:`FakeClock`
makes backoffs instant and :class:`TelemetryRecorder` captures swerve's spans, events and
metrics with the real OTel SDK, for assertions.
"""

from ._model import ErrorStyle, Fault, FaultKind, Reply, ToolCall
from ._recording import FakeClock, TelemetryRecorder
from ._server import FakeProvider

__all__ = [
    "ErrorStyle",
    "FakeClock",
    "FakeProvider",
    "Fault",
    "FaultKind",
    "Reply",
    "TelemetryRecorder",
    "ToolCall",
]
