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
            "openrouter/anthropic/claude-sonnet-5": {
                "base_url": f"{fake.url('openrouter')}/v1",
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
    assert out.count("200") == 2
    # real minimal completions, one per route, with the key from the env, never printed
    assert fake.requests("openrouter") == 1 and fake.requests("anthropic") == 1
    assert fake.received("openrouter")[0]["max_tokens"] == 1
    assert fake.received_headers("openrouter")[0]["authorization"] == f"Bearer {KEY}"
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
