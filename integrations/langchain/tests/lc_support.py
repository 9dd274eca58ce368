"""Helpers shared by the adapter's tests (imported as a plain module: this folder is on
sys.path, and no other test folder has a module of this name)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import httpx
import openrouter
from langchain_anthropic import ChatAnthropic
from langchain_openai import ChatOpenAI
from langchain_openrouter import ChatOpenRouter
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from swerve import FallbackConfig, Telemetry
from swerve.testing import FakeProvider

# Routes: the provider segment is the fake provider's name for it.
P = "primary/fake-model"
F = "fallback/claude-fake"
OPENAI_FALLBACK = "fallback/fake-model-large"


def seed_config(**kw: Any) -> FallbackConfig:
    params: dict[str, Any] = {
        "fallbacks": {P: F, F: P},
        "jitter": False,
        "cooldown_s": 60,
        "max_retries": 0,
    }
    params.update(kw)
    return FallbackConfig(**params)


def chat_openai(
    fake: FakeProvider, provider: str, model: str = "fake-model", **kw: Any
) -> ChatOpenAI:
    return ChatOpenAI(
        base_url=f"{fake.url(provider)}/v1", api_key="test", model=model, max_retries=0, **kw
    )


def chat_anthropic(
    fake: FakeProvider, provider: str, model: str = "claude-fake", **kw: Any
) -> ChatAnthropic:
    return ChatAnthropic(
        base_url=fake.url(provider), api_key="test", model=model, max_retries=0, **kw
    )


class _Fingerprint(httpx.BaseTransport):
    """The openrouter SDK requires ``system_fingerprint`` on a completion; the fake provider
    does not send one yet. Adds ``"system_fingerprint": null`` to successful JSON bodies and
    changes nothing else (errors, streams and faults pass through as the fake sent them)."""

    def __init__(self) -> None:
        self._inner = httpx.HTTPTransport()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        return _fingerprinted(self._inner.handle_request(request), request)

    def close(self) -> None:
        self._inner.close()


class _AsyncFingerprint(httpx.AsyncBaseTransport):
    def __init__(self) -> None:
        self._inner = httpx.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self._inner.handle_async_request(request)
        if response.headers.get("content-type", "").startswith("application/json"):
            await response.aread()
        return _fingerprinted(response, request)

    async def aclose(self) -> None:
        await self._inner.aclose()


def _fingerprinted(response: httpx.Response, request: httpx.Request) -> httpx.Response:
    import json

    if response.status_code != 200 or not response.headers.get("content-type", "").startswith(
        "application/json"
    ):
        return response
    body = json.loads(response.read())
    if "choices" in body and "system_fingerprint" not in body:
        body["system_fingerprint"] = None
    headers = {k: v for k, v in response.headers.items() if k.lower() != "content-length"}
    return httpx.Response(200, headers=headers, json=body, request=request)


def chat_openrouter(
    fake: FakeProvider, provider: str, model: str = "anthropic/claude-fake", **kw: Any
) -> ChatOpenRouter:
    client = openrouter.OpenRouter(
        api_key="test",
        server_url=f"{fake.url(provider)}/v1",
        client=httpx.Client(transport=_Fingerprint()),
        async_client=httpx.AsyncClient(transport=_AsyncFingerprint()),
    )
    return ChatOpenRouter(
        base_url=f"{fake.url(provider)}/v1", api_key="test", model=model, max_retries=0,
        client=client, **kw,
    )  # fmt: skip


@dataclass
class FakeClock:
    """Wall and monotonic time that only move when the engine waits (no real sleeping)."""

    now: float = 1_800_000_000.0
    sleeps: list[float] = field(default_factory=list)

    def time(self) -> float:
        return self.now

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds

    async def async_sleep(self, seconds: float) -> None:
        self.sleep(seconds)

    def advance(self, seconds: float) -> None:
        self.now += seconds


@dataclass
class Otel:
    spans: InMemorySpanExporter
    reader: InMemoryMetricReader
    telemetry: Telemetry
    tracer_provider: TracerProvider

    def finished(self) -> list[ReadableSpan]:
        return list(self.spans.get_finished_spans())

    def call_spans(self) -> list[ReadableSpan]:
        return [s for s in self.finished() if s.name.startswith("swerve ")]

    def attempt_spans(self) -> list[ReadableSpan]:
        return [s for s in self.finished() if "swerve.attempt.number" in (s.attributes or {})]

    def events(self, name: str | None = None) -> list[tuple[str, dict[str, object]]]:
        out = []
        for span in self.call_spans():
            for event in span.events:
                if name is None or event.name == name:
                    out.append((event.name, dict(event.attributes or {})))
        return out

    def all_events(self, name: str) -> list[dict[str, object]]:
        return [
            dict(e.attributes or {}) for s in self.finished() for e in s.events if e.name == name
        ]

    def metrics(self) -> dict[str, list[tuple[dict[str, object], object]]]:
        out: dict[str, list[tuple[dict[str, object], object]]] = {}
        data = self.reader.get_metrics_data()
        if data is None:
            return out
        for rm in data.resource_metrics:
            for sm in rm.scope_metrics:
                for metric in sm.metrics:
                    for point in metric.data.data_points:
                        value = getattr(point, "value", None)
                        if value is None:
                            value = getattr(point, "count", None)
                        out.setdefault(metric.name, []).append(
                            (dict(point.attributes or {}), value)
                        )
        return out

    def counter(self, name: str, **attrs: object) -> float:
        total = 0.0
        for point_attrs, value in self.metrics().get(name, []):
            if all(point_attrs.get(k.replace("__", ".")) == v for k, v in attrs.items()):
                total += float(value)  # type: ignore[arg-type]
        return total
