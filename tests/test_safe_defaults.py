"""Safe defaults: an attempt with no swerve limit keeps the client's own timeout, and a skip says
whether the cooldown behind it was learned by this Failover or elsewhere on a shared store.

Every engine behaviour runs sync (``call`` / ``stream``) and async (``acall`` / ``astream``)
from one body, over real httpx against the fake provider, on a :class:`FakeClock`."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from swerve import Attempt, Failover, FallbackConfig, MemoryHealth, Result, Route, UpstreamError
from swerve._engine.failover import ROUTE_CACHE_SIZE, _OwnCooldowns
from swerve._engine.timing import CallTime
from swerve._health.store import CooldownRule
from swerve.httpx import AsyncFailoverTransport, FailoverTransport, Upstream
from swerve.testing import FakeProvider, Fault, Reply

from . import _wire
from .conftest import FakeClock, Otel

P, F = "primary/model-a", "fallback/model-b"
DEFAULT = object()  # what a client passes to mean "my own default" (httpx.USE_CLIENT_DEFAULT)
MESSAGES = [{"role": "user", "content": "hi"}]


@pytest.fixture(params=["sync", "async"])
def sync(request: pytest.FixtureRequest) -> bool:
    return bool(request.param == "sync")


def config(**kw: Any) -> FallbackConfig:
    params: dict[str, Any] = {"fallbacks": {P: F}, "jitter": False, "max_retries": 0}
    params.update(kw)
    return FallbackConfig(**params)


def run(fo: Failover, fn: Callable[[Attempt], Any], sync: bool, route: str = P) -> Result[Any]:
    """``fn(attempt)`` as a unary call in the mode, or (async) awaited from a coroutine."""
    if sync:
        return fo.call(route, fn)

    async def afn(attempt: Attempt) -> Any:
        return fn(attempt)

    return asyncio.run(fo.acall(route, afn))


def streamed(fo: Failover, fn: Callable[[Attempt], Any], sync: bool) -> list[Any]:
    """The value ``fn(attempt)`` gives each attempt of a stream, as its one chunk."""
    if sync:
        return list(fo.stream(P, lambda a: iter([fn(a)])))

    async def go() -> list[Any]:
        async def chunks(attempt: Attempt) -> Any:
            yield fn(attempt)

        return [c async for c in fo.astream(P, chunks)]

    return asyncio.run(go())


# --- Attempt.timeout_or ---------------------------------------------------------------------------
def test_timeout_or_gives_swerves_limit_when_there_is_one() -> None:
    route = Route.parse(P)
    assert Attempt(route, route, timeout=3.0).timeout_or(DEFAULT) == 3.0
    assert Attempt(route, route, timeout=0.0).timeout_or(DEFAULT) == 0.0


def test_timeout_or_gives_the_default_unchanged_without_a_limit() -> None:
    route = Route.parse(P)
    assert Attempt(route, route).timeout_or(DEFAULT) is DEFAULT
    assert Attempt(route, route).timeout_or(httpx.USE_CLIENT_DEFAULT) is httpx.USE_CLIENT_DEFAULT
    # A bound swerve derived, not one the config set: the client's default still rules.
    assert Attempt(route, route, timeout=5760.0, limited=False).timeout_or(DEFAULT) is DEFAULT


def test_timeout_or_is_zero_once_the_deadline_has_passed(clock: FakeClock) -> None:
    time = CallTime(config(deadline_s=2.0), clock)
    clock.advance(5.0)
    timeout, _ = time.begin_attempt()
    route = Route.parse(P)
    assert Attempt(route, route, timeout=timeout).timeout_or(DEFAULT) == 0.0


@pytest.mark.parametrize(
    ("limits", "expected"),
    [
        ({}, DEFAULT),  # no limit set: the client keeps its own timeout
        ({"attempt_timeout_s": 3.0}, 3.0),
        ({"deadline_s": 2.0}, 2.0),
        ({"attempt_timeout_s": 3.0, "deadline_s": 2.0}, 2.0),  # whichever is sooner
    ],
)
def test_the_engine_hands_each_attempt_its_limit_or_the_default(
    make_failover: Any, sync: bool, limits: dict[str, float], expected: object
) -> None:
    fo = make_failover(config(**limits))
    assert run(fo, lambda a: a.timeout_or(DEFAULT), sync).value == expected  # DEFAULT: itself
    assert streamed(fo, lambda a: a.timeout_or(DEFAULT), sync) == [expected]
    if not limits:  # attempt.timeout itself stays the call's finite bound
        timeout = run(fo, lambda a: a.timeout, sync).value
        assert timeout == pytest.approx(config().call_bound_s)


def test_a_later_attempt_gets_what_is_left_of_the_deadline(
    make_failover: Any, clock: FakeClock, sync: bool
) -> None:
    fo = make_failover(config(max_retries=1, deadline_s=10.0, backoff_initial_s=1.0))
    seen: list[object] = []

    def fn(attempt: Attempt) -> str:
        seen.append(attempt.timeout_or(DEFAULT))
        if attempt.number == 1:
            clock.advance(4.0)  # the first attempt takes 4 s, then fails
            raise UpstreamError(503)
        return "ok"

    assert run(fo, fn, sync).value == "ok"
    assert seen == [10.0, 5.0]  # 10 s, less the 4 s attempt and the 1 s backoff


def test_without_swerve_the_default_is_kept(sync: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SWERVE_TEST_CONFIG", raising=False)
    fo = Failover(None, MemoryHealth(), env_var="SWERVE_TEST_CONFIG")
    assert run(fo, lambda a: a.timeout_or(DEFAULT), sync).value is DEFAULT


def test_a_hang_ends_at_the_clients_own_timeout_and_swaps(
    make_failover: Any, fake: FakeProvider, sync: bool
) -> None:
    """The quickstart's pattern with no swerve limit: the client's timeout (here 0.2 s, httpx's
    own is 5 s) ends the hung attempt, and the call swaps instead of hanging."""
    fo: Failover = make_failover(config())
    fake.set_fault("primary", Fault.hang())
    timeout = httpx.Timeout(0.2)

    def request(attempt: Attempt) -> dict[str, Any]:  # the quickstart's request
        timeout = attempt.timeout_or(httpx.USE_CLIENT_DEFAULT)
        return {"url": _wire.url(fake, attempt), "json": _wire.body(attempt), "timeout": timeout}

    def text(response: httpx.Response) -> str:
        response.raise_for_status()
        return str(response.json()["choices"][0]["message"]["content"])

    if sync:
        with httpx.Client(timeout=timeout) as client:
            result = fo.call(P, lambda a: text(client.post(**request(a))))
    else:

        async def go() -> Result[str]:
            async with httpx.AsyncClient(timeout=timeout) as client:

                async def acomplete(attempt: Attempt) -> str:
                    return text(await client.post(**request(attempt)))

                return await fo.acall(P, acomplete)

        result = asyncio.run(go())
    assert result.value == "from fallback"
    assert [r.failure.kind.value for r in result.attempts if r.failure] == ["timeout"]


# --- the transport never turns a client's timeout off ---------------------------------------------
class _Recording(httpx.BaseTransport, httpx.AsyncBaseTransport):
    """An inner transport that notes the timeouts each request came with, then sends it."""

    def __init__(self) -> None:
        self.timeouts: list[dict[str, float | None]] = []
        self._sync = httpx.HTTPTransport()
        self._async = httpx.AsyncHTTPTransport()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.timeouts.append(dict(request.extensions["timeout"]))
        return self._sync.handle_request(request)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.timeouts.append(dict(request.extensions["timeout"]))
        return await self._async.handle_async_request(request)

    def close(self) -> None:
        self._sync.close()

    async def aclose(self) -> None:
        await self._async.aclose()


def _through_transport(fo: Failover, fake: FakeProvider, sync: bool, timeout: Any) -> _Recording:
    inner = _Recording()
    ups = {P: Upstream(f"{fake.url('primary')}/v1", transport=inner)}
    body = {"model": P, "messages": MESSAGES}
    url = "http://swerve.invalid/v1/chat/completions"
    if sync:
        with httpx.Client(transport=FailoverTransport(ups, failover=fo), timeout=timeout) as c:
            assert c.post(url, json=body).status_code == 200
        return inner

    async def go() -> None:
        transport = AsyncFailoverTransport(ups, failover=fo)
        async with httpx.AsyncClient(transport=transport, timeout=timeout) as c:
            assert (await c.post(url, json=body)).status_code == 200

    asyncio.run(go())
    return inner


def test_the_transport_keeps_the_clients_timeout_without_a_limit(
    make_failover: Any, fake: FakeProvider, sync: bool
) -> None:
    unlimited = FallbackConfig(fallbacks={}, max_retries=0)
    fo = make_failover(unlimited)
    five = dict.fromkeys(("connect", "read", "write", "pool"), 5.0)
    assert _through_transport(fo, fake, sync, httpx.Timeout(5.0)).timeouts == [five]
    # A client with its timeout off still gets swerve's bound: finite, never None.
    (unbounded,) = _through_transport(fo, fake, sync, None).timeouts
    assert set(unbounded.values()) == {unlimited.call_bound_s}
    # A limit swerve was given is the lower of the two.
    fo = make_failover(unlimited.model_copy(update={"attempt_timeout_s": 2.0}))
    (limited,) = _through_transport(fo, fake, sync, httpx.Timeout(5.0)).timeouts
    assert limited == dict.fromkeys(("connect", "read", "write", "pool"), 2.0)


# --- where a cooldown was learned -----------------------------------------------------------------
def test_a_skip_says_whether_this_failover_learned_the_cooldown(
    make_failover: Any, fake: FakeProvider, clock: FakeClock, otel: Otel, sync: bool
) -> None:
    """Two Failovers on one store (as every Failover on the process-wide default is): the one
    that cooled the primary skips it as ``this_failover``, the other as ``elsewhere``."""
    one = make_failover(config(cooldown_s=60))
    other = make_failover(config(cooldown_s=60))
    fake.script("primary", [Fault.status(503)])

    def complete(attempt: Attempt) -> str:
        with httpx.Client() as c:
            return _wire.complete(c, fake, attempt)

    assert run(one, complete, sync).value == "from fallback"  # cools the primary
    mine, theirs = run(one, complete, sync), run(other, complete, sync)
    assert [(str(s.route), s.learned) for s in mine.skipped] == [(P, "this_failover")]
    assert [(str(s.route), s.learned) for s in theirs.skipped] == [(P, "elsewhere")]
    assert (str(mine.route), str(theirs.route)) == (F, F)
    skips = otel.events("swerve.route_skipped")
    assert [(e["swerve.route"], e["swerve.cooldown.learned"]) for _, e in skips] == [
        (P, "this_failover"),
        (P, "elsewhere"),
    ]
    assert all(e["swerve.reason"] == "degraded" for _, e in skips)

    # Past that cooldown and the recovery after it the store has forgotten it; then the other
    # Failover cools it: what the first one learned is stale, the skip is "elsewhere" now.
    clock.advance(200)
    assert str(run(other, complete, sync).route) == P
    fake.script("primary", [Fault.status(503)])
    assert str(run(other, complete, sync).route) == F
    assert [s.learned for s in run(one, complete, sync).skipped] == ["elsewhere"]
    assert [s.learned for s in run(other, complete, sync).skipped] == ["this_failover"]


def test_skips_on_a_swap_and_at_the_start_each_say_where(
    make_failover: Any, fake: FakeProvider, sync: bool
) -> None:
    chain = FallbackConfig(
        fallbacks={P: [F, "third/model-c"], F: P}, jitter=False, max_retries=0, max_swaps=1
    )
    one, other = make_failover(chain), make_failover(chain)
    fake.set_reply("third", Reply(text="from third"))

    def complete(attempt: Attempt) -> str:
        with httpx.Client() as c:
            return _wire.complete(c, fake, attempt)

    fake.script("fallback", [Fault.status(503)])
    assert run(one, complete, sync, route=F).value == "from primary"  # "one" cools F
    fake.script("primary", [Fault.status(503)])
    result = run(other, complete, sync)  # P fails ("other" cools it), the swap walks past F
    assert result.value == "from third"
    assert [(str(s.route), s.learned) for s in result.skipped] == [(F, "elsewhere")]
    result = run(one, complete, sync)  # both cooled: the start walks past P, then F
    assert (result.value, len(result.attempts)) == ("from third", 1)
    assert [(str(s.route), s.learned) for s in result.skipped] == [
        (P, "elsewhere"),
        (F, "this_failover"),
    ]


def test_a_config_change_forgets_what_was_learned(
    fake: FakeProvider, otel: Otel, clock: FakeClock, monkeypatch: pytest.MonkeyPatch, sync: bool
) -> None:
    settings = '{"fallbacks": {"%s": "%s"}, "max_retries": 0, "cooldown_s": %d}'
    monkeypatch.setenv("SWERVE_TEST_CONFIG", settings % (P, F, 60))
    health = MemoryHealth()
    fo = Failover(None, health, env_var="SWERVE_TEST_CONFIG", telemetry=otel.telemetry, clock=clock)
    fake.script("primary", [Fault.status(503)])

    def complete(attempt: Attempt) -> str:
        with httpx.Client() as c:
            return _wire.complete(c, fake, attempt)

    run(fo, complete, sync)
    monkeypatch.setenv("SWERVE_TEST_CONFIG", settings % (P, F, 61))
    assert fo.config is not None and fo.config.cooldown_s == 61  # the store was cleared
    health.cool_down(P, clock.now, CooldownRule(60, 60))  # now cooled by someone else
    assert [s.learned for s in run(fo, complete, sync).skipped] == ["elsewhere"]


def test_what_a_failover_remembers_is_bounded() -> None:
    own = _OwnCooldowns()
    for i in range(ROUTE_CACHE_SIZE + 10):
        own.remember(f"p/m{i}", 100.0)
    assert own.learned("p/m0", 0.0) == "elsewhere"  # the oldest went first
    assert own.learned(f"p/m{ROUTE_CACHE_SIZE + 9}", 0.0) == "this_failover"
    assert own.learned(f"p/m{ROUTE_CACHE_SIZE + 9}", 100.0) == "elsewhere"  # it ended
    own.remember("p/m5000", 50.0)
    own.remember("p/m5000", 20.0)  # a shorter one never shortens what was learned
    assert own.learned("p/m5000", 30.0) == "this_failover"
    own.forget("p/m5000")
    assert own.learned("p/m5000", 30.0) == "elsewhere"
