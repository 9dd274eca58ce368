"""LatencySketch: a route's time to first chunk, as a small mergeable quantile sketch.

Seconds fall into fixed log-spaced buckets (each :data:`GROWTH` times wider than the last, from
:data:`MIN_S` to :data:`MAX_S`), so a quantile read back is within :data:`RELATIVE_ERROR` of
the exact one, and two sketches merge by adding counts: the same buckets in every process,
which is what lets a fleet share them as plain integer counts (``{bucket index: count}``).

It forgets: counts are kept per window of ``window_s`` seconds of the wall time passed in
(window ``n`` holds ``n * window_s <= now < (n + 1) * window_s``), only the newest window and
the one before it are held, and a quantile reads both. A route that got slow shows it within
a window or two, and the memory is two windows of buckets at most. Pure: no clock, no I/O.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

__all__ = [
    "BUCKETS",
    "DEFAULT_MIN_SAMPLES",
    "DEFAULT_WINDOW_S",
    "GROWTH",
    "MAX_COUNT",
    "MAX_S",
    "MIN_S",
    "RELATIVE_ERROR",
    "LatencySketch",
]

MIN_S = 0.001
"""The smallest time told apart: anything shorter counts in the first bucket."""
MAX_S = 900.0
"""The longest time told apart: anything longer counts in the last bucket."""
GROWTH = 1.1
"""How much wider each bucket is than the one before."""
RELATIVE_ERROR = (GROWTH - 1) / (GROWTH + 1)
"""The most a quantile read back is off, relative to the exact one (about 4.8 %), for times
within [MIN_S, MAX_S]: a bucket answers with the one value that is this close to both ends."""
BUCKETS = math.ceil(math.log(MAX_S / MIN_S) / math.log(GROWTH))
"""How many buckets there are (144): bucket ``i`` holds [MIN_S * GROWTH**i, MIN_S *
GROWTH**(i+1)), the first and last ones everything beyond too."""
DEFAULT_WINDOW_S = 300.0
DEFAULT_MIN_SAMPLES = 20
MAX_COUNT = 2**40
"""The most one bucket of one window may hold when read from elsewhere (a fleet of thousands
of processes, each at thousands of calls a second, stays far below it)."""

_INV_LOG_GROWTH = 1 / math.log(GROWTH)
# What a bucket answers: 2ab/(a+b) for its ends a and b, off by RELATIVE_ERROR at either end.
_VALUES = tuple(2 * MIN_S * GROWTH ** (i + 1) / (GROWTH + 1) for i in range(BUCKETS))
_INTEGER = re.compile(r"-?(?:0|[1-9][0-9]{0,18})")  # as Redis writes one: no sign, no padding


def bucket_of(seconds: float) -> int:
    """The bucket ``seconds`` counts in (times outside the range: the end buckets)."""
    if seconds <= MIN_S:
        return 0
    if seconds >= MAX_S:
        return BUCKETS - 1
    return min(int(math.log(seconds / MIN_S) * _INV_LOG_GROWTH), BUCKETS - 1)


def bucket_value(index: int) -> float:
    """The seconds a quantile that lands in bucket ``index`` reads as."""
    return _VALUES[index]


class LatencySketch:
    """Counts of seconds per log-spaced bucket, in windows of ``window_s`` of wall time.

    Not thread-safe: a store holds its lock around it. Windows only move forward: an
    observation stamped before the previous window (a wall clock stepped back) counts in the
    previous window, never lost and never reviving a forgotten one.
    """

    __slots__ = ("_newest", "_totals", "_window_s", "_windows")

    def __init__(self, window_s: float = DEFAULT_WINDOW_S) -> None:
        if not (math.isfinite(window_s) and window_s > 0):
            raise ValueError(f"LatencySketch window_s must be a positive number, not {window_s!r}")
        self._window_s = float(window_s)
        self._windows: dict[int, list[int]] = {}  # window number -> counts per bucket
        self._totals: dict[int, int] = {}
        self._newest: int | None = None

    @property
    def window_s(self) -> float:
        return self._window_s

    def window(self, now: float) -> int:
        """The number of the window ``now`` falls in."""
        if not math.isfinite(now):
            raise ValueError(f"LatencySketch: now must be a finite time, not {now!r}")
        return math.floor(now / self._window_s)

    @property
    def windows(self) -> tuple[int, ...]:
        """The numbers of the windows held, oldest first (two at most)."""
        return tuple(sorted(self._windows))

    def _slot(self, window: int, *, late: bool) -> int | None:
        """The held window that counts for ``window`` (made if need be), moving the sketch
        forward to ``window`` if it is newer than every window held. One before the previous
        window counts in the previous one if ``late`` (an observation, on a clock that stepped
        back), else nowhere (counts of a window forgotten here already: None)."""
        newest = self._newest
        if newest is None or window > newest:
            for old in [w for w in self._windows if w < window - 1]:
                del self._windows[old]
                del self._totals[old]
            self._newest = newest = window
        if window < newest - 1:
            if not late:
                return None
            window = newest - 1
        if window not in self._windows:
            self._windows[window] = [0] * BUCKETS
            self._totals[window] = 0
        return window

    def observe(self, seconds: float, now: float) -> None:
        """Count one time of ``seconds`` at wall time ``now``."""
        if math.isnan(seconds):
            raise ValueError("LatencySketch.observe: seconds is NaN")
        slot = self._slot(self.window(now), late=True)
        assert slot is not None
        self._windows[slot][bucket_of(seconds)] += 1
        self._totals[slot] += 1

    def _read(self, now: float | None) -> list[int]:
        """The windows a read at ``now`` sees (``now``'s and the one before; None: all held)."""
        if now is None:
            return list(self._windows)
        first = self.window(now) - 1
        return [w for w in self._windows if w >= first]

    def count(self, now: float | None = None) -> int:
        """How many times a quantile at ``now`` reads (None: every one held)."""
        return sum(self._totals[w] for w in self._read(now))

    def quantile(
        self, q: float, now: float, min_samples: int = DEFAULT_MIN_SAMPLES
    ) -> float | None:
        """The ``q`` quantile (0 to 1) of the times in ``now``'s window and the one before:
        the ``ceil(q * n)``-th smallest of the ``n`` times (the smallest for ``q = 0``),
        within :data:`RELATIVE_ERROR` of it. None with fewer than ``min_samples`` times: too
        few to say."""
        if not 0.0 <= q <= 1.0:
            raise ValueError(f"LatencySketch.quantile: q must be in [0, 1], not {q!r}")
        seen_windows = self._read(now)
        read = [self._windows[w] for w in seen_windows]
        total = sum(self._totals[w] for w in seen_windows)
        if total == 0 or total < min_samples:
            return None
        rank = max(1, math.ceil(q * total))
        if len(read) == 1:
            merged = read[0]
        else:
            merged = [a + b for a, b in zip(read[0], read[1], strict=True)]
        if rank > total // 2:  # a tail quantile (the usual ask): from the top, fewer steps
            above = total - rank  # times that rank above the one asked for
            seen = 0
            for index in range(BUCKETS - 1, -1, -1):
                seen += merged[index]
                if seen > above:
                    return _VALUES[index]
        seen = 0
        for index in range(BUCKETS):
            seen += merged[index]
            if seen >= rank:
                return _VALUES[index]
        raise AssertionError("unreachable: the counts add up to total")  # pragma: no cover

    def counts(self, window: int | None = None) -> dict[int, int]:
        """The wire form: ``{bucket index: count}``, nonzero counts only, of window
        ``window`` (empty when it is not held), or of every window held added up."""
        if window is not None:
            held = self._windows.get(window)
            return {} if held is None else {i: c for i, c in enumerate(held) if c}
        out: dict[int, int] = {}
        for held in self._windows.values():
            for i, c in enumerate(held):
                if c:
                    out[i] = out.get(i, 0) + c
        return out

    def add_counts(self, counts: Mapping[int, int], window: int) -> None:
        """Add ``counts`` (the wire form, checked as :meth:`from_counts` checks it) to window
        ``window``: the sketch moves forward to it if it is newer; counts of a window before
        the previous one are dropped (forgotten here already)."""
        checked = _checked(counts)
        if not checked:
            return
        slot = self._slot(window, late=False)
        if slot is None:
            return
        held = self._windows[slot]
        for index, count in checked.items():
            held[index] += count
        self._totals[slot] += sum(checked.values())

    def merge(self, other: LatencySketch) -> None:
        """Add every window ``other`` holds, window by window (equal ``window_s`` only): the
        same as observing, in time order, what both did. Windows before the newest one's
        previous are forgotten, whichever sketch held them."""
        if other._window_s != self._window_s:
            raise ValueError(
                f"LatencySketch.merge: windows of {other._window_s:g} s and "
                f"{self._window_s:g} s do not line up"
            )
        for window in sorted(other._windows):
            slot = self._slot(window, late=False)
            if slot is None:
                continue
            held = self._windows[slot]
            for index, count in enumerate(other._windows[window]):
                held[index] += count
            self._totals[slot] += other._totals[window]

    def copy(self) -> LatencySketch:
        out = LatencySketch(self._window_s)
        out._windows = {w: list(c) for w, c in self._windows.items()}
        out._totals = dict(self._totals)
        out._newest = self._newest
        return out

    @classmethod
    def from_counts(
        cls, counts: Mapping[Any, Any], window: int, *, window_s: float = DEFAULT_WINDOW_S
    ) -> LatencySketch:
        """A sketch holding untrusted ``counts`` (another process's, read back from a shared
        store: indices and counts as ints, or as the text or bytes Redis gives) in window
        ``window``. Raises ValueError naming what is wrong: more entries than buckets, an
        index that is not an integer or not a bucket, a count that is not an integer, is
        negative, or is over :data:`MAX_COUNT`."""
        if isinstance(window, bool) or not isinstance(window, int):
            raise ValueError(f"latency counts: window {_shown(window)} is not an integer")
        sketch = cls(window_s)
        sketch.add_counts(counts, window)
        return sketch


def _checked(counts: Mapping[Any, Any]) -> dict[int, int]:
    """``counts`` as ``{bucket: count}``, every entry checked (ValueError names the first bad
    one); the size first, so a huge mapping is refused before it is walked."""
    if len(counts) > BUCKETS:
        raise ValueError(f"latency counts: {len(counts)} entries, more than the {BUCKETS} buckets")
    out: dict[int, int] = {}
    for key, value in counts.items():
        index = _integer(key, "bucket index")
        if not 0 <= index < BUCKETS:
            raise ValueError(f"latency counts: bucket {_shown(index)} is not in 0..{BUCKETS - 1}")
        count = _integer(value, f"count of bucket {index}")
        if count < 0:
            raise ValueError(f"latency counts: count of bucket {index} is negative")
        if count > MAX_COUNT:
            raise ValueError(f"latency counts: count of bucket {index} is over {MAX_COUNT}")
        if count:
            out[index] = out.get(index, 0) + count
    return out


def _integer(value: Any, what: str) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, bytes):
        try:
            value = value.decode("ascii")
        except UnicodeDecodeError:
            raise ValueError(f"latency counts: {what} {_shown(value)} is not an integer") from None
    if isinstance(value, str) and _INTEGER.fullmatch(value):
        return int(value)
    raise ValueError(f"latency counts: {what} {_shown(value)} is not an integer")


def _shown(value: Any, limit: int = 40) -> str:
    """``value`` for an error message: its repr, escaped and cut."""
    if isinstance(value, int) and not -(10**12) < value < 10**12:
        return "a huge integer"  # repr of a huge int may itself raise (its digit limit)
    text = repr(value[:limit] if isinstance(value, (bytes, str)) else value)
    text = text.encode("ascii", "backslashreplace").decode()
    return text if len(text) <= limit + 3 else text[:limit] + "…"
