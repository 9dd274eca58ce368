"""``swerve demo`` tells the story it claims: where each error came from, what the client saw,
and which route failed, in output that survives a pipe."""

from __future__ import annotations

import contextlib
import io
import re
import subprocess
import sys

import pytest

from swerve.cli import main

PRIMARY = "openrouter/anthropic/claude-sonnet-5"
FALLBACK = "anthropic/claude-sonnet-5"


def run_demo() -> str:
    """The demo as the command line runs it, its stdout captured (not a terminal)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["demo", "--fast"]) == 0
    return out.getvalue()


@pytest.fixture(scope="module")
def output() -> str:
    return run_demo()


def section(output: str, number: str) -> list[str]:
    """The lines under the heading that starts with ``number`` (e.g. "3."), up to the next one."""
    lines = output.splitlines()
    start = next(i for i, line in enumerate(lines) if f" {number} " in line and "─" in line)
    end = next((i for i in range(start + 1, len(lines)) if "─" * 3 in lines[i]), len(lines))
    return lines[start + 1 : end]


def test_the_error_inside_a_200_stream_is_shown_as_such(output: str) -> None:
    story = "\n".join(section(output, "3."))
    # The probe failed on the primary, and the line says the error came in the stream ...
    assert f"attempt 1 probe  {PRIMARY}  ERROR 503 unavailable (in stream)" in story
    # ... after a 200 status line, as an event: the wire's own words, not the demo's.
    assert (
        "the response was HTTP 200 OK, then an error event arrived in the stream: "
        "503 Service Unavailable"
    ) in story
    # The client's stream held only the fallback's chunks and raised nothing.
    assert re.search(
        rf"the client never saw the error: its stream raised nothing, "
        rf"and all \d+ chunks it read came from {FALLBACK}$",
        story,
        re.MULTILINE,
    ), story
    assert f"streamed from {FALLBACK}: 'Hello from Claude, direct.'" in story


def test_a_plain_503_is_not_told_as_an_in_stream_error(output: str) -> None:
    # Section 1's 503s are status lines: the same telemetry says so, and the text follows it.
    story = section(output, "1.")
    failures = [line for line in story if "ERROR" in line]
    assert len(failures) == 3
    assert all(line.endswith(f"{PRIMARY}  ERROR 503 unavailable") for line in failures)
    assert not any("in stream" in line or "200 OK" in line for line in story)


def test_trace_tree_names_the_failed_route_first(output: str) -> None:
    tree = output.split("─ trace ─", 1)[1]
    attempts = [line for line in tree.splitlines() if "── attempt " in line]
    label = re.compile(r"── attempt \d+(?: probe)?  (\S+)  (?:ok|ERROR .+?)  \d+ ms$")
    assert len(attempts) == 8  # 4 + 1 + 2 + 1 attempts over the four calls
    for line in attempts:
        # "attempt N [probe]  <route>  <outcome>  <ms> ms": the route the attempt went to is
        # the first name on the line, before the outcome.
        match = label.search(line)
        assert match, line
        assert match.group(1) in (PRIMARY, FALLBACK)
    failed = [line for line in attempts if "ERROR" in line]
    assert len(failed) == 4
    assert all(f"  {PRIMARY}  ERROR 503 unavailable" in line for line in failed)
    assert sum("(in stream)" in line for line in failed) == 1
    # The old label read as if Anthropic had failed.
    assert f"chat anthropic/claude-sonnet-5 on {PRIMARY}" not in tree
    assert f"served by {FALLBACK}" in tree and f"served by {PRIMARY}" in tree


def test_piped_output_breaks_no_line() -> None:
    # A real pipe, no COLUMNS: what CI logs get.
    proc = subprocess.run(
        [sys.executable, "-m", "swerve.cli", "demo", "--fast"],
        capture_output=True, text=True, timeout=120, env={"PATH": ""},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    # Every route or model name stands whole on its line; none was cut at a line end.
    for line in lines:
        for name in re.findall(r"[\w./-]*claude[\w./-]*", line):
            assert name in (PRIMARY, FALLBACK, "claude-sonnet-5"), line
    # Known lines longer than 80 columns arrive in one piece.
    swap = f"swap {PRIMARY} -> {FALLBACK} (unavailable)"
    assert any(line.endswith(swap) and len(line) > 80 for line in lines)
    assert any(line.endswith(f"served by {FALLBACK}") for line in lines)
    probe = f"probe  {PRIMARY}  ERROR 503 unavailable (in stream)  "
    assert any(probe in line and line.endswith(" ms") and len(line) > 80 for line in lines)
    assert any(line.startswith("the client never saw the error: ") for line in lines)
    # Headings stay 80 columns wide, and no colour codes reach the log.
    assert all(len(line) == 80 for line in lines if line.startswith("───"))
    assert "\x1b[" not in proc.stdout


def test_the_demo_tells_the_same_story_every_run(output: str) -> None:
    def story(text: str) -> list[str]:  # without the timings, which are the clock's
        text = re.sub(r"^ *\d+\.\d\ds  ", "", text, flags=re.MULTILINE)
        return re.sub(r"\d+ ms", "N ms", text).splitlines()

    assert story(run_demo()) == story(output)
