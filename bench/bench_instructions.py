"""CPU instructions per healthy request, bare SDK or through swerve: issue 21's figure that
timing noise cannot move. Run under callgrind, which counts only between the two toggles:

    valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file=out.sw \\
        .venv/bin/python bench/bench_instructions.py swerve 200
    grep ^totals out.sw     # then the same with ``bare``; (swerve - bare) / 200 per request

The request and both sides are bench_hotpath.py's "sync" ones (tracing off); with a third
argument ``stream``, its "stream" ones (20 SSE chunks in one read, read to the end).
Against another checkout (before/after): ``PYTHONPATH=<tree>/src:<tree>/bench`` in front.
"""

from __future__ import annotations

import gc
import os
import subprocess
import sys

from bench_hotpath import WARMUP, bare_client, caller, stream_caller, swerve_client, untraced


def main() -> None:
    side, n = sys.argv[1], int(sys.argv[2])
    assert side in ("bare", "swerve"), "side: bare or swerve"
    make = stream_caller if sys.argv[3:] == ["stream"] else caller
    one = make(bare_client() if side == "bare" else swerve_client(untraced()))
    for _ in range(WARMUP):  # warm: caches, the pools, the first request's one-time work
        one()
    gc.collect()
    gc.disable()
    toggle = ["callgrind_control", "-i"]
    subprocess.run([*toggle, "on", str(os.getpid())], capture_output=True, check=False)
    for _ in range(n):
        one()
    subprocess.run([*toggle, "off", str(os.getpid())], capture_output=True, check=False)


if __name__ == "__main__":
    main()
