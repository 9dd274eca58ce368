"""Cardinality caps for metric attributes.

Every metric series is kept in memory until the process ends, and every one costs at each
collection, so metric attributes whose values come from outside (route names, error types a
provider sent) are bounded: the first values seen keep their names, later new ones are
reported together under OVERFLOW. Spans and events, which are not aggregated, keep the real
value.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Final

from opentelemetry.util.types import AttributeValue

from .names import ERROR_TYPE, ROUTE, ROUTE_FROM, ROUTE_REQUESTED, ROUTE_SERVED, ROUTE_TO

__all__ = ["ERROR_TYPE_LIMIT", "OVERFLOW", "ROUTE_LIMIT", "AttributeBounds", "Attributes"]

ROUTE_LIMIT: Final = 1000
"""Distinct route names a Telemetry reports in metric attributes."""
ERROR_TYPE_LIMIT: Final = 100
"""Distinct ``error.type`` values a Telemetry reports in metric attributes."""
OVERFLOW: Final = "_OTHER"
"""The value reported for a route or error type past its limit (OTel's ``error.type`` fallback)."""
_ROUTE_KEYS: Final = frozenset({ROUTE, ROUTE_REQUESTED, ROUTE_SERVED, ROUTE_FROM, ROUTE_TO})

Attributes = Mapping[str, AttributeValue]


class _Bounded:
    """The first ``limit`` distinct values pass as they are; every later new one is OVERFLOW."""

    __slots__ = ("_limit", "_lock", "_seen")

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._seen: set[str] = set()
        self._lock = threading.Lock()

    def __call__(self, value: str) -> str:
        if value in self._seen:  # the hot path: a value already known
            return value
        with self._lock:
            if len(self._seen) < self._limit:
                self._seen.add(value)
                return value
        return OVERFLOW


class AttributeBounds:
    """One Telemetry's caps: route names past ROUTE_LIMIT and error types past
    ERROR_TYPE_LIMIT become OVERFLOW."""

    __slots__ = ("error_type", "route")

    def __init__(self) -> None:
        self.route = _Bounded(ROUTE_LIMIT)
        """One route name, bounded."""
        self.error_type = _Bounded(ERROR_TYPE_LIMIT)
        """One ``error.type`` value, bounded."""

    def __call__(self, attributes: Attributes) -> dict[str, AttributeValue]:
        """``attributes`` for a metric, each route name and error type bounded."""
        out = dict(attributes)
        route, errors = self.route, self.error_type
        for key, value in out.items():
            # A value already known passes as it is (_Bounded.__call__'s hot path, written out:
            # every call's metrics pass here).
            if key in _ROUTE_KEYS:
                if type(value) is not str or value not in route._seen:
                    out[key] = route(str(value))
            elif key == ERROR_TYPE and (type(value) is not str or value not in errors._seen):
                out[key] = errors(str(value))
        return out
