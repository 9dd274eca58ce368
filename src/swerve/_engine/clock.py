"""The one clock swerve reads: wall time, monotonic time, waiting and randomness.

Everything that asks what time it is, waits or draws a random number takes a :class:`Clock`,
so a test swaps them all at once with ``Failover(clock=FakeClock())`` (stamina's single
testing switch is the model: one object, not five callables).
"""

from __future__ import annotations

import asyncio
import random as _random
import time
from typing import Protocol, runtime_checkable

__all__ = ["SYSTEM_CLOCK", "Clock", "SystemClock"]


@runtime_checkable
class Clock(Protocol):
    """What swerve needs of time. ``time`` stamps cooldowns and breakers (shared across
    processes, so wall time); ``monotonic`` measures durations and deadlines; ``random``
    returns a float in ``[0, 1)`` for backoff jitter."""

    def time(self) -> float: ...

    def monotonic(self) -> float: ...

    def sleep(self, seconds: float) -> None: ...

    async def async_sleep(self, seconds: float) -> None: ...

    def random(self) -> float: ...


class SystemClock:
    """The real clocks, :func:`time.sleep`, :func:`asyncio.sleep` and :func:`random.random`."""

    __slots__ = ()

    def time(self) -> float:
        return time.time()

    def monotonic(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)

    async def async_sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)

    def random(self) -> float:
        return _random.random()

    def __repr__(self) -> str:
        return "SystemClock()"


SYSTEM_CLOCK: Clock = SystemClock()
