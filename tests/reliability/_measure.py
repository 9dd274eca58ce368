"""What the reliability tests measure with, shared: the process's memory and descriptors, and
hypothesis settings that scale with the soak."""

from __future__ import annotations

import os
from datetime import timedelta

from hypothesis import HealthCheck, settings

DEADLINE = timedelta(seconds=2)  # one input takes well under a millisecond: this is a hang


def rss_mb() -> float:
    """The process's resident set now (VmRSS), in MB."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS in /proc/self/status")


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def fuzz(soak_s: float, examples: int) -> settings:
    """``examples`` in CI (soak 0); a soak tries about ten times as many per minute of soak."""
    scaled = examples if soak_s <= 0 else int(examples * max(1.0, soak_s / 6))
    return settings(
        max_examples=scaled,
        deadline=DEADLINE,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
