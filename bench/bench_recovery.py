"""What an outage costs: requests wasted on the dead route, and how soon traffic returns.

Run: uv run python bench/bench_recovery.py [--outage 60 ...] [--every 2] [--seeds 20]

A scripted outage on the fake provider: the primary answers 503 for ``--outage`` seconds,
then recovers; a call starts every ``--every`` seconds (one after another: a call that waits out
backoffs starts the next one late). Time is an injected clock, so a 60 s outage runs in well
under a second and the figures are exact for the defaults of the swerve being measured (run it
on an older checkout for a before/after). Jitter is on, as by default, drawn from ``--seeds``
seeded generators; the figures are the mean and the worst over them.

  wasted     requests sent to the primary while it was down
  back       seconds from recovery until a call is served by the primary again
"""

from __future__ import annotations

import argparse
import statistics

import httpx

from swerve import Attempt, Failover, FallbackConfig, MemoryHealth
from swerve.testing import FakeClock, FakeProvider, Fault, Reply

PRIMARY, FALLBACK = "primary/model-a", "fallback/model-b"


def outage(
    fake: FakeProvider, client: httpx.Client, config: FallbackConfig, seconds: float, every: float,
    seed: int,
) -> tuple[int, float]:  # fmt: skip
    clock = FakeClock(random_value=None, seed=seed)  # real jitter, the same on every run
    failover = Failover(config, MemoryHealth(), clock=clock)

    def complete(attempt: Attempt) -> str:
        url = f"{fake.url(attempt.route.provider)}/v1/chat/completions"
        body = {"model": attempt.route.model, "messages": [{"role": "user", "content": "hi"}]}
        response = client.post(url, json=body, timeout=10)
        response.raise_for_status()
        return str(response.json()["choices"][0]["message"]["content"])

    fake.reset_counts()
    fake.set_fault("primary", Fault.status(503))
    start = tick = clock.now
    wasted = None
    while tick - start < 20 * seconds:
        clock.now = max(clock.now, tick)
        if wasted is None and clock.now - start >= seconds:
            wasted = fake.requests("primary")
            fake.set_fault("primary", Fault.ok())
        result = failover.call(PRIMARY, complete)
        if wasted is not None and str(result.route) == PRIMARY:
            return wasted, clock.now - start - seconds
        tick += every
    raise RuntimeError("traffic never returned to the primary")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--outage", type=float, nargs="+", default=[60.0, 120.0, 600.0])
    parser.add_argument(
        "--sweep", type=int, default=40, help="also: this many outage lengths from 20 s to 620 s"
    )
    parser.add_argument("--every", type=float, default=2.0)
    parser.add_argument("--seeds", type=int, default=20)
    args = parser.parse_args()
    config = FallbackConfig(fallbacks={PRIMARY: FALLBACK, FALLBACK: PRIMARY})
    print(
        f"a call every {args.every:g}s, {args.seeds} seeds, defaults: "
        f"cooldown_s={config.cooldown_s:g}, max_retries={config.max_retries}"
    )
    print(f"{'outage':>8} {'wasted: mean':>13} {'worst':>6} {'back after: mean':>17} {'worst':>6}")
    with FakeProvider() as fake, httpx.Client() as client:
        fake.set_reply("primary", Reply(text="from primary"))
        fake.set_reply("fallback", Reply(text="from fallback"))
        for seconds in args.outage:
            runs = [
                outage(fake, client, config, seconds, args.every, seed)
                for seed in range(args.seeds)
            ]
            wasted = [w for w, _ in runs]
            back = [b for _, b in runs]
            print(
                f"{seconds:>7g}s {statistics.mean(wasted):>13.1f} {max(wasted):>6} "
                f"{statistics.mean(back):>16.1f}s {max(back):>5.1f}s"
            )
        # What a cooldown costs depends on where recovery falls in its cycle: over many
        # outage lengths, the seconds back and the requests wasted per minute of outage.
        lengths = [20 + 600 * i / max(args.sweep - 1, 1) for i in range(args.sweep)]
        sweep = [
            (seconds, *outage(fake, client, config, seconds, args.every, seed))
            for seconds in lengths
            for seed in range(3)
        ]
        back = [b for _, _, b in sweep]
        per_minute = [60 * w / s for s, w, _ in sweep]
        print(
            f"sweep of {len(lengths)} outages from 20s to 620s: back after mean "
            f"{statistics.mean(back):.1f}s, worst {max(back):.1f}s; wasted per minute of "
            f"outage mean {statistics.mean(per_minute):.1f}"
        )


if __name__ == "__main__":
    main()
