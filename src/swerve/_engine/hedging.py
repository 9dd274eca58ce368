"""The hedge budget: how many of a route's stream calls may start a second request."""

from __future__ import annotations

import math
import threading

__all__ = ["HedgeBudget"]

# Routes whose counts are kept at once; past it the least recently seen is forgotten first.
_MAX_ROUTES = 1024
_SLOTS = 12  # the minute in 5 s slots: "any minute" to within 5 s


class HedgeBudget:
    """Per route, the stream calls that could hedge and the hedges started, over the last
    ``window_s``: a hedge is allowed while the hedges, this one included, stay within
    ``share`` of those calls. In process: a slow provider cannot double one process's spend,
    and a fleet's processes each keep to the share."""

    __slots__ = ("_lock", "_routes", "_slot_s")

    def __init__(self, window_s: float = 60.0) -> None:
        self._slot_s = window_s / _SLOTS
        self._lock = threading.Lock()
        # route -> per slot: [slot number, calls, hedges]
        self._routes: dict[str, list[list[float]]] = {}

    def _live(self, route: str, now: float) -> tuple[list[list[float]], list[float]]:
        """``route``'s slots of the last window, and the one ``now`` counts in (slots of a
        minute ago start over when they come round). Call with the lock held."""
        number = math.floor(now / self._slot_s) if math.isfinite(now) else 0
        slots = self._routes.pop(route, None)  # re-added last: the most recently seen
        if slots is None:
            slots = [[-math.inf, 0, 0] for _ in range(_SLOTS)]
            if len(self._routes) >= _MAX_ROUTES:
                del self._routes[next(iter(self._routes))]
        self._routes[route] = slots
        current = slots[number % _SLOTS]
        if current[0] != number:
            current[:] = [number, 0, 0]
        return [s for s in slots if number - _SLOTS < s[0] <= number], current

    def called(self, route: str, now: float) -> None:
        """A stream call that could hedge began on ``route`` at ``now`` (wall clock)."""
        with self._lock:
            self._live(route, now)[1][1] += 1

    def take(self, route: str, now: float, share: float) -> bool:
        """Whether a call on ``route`` may hedge now; if so, the hedge is counted."""
        with self._lock:
            live, current = self._live(route, now)
            if sum(s[2] for s in live) + 1 > share * sum(s[1] for s in live):
                return False
            current[2] += 1
            return True
