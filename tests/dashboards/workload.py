"""A swerve process for the end-to-end test: steady traffic against the fake provider, metrics
served for Prometheus through the OpenTelemetry Prometheus exporter.

Run as ``python workload.py CONFIG.json [--shipped]``. It prints ``metrics 127.0.0.1:PORT`` once
serving, then reads commands on stdin, one a line, and answers each with ``ok <command>``:
``outage PROVIDER`` (every request to it gets a 503), ``recover PROVIDER``, ``blip PROVIDER``
(its next request only gets a 429 with ``Retry-After: 2``), ``quit``. It exits on ``quit`` or
when stdin closes, so it never outlives the test.

Calls alternate between a unary call and a stream, both asking for the first route of the
config; failed calls (when every route is down) are ignored. By default about twenty a second
with fast failover timings (:data:`TIMING`), so a test sees an outage within a second or two;
``--shipped`` runs the config as given (swerve's default timings) at about four calls a second,
the pace of one user's agent (:data:`SHIPPED_PACE_S`), as bench/bench_alerts.py does.
"""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
from opentelemetry.exporter.prometheus import PrometheusMetricReader
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.trace import TracerProvider
from prometheus_client import CollectorRegistry, start_http_server

from swerve import Attempt, Failover, FallbackConfig, MemoryHealth, StreamSpec, Telemetry
from swerve._failures import InStreamError
from swerve.testing import FakeProvider, Fault

PACE_S = 0.05  # between calls
SHIPPED_PACE_S = 0.25
# Fast failover so an outage shows within a second or two: one retry, short cooldowns, and a
# breaker that opens after a few failures and probes again soon.
TIMING: dict[str, Any] = {
    "max_retries": 1,
    "backoff_initial_s": 0.02,
    "jitter": False,
    "cooldown_s": 1.5,
    "cooldown_max_s": 3,
    "attempt_timeout_s": 5,
    "breaker": {"window_s": 10, "min_calls": 2, "open_s": 1, "max_open_s": 2},
}


def main(config_path: str, shipped: bool = False) -> int:
    data = json.loads(Path(config_path).read_text())
    settings = data if shipped else {**data, **TIMING}
    config = FallbackConfig.from_mapping(settings, source=config_path)
    pace = SHIPPED_PACE_S if shipped else PACE_S
    requested = next(iter(config.fallbacks))

    registry = CollectorRegistry()
    meter_provider = MeterProvider(metric_readers=[PrometheusMetricReader(registry=registry)])
    telemetry = Telemetry(TracerProvider(), meter_provider)
    failover = Failover(config, MemoryHealth(), telemetry=telemetry)
    server, server_thread = start_http_server(0, addr="127.0.0.1", registry=registry)

    stop = threading.Event()
    with FakeProvider() as fake, httpx.Client() as client:

        def url(attempt: Attempt) -> str:
            return f"{fake.url(attempt.route.provider)}/v1/chat/completions"

        def body(attempt: Attempt, stream: bool) -> dict[str, Any]:
            messages = [{"role": "user", "content": "hi"}]
            return {"model": attempt.route.model, "messages": messages, "stream": stream}

        def complete(attempt: Attempt) -> str:
            response = client.post(url(attempt), json=body(attempt, False))
            response.raise_for_status()
            return str(response.json()["choices"][0]["message"]["content"])

        def chunks(attempt: Attempt) -> Iterator[dict[str, Any]]:
            with client.stream("POST", url(attempt), json=body(attempt, True)) as response:
                response.raise_for_status()
                for line in response.iter_lines():
                    if not line.startswith("data:"):
                        continue
                    payload = line[5:].strip()
                    if payload == "[DONE]":
                        yield {"done": True}
                        continue
                    chunk = json.loads(payload)
                    if "error" in chunk:
                        raise InStreamError(chunk, route=str(attempt.route))
                    yield chunk

        spec: StreamSpec[dict[str, Any]] = StreamSpec(
            part=lambda c: "text" if _delta(c) else None, is_finish=lambda c: "done" in c
        )

        def traffic() -> None:
            n = 0
            while not stop.wait(pace):
                n += 1
                try:
                    if n % 2:
                        failover.call(requested, complete)
                    else:
                        for _ in failover.stream(requested, chunks, spec):
                            pass
                except Exception:  # every route down: the call fails, as it would for a user
                    continue

        worker = threading.Thread(target=traffic, name="workload", daemon=True)
        worker.start()
        print(f"metrics 127.0.0.1:{server.server_port}", flush=True)
        try:
            for line in sys.stdin:
                command, _, provider = line.strip().partition(" ")
                if command == "quit":
                    break
                if command == "outage":
                    fake.set_fault(provider, Fault.status(503))
                elif command == "recover":
                    fake.set_fault(provider, Fault.ok())
                elif command == "blip":
                    fake.script(provider, [Fault.status(429, retry_after=2)])
                else:
                    print(f"error unknown command {line.strip()!r}", flush=True)
                    continue
                print(f"ok {line.strip()}", flush=True)
        finally:
            stop.set()
            worker.join(timeout=10)
    server.shutdown()
    server.server_close()
    server_thread.join()
    meter_provider.shutdown()
    return 0


def _delta(chunk: dict[str, Any]) -> str:
    choices = chunk.get("choices") or [{}]
    return str((choices[0].get("delta") or {}).get("content") or "")


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1], shipped="--shipped" in sys.argv[2:]))
