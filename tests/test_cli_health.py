"""`swerve health`: real completions through the transport, a table, and the exit status."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from swerve.cli import main
from swerve.testing import FakeProvider, Fault

KEY = "sk-or-v1-HEALTHSECRET0123456789abcdef"


@pytest.fixture
def fake() -> Iterator[FakeProvider]:
    with FakeProvider() as server:
        yield server


def write(tmp_path: Path, fake: FakeProvider, **extra: object) -> Path:
    data = {
        "fallbacks": {"openrouter/anthropic/claude-sonnet-5": "anthropic/claude-sonnet-5"},
        "upstreams": {
            # One wire for the whole chain: swerve does not translate between wires.
            "openrouter/anthropic/claude-sonnet-5": {
                "base_url": fake.url("openrouter"),
                "wire": "anthropic",
                "api_key_env": "TEST_OPENROUTER_KEY",
            },
            "anthropic/claude-sonnet-5": {"base_url": fake.url("anthropic"), "wire": "anthropic"},
        },
        **extra,
    }
    path = tmp_path / "swerve.json"
    path.write_text(json.dumps(data))
    return path


def test_all_routes_up(
    tmp_path: Path, fake: FakeProvider, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    monkeypatch.setenv("TEST_OPENROUTER_KEY", KEY)
    monkeypatch.setenv("COLUMNS", "200")
    assert main(["health", str(write(tmp_path, fake))]) == 0
    out = capsys.readouterr().out
    assert "openrouter/anthropic/claude-sonnet-5" in out and "anthropic/claude-sonnet-5" in out
    # The status column of each route's row (a latency may read "200 ms" too).
    rows = [line.split() for line in out.splitlines() if "claude-sonnet-5" in line]
    assert sorted((row[0], row[1]) for row in rows) == [
        ("anthropic/claude-sonnet-5", "200"),
        ("openrouter/anthropic/claude-sonnet-5", "200"),
    ]
    # real minimal completions, one per route, with the key from the env, never printed
    assert fake.requests("openrouter") == 1 and fake.requests("anthropic") == 1
    assert fake.received("openrouter")[0]["max_tokens"] == 1
    assert fake.received_headers("openrouter")[0]["x-api-key"] == KEY  # the anthropic wire's header
    assert KEY not in out


def test_a_route_down_fails_the_command_without_swapping(
    tmp_path: Path, fake: FakeProvider, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    monkeypatch.setenv("TEST_OPENROUTER_KEY", KEY)
    monkeypatch.setenv("COLUMNS", "200")
    fake.set_fault("openrouter", Fault.status(503))
    assert main(["health", str(write(tmp_path, fake))]) == 1
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if "openrouter/anthropic/claude-sonnet-5" in line)
    assert "503" in row
    assert fake.requests("openrouter") == 1  # probed once: no retries, no swap
    assert fake.requests("anthropic") == 1


def test_skip_probes_checks_reachability_only(
    tmp_path: Path, fake: FakeProvider, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    monkeypatch.setenv("TEST_OPENROUTER_KEY", KEY)
    monkeypatch.setenv("SWERVE_HEALTH_SKIP_PROBES", "1")
    monkeypatch.setenv("COLUMNS", "200")
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    path = write(tmp_path, fake)
    data = json.loads(path.read_text())
    data["upstreams"]["anthropic/claude-sonnet-5"]["base_url"] = f"http://127.0.0.1:{closed}"
    path.write_text(json.dumps(data))
    assert main(["health", str(path)]) == 1
    out = capsys.readouterr().out
    assert "reachable" in out and "unreachable" in out
    assert fake.requests("openrouter") == 0  # no completions at all


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"api_key": "sk-literal"}, "api_key does not belong in a file"),
        ({"wire": "grpc"}, "upstreams['openrouter/anthropic/claude-sonnet-5'].wire"),
        ({"api_key_env": "UNSET_VAR_FOR_TEST"}, "$UNSET_VAR_FOR_TEST is not set"),
    ],
)
def test_bad_upstreams_are_named(
    tmp_path: Path, fake: FakeProvider, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch, change: dict[str, str], message: str,
) -> None:  # fmt: skip
    monkeypatch.setenv("TEST_OPENROUTER_KEY", KEY)
    path = write(tmp_path, fake)
    data = json.loads(path.read_text())
    data["upstreams"]["openrouter/anthropic/claude-sonnet-5"].update(change)
    path.write_text(json.dumps(data))
    assert main(["health", str(path)]) == 2
    err = capsys.readouterr().err
    assert message in err and "sk-literal" not in err


def test_markup_in_an_error_or_a_route_name_is_printed_as_text(
    tmp_path: Path, fake: FakeProvider, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    # an upstream's error text and a route name are data: rich markup in them is shown as is
    monkeypatch.setenv("TEST_OPENROUTER_KEY", KEY)
    monkeypatch.setenv("COLUMNS", "300")
    message = "upstream [/red] broke [bold]here[/bold]"
    fake.set_fault("openrouter", Fault.status(503, body={"error": {"message": message}}))
    path = write(tmp_path, fake)
    data = json.loads(path.read_text())
    data["upstreams"]["anthropic/[red]claude[/]"] = data["upstreams"].pop(
        "anthropic/claude-sonnet-5"
    )
    data["fallbacks"] = {}
    path.write_text(json.dumps(data))
    assert main(["health", str(path)]) == 1
    out = capsys.readouterr().out
    assert "anthropic/[red]claude[/]" in out
    assert "[/red] broke [bold]here[/bold]" in out


def test_every_missing_key_variable_is_named_at_once(
    tmp_path: Path, fake: FakeProvider, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    monkeypatch.delenv("TEST_OPENROUTER_KEY", raising=False)
    monkeypatch.delenv("TEST_ANTHROPIC_KEY", raising=False)
    path = write(tmp_path, fake)
    data = json.loads(path.read_text())
    data["upstreams"]["anthropic/claude-sonnet-5"]["api_key_env"] = "TEST_ANTHROPIC_KEY"
    path.write_text(json.dumps(data))
    assert main(["health", str(path)]) == 2
    assert capsys.readouterr().err == (
        f"error: {path}: upstreams['openrouter/anthropic/claude-sonnet-5']: "
        "$TEST_OPENROUTER_KEY is not set; "
        "upstreams['anthropic/claude-sonnet-5']: $TEST_ANTHROPIC_KEY is not set\n"
    )
    assert fake.requests("openrouter") == 0 and fake.requests("anthropic") == 0


LONG = "openrouter/some-vendor/an-extremely-long-model-name-that-goes-on-and-on-2025-preview"


@pytest.mark.parametrize("columns", ["40", "80", "200"])
def test_a_long_route_name_is_never_cut(
    tmp_path: Path, fake: FakeProvider, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch, columns: str,
) -> None:  # fmt: skip
    monkeypatch.setenv("COLUMNS", columns)
    fake.set_fault("short", Fault.status(503, body={"error": {"message": "down for a while"}}))
    path = tmp_path / "swerve.json"
    upstreams = {
        LONG: {"base_url": f"{fake.url('long')}/v1"},
        "short/m": {"base_url": f"{fake.url('short')}/v1"},
    }
    path.write_text(json.dumps({"upstreams": upstreams}))
    assert main(["health", str(path)]) == 1
    lines = capsys.readouterr().out.splitlines()
    # The whole name on one line, as an operator copies it.
    (line,) = [line for line in lines if "an-extremely-long" in line]
    assert LONG in line
    assert "200" in line or lines[lines.index(line) + 1].startswith("  status: 200")
    words = " ".join(" ".join(lines).split())
    assert "down for a while" in words and "503" in words
    if int(columns) >= len(LONG) + 40:  # room for a table: one row per route
        assert "503" in next(line for line in lines if "short/m" in line)
