"""The pure policy: rules, and properties over every config and failure sequence (hypothesis)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from swerve import FallbackConfig
from swerve._engine.policy import (
    GiveUp,
    GiveUpReason,
    Retry,
    Swap,
    decide,
    next_route,
    qualifies,
    start_route,
    walk,
)
from swerve._failures import Failure, FailureKind

A, B, C, D = (
    "openrouter/anthropic/claude-sonnet-5",
    "anthropic/claude-sonnet-5",
    "openai/gpt-5",
    "x/y",
)
F503 = Failure(FailureKind.UNAVAILABLE, status=503, error_type="503")
F401 = Failure(FailureKind.AUTH, status=401, error_type="401")
RESET = Failure(FailureKind.TRANSPORT, error_type="ConnectionResetError")


def test_retries_then_swaps_with_fresh_budget() -> None:
    config = FallbackConfig(fallbacks={A: B}, max_retries=2, jitter=False)
    assert decide(config, F503, requested=A, current=A, retries=0, swaps=0) == Retry(2.0)
    assert decide(config, F503, requested=A, current=A, retries=1, swaps=0) == Retry(4.0)
    assert decide(config, F503, requested=A, current=A, retries=2, swaps=0) == Swap(B)
    # on the new route the retry count starts again (the engine resets it on a swap)
    assert decide(config, F503, requested=A, current=B, retries=0, swaps=1) == Retry(2.0)


def test_backoff_is_capped_and_jittered() -> None:
    config = FallbackConfig(max_retries=10, backoff_initial_s=1, backoff_max_s=5, jitter=False)
    delays = [decide(config, F503, requested=A, current=A, retries=n, swaps=0) for n in range(5)]
    assert delays == [Retry(1), Retry(2), Retry(4), Retry(5), Retry(5)]
    jittered = FallbackConfig(max_retries=10, backoff_initial_s=1, backoff_max_s=5)
    assert decide(
        jittered, F503, requested=A, current=A, retries=2, swaps=0, rand=lambda: 0.25
    ) == Retry(1.0)


def test_retry_after_within_its_cap_is_waited_beyond_it_swaps() -> None:
    config = FallbackConfig(fallbacks={A: B}, retry_after_max_s=10)
    hinted = Failure(FailureKind.RATE_LIMITED, status=429, retry_after=3.5)
    assert decide(config, hinted, requested=A, current=A, retries=0, swaps=0) == Retry(3.5)
    # The server asks for longer than the config accepts: another route, not a short wait.
    huge = Failure(FailureKind.RATE_LIMITED, status=429, retry_after=900)
    assert decide(config, huge, requested=A, current=A, retries=0, swaps=0) == Swap(B)
    lone = FallbackConfig(retry_after_max_s=10)
    assert decide(lone, huge, requested=A, current=A, retries=0, swaps=0) == GiveUp(
        GiveUpReason.NO_FALLBACK, qualifying=True
    )


@pytest.mark.parametrize(
    "kind", [FailureKind.CONTEXT_OVERFLOW, FailureKind.ABORTED, FailureKind.INVALID_REQUEST]
)
def test_never_swaps_on_the_callers_own_errors(kind: FailureKind) -> None:
    config = FallbackConfig(fallbacks={A: B}, fallback_on=frozenset({400, 503}))
    status = None if kind is FailureKind.ABORTED else 400
    failure = Failure(kind, status=status)
    decision = decide(config, failure, requested=A, current=A, retries=0, swaps=0)
    if kind is FailureKind.INVALID_REQUEST:  # listed status: the config says so
        assert isinstance(decision, Swap)
    else:
        assert decision == GiveUp(GiveUpReason.NOT_QUALIFYING, qualifying=False)


def test_auth_and_quota_surface_unless_listed_then_swap_at_once() -> None:
    default = FallbackConfig(fallbacks={A: B})
    assert decide(default, F401, requested=A, current=A, retries=0, swaps=0) == GiveUp(
        GiveUpReason.NOT_QUALIFYING, qualifying=False
    )
    listed = FallbackConfig(fallbacks={A: B}, fallback_on=frozenset({401, 402, 503}))
    assert decide(listed, F401, requested=A, current=A, retries=0, swaps=0) == Swap(B)
    quota = Failure(FailureKind.QUOTA, status=402)
    assert decide(listed, quota, requested=A, current=A, retries=0, swaps=0) == Swap(B)


def test_statusless_transport_failures_qualify() -> None:
    config = FallbackConfig(fallbacks={A: B}, max_retries=0)
    assert qualifies(config, RESET)
    assert decide(config, RESET, requested=A, current=A, retries=0, swaps=0) == Swap(B)
    assert not qualifies(config, Failure(FailureKind.UNKNOWN))


def test_effects_decline_retry_and_swap() -> None:
    config = FallbackConfig(fallbacks={A: B})
    assert decide(config, F503, requested=A, current=A, retries=0, swaps=0, effects=True) == GiveUp(
        GiveUpReason.EFFECTS, qualifying=True
    )


def test_swap_budget_and_missing_fallback() -> None:
    config = FallbackConfig(fallbacks={A: B, B: A}, max_retries=0, max_swaps=2)
    assert decide(config, F503, requested=A, current=B, retries=0, swaps=1) == Swap(A)
    assert decide(config, F503, requested=A, current=A, retries=0, swaps=2) == GiveUp(
        GiveUpReason.SWAP_BUDGET, qualifying=True
    )
    lone = FallbackConfig(max_retries=0)
    assert decide(lone, F503, requested=C, current=C, retries=0, swaps=0) == GiveUp(
        GiveUpReason.NO_FALLBACK, qualifying=True
    )


def test_deadline_turns_a_long_wait_into_a_swap_and_ends_the_call() -> None:
    config = FallbackConfig(fallbacks={A: B}, jitter=False)
    assert decide(config, F503, requested=A, current=A, retries=0, swaps=0, remaining_s=1) == Swap(
        B
    )
    assert decide(
        config, F503, requested=A, current=A, retries=0, swaps=0, remaining_s=0
    ) == GiveUp(GiveUpReason.DEADLINE, qualifying=True)


def test_ordered_chain_then_the_map() -> None:
    config = FallbackConfig(fallbacks={A: [B, C], C: D})
    assert next_route(config, A, A) == B
    assert next_route(config, A, B) == C
    assert next_route(config, A, C) == D  # past the chain, C's own entry
    assert next_route(config, B, B) is None  # B has no entry of its own


def test_swap_walks_past_degraded_routes() -> None:
    config = FallbackConfig(fallbacks={A: [B, C]}, max_retries=0)
    decision = decide(config, F503, requested=A, current=A, retries=0, swaps=0, degraded={B})
    assert decision == Swap(C, skipped=(B,))


def test_bidirectional_pair_bounces_back_when_everything_is_cooling() -> None:
    config = FallbackConfig(fallbacks={A: B, B: A}, max_retries=0)
    # A (just failed) and B both cooling: nothing healthy, so the swap goes where the map says.
    assert decide(
        config, F503, requested=A, current=B, retries=0, swaps=1, degraded={A, B}
    ) == Swap(A)


def test_start_route_walk_with_cycle_guard() -> None:
    config = FallbackConfig(fallbacks={A: B, B: C, C: A})
    assert start_route(config, A, set()) == (A, ())
    assert start_route(config, A, {A}) == (B, (A,))
    assert start_route(config, A, {A, B}) == (C, (A, B))
    assert start_route(config, A, {A, B, C}) == (A, ())  # every route cooling: the requested one
    assert start_route(config, D, {D}) == (D, ())  # not in the map at all


def test_cooldowns_are_keyed_by_route_not_provider() -> None:
    claude, gpt, gemini = (
        "openrouter/anthropic/claude-sonnet-5",
        "openrouter/openai/gpt-5",
        "openrouter/google/gemini-3",
    )
    config = FallbackConfig(fallbacks={claude: [gpt, gemini]})
    assert start_route(config, claude, {claude}) == (gpt, (claude,))


# --- properties ---------------------------------------------------------------------------------
ROUTES = [f"p{i}/m{i}" for i in range(5)]
failures = st.sampled_from(
    [
        F503,
        F401,
        RESET,
        Failure(FailureKind.RATE_LIMITED, status=429, retry_after=7.0),
        Failure(FailureKind.RATE_LIMITED, status=429, retry_after=10_000.0),
        Failure(FailureKind.CONTEXT_OVERFLOW, status=400),
        Failure(FailureKind.QUOTA, status=402),
        Failure(FailureKind.TIMEOUT),
        Failure(FailureKind.BREAKER_OPEN),
    ]
)
route_maps = st.dictionaries(
    st.sampled_from(ROUTES),
    st.one_of(
        st.sampled_from(ROUTES),
        # A chain naming a route twice is refused by the config (see test_config).
        st.lists(st.sampled_from(ROUTES), min_size=1, max_size=4, unique=True),
    ),
    max_size=5,
).map(lambda m: {k: v for k, v in m.items() if v != k and (isinstance(v, str) or k not in v)})
configs = st.builds(
    FallbackConfig,
    fallbacks=route_maps,
    fallback_on=st.frozensets(st.sampled_from([401, 402, 429, 500, 503, 529]), min_size=1),
    max_swaps=st.integers(0, 4),
    max_retries=st.integers(0, 4),
    backoff_initial_s=st.floats(0, 5),
    backoff_factor=st.floats(1, 4),
    backoff_max_s=st.floats(0, 60),
    retry_after_max_s=st.floats(0, 120),
)


def planned_wait_bound(config: FallbackConfig) -> float:
    """The most waiting one call can plan: every retry on every route, each at its cap."""
    per_wait = max(config.backoff_max_s, config.retry_after_max_s)
    return (config.max_swaps + 1) * config.max_retries * per_wait


def _reachable(config: FallbackConfig, start: str) -> set[str]:
    seen, todo = {start}, [start]
    while todo:
        route = todo.pop()
        targets = config.fallbacks.get(route, [])
        for t in [targets] if isinstance(targets, str) else targets:
            if t not in seen:
                seen.add(t)
                todo.append(t)
    return seen


@settings(max_examples=400, deadline=None)
@given(
    config=configs,
    requested=st.sampled_from(ROUTES),
    sequence=st.lists(failures, min_size=1, max_size=200),
    degraded=st.sets(st.sampled_from(ROUTES)),
    rand=st.floats(0, 1),
)
def test_every_call_terminates_within_its_budgets(
    config: FallbackConfig,
    requested: str,
    sequence: list[Failure],
    degraded: set[str],
    rand: float,
) -> None:
    """Drive decide() the way the engine does, with failures forever (cycled)."""
    current, _ = start_route(config, requested, degraded)
    retries = swaps = 0
    waited = 0.0
    per_route_retries: list[int] = []
    reachable = _reachable(config, requested)
    walked = set(walk(config, requested, requested))  # what the transports check up front
    for step in range(10_000):
        assert current in reachable
        assert current in walked
        failure = sequence[step % len(sequence)]
        decision = decide(
            config, failure, requested=requested, current=current, retries=retries, swaps=swaps,
            degraded=degraded, rand=lambda: rand,
        )  # fmt: skip
        if isinstance(decision, Retry):
            assert decision.delay >= 0
            waited += decision.delay
            retries += 1
        elif isinstance(decision, Swap):
            per_route_retries.append(retries)
            degraded = degraded | {current}
            current, retries, swaps = decision.route, 0, swaps + 1
        else:
            per_route_retries.append(retries)
            break
    else:
        pytest.fail("the call never ended")
    assert swaps <= config.max_swaps
    assert all(r <= config.max_retries for r in per_route_retries)
    assert waited <= planned_wait_bound(config) + 1e-9


# --- the one walk of the fallback map (callers: the engine, the CLI, the alert rules, the
# transports' construction check) ------------------------------------------------------------
@settings(max_examples=300, deadline=None)
@given(
    fallbacks=route_maps,
    max_swaps=st.integers(0, 6),
    requested=st.sampled_from(ROUTES),
    cools=st.booleans(),
)
def test_a_call_whose_every_attempt_fails_tries_the_budgeted_walk(
    fallbacks: dict[str, str | list[str]], max_swaps: int, requested: str, cools: bool
) -> None:
    """walk(..., max_swaps=n), which `swerve config check` prints, is the engine's order: one
    route per swap, revisits included (the cycle guard holds within one choice only)."""
    config = FallbackConfig(fallbacks=fallbacks, max_swaps=max_swaps, max_retries=0)
    degraded: set[str] = set()
    current, _ = start_route(config, requested, degraded)
    tried, swaps = [current], 0
    while True:
        decision = decide(
            config, F503, requested=requested, current=current, retries=0, swaps=swaps,
            degraded=degraded,
        )  # fmt: skip
        if not isinstance(decision, Swap):
            break
        if cools:  # a failed route cools down (cooldown_s > 0), or not (cooldown_s = 0)
            degraded.add(current)
        current, swaps = decision.route, swaps + 1
        tried.append(current)
    assert tried == list(walk(config, requested, requested, max_swaps=max_swaps))


@settings(max_examples=300, deadline=None)
@given(
    fallbacks=route_maps,
    requested=st.sampled_from(ROUTES),
    degraded=st.sets(st.sampled_from(ROUTES)),
)
def test_a_call_starts_on_the_first_healthy_route_of_the_guarded_walk(
    fallbacks: dict[str, str | list[str]], requested: str, degraded: set[str]
) -> None:
    """walk() without a budget, which the alert rules read as a chain, is every route a call
    may start on, however small max_swaps is."""
    config = FallbackConfig(fallbacks=fallbacks, max_swaps=1)
    routes = list(walk(config, requested, requested))
    assert len(routes) == len(set(routes))  # the cycle guard
    healthy = [r for r in routes if r not in degraded]
    start, skipped = start_route(config, requested, degraded)
    assert start == (healthy[0] if healthy else requested)
    assert list(skipped) == (routes[: routes.index(start)] if healthy else [])


def test_a_chain_longer_than_the_swap_budget_is_reached_whole() -> None:
    """One swap is enough to land past a degraded route: the transports check the whole walk."""
    config = FallbackConfig(fallbacks={A: [B, C]}, max_swaps=1)
    assert list(walk(config, A, A)) == [A, B, C]
    assert list(walk(config, A, A, max_swaps=1)) == [A, B]
    assert start_route(config, A, {A, B}) == (C, (A, B))
    assert decide(config, F503, requested=A, current=A, retries=3, swaps=0, degraded={B}) == (
        Swap(C, (B,))
    )


# --- backoff at the edges (issue 9, B10) -----------------------------------------------------


@pytest.mark.parametrize(
    ("initial", "factor", "cap"),
    [(2.0, 10.0, 30.0), (5e-324, 1e300, 604800.0), (1.0, 1.0000001, 30.0), (0.0, 10.0, 30.0)],
)
def test_backoff_is_finite_and_capped_for_any_retry_count(
    initial: float, factor: float, cap: float
) -> None:
    # max_retries=400 with backoff_factor=10 once ended in an OverflowError (10.0 ** 400) that
    # replaced the upstream's own error.
    from swerve._engine.policy import backoff

    config = FallbackConfig(
        max_retries=400,
        backoff_initial_s=initial,
        backoff_factor=factor,
        backoff_max_s=cap,
        jitter=False,
    )
    waits = [backoff(config, n, lambda: 1.0) for n in (0, 1, 399, 400, 10**6, 10**18)]
    assert all(0 <= w <= cap for w in waits)
    assert waits[0] == min(initial, cap)
    expected_late = cap if initial > 0 else 0.0
    assert waits[-1] == expected_late


def test_backoff_keeps_exact_small_values() -> None:
    from swerve._engine.policy import backoff

    config = FallbackConfig(backoff_initial_s=2, backoff_factor=2, backoff_max_s=30, jitter=False)
    assert [backoff(config, n, lambda: 1.0) for n in range(6)] == [2, 4, 8, 16, 30, 30]


def test_decide_after_399_retries_with_factor_10_waits_the_cap() -> None:
    config = FallbackConfig(
        fallbacks={A: B}, max_retries=400, backoff_factor=10, backoff_max_s=30, jitter=False
    )
    failure = Failure(FailureKind.SERVER_ERROR, status=503)
    decision = decide(config, failure, requested=A, current=A, retries=399, swaps=0)
    assert decision == Retry(30.0)
