"""Nothing swerve keeps grows with the number of distinct routes, models or error codes.

100,000 distinct routes go through ``Failover.call`` and ``Failover.acall``: most succeed,
every tenth fails with a 503 (its route cools down), every seventh with an in-stream error
whose code no provider ever sent before. Counted through the public API (``health.snapshot()``,
the metrics an SDK reader collects) and the process's RSS, everything stays bounded.
"""

from __future__ import annotations

import asyncio
import time
import tracemalloc
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from opentelemetry.trace import NoOpTracerProvider

from swerve import Attempt, Failover, FallbackConfig, MemoryHealth, StreamSpec, Telemetry
from swerve._failures import InStreamError
from swerve._health.store import DEFAULT_MAX_ROUTES
from swerve._telemetry import bounded, names
from swerve.testing import FakeClock, TelemetryRecorder

from ._measure import rss_mb
from .conftest import Report

ROUTES = 100_000
_REQUEST = httpx.Request("POST", "http://127.0.0.1/v1/chat/completions")


def _outcome(i: int) -> Callable[[Attempt], str]:
    """What the i-th route does: fail with a 503, with a never-seen error code, or answer."""

    def fn(attempt: Attempt) -> str:
        if i % 10 == 0:
            response = httpx.Response(503, request=_REQUEST)
            raise httpx.HTTPStatusError("503", request=_REQUEST, response=response)
        if i % 7 == 0:
            raise InStreamError({"error": {"code": f"weird_code_{i}", "message": "no"}})
        return attempt.route.model

    return fn


def _series(recorder: TelemetryRecorder) -> dict[str, int]:
    return {name: len(points) for name, points in recorder.metrics().items()}


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_100k_distinct_routes_leave_bounded_health_series_and_memory(
    figure: Report, mode: str, soak_s: float
) -> None:
    # 3x every bound (30k routes) in the suite, sync and async; 100k in a soak
    # (bench/reliability.py --soak), whose figure docs/reliability.md reports.
    routes = ROUTES if soak_s else 30_000
    recorder = TelemetryRecorder()
    # Spans are not what is measured here (they are not aggregated, and an exporter's memory is
    # its own): a no-op tracer keeps the run short. Metrics go through the real SDK.
    telemetry = Telemetry(NoOpTracerProvider(), recorder.meter_provider)
    health = MemoryHealth()
    clock = FakeClock()
    failover = Failover(
        FallbackConfig(fallbacks={}, max_retries=0, cooldown_s=30),
        health,
        telemetry=telemetry,
        clock=clock,
    )
    warm = [f"warm{i}/model" for i in range(100)]  # steady routes, called throughout

    def route(i: int) -> str:
        return warm[i % 100] if i % 2 else f"provider{i % 97}/model-{i}"

    def run_sync(start: int, stop: int) -> int:
        errors = 0
        for i in range(start, stop):
            clock.advance(0.001)
            try:
                failover.call(route(i), _outcome(i))
            except (httpx.HTTPStatusError, InStreamError):
                errors += 1
        return errors

    async def run_async(start: int, stop: int) -> int:
        errors = 0
        for i in range(start, stop):
            clock.advance(0.001)
            fn = _outcome(i)

            async def afn(attempt: Attempt, fn: Callable[[Attempt], str] = fn) -> str:
                return fn(attempt)

            try:
                await failover.acall(route(i), afn)
            except (httpx.HTTPStatusError, InStreamError):
                errors += 1
        return errors

    def run(start: int, stop: int) -> int:
        return run_sync(start, stop) if mode == "sync" else asyncio.run(run_async(start, stop))

    # Two halves: the first fills every bounded structure to its bound; the second, 50,000
    # more routes never seen, must find nothing left to grow.
    rss_before = rss_mb()
    failed = run(0, routes // 2)
    rss_mid = rss_mb()
    failed += run(routes // 2, routes)
    rss_after = rss_mb()

    t0 = time.perf_counter()
    snapshot = health.snapshot(clock.now)
    snapshot_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    series = _series(recorder)
    collect_s = time.perf_counter() - t0
    recorder.shutdown()

    # Every distinct route's failure (a third of them) made an entry; the store kept its bound.
    assert failed > routes // 10
    # (at most max_routes cooldowns and as many breakers: a route may have both)
    assert len(health) <= 2 * DEFAULT_MAX_ROUTES and len(snapshot) <= 2 * DEFAULT_MAX_ROUTES
    # Route attributes: at most ROUTE_LIMIT names plus _OTHER; error.type at most
    # ERROR_TYPE_LIMIT plus _OTHER. No metric's series count follows the 100k inputs.
    bound = 4 * (bounded.ROUTE_LIMIT + 1) + 4 * (bounded.ERROR_TYPE_LIMIT + 1)
    worst = max(series.values())
    assert worst <= bound, series
    error_types = {
        attrs.get(names.ERROR_TYPE)
        for attrs, _ in _collect_attempts(telemetry)
        if names.ERROR_TYPE in attrs
    }
    assert len(error_types) <= bounded.ERROR_TYPE_LIMIT + 1
    # A guard against a walk that grows with the 100k inputs, not a speed figure: both take
    # well under a second, and a loaded machine must not fail them at a second.
    assert collect_s < 10.0 and snapshot_s < 10.0, (collect_s, snapshot_s)
    grown, second = rss_after - rss_before, rss_after - rss_mid
    # The first half pays for the structures at their bounds (and the allocator's arenas);
    # the second half of never-seen routes must not grow RSS much further.
    assert second < 16 and grown < 96, f"RSS grew {grown:.0f} MB, {second:.0f} in the 2nd half"
    figure(
        f"{routes:,} distinct routes through Failover.{'call' if mode == 'sync' else 'acall'}",
        f"health entries <= {2 * DEFAULT_MAX_ROUTES:,}; series per metric <= {bound:,}; "
        f"RSS: < 16 MB for the second {routes // 2:,} routes, < 96 MB in all; collection and "
        "snapshot < 1 s",
        measured=(
            f"{len(health):,} health entries, {worst:,} series in the largest metric "
            f"({sum(series.values()):,} in all), {len(error_types)} error.type values, "
            f"RSS +{grown:.1f} MB (+{second:.1f} MB in the second half), collection "
            f"{collect_s * 1000:.0f} ms, snapshot {snapshot_s * 1000:.0f} ms"
        ),
    )


def test_100k_distinct_error_types_make_a_bounded_number_of_series(figure: Report) -> None:
    """However error.type is produced, a metric never carries more than its limit of them."""
    recorder = TelemetryRecorder()
    telemetry = recorder.telemetry
    for i in range(ROUTES):
        telemetry.attempt_ended(f"p/m{i % 10}", "failure", f"provider_code_{i}", 0.01)
    series = _series(recorder)
    recorder.shutdown()
    errors = {a.get(names.ERROR_TYPE) for a, _ in _collect_attempts(telemetry)}
    assert len(errors) == bounded.ERROR_TYPE_LIMIT + 1 and bounded.OVERFLOW in errors
    assert series[names.METRIC_ATTEMPTS] <= bounded.ERROR_TYPE_LIMIT + 10
    figure(
        f"{ROUTES:,} distinct error.type values into the attempt metrics",
        f"<= {bounded.ERROR_TYPE_LIMIT + 1} error.type values per metric",
        measured=(
            f"{len(errors)} error.type values, {series[names.METRIC_ATTEMPTS]} attempt series, "
            f"{series[names.METRIC_ATTEMPT_DURATION]} duration series"
        ),
    )


def _collect_attempts(telemetry: Telemetry) -> list[tuple[dict[str, Any], int]]:
    """The attempts counter's points, as its observable counter reports them to a reader."""
    return [
        (dict(obs.attributes or {}), int(obs.value))
        for obs in telemetry.attempts.observe(None)  # type: ignore[arg-type]
    ]


def test_a_long_stream_passes_through_in_constant_memory(figure: Report) -> None:
    # B5: a stream whose chunks are handed on is never held whole (100 MB here, in 1 KB chunks).
    chunks, size = 100_000, 1024
    spec = StreamSpec(part=lambda c: "text", is_finish=lambda c: c == b"end", keep_partial=False)
    failover = Failover(FallbackConfig(fallbacks={"a/m": "b/m"}), MemoryHealth())

    def produce(attempt: object) -> Iterator[bytes]:
        for i in range(chunks):
            yield i.to_bytes(4, "big") * (size // 4)
        yield b"end"

    tracemalloc.start()
    try:
        seen = sum(len(c) for c in failover.stream("a/m", produce, spec) if isinstance(c, bytes))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert seen == chunks * size + 3
    assert peak < 8 << 20, f"peak {peak / 2**20:.1f} MB while streaming {seen / 2**20:.0f} MB"
    figure(
        "a 100 MB stream through Failover.stream (keep_partial=False, as the transport uses)",
        "peak traced memory < 8 MB",
        measured=f"{seen / 2**20:.0f} MB streamed, peak {peak / 2**20:.2f} MB",
    )
