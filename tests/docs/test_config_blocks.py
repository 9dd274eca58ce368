"""Every JSON block in the docs is a config file, and `swerve config check` (the installed
command, run as a user runs it) accepts it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from swerve import FallbackConfig, MemoryHealth
from swerve.httpx import FailoverTransport, Upstream

from ._documents import JsonBlock, json_blocks
from ._placeholders import API_KEY_VARS

BLOCKS = json_blocks()
SWERVE = Path(sys.executable).with_name("swerve")


def test_the_config_pages_are_read() -> None:
    assert {block.document_name for block in BLOCKS} >= {"config.md", "fleet.md", "httpx.md"}


@pytest.mark.parametrize("block", BLOCKS, ids=[block.id for block in BLOCKS])
def test_config_check_accepts(block: JsonBlock, tmp_path: Path) -> None:
    path = tmp_path / "swerve.json"
    path.write_text(block.text, encoding="utf-8")
    # The variables a file names (keys, the fleet's Redis URL) are set, as they are where it
    # is used; the config itself comes only from the file.
    env = {k: v for k, v in os.environ.items() if not k.startswith("SWERVE_")}
    env.update(dict.fromkeys(API_KEY_VARS, "test-key"))
    env["SWERVE_HEALTH_URL"] = "redis://127.0.0.1:6379/0"
    done = subprocess.run(
        [str(SWERVE), "config", "check", str(path)],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines()[0] == f"{path}: valid", done.stdout


UPSTREAM_BLOCKS = [block for block in BLOCKS if '"upstreams"' in block.text]


def test_a_page_shows_upstreams() -> None:
    assert UPSTREAM_BLOCKS


@pytest.mark.parametrize("block", UPSTREAM_BLOCKS, ids=[block.id for block in UPSTREAM_BLOCKS])
def test_the_failover_transport_takes_the_upstreams(block: JsonBlock) -> None:
    """The same file as a transport: it refuses a fallback to a route of another wire, which
    `swerve config check` and `swerve health` do not look for."""
    data = json.loads(block.text)
    upstreams = {
        route: Upstream(spec["base_url"], spec.get("wire", "openai"), "test-key", spec.get("model"))
        for route, spec in data.pop("upstreams").items()
    }
    config = FallbackConfig.from_mapping(data)
    FailoverTransport(upstreams, config, health=MemoryHealth()).close()
