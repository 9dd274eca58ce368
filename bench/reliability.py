"""Run the reliability suite and write its figures into docs/reliability.md.

    uv run python bench/reliability.py              # the short run (as in CI), about a minute
    uv run python bench/reliability.py --soak 600   # the long soak: load tests run 10 minutes

Runs ``pytest tests/reliability integrations/langchain/tests/test_reliability_faults.py``
with ``$SWERVE_RELIABILITY_REPORT`` pointing at a temporary JSON file (and ``$SWERVE_SOAK_S``
set to ``--soak``), then replaces the part of docs/reliability.md between
``<!-- figures:begin -->`` and ``<!-- figures:end -->`` with the figures, grouped by test
module: what, bound, measured. The figures of a failing test are written too, marked FAILED
(a failure is a figure), and the exit status is pytest's.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "reliability.md"
BEGIN, END = "<!-- figures:begin -->", "<!-- figures:end -->"
SUITE = ["tests/reliability", "integrations/langchain/tests/test_reliability_faults.py"]


def failed_tests(junit: Path) -> set[str]:
    """Node ids of the tests that failed or errored, from pytest's JUnit XML."""
    if not junit.exists():
        return set()
    out = set()
    for case in ET.parse(junit).iter("testcase"):
        if case.find("failure") is not None or case.find("error") is not None:
            path = case.get("classname", "").replace(".", "/")
            out.add(f"{path}.py::{case.get('name', '')}")
    return out


def run(soak_s: float, extra: list[str]) -> tuple[int, str, list[dict[str, str]], float]:
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "figures.json"
        junit = Path(tmp) / "junit.xml"
        env = {
            **os.environ,
            "SWERVE_RELIABILITY_REPORT": str(report),
            "SWERVE_SOAK_S": f"{soak_s:g}",
        }
        cmd = [sys.executable, "-m", "pytest", *SUITE, "-q", "-p", "no:cacheprovider"]
        cmd += [f"--junitxml={junit}", *extra]
        t0 = time.monotonic()
        proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
        elapsed = time.monotonic() - t0
        sys.stdout.write(proc.stdout)
        sys.stderr.write(proc.stderr)
        figures: list[dict[str, str]] = []
        if report.exists():
            figures += json.loads(report.read_text())
        sidecar = Path(f"{report}.langchain.jsonl")
        if sidecar.exists():
            figures += [json.loads(line) for line in sidecar.read_text().splitlines() if line]
        failed = failed_tests(junit)
        for f in figures:
            if f["test"] in failed:
                f["measured"] = f"**FAILED**: {f['measured']}"
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    summary = lines[-1].strip("= ") if lines else f"pytest exited {proc.returncode}"
    return proc.returncode, summary, figures, elapsed


def cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render(figures: list[dict[str, str]], summary: str, soak_s: float, elapsed: float) -> str:
    command = "uv run python bench/reliability.py" + (f" --soak {soak_s:g}" if soak_s else "")
    out = [
        f"Run `{command}` on {time.strftime('%Y-%m-%d')} ({os.cpu_count()} CPUs, Python "
        f"{sys.version.split()[0]}): {summary}, {elapsed:.0f} s in all.",
        "",
    ]
    modules: dict[str, list[dict[str, str]]] = defaultdict(list)
    for f in figures:
        modules[f["test"].split("::")[0]].append(f)
    for module in sorted(modules):
        out += [f"#### `{module}`", "", "| test | what | bound | measured |", "|---|---|---|---|"]
        for f in modules[module]:
            name = f["test"].split("::", 1)[1] if "::" in f["test"] else f["test"]
            row = (f"`{cell(name)}`", cell(f["what"]), cell(f["bound"]), cell(f["measured"]))
            out.append("| " + " | ".join(row) + " |")
        out.append("")
    if not figures:
        out.append("No figures were reported.")
    return "\n".join(out).rstrip() + "\n"


def write(doc: Path, body: str) -> None:
    text = doc.read_text()
    start, end = text.find(BEGIN), text.find(END)
    if start < 0 or end < start:
        raise SystemExit(f"{doc} has no {BEGIN} ... {END} section")
    doc.write_text(text[: start + len(BEGIN)] + "\n" + body + text[end:])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--soak",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="how long the load tests run (default 0: the short CI run)",
    )
    parser.add_argument(
        "--no-write", action="store_true", help="print the figures, leave docs/reliability.md alone"
    )
    parser.add_argument("pytest_args", nargs="*", help="more arguments for pytest (after --)")
    args = parser.parse_args()
    if not 0 <= args.soak <= 86400:
        parser.error("--soak takes 0 to 86400 seconds")
    code, summary, figures, elapsed = run(args.soak, args.pytest_args)
    body = render(figures, summary, args.soak, elapsed)
    if args.no_write:
        print(body)
    else:
        write(DOC, body)
        print(f"wrote {len(figures)} figures to {DOC.relative_to(ROOT)}")
    return code


if __name__ == "__main__":
    raise SystemExit(main())
