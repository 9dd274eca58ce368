"""swerve's traces in a real trace backend: Arize Phoenix, fed by the stock OTLP/HTTP exporter.

tests/e2e/traced_app.py runs two real failovers against the fake provider, one through
LangChain's ``FailoverChatModel`` and one through the openai SDK over ``FailoverTransport``,
exporting with the standard OTLP environment variables; these tests read the traces back
through Phoenix's REST API and check their exact shape, so the OTLP wire format (ids, parents,
kinds of values, events, statuses) is proven against a real backend.
"""

from __future__ import annotations

import json

import pytest

from swerve._telemetry import names as n

from ._flows import FLOWS, KEYS, Flow
from ._phoenix import Phoenix
from ._trace import SPANS_PER_FLOW, FailoverRun

pytestmark = pytest.mark.parametrize("flow", FLOWS, ids=[f.name for f in FLOWS])


def test_the_call_span_has_one_child_per_attempt(failover_run: FailoverRun, flow: Flow) -> None:
    trace = failover_run.traces[flow.name]
    # One GenAI inference span for the call, named for the model it sent on the wire; the
    # attempts are swerve's own, named for their routes.
    assert trace.root["name"] == n.SPAN_CALL.format(operation="chat", model=flow.model_primary)
    attempts = trace.children(trace.root)
    assert [a["name"] for a in attempts] == [
        n.SPAN_ATTEMPT.format(route=flow.primary),
        n.SPAN_ATTEMPT.format(route=flow.primary),
        n.SPAN_ATTEMPT.format(route=flow.fallback),
    ]
    assert not [a for a in attempts if n.GEN_AI_OPERATION_NAME in a["attributes"]]
    seen = [
        (
            a["attributes"][n.ROUTE],
            a["attributes"][n.ATTEMPT_NUMBER],
            a["attributes"][n.ATTEMPT_OUTCOME],
            a["attributes"].get(n.HTTP_RESPONSE_STATUS_CODE),
            a["attributes"].get(n.ERROR_TYPE),
            a["status_code"],
        )
        for a in attempts
    ]
    assert seen == [
        (flow.primary, 1, "failure", 503, "503", "ERROR"),
        (flow.primary, 2, "failure", 503, "503", "ERROR"),
        (flow.fallback, 3, "success", None, None, "UNSET"),
    ]
    assert attempts[1]["attributes"][n.ATTEMPT_RETRY] == 1
    assert attempts[2]["attributes"][n.SWAP_INDEX] == 1
    assert {a["attributes"][n.FAILURE_KIND] for a in attempts[:2]} == {"unavailable"}


def test_the_http_client_spans_sit_under_the_attempts(
    failover_run: FailoverRun, flow: Flow
) -> None:
    trace = failover_run.traces[flow.name]
    assert len(trace.spans) == SPANS_PER_FLOW
    fakes = [flow.fake_primary, flow.fake_primary, flow.fake_fallback]
    for attempt, status, fake in zip(
        trace.children(trace.root), [503, 503, 200], fakes, strict=True
    ):
        (http,) = trace.children(attempt)
        attributes = http["attributes"]
        assert http["name"] == "POST"
        # The instrumentation's default (old) HTTP conventions, or the stable ones if opted in.
        assert (
            attributes.get("http.status_code", attributes.get(n.HTTP_RESPONSE_STATUS_CODE))
            == status
        )
        url = attributes.get("http.url", attributes.get("url.full"))
        assert url.endswith(f"/{fake}/v1/chat/completions")
        assert trace.children(http) == []


def test_the_call_span_carries_retry_cooldown_and_swap(
    failover_run: FailoverRun, flow: Flow
) -> None:
    events = failover_run.traces[flow.name].root["events"]
    assert [e["name"] for e in events] == [n.EVENT_RETRY, n.EVENT_COOLDOWN, n.EVENT_SWAP]
    retry, cooldown, swap = (e["attributes"] for e in events)
    assert retry == {
        n.ROUTE: flow.primary,
        n.ATTEMPT_NUMBER: 1,
        n.RETRY_DELAY: 2.0,
        n.ERROR_TYPE: "503",
        n.FAILURE_KIND: "unavailable",
        n.HTTP_RESPONSE_STATUS_CODE: 503,
    }
    assert cooldown[n.ROUTE] == flow.primary and cooldown[n.COOLDOWN_SECONDS] == 10.0
    assert swap == {
        n.ROUTE_FROM: flow.primary,
        n.ROUTE_TO: flow.fallback,
        n.REASON: "unavailable",
        n.SWAP_INDEX: 1,
    }


def test_the_served_route_and_model(failover_run: FailoverRun, flow: Flow) -> None:
    trace = failover_run.traces[flow.name]
    call = trace.root["attributes"]
    assert (call[n.ROUTE_REQUESTED], call[n.ROUTE_SERVED]) == (flow.primary, flow.fallback)
    assert call[n.GEN_AI_RESPONSE_MODEL] == flow.model_fallback
    assert (call[n.CALL_ATTEMPTS], call[n.CALL_RETRIES], call[n.CALL_SWAPS]) == (3, 1, 1)
    served = trace.children(trace.root)[-1]["attributes"]
    assert served[n.GEN_AI_RESPONSE_MODEL] == flow.model_fallback
    assert failover_run.answers[flow.name]["text"] == f"hello from {flow.fake_fallback}"
    requests = failover_run.answers["requests"]
    assert (requests[flow.fake_primary], requests[flow.fake_fallback]) == (2, 1)


def test_no_api_key_reaches_the_backend(
    phoenix: Phoenix, failover_run: FailoverRun, flow: Flow
) -> None:
    # The first failure echoed the request's headers; its message (redacted and bounded) is
    # on the attempt span, and the httpx spans carry URLs and statuses.
    trace = failover_run.traces[flow.name]
    first = trace.children(trace.root)[0]
    assert first["attributes"][n.FAILURE_MESSAGE].startswith("received headers: ")
    projects = phoenix.client.get("/v1/projects").json()["data"]
    stored = json.dumps([phoenix.spans(p["name"]) for p in projects])  # every attribute, event
    for name, key in KEYS.items():
        assert key not in stored, name
        assert key.removeprefix("sk-") not in stored, name
