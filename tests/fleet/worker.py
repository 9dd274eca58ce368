"""One process of a fleet: a Failover on a RedisHealth, calling the fake provider over httpx.

Run as ``python worker.py SPEC`` where SPEC is JSON: ``redis`` (the store's URL), ``prefix``,
``fake`` (the fake provider's base URL, ``http://127.0.0.1:PORT``), ``config`` (a
FallbackConfig as a mapping) and ``mode`` (``sync``: ``Failover.call`` on an httpx.Client;
``async``: ``Failover.acall`` on an httpx.AsyncClient; ``stream``/``astream``: the first call
is ``Failover.stream``/``astream`` of the SSE lines, later ones as sync/async); ``first_call``
(optional): a route to
call as soon as the Failover exists, before anything waits for the store, answered first with
``{"first": [attempted routes], "route": served}``. Once its store has connected and synced
it prints ``{"ready": ...}``, then reads one JSON command a line on stdin and answers each with
one JSON line on stdout:

``{"cmd": "call", "route": R, "at": EPOCH}``
    wait until ``at`` (if given: fleets race from one start), make one call asking for R, and
    answer with the route that served it, its attempts and the swerve events of its span.
``{"cmd": "health"}``
    answer with the local view of route health (what the next call acts on).

It exits when stdin closes, so it never outlives the test that started it.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx

from swerve import Attempt, Failover, FallbackConfig, RedisHealth, Result
from swerve.testing import TelemetryRecorder

_MAX_WAIT_S = 30.0  # an "at" further off than this is a test's mistake, not a reason to hang


def _url(fake: str, attempt: Attempt) -> str:
    return f"{fake}/{attempt.route.provider}/v1/chat/completions"


def _body(attempt: Attempt) -> dict[str, Any]:
    return {"model": attempt.route.model, "messages": [{"role": "user", "content": "hi"}]}


def _text(response: httpx.Response) -> str:
    response.raise_for_status()
    return str(response.json()["choices"][0]["message"]["content"])


def main(spec: dict[str, Any]) -> int:
    recorder = TelemetryRecorder()
    # The clients first: a first call then follows the store's creation at once, before its
    # first sync could have happened by itself.
    fake = spec["fake"]
    client = httpx.Client()
    runner = asyncio.Runner()
    aclient = runner.run(_aclient())
    bounds = {"first_sync_s": spec["first_sync_s"]} if "first_sync_s" in spec else {}
    store = RedisHealth.from_url(
        spec["redis"], prefix=spec.get("prefix", "swerve"), telemetry=recorder.telemetry, **bounds
    )
    failover = Failover(FallbackConfig(**spec["config"]), store, telemetry=recorder.telemetry)

    def complete(attempt: Attempt) -> str:
        return _text(client.post(_url(fake, attempt), json=_body(attempt), timeout=attempt.timeout))

    async def acomplete(attempt: Attempt) -> str:
        response = await aclient.post(
            _url(fake, attempt), json=_body(attempt), timeout=attempt.timeout
        )
        return _text(response)

    def lines(attempt: Attempt) -> Iterator[str]:
        body = {**_body(attempt), "stream": True}
        with client.stream("POST", _url(fake, attempt), json=body) as response:
            response.raise_for_status()
            yield from (line for line in response.iter_lines() if line)

    async def alines(attempt: Attempt) -> AsyncIterator[str]:
        body = {**_body(attempt), "stream": True}
        async with aclient.stream("POST", _url(fake, attempt), json=body) as response:
            response.raise_for_status()
            async for line in response.aiter_lines():
                if line:
                    yield line

    async def astreamed(route: str) -> Result[None]:
        stream = failover.astream(route, alines)
        async for _ in stream:
            pass
        return stream.result(None)

    def streamed(route: str) -> Result[None]:
        stream = failover.stream(route, lines)
        for _ in stream:
            pass
        return stream.result(None)

    def call(route: str) -> Result[str]:
        if spec.get("mode", "sync") in ("async", "astream"):
            return runner.run(failover.acall(route, acomplete))
        return failover.call(route, complete)

    first = spec.get("first_call")
    if first is not None:
        # A process that starts after the fleet learned an outage: its first call goes at
        # once, the store not waited for (the Failover gives it its first sync by itself).
        mode = spec.get("mode", "sync")
        result: Result[Any] = (
            runner.run(astreamed(first))
            if mode == "astream"
            else streamed(first)
            if mode == "stream"
            else call(first)
        )
        _say({"first": [str(a.route) for a in result.attempts], "route": str(result.route)})
    sharing = store.wait_until_shared(timeout=10)
    _say({"ready": True, "sharing": sharing})
    try:
        for line in sys.stdin:
            command = json.loads(line)
            if command["cmd"] == "call":
                at = command.get("at")
                if at is not None:
                    time.sleep(min(max(at - time.time(), 0.0), _MAX_WAIT_S))
                recorder.spans.clear()
                t0 = time.time()
                try:
                    result = call(command["route"])
                except Exception as exc:  # reported, for the test to fail on
                    _say({"error": f"{type(exc).__name__}: {exc}"})
                    continue
                _say(
                    {
                        "route": str(result.route),
                        "value": result.value,
                        "start": t0,
                        "seconds": time.time() - t0,
                        "attempts": [
                            {
                                "route": str(a.route),
                                "outcome": a.outcome,
                                "kind": a.failure.kind.value if a.failure else None,
                                "seconds": a.duration_s,
                            }
                            for a in result.attempts
                        ],
                        "events": recorder.events(),
                    }
                )
            elif command["cmd"] == "health":
                now = time.time()
                _say(
                    {
                        "sharing": store.sharing,
                        "health": {
                            h.route: {
                                "degraded": h.degraded,
                                "until": h.degraded_until,
                                "recovering": h.recovering,
                                "breaker": h.breaker.value,
                            }
                            for h in store.snapshot(now)
                        },
                    }
                )
    finally:
        client.close()
        runner.run(aclient.aclose())
        runner.close()
        store.close()
    return 0


async def _aclient() -> httpx.AsyncClient:
    return httpx.AsyncClient()


def _say(message: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(message, default=str) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    sys.exit(main(json.loads(sys.argv[1])))
