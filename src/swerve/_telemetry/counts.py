"""Counters kept in process and read by observable counters when metrics are collected."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable

from opentelemetry.metrics import CallbackOptions, Observation
from opentelemetry.util.types import AttributeValue

from .bounded import Attributes

__all__ = ["Counts"]


class Counts:
    """One counter's values by attributes.

    An increment is a dict update under a lock, not an SDK measurement (an order of magnitude
    cheaper), so counting stays off the call path like exporting does.
    """

    __slots__ = ("_bound", "_lock", "_values")

    def __init__(self, bound: Callable[[Attributes], Attributes] = dict) -> None:
        self._bound = bound
        self._lock = threading.Lock()
        self._values: dict[tuple[tuple[str, AttributeValue], ...], int] = {}

    def add(self, amount: int, attributes: Attributes) -> None:
        """Count ``amount`` under ``attributes``, bounded (route names, error types)."""
        self.add_bounded(amount, self._bound(attributes))

    def add_bounded(self, amount: int, attributes: Attributes) -> None:
        """:meth:`add` for attributes that are bounded already."""
        key = tuple(attributes.items())
        with self._lock:
            self._values[key] = self._values.get(key, 0) + amount

    def __len__(self) -> int:
        return len(self._values)

    def observe(self, _: CallbackOptions) -> Iterable[Observation]:
        with self._lock:
            items = list(self._values.items())
        return [Observation(value, dict(key)) for key, value in items]
