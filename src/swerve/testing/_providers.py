"""The fake provider's state: each named provider's reply, standing fault, fault script and
received requests, shared under one lock by the control surface and the request handlers."""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field

from ._model import Fault, Reply
from ._wires import Body

__all__ = ["Provider", "Providers", "check_name"]


@dataclass
class Provider:
    reply: Reply | None = None
    fault: Fault = field(default_factory=Fault.ok)
    script: deque[Fault] = field(default_factory=deque)
    # Hung requests wait on this; it is set (and replaced) whenever the faults change.
    wake: threading.Event = field(default_factory=threading.Event)
    bodies: list[Body] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)

    def rouse(self) -> None:
        self.wake.set()
        self.wake = threading.Event()


class Providers:
    """Every named provider (created on first use), and a condition that tells waiters when a
    request arrives."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._providers: dict[str, Provider] = {}

    def set_reply(self, provider: str, reply: Reply) -> None:
        with self._cond:
            self._get(provider).reply = reply

    def set_fault(self, provider: str, fault: Fault) -> None:
        with self._cond:
            state = self._get(provider)
            state.fault = fault
            state.rouse()

    def script(self, provider: str, faults: Iterable[Fault]) -> None:
        with self._cond:
            state = self._get(provider)
            state.script = deque(faults)
            state.rouse()

    def release_all(self) -> None:
        """Wake every hung request (the server is stopping)."""
        with self._cond:
            for state in self._providers.values():
                state.rouse()

    def received(self, provider: str) -> list[Body]:
        with self._cond:
            return list(self._get(provider).bodies)

    def received_headers(self, provider: str) -> list[dict[str, str]]:
        with self._cond:
            return [dict(h) for h in self._get(provider).headers]

    def reset_counts(self) -> None:
        with self._cond:
            for state in self._providers.values():
                state.bodies.clear()
                state.headers.clear()

    def wait_for_requests(self, provider: str, n: int, timeout: float) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: len(self._get(provider).bodies) >= n, timeout)

    # -- used by the request handler ------------------------------------------------------

    def record(self, provider: str, body: Body, headers: dict[str, str]) -> None:
        with self._cond:
            state = self._get(provider)
            state.bodies.append(body)
            state.headers.append(headers)
            self._cond.notify_all()

    def next(self, provider: str) -> tuple[Fault, Reply, threading.Event]:
        """The fault for the next completion request, the reply, and the hang wake-up event."""
        with self._cond:
            state = self._get(provider)
            fault = state.script.popleft() if state.script else state.fault
            return fault, state.reply or Reply(), state.wake

    def standing(self, provider: str) -> tuple[Fault, threading.Event]:
        with self._cond:
            state = self._get(provider)
            return state.fault, state.wake

    def _get(self, provider: str) -> Provider:
        check_name(provider)
        return self._providers.setdefault(provider, Provider())


def check_name(provider: str) -> None:
    if not isinstance(provider, str):
        raise TypeError(f"provider must be a str (its URL path segment), got {provider!r}")
    if not provider or "/" in provider or "?" in provider:
        raise ValueError(f"provider name must be one URL path segment, got {provider!r}")
