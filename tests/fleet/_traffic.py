"""Calls running throughout a fault: a sync caller (a thread, httpx.Client) and an async one
(an event loop in another thread, httpx.AsyncClient) call through one Failover until stopped,
and every call is recorded: when it started, how long it took, what answered, or its error."""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import httpx

from swerve import Attempt, Failover, Result
from swerve.testing import FakeProvider

from ._fleet import P

_PACE_S = 0.01  # between one caller's calls: a steady trickle, not a busy loop


@dataclass(frozen=True, slots=True)
class Call:
    mode: str
    start: float  # time.monotonic()
    seconds: float
    route: str | None  # the route that answered; None when the call raised
    primary_attempts: int
    error: str | None = None


def url(fake: FakeProvider, attempt: Attempt) -> str:
    return f"{fake.url(attempt.route.provider)}/v1/chat/completions"


def body(attempt: Attempt) -> dict[str, Any]:
    return {"model": attempt.route.model, "messages": [{"role": "user", "content": "hi"}]}


def complete(client: httpx.Client, fake: FakeProvider, attempt: Attempt) -> str:
    response = client.post(url(fake, attempt), json=body(attempt), timeout=attempt.timeout)
    response.raise_for_status()
    return str(response.json()["choices"][0]["message"]["content"])


async def acomplete(client: httpx.AsyncClient, fake: FakeProvider, attempt: Attempt) -> str:
    response = await client.post(url(fake, attempt), json=body(attempt), timeout=attempt.timeout)
    response.raise_for_status()
    return str(response.json()["choices"][0]["message"]["content"])


class Traffic:
    """``with Traffic(failover, fake) as traffic:`` calls ``route`` from both callers until the
    block ends. ``loop_lag_s`` is the longest the async caller's event loop went without
    running a 10 ms ticker late (a blocked loop shows up there)."""

    def __init__(self, failover: Failover, fake: FakeProvider, route: str = P) -> None:
        self.failover = failover
        self.fake = fake
        self.route = route
        self.calls: list[Call] = []
        self.loop_lag_s = 0.0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._sync, name="traffic-sync", daemon=True),
            threading.Thread(target=lambda: asyncio.run(self._async()), name="traffic-async"),
        ]

    def __enter__(self) -> Traffic:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=15)
        assert not any(t.is_alive() for t in self._threads), "a caller did not stop"

    def _record(
        self, mode: str, start: float, result: Result[str] | None, error: str | None
    ) -> None:
        seconds = time.monotonic() - start
        route = str(result.route) if result is not None else None
        on_primary = sum(str(a.route) == P for a in result.attempts) if result else 0
        with self._lock:
            self.calls.append(Call(mode, start, seconds, route, on_primary, error))

    def _sync(self) -> None:
        with httpx.Client() as client:
            while not self._stop.is_set():
                start = time.monotonic()
                try:
                    result = self.failover.call(
                        self.route, lambda a: complete(client, self.fake, a)
                    )
                except Exception as exc:
                    self._record("sync", start, None, f"{type(exc).__name__}: {exc}")
                else:
                    self._record("sync", start, result, None)
                self._stop.wait(_PACE_S)

    async def _async(self) -> None:
        ticker = asyncio.create_task(self._tick())
        async with httpx.AsyncClient() as client:

            async def call(attempt: Attempt) -> str:
                return await acomplete(client, self.fake, attempt)

            while not self._stop.is_set():
                start = time.monotonic()
                try:
                    result = await self.failover.acall(self.route, call)
                except Exception as exc:
                    self._record("async", start, None, f"{type(exc).__name__}: {exc}")
                else:
                    self._record("async", start, result, None)
                await asyncio.sleep(_PACE_S)
        ticker.cancel()

    async def _tick(self) -> None:
        while True:
            before = time.monotonic()
            await asyncio.sleep(0.01)
            self.loop_lag_s = max(self.loop_lag_s, time.monotonic() - before - 0.01)

    # -- reading what happened ----------------------------------------------------------------
    def since(self, start: float) -> list[Call]:
        """Calls that started at or after ``start`` (a time.monotonic() value)."""
        with self._lock:
            return [c for c in self.calls if c.start >= start]

    def wait_for_calls(self, n: int, since: float, timeout: float = 10.0) -> list[Call]:
        """Block until both callers made ``n`` calls each since ``since``."""
        deadline = time.monotonic() + timeout
        while True:
            calls = self.since(since)
            if all(sum(c.mode == m for c in calls) >= n for m in ("sync", "async")):
                return calls
            if time.monotonic() > deadline:
                raise AssertionError(f"the callers made only {len(calls)} calls in {timeout:g}s")
            time.sleep(0.01)

    def errors(self) -> list[str]:
        with self._lock:
            return [c.error for c in self.calls if c.error is not None]
