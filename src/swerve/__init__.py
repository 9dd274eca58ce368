"""swerve: OpenTelemetry-instrumented failover for LLM calls.

When a ``provider/model`` route fails, swerve retries it with backoff, swaps to the configured
sibling route, cools the failed route down so later calls start on a healthy one, and reports
every decision as OpenTelemetry spans, events and metrics.
"""

import logging
from importlib.metadata import PackageNotFoundError, version

from ._config import BreakerConfig, ConfigError, FallbackConfig
from ._engine import (
    AsyncFailoverStream,
    Attempt,
    AttemptRecord,
    Failover,
    FailoverStream,
    MidStreamError,
    PartKind,
    Result,
    StreamReset,
    StreamSpec,
)
from ._redis import RedisHealth
from ._routes import Route
from .failures import Classifier, Failure, FailureKind, UpstreamError, classify
from .health import HealthStore, MemoryHealth
from .telemetry import Telemetry

try:
    __version__ = version("swerve")
except PackageNotFoundError:  # pragma: no cover - running from a source tree
    __version__ = "0.0.0"

# A library logs; the application decides where to (the logging HOWTO's advice).
logging.getLogger("swerve").addHandler(logging.NullHandler())

__all__ = [
    "AsyncFailoverStream",
    "Attempt",
    "AttemptRecord",
    "BreakerConfig",
    "Classifier",
    "ConfigError",
    "Failover",
    "FailoverStream",
    "Failure",
    "FailureKind",
    "FallbackConfig",
    "HealthStore",
    "MemoryHealth",
    "MidStreamError",
    "PartKind",
    "RedisHealth",
    "Result",
    "Route",
    "StreamReset",
    "StreamSpec",
    "Telemetry",
    "UpstreamError",
    "__version__",
    "classify",
]
