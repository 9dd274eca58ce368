"""The command line: the demo tells the outage story; config check validates and explains."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from swerve.cli import main


def test_demo_runs_the_scripted_outage_end_to_end() -> None:
    # A real subprocess, as a user runs it; --fast shortens the waits.
    proc = subprocess.run(
        [sys.executable, "-m", "swerve.cli", "demo", "--fast"],
        capture_output=True, text=True, timeout=120, env={"PATH": "", "COLUMNS": "200"},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "swap openrouter/anthropic/claude-sonnet-5 -> anthropic/claude-sonnet-5" in out
    assert "skip openrouter/anthropic/claude-sonnet-5 (degraded)" in out
    assert "answer from anthropic/claude-sonnet-5" in out
    assert "streamed from anthropic/claude-sonnet-5" in out
    assert "answer from openrouter/anthropic/claude-sonnet-5" in out  # recovery
    assert "swerve chat openrouter/anthropic/claude-sonnet-5" in out  # the trace tree


def test_config_check_prints_chains(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "swerve.json"
    path.write_text(
        json.dumps(
            {
                "fallbackModelsByModel": {"a/x": "b/y", "b/y": "a/x", "c/z": ["a/x", "b/y"]},
                "maxFallbackAttempts": 2,
            }
        )
    )
    assert main(["config", "check", str(path)]) == 0
    out = capsys.readouterr().out
    assert "valid" in out
    assert "a/x -> b/y -> a/x" in out
    assert "c/z -> a/x -> b/y" in out


def test_config_check_names_the_bad_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MY_CFG", '{"fallbacks": {"claude": "anthropic/claude"}}')
    assert main(["config", "check", "--env", "MY_CFG"]) == 1
    err = capsys.readouterr().err
    assert "$MY_CFG" in err and "'claude'" in err and "provider/model" in err
    assert main(["config", "check", str(tmp_path / "missing.json")]) == 2
    assert "cannot read" in capsys.readouterr().err


def test_config_check_unset_env_means_passthrough(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SWERVE_FALLBACK_CONFIG", raising=False)
    assert main(["config", "check"]) == 0
    assert "passes every call straight through" in capsys.readouterr().out
