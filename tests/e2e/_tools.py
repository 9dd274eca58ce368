"""Test tools that must not enter the project's lock, each in its own pinned environment.

Arize Phoenix (a trace backend) and Playwright (a browser driver) are only ever run, never
imported here: ``uv tool run --from <pin>`` makes their environment once in uv's cache (the
first run downloads them) and reuses it, so their pins never meet swerve's.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

PHOENIX = "arize-phoenix==20.26.1"
PLAYWRIGHT = "playwright==1.65.2"


def uv() -> str:
    path = os.environ.get("UV") or shutil.which("uv")  # `uv run` names itself in $UV
    assert path, "uv is not installed: ./scripts/test installs it"
    return path


def tool(spec: str, *command: str) -> list[str]:
    """``command`` run in uv's cached environment for the pinned ``spec``, on this Python.

    Offline once the environment exists: online, uv re-checks every pin with the index (~5 s
    for Phoenix's ~200).
    """
    run = [uv(), "tool", "run", "--quiet", "--python", sys.executable, "--from", spec]
    probe = [*run, "--offline", "python", "-c", "pass"]
    cached = subprocess.run(probe, capture_output=True, timeout=60, check=False).returncode == 0
    return [*run, *(["--offline"] if cached else []), *command]


def tool_env(**extra: str) -> dict[str, str]:
    """This process's environment (uv's cache, HOME, PATH) without OTEL_/PHOENIX_ settings,
    plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "PHOENIX_"))}
    return {**env, **extra}


def install() -> None:
    """Make each pinned environment now (./scripts/test calls this before pytest, so the
    one-time download is not inside a test's time)."""
    for spec in (PHOENIX, PLAYWRIGHT):
        command = [uv(), "tool", "run", "--quiet", "--python", sys.executable, "--from", spec]
        subprocess.run([*command, "python", "-c", "pass"], check=True, timeout=1200)


if __name__ == "__main__":
    install()
