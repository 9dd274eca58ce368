"""Open one trace in Phoenix's UI in headless Chromium and save a screenshot.

Run by the screenshot test in its own pinned Playwright environment (tests/e2e/_tools.py), so
it imports nothing but Playwright and the standard library. Usage::

    screenshot.py PHOENIX_URL TRACE_ID OUT.png CHROMIUM SPEC

``SPEC`` is JSON: ``{"spans": [span name, ...], "events": [event name, ...], "open":
event name, "shows": attribute name}``. Opens ``/redirects/traces/<trace id>`` (Phoenix's own
link to a trace, which finds its project), waits until every span name is visible in the
trace tree, opens the root span's events and event ``open`` until attribute ``shows`` is
visible, and writes the PNG. Prints one JSON line: the URL the trace opened at, the tree as
shown (``[depth, span name]`` in page order, the root at 0) and the events as listed.
"""

from __future__ import annotations

import json
import re
import sys
import tempfile
from typing import Any

from playwright.sync_api import Page, sync_playwright

# This machine's network is closed: Chromium's own background traffic would only be refused.
ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
TIMEOUT_MS = 30_000
# How many list items enclose a span's heading: its depth in the tree (the root: 0).
DEPTH = (
    "e => { let d = 0; for (let x = e; x; x = x.parentElement) d += x.tagName === 'LI'; return d; }"
)


def tree(page: Page) -> list[tuple[int, str]]:
    headings = page.get_by_test_id("trace-tree").locator(".span-node__heading")
    return [(h.evaluate(DEPTH), h.inner_text().strip()) for h in headings.all()]


def main(base: str, trace_id: str, out: str, chromium: str, spec: dict[str, Any]) -> None:
    with tempfile.TemporaryDirectory() as profile, sync_playwright() as pw:
        browser = pw.chromium.launch_persistent_context(
            profile,
            executable_path=chromium,
            headless=True,
            args=ARGS,
            viewport={"width": 1600, "height": 760},
        )
        try:
            page = browser.new_page()
            page.set_default_timeout(TIMEOUT_MS)
            page.goto(f"{base}/redirects/traces/{trace_id}", wait_until="domcontentloaded")
            shown = page.get_by_test_id("trace-tree")
            for name in spec["spans"]:
                shown.get_by_text(name, exact=True).first.wait_for(state="visible")
            # The root span is selected: show its events, one of them open.
            page.get_by_role("tab", name=re.compile(r"^Events")).click()
            page.get_by_text(spec["open"], exact=True).click()
            page.get_by_text(spec["shows"], exact=True).wait_for(state="visible")
            listed = {n: page.get_by_text(n, exact=True).bounding_box() for n in spec["events"]}
            events = sorted(listed, key=lambda n: (listed[n] or {"y": 1e9})["y"])
            page.screenshot(path=out)
            print(json.dumps({"url": page.url, "tree": tree(page), "events": events}), flush=True)
        finally:
            browser.close()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], json.loads(sys.argv[5]))
