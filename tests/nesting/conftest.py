"""Each instrumentation family installed and active, on the real OTel SDK.

The instrumentors patch LangChain, the openai SDK and httpx2 for the whole interpreter, so
each family is instrumented once (package scope, one family after the other) on the tracer
provider of one :class:`TelemetryRecorder`, and uninstrumented at the end (and what its
``uninstrument()`` leaves patched is put back, see ``_patches``); every test starts with an
empty span exporter.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from swerve import Failover, FallbackConfig, MemoryHealth
from swerve.testing import FakeClock, TelemetryRecorder

from ._families import FAMILIES, Family
from ._patches import Snapshot

PRIMARY, FALLBACK = "primary/gpt-5-mini", "fallback/gpt-5-mini"


@pytest.fixture(scope="package", params=sorted(FAMILIES))
def instrumented(request: pytest.FixtureRequest) -> Iterator[tuple[Family, TelemetryRecorder]]:
    family = FAMILIES[request.param]
    import langchain_openai  # noqa: F401  (what the families patch, imported before the snapshot)
    import openai  # noqa: F401

    snapshot = Snapshot()
    recorder = TelemetryRecorder()
    started = family.instrument(recorder.tracer_provider)
    yield family, recorder
    for instrumentor in reversed(started):
        instrumentor.uninstrument()
    snapshot.restore()
    recorder.shutdown()


@pytest.fixture
def family(instrumented: tuple[Family, TelemetryRecorder]) -> Family:
    return instrumented[0]


@pytest.fixture
def otel(instrumented: tuple[Family, TelemetryRecorder]) -> Iterator[TelemetryRecorder]:
    recorder = instrumented[1]
    recorder.spans.clear()
    yield recorder
    recorder.spans.clear()


@pytest.fixture
def failover(otel: TelemetryRecorder) -> Failover:
    """One retry on the primary, then one swap to the fallback; backoffs not waited."""
    config = FallbackConfig(fallbacks={PRIMARY: FALLBACK}, max_retries=1, max_swaps=1)
    return Failover(config, health=MemoryHealth(), telemetry=otel.telemetry, clock=FakeClock())
