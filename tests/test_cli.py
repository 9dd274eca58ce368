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


def test_config_check_prints_the_policy_by_failure_kind(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "swerve.json"
    config = {
        "fallbacks": {"openai/gpt-5-mini": "backup/gpt-5-mini"},
        "fallbackOnErrors": [429, 503, 402],
        "onFailure": {"overloaded": "swap"},
        "fallbacksByFailure": {"context_overflow": {"openai/gpt-5-mini": "openai/gpt-5"}},
        "cooldownSeconds": 10,
        "cooldownMaxSeconds": 120,
    }
    path.write_text(json.dumps(config))
    assert main(["config", "check", str(path)]) == 0
    rows = {
        line.split()[0]: " ".join(line.split()[1:])
        for line in capsys.readouterr().out.splitlines()
        if line.startswith("  ") and "->" not in line.split()[0]
    }
    assert rows["timeout"] == "swap at once"
    assert rows["overloaded"] == "swap at once"
    assert rows["rate_limited"].startswith("retry, then swap (waits a Retry-After up to 60s")
    assert rows["content_filter"] == "surface"
    assert rows["quota"] == "surface; HTTP 402 swap at once (listed in fallback_on)"
    assert rows["context_overflow"] == (
        "surface; from a mapped route it swaps: openai/gpt-5-mini -> openai/gpt-5"
    )
    assert "aborted" not in rows


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


def test_demo_exports_spans_over_otlp_when_the_endpoint_is_set() -> None:
    """A loopback OTLP/HTTP receiver gets the demo's spans (protobuf POSTs to /v1/traces)."""
    import http.server
    import threading

    received: list[tuple[str, int]] = []

    class Receiver(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("content-length", 0))
            self.rfile.read(length)
            received.append((self.path, length))
            self.send_response(200)
            self.send_header("content-type", "application/x-protobuf")
            self.send_header("content-length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        endpoint = f"http://127.0.0.1:{server.server_address[1]}"
        proc = subprocess.run(
            [sys.executable, "-m", "swerve.cli", "demo", "--fast"],
            capture_output=True, text=True, timeout=120,
            env={"PATH": "", "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint},
        )  # fmt: skip
    finally:
        server.shutdown()
        thread.join(timeout=5)
    assert proc.returncode == 0, proc.stderr
    assert received and all(path == "/v1/traces" for path, _ in received)
    assert sum(size for _, size in received) > 500
