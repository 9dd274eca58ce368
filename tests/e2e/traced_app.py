"""An application traced the way docs/observability.md says, run as its own process by the
Phoenix e2e tests (``python -m tests.e2e.traced_app``): a real failover through LangChain's
``FailoverChatModel`` over two ``ChatOpenAI`` routes, and one through the openai SDK over
``FailoverTransport``, both against the fake provider (tests/e2e/_flows.py).

Tracing is set up only through the standard OpenTelemetry environment variables
(``OTEL_SERVICE_NAME``, ``OTEL_RESOURCE_ATTRIBUTES``, ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``,
``OTEL_BSP_SCHEDULE_DELAY``) read by the stock SDK and OTLP/HTTP exporter, with the httpx and
httpx2 instrumentations on (the openai SDK runs on httpx2). Its own process, because those
patch httpx for the whole interpreter.

It runs both failovers at once, then waits for a line on stdin (the backend is up) before it
flushes its spans, and prints one JSON line: what each flow answered and the requests the
fake provider saw.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import httpx2
import openai
from langchain_openai import ChatOpenAI
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.instrumentation.httpx import HTTPX2ClientInstrumentor, HTTPXClientInstrumentor
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from pydantic import SecretStr
from swerve_langchain import FailoverChatModel

from swerve import Failover, FallbackConfig, Telemetry
from swerve.httpx import FailoverTransport, Upstream
from swerve.testing import FakeClock, FakeProvider, Reply

from ._flows import FLOWS, KEYS, LANGCHAIN, OUTAGE, SDK, Flow


def failover(flow: Flow) -> Failover:
    config = FallbackConfig(fallbacks={flow.primary: flow.fallback}, max_retries=1, max_swaps=1)
    # The global tracer provider. Failure messages are recorded (redacted), so an echoed key
    # would reach the backend if redaction missed it. FakeClock: the backoff is not waited.
    return Failover(config, telemetry=Telemetry(record_messages=True), clock=FakeClock())


def langchain_flow(fake: FakeProvider) -> dict[str, Any]:
    flow = LANGCHAIN

    def route(provider: str, model: str, key: str) -> ChatOpenAI:
        url = f"{fake.url(provider)}/v1"
        return ChatOpenAI(base_url=url, api_key=SecretStr(key), model=model, max_retries=0)

    model = FailoverChatModel(
        routes={
            flow.primary: route(flow.fake_primary, flow.model_primary, KEYS["langchain-primary"]),
            flow.fallback: route(
                flow.fake_fallback, flow.model_fallback, KEYS["langchain-fallback"]
            ),
        },
        primary=flow.primary,
        failover=failover(flow),
    )
    message = model.invoke("Say hello.")
    return {"text": message.content, "served": message.response_metadata["swerve"]["served"]}


def sdk_flow(fake: FakeProvider) -> dict[str, Any]:
    flow = SDK
    transport = FailoverTransport(
        upstreams={
            flow.primary: Upstream(
                f"{fake.url(flow.fake_primary)}/v1",
                api_key=KEYS["sdk-primary"],
                model=flow.model_primary,
            ),
            flow.fallback: Upstream(
                f"{fake.url(flow.fake_fallback)}/v1",
                api_key=KEYS["sdk-fallback"],
                model=flow.model_fallback,
            ),
        },
        failover=failover(flow),
    )
    with httpx2.Client(transport=transport) as http:
        client = openai.OpenAI(
            base_url="http://swerve.invalid/v1",
            api_key=KEYS["sdk-client"],
            max_retries=0,
            http_client=http,
        )
        completion = client.chat.completions.create(
            model=flow.primary, messages=[{"role": "user", "content": "Say hello."}]
        )
    return {"text": completion.choices[0].message.content, "model": completion.model}


def main() -> None:
    provider = TracerProvider()  # resource from OTEL_SERVICE_NAME / OTEL_RESOURCE_ATTRIBUTES
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))  # OTEL_EXPORTER_OTLP_*
    trace.set_tracer_provider(provider)
    HTTPXClientInstrumentor().instrument()
    HTTPX2ClientInstrumentor().instrument()
    with FakeProvider() as fake:
        for flow in FLOWS:
            fake.set_reply(flow.fake_fallback, Reply(text=f"hello from {flow.fake_fallback}"))
            fake.script(flow.fake_primary, list(OUTAGE))
        results: dict[str, Any] = {"langchain": langchain_flow(fake), "sdk": sdk_flow(fake)}
        results["requests"] = {
            name: fake.requests(name)
            for flow in FLOWS
            for name in (flow.fake_primary, flow.fake_fallback)
        }
    sys.stdin.readline()  # the test's word that the backend is listening
    if not provider.force_flush(timeout_millis=30_000):
        sys.exit("the spans were not exported within 30 s")
    provider.shutdown()
    print(json.dumps(results), flush=True)


if __name__ == "__main__":
    main()
