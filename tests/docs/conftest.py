"""One set-up per document: its blocks share a namespace, a fake provider the docs' real
URLs are sent to, the API keys they read, a clean process-wide health store, and the real
services the page names (a redis-server, an OTLP receiver), checked after its last block."""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from sybil import Document

from swerve import Failover, FallbackConfig, MemoryHealth, Telemetry
from swerve._telemetry.names import INSTRUMENTATION_NAME
from swerve.testing import FakeProvider, Reply, ToolCall

from ._documents import Block
from ._placeholders import API_KEY_VARS, placeholders
from ._process_globals import contained_globals
from ._redirect import redirect_providers
from ._services import DocsRedis, OtlpReceiver, docs_redis

SERVICE_NAME = "swerve-docs"  # OTEL_SERVICE_NAME for the pages' exporters
Check = Callable[[], None]


def _clear_process_health() -> None:
    # The docs build Failovers without health=, so they share the process-wide store; a
    # cooldown one document (or another test) learnt must not decide where the next starts.
    Failover().health.clear()


@contextmanager
def _document_setup(block: Block) -> Iterator[tuple[list[Check], FakeProvider]]:
    """Yields the checks to run after the document's last block, and the page's fake."""
    text = block.document.text
    checks: list[Check] = []
    with ExitStack() as stack, FakeProvider() as fake, pytest.MonkeyPatch.context() as mp:
        for var in ("SWERVE_FALLBACK_CONFIG", "SWERVE_HEALTH_URL", "SWERVE_HEALTH_PREFIX"):
            mp.delenv(var, raising=False)
        for var in API_KEY_VARS:
            mp.setenv(var, "test-key")
        redirect_providers(mp, fake)
        if "redis://localhost:6379" in text or "port=6379" in text:
            checks.append(_wrote_to(stack.enter_context(docs_redis(mp))))
        receiver = None
        if "OTLPSpanExporter" in text:
            receiver = OtlpReceiver()
            stack.callback(receiver.stop)
            for var in ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_RESOURCE_ATTRIBUTES"):
                mp.delenv(var, raising=False)
            mp.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.url)
            mp.setenv("OTEL_SERVICE_NAME", SERVICE_NAME)
        block.document.namespace.update(placeholders(block.document_name, fake))
        if block.document_name == "integrations/langchain/README.md":
            checks.append(_answers(block.document.namespace, fake))
        _clear_process_health()
        try:
            with contained_globals(mp) as providers:
                if receiver is not None:
                    checks.append(_exported_to(receiver, providers))
                yield checks, fake
        finally:
            # What the blocks built (a transport claims its route names in the process-wide
            # store while it lives) must not outlive the document.
            block.document.namespace.clear()
            gc.collect()
            _clear_process_health()


def _wrote_to(redis: DocsRedis) -> Check:
    def check() -> None:
        # Every store the blocks built reached the server, and wrote there under its prefix.
        assert redis.closed, "no doc block built and closed a RedisHealth"
        assert redis.prefixes() == set(redis.closed), (redis.prefixes(), redis.closed)

    return check


def _answers(namespace: dict[str, Any], fake: FakeProvider) -> Check:
    def check() -> None:
        # The page only builds its model: it is a chat model that answers, from its primary.
        message = namespace["model"].invoke("Hello")
        assert message.content and fake.requests("openrouter") == 1, message

    return check


def _exported_to(receiver: OtlpReceiver, providers: list[Any]) -> Check:
    def check() -> None:
        # The provider the page set up, given to a Failover as the page says swerve takes it
        # (the global one, here handed over directly: the suite owns the process's globals).
        (provider,) = [p for p in providers if isinstance(p, TracerProvider)]
        failover = Failover(
            FallbackConfig(fallbacks={"a/m": "b/m"}),
            health=MemoryHealth(),
            telemetry=Telemetry(provider),
        )
        assert failover.call("a/m", lambda attempt: "ok").value == "ok"
        assert provider.force_flush(10_000)
        spans = receiver.wait_for_spans()
        assert {resource.get("service.name") for resource, _, _ in spans} == {SERVICE_NAME}
        assert {scope for _, scope, _ in spans} == {INSTRUMENTATION_NAME}, spans

    return check


def _script_agent(block: Block, fake: FakeProvider) -> None:
    """A recipe of docs/frameworks.md runs its agent's tool: the page's primary
    (api.openai.com) asks for ``get_weather`` once, then answers (a smolagents agent answers
    through its ``final_answer`` tool)."""
    if block.document_name != "frameworks.md" or "def get_weather" not in block.source:
        return
    if "smolagents" in block.source:
        final = Reply(text="", tool_calls=[ToolCall("final_answer", {"answer": "sunny in Oslo"})])
    else:
        final = Reply(text="It is sunny in Oslo.")
    asked = Reply(text="", tool_calls=[ToolCall("get_weather", {"city": "Oslo"})])
    fake.script("openai", [asked, final])


class DocumentSessions:
    """The set-up of the document whose blocks are running; the blocks of one document run one
    after another (in file order), so a new document ends the last one's set-up."""

    def __init__(self) -> None:
        self._stack = ExitStack()
        self._current: Document | None = None
        self._checks: list[Check] = []

    def enter(self, block: Block) -> None:
        if block.document is not self._current:
            self.close()
            self._checks, self._fake = self._stack.enter_context(_document_setup(block))
            self._current = block.document
        _script_agent(block, self._fake)

    def check(self) -> None:
        """After the document's last block: what its blocks built reached the real service."""
        for check in self._checks:
            check()

    def close(self) -> None:
        self._stack.close()
        self._current = None
        self._checks = []


@pytest.fixture(scope="module")
def document_sessions() -> Iterator[DocumentSessions]:
    sessions = DocumentSessions()
    yield sessions
    sessions.close()
