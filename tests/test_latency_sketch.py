"""LatencySketch, the learned per-route time to first chunk, and MemoryHealth's two optional
latency methods. Pure: every time is a number the test passes in (no clock, no sleeps)."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from swerve import MemoryHealth
from swerve._health.latency import (
    BUCKETS,
    MAX_COUNT,
    MAX_S,
    MIN_S,
    RELATIVE_ERROR,
    bucket_of,
    bucket_value,
)
from swerve.stores import HealthStore, LatencySketch

T0 = 1_700_000_100.0  # a wall time at the start of a window (300 s windows)
W = int(T0 // 300)
R = "primary/model-a"

seconds_in_range = st.floats(min_value=MIN_S, max_value=MAX_S, allow_nan=False)


def exact(values: list[float], q: float) -> float:
    """The quantile the sketch approximates: the ceil(q * n)-th smallest (the smallest at 0)."""
    ordered = sorted(values)
    return ordered[max(1, math.ceil(q * len(ordered))) - 1]


# --- accuracy ---------------------------------------------------------------------------------
def test_the_buckets_cover_1_ms_to_900_s_within_5_percent() -> None:
    assert RELATIVE_ERROR <= 0.05
    assert BUCKETS == 144
    assert MIN_S * 1.1**BUCKETS >= MAX_S
    for index in range(BUCKETS):
        low, high = MIN_S * 1.1**index, MIN_S * 1.1 ** (index + 1)
        value = bucket_value(index)
        assert low < value < high
        assert abs(value - low) / low <= RELATIVE_ERROR + 1e-12
        assert abs(high - value) / high <= RELATIVE_ERROR + 1e-12


@settings(max_examples=300, deadline=None)
@given(
    values=st.lists(seconds_in_range, min_size=1, max_size=300),
    q=st.floats(min_value=0.0, max_value=1.0),
)
def test_a_quantile_is_within_the_relative_error_of_the_exact_one(
    values: list[float], q: float
) -> None:
    sketch = LatencySketch()
    for value in values:
        sketch.observe(value, T0)
    got = sketch.quantile(q, T0, min_samples=1)
    want = exact(values, q)
    assert got is not None
    assert abs(got - want) <= (RELATIVE_ERROR + 1e-9) * want, (got, want)
    assert sketch.count(T0) == len(values)


@settings(max_examples=200, deadline=None)
@given(
    observed=st.lists(
        st.tuples(seconds_in_range, st.floats(min_value=0, max_value=1500), st.booleans()),
        max_size=120,
    ),
)
def test_merging_two_sketches_is_observing_everything_in_one(
    observed: list[tuple[float, float, bool]],
) -> None:
    # Times move forward (as a wall clock does); each observation goes to one of two sketches.
    observed.sort(key=lambda o: o[1])
    one, left, right = LatencySketch(), LatencySketch(), LatencySketch()
    for seconds, offset, to_left in observed:
        one.observe(seconds, T0 + offset)
        (left if to_left else right).observe(seconds, T0 + offset)
    left.merge(right)
    assert left.windows == one.windows
    for window in one.windows:
        assert left.counts(window) == one.counts(window)
    now = T0 + (observed[-1][1] if observed else 0.0)
    for q in (0.0, 0.5, 0.95, 0.99, 1.0):
        assert left.quantile(q, now, min_samples=1) == one.quantile(q, now, min_samples=1)


@settings(max_examples=100, deadline=None)
@given(values=st.lists(seconds_in_range, max_size=200))
def test_the_wire_form_builds_the_same_sketch(values: list[float]) -> None:
    sketch = LatencySketch()
    for value in values:
        sketch.observe(value, T0)
    wire = {str(i).encode(): str(c).encode() for i, c in sketch.counts(W).items()}  # as Redis
    again = LatencySketch.from_counts(wire, W)
    assert again.counts() == sketch.counts() == sketch.counts(W)
    assert again.count() == len(values)


def test_times_outside_the_range_count_in_the_end_buckets() -> None:
    sketch = LatencySketch()
    for value in (0.0, -1.0, 1e-9, MIN_S):
        sketch.observe(value, T0)
    for value in (MAX_S, 1e6, math.inf):
        sketch.observe(value, T0)
    assert sketch.counts() == {0: 4, BUCKETS - 1: 3}
    assert sketch.quantile(0.0, T0, min_samples=1) == bucket_value(0)
    assert sketch.quantile(1.0, T0, min_samples=1) == bucket_value(BUCKETS - 1)
    assert abs(bucket_value(BUCKETS - 1) - MAX_S) / MAX_S <= RELATIVE_ERROR
    assert bucket_of(MAX_S * 0.999) == BUCKETS - 1


def test_bad_arguments_are_refused() -> None:
    sketch = LatencySketch()
    with pytest.raises(ValueError, match="NaN"):
        sketch.observe(math.nan, T0)
    with pytest.raises(ValueError, match="finite"):
        sketch.observe(1.0, math.inf)
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        sketch.quantile(1.5, T0)
    with pytest.raises(ValueError, match="window_s"):
        LatencySketch(window_s=0)
    with pytest.raises(ValueError, match="line up"):
        sketch.merge(LatencySketch(window_s=60))
    assert sketch.count() == 0 and sketch.windows == ()


# --- too few to say ---------------------------------------------------------------------------
def test_no_quantile_below_min_samples() -> None:
    sketch = LatencySketch()
    assert sketch.quantile(0.5, T0) is None
    for _ in range(19):
        sketch.observe(0.2, T0)
    assert sketch.quantile(0.5, T0) is None  # 20 by default
    assert sketch.quantile(0.5, T0, min_samples=19) is not None
    sketch.observe(0.2, T0)
    assert sketch.quantile(0.5, T0) == bucket_value(bucket_of(0.2))


# --- forgetting -------------------------------------------------------------------------------
def test_it_reads_the_current_and_the_previous_window_and_forgets_older_ones() -> None:
    sketch = LatencySketch()
    for _ in range(30):
        sketch.observe(0.2, T0)  # window W
    sketch.observe(5.0, T0 + 300)  # window W + 1
    assert sketch.windows == (W, W + 1)
    assert sketch.count(T0 + 300) == 31
    assert sketch.count(T0 + 600) == 1  # W + 2 reads W + 1 only
    assert sketch.quantile(0.5, T0 + 600) is None
    sketch.observe(5.0, T0 + 600)
    assert sketch.windows == (W + 1, W + 2)  # W forgotten: the memory stays two windows
    assert sketch.count() == 2
    sketch.observe(5.0, T0 + 3000)  # long quiet: both older windows go
    assert sketch.windows == (W + 10,) and sketch.count() == 1


def test_a_route_that_got_slow_shows_it_within_two_windows() -> None:
    sketch = LatencySketch()
    for i in range(600):  # two windows of 0.2 s first chunks, one a second
        sketch.observe(0.2, T0 + i)
    p95 = sketch.quantile(0.95, T0 + 599)
    assert p95 is not None and abs(p95 - 0.2) <= 0.2 * RELATIVE_ERROR
    for i in range(600, 720):  # the route gets slow: 20 s
        sketch.observe(20.0, T0 + i)
    p95 = sketch.quantile(0.95, T0 + 719)
    assert p95 is not None and abs(p95 - 20.0) <= 20.0 * RELATIVE_ERROR  # 120 of 420 read


def test_a_time_before_the_previous_window_counts_in_the_previous_window() -> None:
    # The wall clock stepped back an hour: the time is kept, and nothing forgotten revives.
    sketch = LatencySketch()
    sketch.observe(0.2, T0)
    sketch.observe(0.3, T0 - 3600)
    assert sketch.windows == (W - 1, W)
    assert sketch.counts(W - 1) == {bucket_of(0.3): 1}
    assert sketch.count(T0) == 2
    assert sketch.count(T0 - 3600) == 2  # read back then, it sees what it holds


def test_add_counts_moves_the_windows_like_observe() -> None:
    sketch = LatencySketch()
    sketch.add_counts({3: 2}, W)
    sketch.add_counts({4: 1}, W + 1)
    sketch.add_counts({5: 7}, W + 3)
    assert sketch.windows == (W + 3,)
    assert sketch.counts() == {5: 7}
    sketch.add_counts({6: 1}, W + 1)  # forgotten here already: dropped, not counted late
    assert sketch.counts() == {5: 7} and sketch.windows == (W + 3,)
    sketch.add_counts({}, W + 9)  # nothing to add: nothing moves
    assert sketch.windows == (W + 3,)
    copy = sketch.copy()
    copy.observe(1.0, T0 + 900)
    assert sketch.count() == 7 and copy.count() == 8


# --- counts from elsewhere --------------------------------------------------------------------
@pytest.mark.parametrize(
    ("counts", "named"),
    [
        ({BUCKETS: 1}, "is not in 0..143"),
        ({-1: 1}, "is not in 0..143"),
        ({10**400: 1}, "a huge integer"),
        ({b"x": 1}, "bucket index 'x' is not an integer"),
        ({"01": 1}, "bucket index '01' is not an integer"),
        ({" 1": 1}, "is not an integer"),
        ({1.0: 1}, "bucket index 1.0 is not an integer"),
        ({True: 1}, "bucket index True is not an integer"),
        ({b"\xff": 1}, "is not an integer"),
        ({3: -1}, "count of bucket 3 is negative"),
        ({3: b"-1"}, "count of bucket 3 is negative"),
        ({3: "1.5"}, "count of bucket 3 '1.5' is not an integer"),
        ({3: b"1e3"}, "is not an integer"),
        ({3: None}, "count of bucket 3 None is not an integer"),
        ({3: MAX_COUNT + 1}, "is over"),
        ({3: "9" * 19}, "is over"),
        ({3: "9" * 30}, "is not an integer"),  # longer than any 64-bit integer
        ({3: 10**5000}, "is over"),
        ({i: 1 for i in range(BUCKETS + 1)}, "145 entries, more than the 144 buckets"),
    ],
)
def test_bad_counts_are_refused_by_name(counts: dict[Any, Any], named: str) -> None:
    with pytest.raises(ValueError, match="latency counts") as caught:
        LatencySketch.from_counts(counts, W)
    assert named in str(caught.value)
    with pytest.raises(ValueError, match="latency counts"):
        LatencySketch().add_counts(counts, W)


def test_good_counts_in_every_form_are_taken() -> None:
    sketch = LatencySketch.from_counts({0: 1, "5": "2", b"143": b"0", b"7": MAX_COUNT}, W)
    assert sketch.counts() == {0: 1, 5: 2, 7: MAX_COUNT}
    assert sketch.windows == (W,)
    with pytest.raises(ValueError, match="window"):
        LatencySketch.from_counts({}, True)


# --- MemoryHealth -----------------------------------------------------------------------------
def test_memory_health_learns_each_route_apart() -> None:
    store = MemoryHealth()
    assert store.first_chunk_quantile(R, 0.95, T0) is None
    for i in range(20):
        store.observe_first_chunk(R, 0.2 + i / 100, T0 + i)
        store.observe_first_chunk("fallback/model-b", 2.0, T0 + i)
    p95 = store.first_chunk_quantile(R, 0.95, T0 + 20)
    assert p95 is not None and abs(p95 - 0.38) <= 0.38 * RELATIVE_ERROR
    assert store.first_chunk_quantile("fallback/model-b", 0.5, T0 + 20) == bucket_value(
        bucket_of(2.0)
    )
    assert store.first_chunk_quantile(R, 0.95, T0 + 20, min_samples=21) is None
    assert store.first_chunk_quantile(R, 0.95, T0 + 900) is None  # two windows on: forgotten
    store.clear()  # a config change ends cooldowns and breakers, not what the routes showed
    assert store.first_chunk_quantile(R, 0.95, T0 + 20) is not None
    assert isinstance(store, HealthStore)


def test_memory_health_refuses_a_bad_time_without_keeping_the_route() -> None:
    store = MemoryHealth()
    with pytest.raises(ValueError, match="NaN"):
        store.observe_first_chunk(R, math.nan, T0)
    with pytest.raises(ValueError, match="finite"):
        store.observe_first_chunk(R, 0.2, math.nan)
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        store.first_chunk_quantile(R, 2.0, T0)
    assert store.first_chunk_routes() == [] and store.first_chunks(R) is None


def test_memory_health_keeps_latency_for_at_most_max_routes() -> None:
    store = MemoryHealth(max_routes=10)
    for i in range(10):
        store.observe_first_chunk(f"p/old{i}", 0.2, T0)  # observed long ago
    for i in range(30):
        store.observe_first_chunk(f"p/new{i}", 0.2, T0 + 3000 + i)
        assert len(store.first_chunk_routes()) <= 10
    routes = store.first_chunk_routes()
    assert "p/new29" in routes  # the one being observed is never the one dropped
    assert not any(r.startswith("p/old") for r in routes)  # forgotten ones went first


def test_memory_health_adopts_a_fleet_sketch() -> None:
    store = MemoryHealth()
    store.observe_first_chunk(R, 0.2, T0)
    fleet = LatencySketch.from_counts({bucket_of(1.0): 40}, W)
    store.adopt_first_chunks(R, fleet, T0)
    assert store.first_chunk_quantile(R, 0.5, T0) == bucket_value(bucket_of(1.0))
    held = store.first_chunks(R)
    assert held is not None and held.count() == 40
    held.observe(9.0, T0)  # a copy: the store's own is untouched
    assert store.first_chunks(R).count() == 40  # type: ignore[union-attr]
