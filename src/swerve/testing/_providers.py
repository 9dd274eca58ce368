"""The fake provider's state: each named provider's standing reply and fault, its scripts
(provider-wide and per model) and received requests, shared under one lock by the control
surface and the request handlers."""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field

from ._model import Fault, Reply
from ._wires import Body

__all__ = ["Provider", "Providers", "Step", "check_name"]

Step = Fault | Reply
"""One scripted request: a fault (served on the standing reply) or a reply (served with no
fault)."""


@dataclass
class Provider:
    reply: Reply | None = None
    fault: Fault = field(default_factory=Fault.ok)
    script: deque[Step] = field(default_factory=deque)
    # Per request model; a model's own script is consumed before the provider-wide one.
    model_scripts: dict[str, deque[Step]] = field(default_factory=dict)
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

    def script(self, provider: str, steps: Iterable[Step], model: str | None) -> None:
        with self._cond:
            state = self._get(provider)
            if model is None:
                state.script = deque(steps)
            else:
                queue = deque(steps)
                if queue:
                    state.model_scripts[model] = queue
                else:
                    state.model_scripts.pop(model, None)
            state.rouse()

    def remaining(self, provider: str, model: str | None) -> int:
        with self._cond:
            state = self._get(provider)
            if model is None:
                return len(state.script)
            return len(state.model_scripts.get(model, ()))

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

    def next(self, provider: str, model: str) -> tuple[Fault, Reply, threading.Event]:
        """The fault and the reply for the next completion request for ``model``, and the hang
        wake-up event: the next step of the model's script, else of the provider's, else the
        standing fault and reply."""
        with self._cond:
            state = self._get(provider)
            own = state.model_scripts.get(model)
            queue = own if own else state.script
            step = queue.popleft() if queue else None
            if own is not None and not own:
                del state.model_scripts[model]  # used up: the dict holds live scripts only
            if isinstance(step, Reply):
                return Fault.ok(), step, state.wake
            fault = step if step is not None else state.fault
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
