"""Failure rules users extend: ``UpstreamError``, ``Failover(classifiers=...)`` and a predicate
``fallback_on``.

Each engine behaviour is written once and run through ``call``, ``acall``, ``stream`` and
``astream`` with a hand-written ``fn`` and a :class:`FakeClock` (no real waiting).
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any

import pytest

import swerve
from swerve import (
    Attempt,
    AttemptRecord,
    Classifier,
    Failover,
    Failure,
    FailureKind,
    FallbackConfig,
    MemoryHealth,
    UpstreamError,
)
from swerve._engine.policy import action
from swerve._failures import RETRY_AFTER_MAX_S, classify
from swerve.testing import FakeClock

P, F = "primary/model-a", "fallback/model-b"
MODES = ("call", "acall", "stream", "astream")
K = FailureKind


class Script:
    """What each route does, attempt by attempt: an exception is raised, anything else is
    returned; the last step repeats."""

    def __init__(self, steps: dict[str, Sequence[object]]) -> None:
        self.steps = {route: list(items) for route, items in steps.items()}
        self.seen: list[str] = []

    def __call__(self, attempt: Attempt) -> object:
        route = str(attempt.route)
        self.seen.append(route)
        items = self.steps[route]
        step = items.pop(0) if len(items) > 1 else items[0]
        if isinstance(step, BaseException):
            raise step
        return step


def run(mode: str, fo: Failover, script: Script) -> tuple[object, list[AttemptRecord]]:
    """One call in ``mode``: the value (or the stream's one chunk) and the attempts made."""
    if mode == "call":
        result = fo.call(P, script)
        return result.value, list(result.attempts)
    if mode == "acall":

        async def afn(attempt: Attempt) -> object:
            await asyncio.sleep(0)
            return script(attempt)

        aresult = asyncio.run(fo.acall(P, afn))
        return aresult.value, list(aresult.attempts)
    if mode == "stream":

        def chunks(attempt: Attempt) -> Iterator[object]:
            yield script(attempt)

        stream = fo.stream(P, chunks)
        (value,) = list(stream)
        return value, list(stream.attempts)

    async def achunks(attempt: Attempt) -> AsyncIterator[object]:
        await asyncio.sleep(0)
        yield script(attempt)

    async def consume() -> tuple[object, list[AttemptRecord]]:
        astream = fo.astream(P, achunks)
        (value,) = [chunk async for chunk in astream]
        return value, list(astream.attempts)

    return asyncio.run(consume())


def config(**kw: Any) -> FallbackConfig:
    params: dict[str, Any] = {"fallbacks": {P: F}, "jitter": False}
    params.update(kw)
    return FallbackConfig(**params)


def failover(cfg: FallbackConfig, clock: FakeClock, **kw: Any) -> Failover:
    return Failover(cfg, MemoryHealth(), clock=clock, **kw)  # FakeClock().random() is 1.0


@pytest.fixture(params=MODES)
def mode(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def routes(records: list[AttemptRecord]) -> list[str]:
    return [str(r.route) for r in records]


# --- UpstreamError ------------------------------------------------------------------------


def test_upstream_error_503_retries_then_swaps(mode: str) -> None:
    clock = FakeClock()
    fo = failover(config(max_retries=2), clock)
    script = Script({P: [UpstreamError(503, message="busy")], F: ["from fallback"]})

    value, records = run(mode, fo, script)

    assert value == "from fallback"
    assert routes(records) == [P, P, P, F]
    assert clock.sleeps == [2.0, 4.0]  # the backoff, jitter off
    failure = records[0].failure
    assert failure is not None
    assert (failure.kind, failure.status, failure.error_type) == (K.UNAVAILABLE, 503, "503")
    assert P in fo.health.unavailable(clock.time())


def test_upstream_error_429_waits_its_retry_after(mode: str) -> None:
    clock = FakeClock()
    fo = failover(config(max_retries=2), clock)
    script = Script({P: [UpstreamError(429, retry_after=2), "from primary"], F: ["unused"]})

    value, records = run(mode, fo, script)

    assert value == "from primary"
    assert routes(records) == [P, P]
    assert clock.sleeps == [2.0]
    assert records[0].failure is not None and records[0].failure.retry_after == 2.0


def test_upstream_error_status_not_listed_surfaces(mode: str) -> None:
    clock = FakeClock()
    fo = failover(config(), clock)
    error = UpstreamError(400, message="bad tool schema")
    script = Script({P: [error], F: ["unused"]})

    with pytest.raises(UpstreamError) as raised:
        run(mode, fo, script)

    assert raised.value is error  # the caller's own exception, unchanged
    assert script.seen == [P]
    assert clock.sleeps == []


# --- a predicate fallback_on --------------------------------------------------------------


def only_code(code: str) -> Any:
    def predicate(failure: Failure) -> bool:
        return failure.code == code

    return predicate


@pytest.mark.parametrize(
    ("code", "expected"),
    [("in_band_overload", ["swap"]), ("something_else", ["surface"])],
)
def test_predicate_fallback_on_decides(mode: str, code: str, expected: list[str]) -> None:
    clock = FakeClock()
    fo = failover(config(max_retries=0, fallback_on=only_code("in_band_overload")), clock)
    script = Script({P: [UpstreamError(500, code=code)], F: ["from fallback"]})

    if expected == ["swap"]:
        value, records = run(mode, fo, script)
        assert value == "from fallback"
        assert routes(records) == [P, F]
    else:
        with pytest.raises(UpstreamError):
            run(mode, fo, script)
        assert script.seen == [P]


def test_predicate_true_acts_like_a_listed_status(mode: str) -> None:
    # 401 surfaces by default; a predicate that says yes makes it swap at once, exactly as
    # listing 401 in the status list does.
    clock = FakeClock()
    fo = failover(config(fallback_on=lambda failure: failure.status == 401), clock)
    script = Script({P: [UpstreamError(401)], F: ["from fallback"]})

    value, records = run(mode, fo, script)

    assert value == "from fallback"
    assert routes(records) == [P, F]
    assert clock.sleeps == []


def test_predicate_that_raises_surfaces_the_upstream_error(
    mode: str, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(failure: Failure) -> bool:
        raise KeyError("oops")

    clock = FakeClock()
    fo = failover(config(fallback_on=broken), clock)
    error = UpstreamError(503)
    script = Script({P: [error], F: ["unused"]})

    with caplog.at_level(logging.WARNING, logger="swerve"):
        with pytest.raises(UpstreamError) as raised:
            run(mode, fo, script)
        with pytest.raises(UpstreamError):
            run(mode, fo, script)

    assert raised.value is error
    warnings = [r for r in caplog.records if "fallback_on predicate" in r.getMessage()]
    assert len(warnings) <= 1  # once per predicate (another mode's run may have logged it)


# --- classifiers= ---------------------------------------------------------------------------


def in_band(error: BaseException) -> Failure | None:
    if isinstance(error, ValueError) and "overload" in str(error):
        return Failure(K.UNAVAILABLE, status=503, message=str(error), error_type="503")
    return None


def test_user_classifier_beats_the_builtin_one(mode: str) -> None:
    clock = FakeClock()
    script = Script({P: [ValueError("in-band overload")], F: ["from fallback"]})

    # Without the classifier the plain exception is unknown: it surfaces at once.
    with pytest.raises(ValueError, match="in-band overload"):
        run(mode, failover(config(), clock), script)
    assert script.seen == [P]

    clock = FakeClock()
    script.seen.clear()
    fo = failover(config(max_retries=1), clock, classifiers=[in_band])
    value, records = run(mode, fo, script)

    assert value == "from fallback"
    assert routes(records) == [P, P, F]
    assert records[0].failure is not None and records[0].failure.kind is K.UNAVAILABLE


def test_with_classifiers_teaches_a_ready_failover_and_leaves_it_as_it_was(mode: str) -> None:
    """What an adapter does with a Failover it is handed: a copy that reads its framework's
    errors first, on the same health store; the original still reads them as unknown."""
    clock = FakeClock()
    base = failover(config(max_retries=0), clock)
    taught = base.with_classifiers(in_band)
    with pytest.raises(ValueError, match="in-band overload"):
        run(mode, base, Script({P: [ValueError("in-band overload")], F: ["unused"]}))

    script = Script({P: [ValueError("in-band overload")], F: ["from fallback"]})
    value, records = run(mode, taught, script)
    assert value == "from fallback" and routes(records) == [P, F]
    cooling = {h.route for h in base.health.snapshot(clock.now) if h.degraded}
    assert taught.health is base.health and cooling == {P}


def test_classifiers_run_in_order_and_can_overrule_builtin_kinds(mode: str) -> None:
    # A reset is a transport failure (retried) to the built-in rules; the user says it is a
    # prompt problem, so it surfaces on the first attempt. The first rule to answer wins.
    def prompt_problem(error: BaseException) -> Failure | None:
        if isinstance(error, ConnectionResetError):
            return Failure(K.CONTEXT_OVERFLOW, error_type="context_overflow")
        return None

    def never_reached(error: BaseException) -> Failure | None:
        raise AssertionError("a later classifier ran after an earlier one answered")

    clock = FakeClock()
    fo = failover(config(), clock, classifiers=[in_band, prompt_problem, never_reached])
    script = Script({P: [ConnectionResetError("reset")], F: ["unused"]})

    with pytest.raises(ConnectionResetError):
        run(mode, fo, script)
    assert script.seen == [P]


def test_classifier_that_raises_does_not_mask_the_error(
    mode: str, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(error: BaseException) -> Failure | None:
        raise RuntimeError("classifier bug")

    clock = FakeClock()
    fo = failover(config(max_retries=1), clock, classifiers=[broken, in_band])
    with caplog.at_level(logging.WARNING, logger="swerve"):
        # Treated as None: the next classifier still answers...
        script = Script({P: [ValueError("in-band overload")], F: ["from fallback"]})
        value, records = run(mode, fo, script)
        assert value == "from fallback"
        assert routes(records) == [P, P, F]
        # ...and the built-in rules still apply (UpstreamError(503) retries on its own).
        script = Script({P: [UpstreamError(503)], F: ["from fallback"]})
        value, _ = run(mode, fo, script)
        assert value == "from fallback"
        # An error no rule knows surfaces as itself, never as the classifier's RuntimeError.
        error = ValueError("something else")
        with pytest.raises(ValueError, match="something else") as raised:
            run(mode, fo, Script({P: [error], F: [error]}))  # P may be cooling: both fail
        assert raised.value is error

    warnings = [r for r in caplog.records if "classifier" in r.getMessage()]
    assert len(warnings) == 1
    assert warnings[0].levelno == logging.WARNING
    assert "RuntimeError" in warnings[0].getMessage()


def test_classifier_returning_a_non_failure_is_ignored(mode: str) -> None:
    clock = FakeClock()
    fo = failover(config(), clock, classifiers=[lambda error: "503"])
    script = Script({P: [UpstreamError(503)], F: ["from fallback"]})

    value, records = run(mode, fo, script)

    assert value == "from fallback"
    assert routes(records) == [P, P, P, F]


def test_cancellation_is_not_offered_to_classifiers() -> None:
    seen: list[BaseException] = []

    def spy(error: BaseException) -> Failure | None:
        seen.append(error)
        return Failure(K.UNAVAILABLE, status=503)

    fo = failover(config(), FakeClock(), classifiers=[spy])

    def interrupted(attempt: Attempt) -> str:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        fo.call(P, interrupted)
    assert seen == []


def test_classifier_type_accepts_a_plain_function() -> None:
    rule: Classifier = in_band
    assert rule(ValueError("overload")) is not None
    with pytest.raises(TypeError, match="callable"):
        Failover(config(), MemoryHealth(), classifiers=["not a function"])  # type: ignore[list-item]


# --- classification of UpstreamError ----------------------------------------------------


@pytest.mark.parametrize(
    ("status", "kind"),
    [
        (503, K.UNAVAILABLE),
        (429, K.RATE_LIMITED),
        (529, K.OVERLOADED),
        (500, K.SERVER_ERROR),
        (504, K.TIMEOUT),
        (401, K.AUTH),
        (402, K.QUOTA),
        (400, K.INVALID_REQUEST),
    ],
)
def test_upstream_error_classifies_as_its_status(status: int, kind: FailureKind) -> None:
    failure = classify(UpstreamError(status))
    assert (failure.kind, failure.status, failure.error_type) == (kind, status, str(status))
    assert failure.retry_after is None


@pytest.mark.parametrize(
    ("given", "read"),
    [
        (2, 2.0),
        (0.5, 0.5),
        (-3, 0.0),
        (1e12, RETRY_AFTER_MAX_S),
        (math.inf, RETRY_AFTER_MAX_S),
        (math.nan, None),
        (None, None),
    ],
)
def test_upstream_error_retry_after_is_bounded_like_a_header(
    given: float | None, read: float | None
) -> None:
    assert classify(UpstreamError(429, retry_after=given)).retry_after == read


def test_upstream_error_reads_code_and_message_like_an_error_body() -> None:
    failure = classify(UpstreamError(code="overloaded_error", message="Overloaded"))
    assert (failure.kind, failure.status, failure.error_type) == (
        K.OVERLOADED,
        529,
        "overloaded_error",
    )
    failure = classify(UpstreamError(400, message="maximum context length is 8192 tokens"))
    assert failure.kind is K.CONTEXT_OVERFLOW
    failure = classify(UpstreamError(503, code="in_band", message="sk-abcdefghijklmnop1234"))
    assert failure.code == "in_band"
    assert "sk-abcdefghijklmnop1234" not in failure.message  # redacted like any message
    assert classify(UpstreamError()).kind is K.UNKNOWN
    assert classify(UpstreamError(503), in_stream=True).in_stream


def test_upstream_error_found_as_a_cause() -> None:
    outer = RuntimeError("wrapped")
    outer.__cause__ = UpstreamError(503)
    assert classify(outer).kind is K.UNAVAILABLE


@pytest.mark.parametrize("status", [99, 600, True, "503", 503.0])
def test_upstream_error_refuses_what_is_not_a_status(status: Any) -> None:
    with pytest.raises(ValueError, match="100-599"):
        UpstreamError(status)


def test_upstream_error_message() -> None:
    assert str(UpstreamError(503)) == "upstream error 503"
    assert str(UpstreamError(503, message="busy")) == "busy"
    error = UpstreamError(429, retry_after=2, code="x")
    assert (error.status, error.retry_after, error.code) == (429, 2, "x")


# --- the config --------------------------------------------------------------------------


def test_predicate_config_is_kept_and_left_out_of_json() -> None:
    def predicate(failure: Failure) -> bool:
        return failure.status == 503

    cfg = FallbackConfig(fallbacks={P: F}, fallback_on=predicate)
    assert cfg.fallback_on is predicate
    assert cfg == FallbackConfig(fallbacks={P: F}, fallback_on=predicate)
    assert cfg != FallbackConfig(fallbacks={P: F})
    dumped = json.loads(cfg.model_dump_json())
    assert "fallback_on" not in dumped
    assert FallbackConfig.from_json(cfg.model_dump_json()) == FallbackConfig(fallbacks={P: F})
    assert cfg.model_copy(update={"fallbacks": {}}).fallback_on is predicate
    # The status list still round-trips through JSON, as a list.
    plain = FallbackConfig(fallback_on=frozenset({503, 429}))
    assert json.loads(plain.model_dump_json())["fallback_on"] == [429, 503]
    assert FallbackConfig.from_json(plain.model_dump_json()) == plain
    assert plain.model_dump()["fallback_on"] == frozenset({429, 503})


def test_predicate_policy_keeps_swerves_own_kinds() -> None:
    cfg = FallbackConfig(fallback_on=lambda failure: False)
    assert action(cfg, Failure(K.BREAKER_OPEN)) == "swap"
    assert action(cfg, Failure(K.ABORTED)) == "surface"
    assert action(cfg, Failure(K.UNAVAILABLE, status=503)) == "surface"
    cfg = FallbackConfig(fallback_on=lambda failure: True)
    assert action(cfg, Failure(K.UNAVAILABLE, status=503)) == "retry"
    assert action(cfg, Failure(K.TIMEOUT)) == "swap"
    assert action(cfg, Failure(K.CONTEXT_OVERFLOW, status=400)) == "surface"
    assert action(cfg, Failure(K.UNKNOWN)) == "surface"  # no status to vouch for it


def test_public_names() -> None:
    for name in ("UpstreamError", "Classifier"):
        assert name in swerve.__all__
