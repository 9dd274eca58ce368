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
    assert "── chat anthropic/claude-sonnet-5 " in out  # the trace tree: the call span


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


def test_config_check_with_nothing_to_check_fails_and_says_what_to_pass(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SWERVE_FALLBACK_CONFIG", raising=False)
    assert main(["config", "check"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("error: nothing to check: $SWERVE_FALLBACK_CONFIG is not set\n")
    for hint in ("swerve config check swerve.json", "--env VAR", "--allow-unset"):
        assert hint in captured.err
    # --allow-unset is the explicit opt-out: unset then means pass-through, as documented
    assert main(["config", "check", "--allow-unset"]) == 0
    assert capsys.readouterr().out == (
        "$SWERVE_FALLBACK_CONFIG is not set: swerve passes every call straight through.\n"
    )
    # set, the default variable is what a bare `config check` reads
    monkeypatch.setenv("SWERVE_FALLBACK_CONFIG", '{"fallbacks": {"a/x": "b/y"}}')
    assert main(["config", "check"]) == 0
    assert capsys.readouterr().out.startswith("$SWERVE_FALLBACK_CONFIG: valid\n")


def test_config_check_with_nothing_to_check_in_a_subprocess_exits_2() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "swerve.cli", "config", "check"],
        capture_output=True, text=True, timeout=60, env={"PATH": ""},
    )  # fmt: skip
    assert proc.returncode == 2 and proc.stdout == ""
    assert "nothing to check" in proc.stderr and "Traceback" not in proc.stderr


def _deployment(tmp_path: Path) -> Path:
    """A file naming two keys and the fleet's Redis by variable, as a deployment writes it."""
    path = tmp_path / "swerve.json"
    path.write_text(
        json.dumps(
            {
                "fallbacks": {"a/x": "b/y"},
                "upstreams": {
                    "a/x": {"base_url": "http://127.0.0.1:1/v1", "api_key_env": "T_KEY_A"},
                    "b/y": {"base_url": "http://127.0.0.1:2/v1", "api_key_env": "T_KEY_B"},
                },
                "health": {"url_env": "T_FLEET_REDIS", "prefix": "support-agent"},
            }
        )
    )
    return path


def test_config_check_fails_a_file_whose_variables_are_unset_naming_them_all(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for var in ("T_KEY_A", "T_KEY_B", "T_FLEET_REDIS"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("T_KEY_B", "  ")  # empty counts as unset, as `swerve health` reads it
    path = _deployment(tmp_path)
    assert main(["config", "check", str(path)]) == 2
    captured = capsys.readouterr()
    assert "valid" not in captured.out
    assert captured.err.splitlines()[0] == (
        f"error: {path}: upstreams['a/x']: $T_KEY_A is not set; "
        "upstreams['b/y']: $T_KEY_B is not set; health.url_env: $T_FLEET_REDIS is not set"
    )
    assert "--allow-unset" in captured.err
    # `swerve health` and `swerve routes` refuse the same file with the same words
    assert main(["health", str(path)]) == 2
    health_err = capsys.readouterr().err
    assert "upstreams['a/x']: $T_KEY_A is not set; upstreams['b/y']: $T_KEY_B" in health_err
    assert main(["routes", "--config", str(path)]) == 2
    assert f"{path}: health.url_env: $T_FLEET_REDIS is not set" in capsys.readouterr().err


def test_config_check_allow_unset_checks_the_file_alone_and_says_what_is_unset(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("T_KEY_A", "sk-test-a")
    monkeypatch.delenv("T_KEY_B", raising=False)
    monkeypatch.setenv("T_FLEET_REDIS", "redis://127.0.0.1:1/0")
    path = _deployment(tmp_path)
    assert main(["config", "check", str(path), "--allow-unset"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"{path}: valid\n")
    unset = "upstreams['b/y']: $T_KEY_B is not set"
    assert f"not set here (accepted with --allow-unset): {unset}" in out
    assert "sk-test-a" not in out
    monkeypatch.setenv("T_KEY_B", "sk-test-b")
    assert main(["config", "check", str(path)]) == 0
    out = capsys.readouterr().out
    assert "not set here" not in out and "sk-test" not in out


BAD_CONFIGS = [
    ({"cooldown_s": -5}, "cooldown_s: -5 is below 0"),
    ({"max_retries": "three"}, "max_retries: 'three' is not an integer"),
    ({"retries": 3}, "retries: unknown key; did you mean 'max_retries'?"),
    (
        {"fallbacks": {"a/m": "b/m"}, "fallbackModelsByModel": {"a/m": "c/m"}},
        "fallbacks and fallbackModelsByModel are the same field, given twice; keep one",
    ),
]


@pytest.mark.parametrize(("data", "message"), BAD_CONFIGS)
def test_config_check_names_the_value_from_a_file_and_from_the_env(
    data: dict[str, object], message: str, tmp_path: Path,
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    path = tmp_path / "swerve.json"
    path.write_text(json.dumps(data))
    assert main(["config", "check", str(path)]) == 1
    captured = capsys.readouterr()
    assert (captured.out, captured.err) == ("", f"error: {path}: {message}\n")
    monkeypatch.setenv("MY_CFG", json.dumps(data))
    assert main(["config", "check", "--env", "MY_CFG"]) == 1
    assert capsys.readouterr().err == f"error: $MY_CFG: {message}\n"


def test_config_check_env_unset_or_empty_is_an_error_unless_allowed(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("MY_UNSET_CFG", raising=False)
    hint = "(--allow-unset accepts it: calls then pass straight through)\n"
    assert main(["config", "check", "--env", "MY_UNSET_CFG"]) == 2
    captured = capsys.readouterr()
    assert (captured.out, captured.err) == ("", f"error: $MY_UNSET_CFG is not set\n{hint}")
    monkeypatch.setenv("MY_UNSET_CFG", "  ")
    assert main(["config", "check", "--env", "MY_UNSET_CFG"]) == 2
    assert capsys.readouterr().err == f"error: $MY_UNSET_CFG is not set (it is empty)\n{hint}"
    assert main(["config", "check", "--env", "MY_UNSET_CFG", "--allow-unset"]) == 0
    assert capsys.readouterr().out == (
        "$MY_UNSET_CFG is not set: swerve passes every call straight through.\n"
    )


def test_config_check_a_misspelt_variable_is_not_valid_and_the_near_one_is_named(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SWERVE_FALLBACK_CONFIG", '{"max_swaps": 1}')
    monkeypatch.delenv("SWERVE_FALBACK_CONFIG", raising=False)
    assert main(["config", "check", "--env", "SWERVE_FALBACK_CONFIG"]) == 2
    captured = capsys.readouterr()
    assert "valid" not in captured.out
    assert captured.err.startswith(
        "error: $SWERVE_FALBACK_CONFIG is not set; did you mean $SWERVE_FALLBACK_CONFIG?\n"
    )


def test_config_check_in_a_subprocess_exits_non_zero_on_an_unset_variable() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "swerve.cli", "config", "check", "--env", "NO_SUCH_SWERVE_VAR"],
        capture_output=True, text=True, timeout=60, env={"PATH": ""},
    )  # fmt: skip
    assert proc.returncode == 2
    assert proc.stderr.startswith("error: $NO_SUCH_SWERVE_VAR is not set\n")


def test_config_check_says_a_cycle_is_valid_and_how_a_call_walks_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "swerve.json"
    data = {"fallbacks": {"a/x": "b/y", "b/y": "a/x", "d/w": "e/v"}, "max_swaps": 3}
    path.write_text(json.dumps(data))
    assert main(["config", "check", str(path)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"{path}: valid\n")
    assert out.split("chains:\n")[1] == (
        "  a/x -> b/y -> a/x -> b/y   (a cycle: b/y falls back to a/x)\n"
        "  b/y -> a/x -> b/y -> a/x   (a cycle: a/x falls back to b/y)\n"
        "  d/w -> e/v\n"
        "a cycle is valid: a call walks it as shown, one route per swap, until its 3 swaps\n"
        "(max_swaps) are spent; passing over cooling routes, it goes round a cycle once only\n"
    )
    # A chain that ends in a loop further on is named as one too; a chain without one is not.
    data = {"fallbacks": {"a/x": ["b/y", "c/z"], "c/z": "b/y"}, "max_swaps": 1}
    path.write_text(json.dumps(data))
    assert main(["config", "check", str(path)]) == 0
    chains = capsys.readouterr().out.split("chains:\n")[1]
    assert chains.splitlines()[:2] == [
        "  a/x -> b/y   (a cycle: c/z falls back to b/y)",
        "  c/z -> b/y",
    ]
    assert "until its 1 swap\n" in chains


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


@pytest.mark.parametrize(
    ("upstreams", "message"),
    [
        (
            {"a/x": {"base_url": "http://127.0.0.1:1/v1"},
             "b/y": {"base_url": "http://127.0.0.1:2", "wire": "anthropic"}},
            "route a/x (openai wire) falls back to b/y (anthropic wire): swerve does not translate",
        ),
        (
            {"a/x": {"base_url": "http://127.0.0.1:1/v1"}},
            "route a/x falls back to b/y, which has no Upstream",
        ),
    ],
)  # fmt: skip
def test_config_check_refuses_upstreams_the_transport_would_refuse(
    upstreams: dict[str, object], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A file `swerve health` and `config check` accept must build a FailoverTransport too."""
    path = tmp_path / "swerve.json"
    path.write_text(json.dumps({"fallbacks": {"a/x": "b/y"}, "upstreams": upstreams}))
    assert main(["config", "check", str(path)]) == 1
    assert f"{path}: upstreams: {message}" in capsys.readouterr().err


def test_version_prints_swerve_and_the_installed_adapters(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from importlib.metadata import version

    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"swerve {version('swerve')}"
    # the langchain adapter is installed in this environment (a workspace member)
    assert lines[1:] == [f"swerve-langchain {version('swerve-langchain')}"]


def test_version_in_a_subprocess() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "swerve.cli", "--version"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 0 and proc.stdout.startswith("swerve ")
