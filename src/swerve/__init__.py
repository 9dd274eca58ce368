"""swerve: OpenTelemetry-instrumented failover for LLM calls.

When a ``provider/model`` route fails, swerve retries it with backoff, swaps to the configured
sibling route, cools the failed route down so later calls start on a healthy one, and reports
every decision as OpenTelemetry spans, events and metrics.
"""

from ._engine.clock import Clock
from ._engine.config import BreakerConfig, ConfigError, FallbackConfig
from ._engine.failover import Failover
from ._engine.results import (
    Attempt,
    AttemptRecord,
    MidStreamError,
    PartKind,
    Result,
    SkippedRoute,
    StreamReset,
    StreamSpec,
)
from ._engine.routes import Route
from ._failures import Classifier, Failure, FailureKind, UpstreamError
from ._health.redis import RedisHealth
from ._health.store import HealthStore, MemoryHealth
from ._telemetry.telemetry import Telemetry
from ._version import __version__

# No NullHandler on "swerve": with logging unconfigured, Python's last-resort handler shows
# WARNING and above on stderr (a swap, a health store that went away), and an application that
# configures logging decides as usual. Nothing below WARNING is shown unasked.

__all__ = [
    "Attempt",
    "AttemptRecord",
    "BreakerConfig",
    "Classifier",
    "Clock",
    "ConfigError",
    "Failover",
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
    "SkippedRoute",
    "StreamReset",
    "StreamSpec",
    "Telemetry",
    "UpstreamError",
    "__version__",
]
