"""What every benchmark here shares: traced telemetry, the fake provider in its own process,
and interleaved timing. Run the benchmarks from the project root (``uv run python bench/...``)."""

from __future__ import annotations

import atexit
import importlib
import io
import multiprocessing
import re
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

from swerve import Telemetry
from swerve.testing import FakeProvider


class _Discard(SpanExporter):
    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return SpanExportResult.SUCCESS


def traced() -> tuple[Telemetry, TracerProvider, MeterProvider]:
    """Tracing on as in production: the SDK, a BatchSpanProcessor (its export discarded)."""
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(BatchSpanProcessor(_Discard()))
    meter_provider = MeterProvider(metric_readers=[InMemoryMetricReader()])
    return Telemetry(tracer_provider, meter_provider), tracer_provider, meter_provider


# A line that imports swerve by its absolute name (the package's own, or its submodules').
_IMPORTS_SWERVE = re.compile(rb"^(\s*(?:from|import) )swerve\b", re.MULTILINE)


def build_at(rev: str) -> tuple[ModuleType, ModuleType]:
    """swerve as it was at git revision ``rev``, imported beside the working tree's own, for a
    before/after interleaved in one process: ``(swerve, swerve.httpx)`` of that build.

    Its ``src/swerve`` is exported (``git archive``) into a temporary directory as the package
    ``swerve_<commit>``, with its own absolute imports of swerve renamed to match (relative
    imports need nothing). Only its code differs: it runs on this environment's dependencies.
    """
    root = Path(__file__).resolve().parent.parent
    sha = subprocess.run(
        ["git", "rev-parse", "--short=10", f"{rev}^{{commit}}"],
        cwd=root,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    name = f"swerve_{sha}"
    if name not in sys.modules:
        archive = subprocess.run(
            ["git", "archive", "--format=tar", sha, "src/swerve"],
            cwd=root,
            check=True,
            capture_output=True,
        ).stdout
        into = Path(tempfile.mkdtemp(prefix="swerve-build-"))
        atexit.register(shutil.rmtree, into, ignore_errors=True)
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            tar.extractall(into, filter="data")
        package = into / name
        (into / "src" / "swerve").rename(package)
        for module in package.rglob("*.py"):
            module.write_bytes(_IMPORTS_SWERVE.sub(rb"\1" + name.encode(), module.read_bytes()))
        sys.path.insert(0, str(into))
    return importlib.import_module(name), importlib.import_module(f"{name}.httpx")


def _serve(port: Any, stop: Any) -> None:
    with FakeProvider() as fake:
        port.value = fake.port
        stop.wait()


@contextmanager
def fake_provider_process() -> Iterator[str]:
    """The fake provider's base URL, served from its own process: sharing the GIL with it
    would bill its work to whichever side of a comparison happens to be running."""
    port, stop = multiprocessing.Value("i", 0), multiprocessing.Event()
    server = multiprocessing.Process(target=_serve, args=(port, stop), daemon=True)
    server.start()
    deadline = time.monotonic() + 10
    while not port.value and time.monotonic() < deadline:
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port.value}"
    finally:
        stop.set()
        server.join(timeout=5)


def median_us(samples: list[int]) -> float:
    return statistics.median(samples) / 1000


def interleaved(
    first: Callable[[], object], second: Callable[[], object], n: int
) -> tuple[float, float]:
    """Median microseconds of each, run alternately so drift hits both alike."""
    a: list[int] = []
    b: list[int] = []
    for _ in range(n):
        t0 = time.perf_counter_ns()
        first()
        t1 = time.perf_counter_ns()
        second()
        t2 = time.perf_counter_ns()
        a.append(t1 - t0)
        b.append(t2 - t1)
    return median_us(a), median_us(b)
