"""`swerve routes`: the fleet's shared health, read, cleared and drained through a real Redis.

Each test that needs Redis gets its own `redis-server` (the Debian package) on 127.0.0.1, a free
port and a temporary directory, with persistence off; it is killed at teardown. Changes travel
between stores through Redis in the background, so the tests poll (bounded) for what they expect.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest

from swerve import BreakerConfig, Failover, FallbackConfig, RedisHealth
from swerve._health.store import BreakerState, CooldownRule, Outcome, RouteHealth
from swerve.cli import _duration_arg, main
from swerve.testing import TelemetryRecorder

from ._servers import RedisServer, free_port, wait_for

PRIMARY = "openrouter/anthropic/claude-sonnet-5"
FALLBACK = "anthropic/claude-sonnet-5"
PASSWORD = "s3cret-fleet-pass-0123456789"
T = TypeVar("T")


# --- a real Redis: tests/fleet/conftest.py's `redis_server`, one per test -------------------
@pytest.fixture
def server(redis_server: RedisServer) -> RedisServer:
    return redis_server


def _wait_for(what: str, check: Callable[[], T | None], timeout: float = 10.0) -> T:
    return wait_for(what, check, timeout)


@pytest.fixture
def store(server: RedisServer) -> Iterator[RedisHealth]:
    """A process of the fleet: a store on the test's Redis."""
    health = RedisHealth.from_url(server.url)
    assert health.wait_until_shared(5)
    yield health
    health.close()


@pytest.fixture
def other(server: RedisServer) -> Iterator[RedisHealth]:
    """Another process of the same fleet."""
    health = RedisHealth.from_url(server.url)
    assert health.wait_until_shared(5)
    yield health
    health.close()


def _fleet(url: str, route: str) -> bool:
    """Whether a fresh store (as a process starting now) finds ``route`` in Redis."""
    health = RedisHealth.from_url(url)
    try:
        return any(h.route == route for h in health.fleet_view())
    finally:
        health.close()


def _routes(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["routes", *args])
    out, err = capsys.readouterr()
    return code, out, err


# --- the fleet's view -------------------------------------------------------------------------
def test_the_view_shows_each_route_with_its_state_and_reason(
    server: RedisServer, store: RedisHealth, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    monkeypatch.setenv("COLUMNS", "200")
    now = time.time()
    store.cool_down(PRIMARY, now, CooldownRule(60, 60), "unavailable")
    store.cool_down("openai/gpt-5-mini", now - 30, CooldownRule(5, 600), "rate_limited")
    store.drain(FALLBACK, now + 600, now)
    breaker = BreakerConfig(min_calls=2, open_s=120)
    for _ in range(2):
        store.record("mistral/large", Outcome.FAILURE, now, breaker, probe=False)
    every = {PRIMARY, FALLBACK, "openai/gpt-5-mini", "mistral/large"}
    _wait_for("all four to reach Redis", lambda: {h.route for h in store.fleet_view()} == every)

    code, out, err = _routes(capsys, "--url", server.url)
    assert code == 0, err
    rows = {line.split()[0]: line for line in out.splitlines() if "/" in line.split(" ")[0]}
    assert set(rows) == every, out
    assert "4 route(s) degraded in " + server.url in out
    cooling = rows[PRIMARY].split()
    assert cooling[1:2] == ["cooling"] and cooling[-2:] == ["closed", "unavailable"]
    assert "(in 59s)" in rows[PRIMARY] or "(in 60s)" in rows[PRIMARY]  # 60 s, read a moment later
    assert rows[FALLBACK].split()[1] == "drained" and rows[FALLBACK].split()[-1] == "drained"
    assert "(in 599s)" in rows[FALLBACK] or "(in 600s)" in rows[FALLBACK]
    assert "recovering (awaiting a probe)" in rows["openai/gpt-5-mini"]
    assert rows["openai/gpt-5-mini"].split()[-1] == "rate_limited"
    assert "breaker open" in rows["mistral/large"]
    assert rows["mistral/large"].split()[-2:] == ["open", "-"]
    # an open breaker's "until" is when it turns half-open and lets a probe through
    assert "(in 119s)" in rows["mistral/large"] or "(in 120s)" in rows["mistral/large"]


def test_an_empty_view_says_every_route_is_healthy(
    server: RedisServer, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SWERVE_HEALTH_URL", server.url)  # the default URL
    monkeypatch.setenv("SWERVE_HEALTH_PREFIX", "elsewhere")
    code, out, _ = _routes(capsys)
    assert code == 0
    assert out.strip() == f"every route is healthy in {server.url} (prefix 'elsewhere')"


def test_the_prefix_selects_the_fleet(
    server: RedisServer, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    blue = RedisHealth.from_url(server.url, prefix="blue")
    try:
        assert blue.wait_until_shared(5)
        blue.cool_down(PRIMARY, time.time(), CooldownRule(60, 60), "timeout")
        _wait_for("blue's cooldown in Redis", lambda: blue.fleet_view())
    finally:
        blue.close()
    assert "every route is healthy" in _routes(capsys, "--url", server.url)[1]
    code, out, _ = _routes(capsys, "--url", server.url, "--prefix", "blue")
    assert code == 0 and PRIMARY in out and "timeout" in out


def test_a_narrow_console_never_cuts_a_route_name(
    server: RedisServer, store: RedisHealth, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    monkeypatch.setenv("COLUMNS", "60")
    long = "bedrock/us.anthropic.claude-sonnet-5-20260101-v1:0-with-a-very-long-name"
    now = time.time()
    for route in (PRIMARY, FALLBACK, long):
        store.cool_down(route, now, CooldownRule(60, 60), "overloaded")
    _wait_for("the cooldowns to reach Redis", lambda: len(store.fleet_view()) == 3)
    code, out, _ = _routes(capsys, "--url", server.url)
    assert code == 0
    lines = out.splitlines()
    for route in (PRIMARY, FALLBACK, long):
        assert any(route in line for line in lines), out  # whole, on one line
    assert "…" not in out
    # The short names fit a table at 80 columns and more; at 60 each route gets a block.
    monkeypatch.setenv("COLUMNS", "100")
    store.clear(long)
    _wait_for("the long route to leave Redis", lambda: len(store.fleet_view()) == 2)
    code, out, _ = _routes(capsys, "--url", server.url)
    assert any(line.split()[:2] == [PRIMARY, "cooling"] for line in out.splitlines()), out


# --- clear and drain ---------------------------------------------------------------------------
def test_clear_ends_a_cooldown_for_the_whole_fleet(
    server: RedisServer, store: RedisHealth, other: RedisHealth,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    store.cool_down(PRIMARY, time.time(), CooldownRule(60, 60), "unavailable")
    _wait_for("the other process to see the cooldown", lambda: PRIMARY in _unavailable(other))

    code, out, err = _routes(capsys, "--url", server.url, "clear", PRIMARY)
    assert code == 0, err
    assert out.splitlines()[0] == f"cleared {PRIMARY}"

    _wait_for("the other process to see the route healthy", lambda: not _snapshot(other))
    assert PRIMARY not in _unavailable(other)
    assert (PRIMARY, "cleared") in other.take_notices()
    assert not _fleet(server.url, PRIMARY)  # and a process that starts now, too
    assert "every route is healthy" in _routes(capsys, "--url", server.url)[1]


def test_clear_also_closes_an_open_breaker(
    server: RedisServer, store: RedisHealth, other: RedisHealth,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    breaker = BreakerConfig(min_calls=2, open_s=120)
    now = time.time()
    for _ in range(2):
        store.record(PRIMARY, Outcome.FAILURE, now, breaker, probe=False)
    _wait_for(
        "the other process to see the breaker open",
        lambda: [h for h in _snapshot(other) if h.breaker is BreakerState.OPEN],
    )
    assert _routes(capsys, "--url", server.url, "clear", PRIMARY)[0] == 0
    _wait_for("the other process to see the breaker closed", lambda: not _snapshot(other))
    assert not _fleet(server.url, PRIMARY)


def test_drain_takes_a_route_out_and_the_next_call_reports_it(
    server: RedisServer, other: RedisHealth, capsys: pytest.CaptureFixture[str]
) -> None:
    recorder = TelemetryRecorder()
    config = FallbackConfig(fallbacks={PRIMARY: FALLBACK}, max_swaps=1)
    failover = Failover(config, other, telemetry=recorder.telemetry)
    try:
        code, out, err = _routes(capsys, "drain", PRIMARY, "--for", "10m", "--url", server.url)
        assert code == 0, err
        assert out.startswith(f"drained {PRIMARY} until ")
        assert "(in 600s)" in out.splitlines()[0] or "(in 599s)" in out.splitlines()[0]

        _wait_for("the other process to see the drain", lambda: PRIMARY in _unavailable(other))
        (health,) = _snapshot(other)
        assert health.reason == "drained"
        assert health.degraded_until is not None and health.degraded_until > time.time() + 590

        result = failover.call(PRIMARY, lambda attempt: str(attempt.route))
        assert str(result.route) == FALLBACK  # the drained route is walked past
        assert recorder.events("swerve.operator") == [
            ("swerve.operator", {"swerve.route": PRIMARY, "swerve.operator.action": "drained"})
        ]
        failover.call(PRIMARY, lambda attempt: str(attempt.route))
        assert len(recorder.events("swerve.operator")) == 1  # reported once
        assert _fleet(server.url, PRIMARY)
    finally:
        recorder.shutdown()


def test_a_drain_from_another_process_reaches_this_one(
    server: RedisServer, other: RedisHealth
) -> None:
    # The operator's command as its own process, as operators run it.
    proc = subprocess.run(
        [sys.executable, "-m", "swerve.cli", "routes", "drain", FALLBACK, "--for", "90s"],
        capture_output=True, text=True, timeout=60,
        env={**os.environ, "SWERVE_HEALTH_URL": server.url, "COLUMNS": "200"},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"drained {FALLBACK} until ")
    _wait_for("this process to see the drain", lambda: FALLBACK in _unavailable(other))
    assert other.take_notices() == [(FALLBACK, "drained")]
    (health,) = _snapshot(other)
    assert health.reason == "drained" and health.degraded_until is not None


def _unavailable(health: RedisHealth) -> set[str]:
    now = time.time()
    return {h.route for h in health.snapshot(now) if h.route in health.unavailable(now)}


def _snapshot(health: RedisHealth) -> list[RouteHealth]:
    return list(health.snapshot(time.time()))


# --- errors --------------------------------------------------------------------------------------
def test_no_url_exits_2_naming_the_variable(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SWERVE_HEALTH_URL", raising=False)
    for args in ((), ("clear", PRIMARY), ("drain", PRIMARY, "--for", "90s")):
        code, out, err = _routes(capsys, *args)
        assert code == 2 and out == ""
        assert "SWERVE_HEALTH_URL" in err and "Traceback" not in err


@pytest.mark.parametrize("args", [(), ("clear", PRIMARY), ("drain", PRIMARY, "--for", "1h")])
def test_unreachable_redis_exits_1_without_the_password(
    args: tuple[str, ...], capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"redis://fleet:{PASSWORD}@127.0.0.1:{free_port()}/0"  # nothing listens there
    code, out, err = _routes(capsys, "--url", url, "--timeout", "0.3", *args)
    assert code == 1
    assert PASSWORD not in out + err
    assert "Traceback" not in out + err
    assert f"redis://fleet:***@127.0.0.1:{url.split(':')[-1]}" in err
    assert "ConnectionError" in err


def test_a_refused_password_exits_1_without_the_password(
    start_redis: Callable[..., RedisServer], capsys: pytest.CaptureFixture[str]
) -> None:
    guarded = start_redis(requirepass="the-right-one")
    try:
        url = f"redis://:{PASSWORD}@127.0.0.1:{guarded.port}/0"
        code, out, err = _routes(capsys, "--url", url, "--timeout", "0.5")
    finally:
        guarded.stop()
    assert code == 1
    assert PASSWORD not in out + err and "Traceback" not in out + err
    assert f"redis://:***@127.0.0.1:{guarded.port}/0" in err
    assert "AuthenticationError" in err


@pytest.mark.parametrize(
    "args",
    [
        ("clear", "claude-sonnet-5"),
        ("drain", "claude-sonnet-5", "--for", "10m"),
        ("drain", PRIMARY, "--for", "soon"),
        ("drain", PRIMARY, "--for", "-5m"),
        ("drain", PRIMARY),
    ],
)
def test_bad_arguments_exit_2_before_any_redis(
    args: tuple[str, ...], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["routes", "--url", f"redis://127.0.0.1:{free_port()}/0", *args])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "provider/model" in err or "--for" in err


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90s", 90), ("10m", 600), ("2h", 7200), ("45", 45), ("1.5h", 5400), ("1d", 86400)],
)
def test_durations(text: str, seconds: float) -> None:
    assert _duration_arg(text) == seconds


@pytest.mark.parametrize("text", ["", "m", "0", "-1m", "ten", "10y", "inf", "nan"])
def test_bad_durations(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError):
        _duration_arg(text)


# --- the CLI's config file ---------------------------------------------------------------------
def _write(tmp_path: Path, health: object) -> Path:
    path = tmp_path / "swerve.json"
    path.write_text(json.dumps({"fallbacks": {PRIMARY: FALLBACK}, "health": health}))
    return path


def test_the_config_file_names_the_fleet(
    start_redis: Callable[..., RedisServer], tmp_path: Path,
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    guarded = start_redis(requirepass=PASSWORD)
    monkeypatch.setenv("FLEET_REDIS", guarded.url)  # the password stays in the environment
    monkeypatch.setenv("SWERVE_HEALTH_URL", f"redis://127.0.0.1:{free_port()}/0")  # not used
    path = _write(tmp_path, {"url_env": "FLEET_REDIS", "prefix": "support-agent"})
    code, out, err = _routes(capsys, "--config", str(path), "drain", PRIMARY, "--for", "10m")
    assert code == 0, err
    assert PASSWORD not in out + err and "prefix 'support-agent'" in out
    mine = RedisHealth.from_url(guarded.url, prefix="support-agent")
    try:
        assert mine.wait_until_shared(5)
        assert [h.reason for h in mine.fleet_view()] == ["drained"]
    finally:
        mine.close()
    code, out, err = _routes(capsys, "--config", str(path))
    assert code == 0, err
    assert "1 route(s) degraded" in out and PRIMARY in out and "drained" in out
    # a flag still wins over the file: another prefix holds nothing
    code, out, _ = _routes(capsys, "--config", str(path), "--prefix", "elsewhere")
    assert code == 0 and "every route is healthy" in out


def test_the_config_check_names_the_fleet(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _write(tmp_path, {"url": "redis://redis.internal:6379/0", "prefix": "support-agent"})
    assert main(["config", "check", str(path)]) == 0
    out = capsys.readouterr().out
    assert "shared health: redis://redis.internal:6379/0, prefix 'support-agent'" in out


@pytest.mark.parametrize(
    ("health", "message"),
    [
        ({"url": f"redis://:{PASSWORD}@127.0.0.1:6379/0"}, "health.url: a password does not"),
        ({"url": f"redis://127.0.0.1/0?password={PASSWORD}"}, "health.url: a password does not"),
        ({"url": "redis://a/0", "url_env": "X"}, "health: give exactly one of url and url_env"),
        ({"prefix": "p"}, "health: give exactly one of url and url_env"),
        ({"url_env": "SWERVE_TEST_UNSET_VAR"}, "health.url_env: $SWERVE_TEST_UNSET_VAR is not set"),
        ({"url": "redis://a/0", "port": 6379}, "health.port: unknown key"),
        ("redis://a/0", "health: 'redis://a/0' is not an object"),
    ],
)
def test_a_bad_health_section_is_named_and_keeps_the_password_out(
    health: object, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    monkeypatch.delenv("SWERVE_TEST_UNSET_VAR", raising=False)
    path = _write(tmp_path, health)
    code, out, err = _routes(capsys, "--config", str(path))
    assert code == 2 and out == ""
    assert f"{path}: {message}" in err, err
    assert PASSWORD not in err and "Traceback" not in err


# --- traps: another prefix holds the fleet; a drain that leaves a chain nothing -----------------
def _cool(url: str, prefix: str, *routes: str) -> None:
    """Cool ``routes`` down under ``prefix``, as a process of that fleet would."""
    health = RedisHealth.from_url(url, prefix=prefix)
    try:
        assert health.wait_until_shared(5)
        for route in routes:
            health.cool_down(route, time.time(), CooldownRule(60, 60), "unavailable")
        _wait_for(f"{prefix}'s cooldowns in Redis", lambda: len(health.fleet_view()) == len(routes))
    finally:
        health.close()


def test_an_empty_prefix_names_the_prefixes_that_hold_routes(
    server: RedisServer, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.delenv("SWERVE_HEALTH_PREFIX", raising=False)
    # docs/fleet.md's prefix; a route with a ":" in its model; a route whose key is a digest
    _cool(server.url, "support-agent", PRIMARY, "bedrock/claude-v1:0")
    _cool(server.url, "blue:green", "x/{odd}")
    code, out, err = _routes(capsys, "--url", server.url)
    assert code == 0, err
    assert out.splitlines() == [
        f"every route is healthy in {server.url} (prefix 'swerve')",
        "other prefixes in this Redis hold route health: 'blue:green' (1 route), "
        "'support-agent' (2 routes)",
        "pick one with --prefix NAME (or the config file's health.prefix, or "
        "$SWERVE_HEALTH_PREFIX)",
    ]
    code, out, _ = _routes(capsys, "--url", server.url, "--prefix", "support-agent")
    assert code == 0 and out.startswith("2 route(s) degraded") and "other prefixes" not in out
    # an empty prefix beside one other: only the other is named, never the one asked for
    _cool(server.url, "swerve", FALLBACK)
    code, out, _ = _routes(capsys, "--url", server.url, "--prefix", "empty")
    assert "'swerve' (1 route)" in out and "'empty'" not in out.splitlines()[1]


def test_the_prefix_scan_is_bounded(server: RedisServer) -> None:
    _cool(server.url, "support-agent", PRIMARY, FALLBACK)
    health = RedisHealth.from_url(server.url)
    try:
        assert health.wait_until_shared(5)
        assert health._wire.prefixes() == ({"support-agent": 2}, True)
        found, complete = health._wire.prefixes(limit=1)  # one key read: the look is partial
        assert found == {"support-agent": 1} and not complete
    finally:
        health.close()


def _chain_file(tmp_path: Path) -> Path:
    path = tmp_path / "chain.json"
    path.write_text(json.dumps({"fallbacks": {PRIMARY: FALLBACK}}))
    return path


def test_drain_refuses_to_leave_a_chain_with_no_healthy_route(
    server: RedisServer, store: RedisHealth, tmp_path: Path,
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    monkeypatch.setenv("COLUMNS", "200")
    store.cool_down(PRIMARY, time.time(), CooldownRule(60, 60), "unavailable")
    _wait_for("the cooldown in Redis", lambda: store.fleet_view())
    config = str(_chain_file(tmp_path))
    args = ("--url", server.url, "--config", config, "drain", FALLBACK, "--for", "10m")
    code, out, err = _routes(capsys, *args)
    assert code == 3 and out == ""
    first = err.splitlines()[0]
    assert first.startswith(
        f"error: draining {FALLBACK} leaves no healthy route for calls to {PRIMARY}: "
        f"{PRIMARY} -> {FALLBACK} ({PRIMARY} cooling until "
    )
    assert first.endswith(f", {FALLBACK} drained (this drain))")
    assert "--force" in err and "swerve routes clear" in err
    assert [h.route for h in store.fleet_view()] == [PRIMARY]  # nothing drained
    # --force drains anyway
    code, out, err = _routes(capsys, *args, "--force")
    assert code == 0, err
    assert out.startswith(f"drained {FALLBACK} until ")
    assert {h.route: h.reason for h in store.fleet_view()}[FALLBACK] == "drained"


def test_drain_counts_an_open_breaker_as_down_and_reads_the_config_variable(
    server: RedisServer, store: RedisHealth,
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    monkeypatch.setenv("SWERVE_FALLBACK_CONFIG", json.dumps({"fallbacks": {PRIMARY: FALLBACK}}))
    breaker = BreakerConfig(min_calls=2, open_s=120)
    for _ in range(2):
        store.record(FALLBACK, Outcome.FAILURE, time.time(), breaker, probe=False)
    _wait_for("the open breaker in Redis", lambda: store.fleet_view())
    code, _, err = _routes(capsys, "--url", server.url, "drain", PRIMARY, "--for", "90s")
    assert code == 3
    assert f"{FALLBACK} breaker open until " in err and f"{PRIMARY} -> {FALLBACK}" in err


def test_drain_goes_ahead_when_the_chain_keeps_a_healthy_route(
    server: RedisServer, store: RedisHealth, tmp_path: Path,
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    monkeypatch.delenv("SWERVE_FALLBACK_CONFIG", raising=False)
    config = str(_chain_file(tmp_path))
    # the primary cooling, the fallback healthy: draining the primary leaves the fallback
    store.cool_down(PRIMARY, time.time(), CooldownRule(60, 60), "unavailable")
    _wait_for("the cooldown in Redis", lambda: store.fleet_view())
    code, out, err = _routes(
        capsys, "--url", server.url, "--config", config, "drain", PRIMARY, "--for", "90s"
    )
    assert code == 0 and err == "" and out.startswith(f"drained {PRIMARY}")
    # a route on no chain of the config: nothing to strand
    code, _, err = _routes(
        capsys, "--url", server.url, "--config", config, "drain", "mistral/large", "--for", "90s"
    )
    assert code == 0 and err == ""


def test_drain_without_a_config_says_the_check_could_not_be_made(
    server: RedisServer, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SWERVE_FALLBACK_CONFIG", raising=False)
    code, out, err = _routes(capsys, "--url", server.url, "drain", FALLBACK, "--for", "90s")
    assert code == 0 and out.startswith(f"drained {FALLBACK}")
    assert err.startswith("note: could not check that the drain leaves each chain a healthy route")
    assert "--config FILE" in err and "$SWERVE_FALLBACK_CONFIG" in err
