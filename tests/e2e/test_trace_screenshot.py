"""The failover trace as Phoenix's UI shows it, in headless Chromium (Debian's, driven by
Playwright from its own pinned environment): the page must show the call span with its
attempts nested under it, and the retry, cooldown and swap events.

The screenshot goes to a temporary file; ``SWERVE_WRITE_SCREENSHOT=1`` writes it to
docs/img/failover-trace.png instead, the picture docs/observability.md shows.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from swerve._telemetry import names as n

from .._local import binary
from ._app import ROOT
from ._flows import LANGCHAIN
from ._phoenix import Phoenix
from ._png import read_png
from ._tools import PLAYWRIGHT, tool, tool_env
from ._trace import FailoverRun

SCRIPT = Path(__file__).with_name("screenshot.py")
DOCS_IMG = ROOT / "docs" / "img" / "failover-trace.png"


def test_phoenix_shows_the_attempts_of_the_failover(
    phoenix: Phoenix, failover_run: FailoverRun, tmp_path: Path
) -> None:
    flow, trace = LANGCHAIN, failover_run.traces[LANGCHAIN.name]
    out = DOCS_IMG if os.environ.get("SWERVE_WRITE_SCREENSHOT") == "1" else tmp_path / "trace.png"
    out.parent.mkdir(parents=True, exist_ok=True)
    call, primary, fallback = (
        trace.root["name"], f"swerve attempt {flow.primary}", f"swerve attempt {flow.fallback}"
    )  # fmt: skip
    spec = {
        "spans": [call, primary, fallback],
        "events": [n.EVENT_RETRY, n.EVENT_COOLDOWN, n.EVENT_SWAP],
        "open": n.EVENT_SWAP,
        "shows": n.ROUTE_TO,
    }
    command = tool(
        PLAYWRIGHT, "python", str(SCRIPT),
        phoenix.url, trace.id, str(out), binary("chromium"), json.dumps(spec),
    )  # fmt: skip
    # The first run installs Playwright (its driver, not a browser) into uv's cache.
    shot = subprocess.run(
        command, env=tool_env(), capture_output=True, text=True, timeout=300, check=False
    )
    assert shot.returncode == 0, shot.stderr
    page = json.loads(shot.stdout.splitlines()[-1])
    assert f"/traces/{trace.id}" in page["url"]
    assert [tuple(node) for node in page["tree"]] == [
        (0, call),
        (1, primary), (2, "POST"),
        (1, primary), (2, "POST"),
        (1, fallback), (2, "POST"),
    ]  # fmt: skip
    assert page["events"] == spec["events"]
    png = read_png(out)
    assert (png.width, png.height) == (1600, 760)
    assert png.distinct_bytes > 64 and out.stat().st_size > 20_000  # a page, not a blank
