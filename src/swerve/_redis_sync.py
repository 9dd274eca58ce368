"""The background half of a :class:`~swerve.RedisHealth`: a writer thread that takes this
process's changes to Redis, and a reader thread that applies the fleet's (from the pub/sub
channel) to the local view, resyncs it on every (re)connect, and notices Redis going away.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Any

from ._breaker import BreakerState, Outcome
from ._clock import Clock
from ._config import BreakerConfig
from ._memory import MemoryHealth
from ._redis_wire import RedisWire, cooling_from_message, cooling_message
from ._telemetry import Telemetry

__all__ = ["RedisSync"]

_log = logging.getLogger("swerve")
_RECONNECT_MIN_S = 0.1
_MAX_OPS = 10_000


@dataclass(slots=True)
class _Counts:
    ok: int
    fail: int
    config: BreakerConfig


class RedisSync:
    """Keeps ``local`` and Redis (through ``wire``) in step, on two daemon threads.

    Liveness (pings, reconnect backoff) runs on real time whatever ``clock`` is: a socket does
    not wait on a test's clock. ``clock`` stamps what goes to Redis.
    """

    def __init__(
        self,
        wire: RedisWire,
        local: MemoryHealth,
        *,
        clock: Clock,
        telemetry: Telemetry,
        description: str,
        reconnect_max_s: float,
    ) -> None:
        self._wire = wire
        self._local = local
        self._clock = clock
        self._telemetry = telemetry
        self._description = description
        self._reconnect_max_s = reconnect_max_s
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._ops: deque[tuple[str, str, tuple[Any, ...]]] = deque(maxlen=_MAX_OPS)
        self._counts: dict[str, _Counts] = {}
        self._up: bool | None = None  # None until the first connect settles it
        self._stop = threading.Event()
        self._reader = threading.Thread(target=self._read, name="swerve-redis-reader", daemon=True)
        self._writer = threading.Thread(target=self._write, name="swerve-redis-writer", daemon=True)
        self._reader.start()
        self._writer.start()

    @property
    def up(self) -> bool | None:
        """Whether Redis is reachable: None until the first connect settles it."""
        return self._up

    def wait_until_up(self, timeout: float) -> bool:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self._up:
                return True
            self._stop.wait(0.01)
        return bool(self._up)

    def lost(self, exc: BaseException) -> None:
        """A Redis operation failed: calls run on the local view until the reader reconnects."""
        self._set_up(False, type(exc).__name__)

    def send(self, op: str, route: str, args: tuple[Any, ...]) -> None:
        """Queue a change for the writer."""
        if self._up is False:
            return  # merged back from the local view when Redis returns
        with self._wake:
            self._ops.append((op, route, args))
            self._wake.notify()

    def count(self, route: str, outcome: Outcome, config: BreakerConfig) -> None:
        """Add an attempt's outcome to the fleet's breaker window (in batches, by the writer)."""
        with self._wake:
            counts = self._counts.get(route)
            if counts is None:
                counts = self._counts[route] = _Counts(0, 0, config)
            counts.ok += outcome is Outcome.SUCCESS
            counts.fail += outcome is Outcome.FAILURE
            self._wake.notify()

    def close(self) -> None:
        self._stop.set()
        with self._wake:
            self._wake.notify_all()
        if self._up:
            # The reader sleeps in a pub/sub read: a message on its own channel wakes it now
            # (other processes ignore an op they do not know).
            with contextlib.suppress(Exception):
                self._wire.publish({"op": "bye", "route": ""})
        self._reader.join(timeout=2)
        self._writer.join(timeout=2)

    def _set_up(self, up: bool, reason: str = "") -> None:
        if self._up is up:
            return
        self._up = up
        self._telemetry.store(self._description, up, reason)

    # -- the writer thread ----------------------------------------------------------------------
    def _write(self) -> None:
        while not self._stop.is_set():
            with self._wake:
                if not self._ops and not self._counts:
                    self._wake.wait(timeout=1.0)
                ops, self._ops = list(self._ops), deque(maxlen=_MAX_OPS)
                counts, self._counts = self._counts, {}
            if not self._up:
                continue
            try:
                for op, route, args in ops:
                    self._apply(op, route, args)
                for route, c in counts.items():
                    self._account(route, c)
            except Exception as exc:
                self.lost(exc)

    def _apply(self, op: str, route: str, args: tuple[Any, ...]) -> None:
        wire = self._wire
        if op == "cool":
            now, base, longest, floor, reason = args
            state = wire.run(
                "COOL",
                wire.keys(route, "cool", "probe"),
                [repr(now), repr(base), repr(longest), repr(floor), reason],
            )
            wire.publish({"op": "cool", "route": route, **cooling_message(state)})
        elif op == "release":
            wire.run("RELEASE", wire.keys(route, "probe"), [args[0]])
            wire.publish({"op": "release", "route": route})
        elif op == "recover":
            if wire.run("RECOVER", wire.keys(route, "cool", "probe"), [repr(args[0])]):
                wire.publish({"op": "recover", "route": route})
        elif op == "half_open_release":
            wire.release_slot(*args)
        elif op == "breaker":
            open_until, config = args
            self._account(
                route, _Counts(0, 0, config), open_until=open_until, closed=open_until is None
            )

    def _account(
        self, route: str, c: _Counts, *, open_until: float | None = None, closed: bool = False
    ) -> None:
        cfg, now = c.config, self._clock.time()
        result = self._wire.run(
            "ACCOUNT",
            self._wire.keys(route, "window", "brk"),
            [
                repr(now), c.ok, c.fail, repr(cfg.window_s), cfg.min_calls,
                repr(cfg.failure_rate), repr(cfg.open_s), repr(cfg.max_open_s),
                repr(open_until or 0.0), "1" if closed else "0",
            ],
        )  # fmt: skip
        fleet = float(result.decode() if isinstance(result, bytes) else result)
        if closed:
            self._wire.publish({"op": "breaker", "route": route, "open_until": None})
        elif fleet > now:
            if fleet != self._local.breaker_open_until(route):
                self._local.adopt_breaker(route, fleet, now)
            self._wire.publish({"op": "breaker", "route": route, "open_until": fleet})

    # -- the reader thread: pub/sub, resync, reconnects ------------------------------------------
    def _read(self) -> None:
        backoff = _RECONNECT_MIN_S
        while not self._stop.is_set():
            pubsub = None
            try:
                pubsub = self._wire.subscribe()
                self._merge_local()
                self._resync()
                self._set_up(True)
                backoff = _RECONNECT_MIN_S
                last_ping = last_heard = time.monotonic()
                while not self._stop.is_set():
                    message = pubsub.get_message(timeout=0.5)
                    if message is not None:  # a message or a pong: the server is alive
                        last_heard = time.monotonic()
                        if message.get("type") == "message":
                            self._on_message(message["data"])
                    if time.monotonic() - last_ping > 1.0:
                        # A ping only sends: its pong comes back as a message. A paused server
                        # shows up here, as a ping that went a whole interval unanswered.
                        if last_heard < last_ping:
                            raise ConnectionError("redis did not answer a ping")
                        pubsub.ping()
                        last_ping = time.monotonic()
                    if self._up is False:  # the writer or a claim lost it: reconnect
                        raise ConnectionError("redis operation failed")
            except Exception as exc:
                self.lost(exc)
                self._stop.wait(backoff)
                backoff = min(backoff * 2, self._reconnect_max_s)
            finally:
                if pubsub is not None:
                    try:
                        pubsub.close()
                    except Exception:  # already broken: nothing left to close cleanly
                        _log.debug("swerve: closing a broken pub/sub connection failed")

    def _merge_local(self) -> None:
        """Health learned while Redis was away goes back in, never shortening anything."""
        now = self._clock.time()
        for health in self._local.snapshot(now):
            cooling = self._local.cooling(health.route, now)
            if cooling is None:
                continue
            state = self._wire.run(
                "MERGE",
                self._wire.keys(health.route, "cool"),
                [repr(cooling.until), cooling.streak, repr(cooling.forget_at), cooling.reason],
            )
            self._wire.publish({"op": "cool", "route": health.route, **cooling_message(state)})

    def _resync(self) -> None:
        now = self._clock.time()
        for route_health in self._wire.fleet_view(now):
            route = route_health.route
            cooling = self._wire.cooling(route)
            if cooling is not None:
                self._local.adopt(route, cooling, now)
            if route_health.breaker is BreakerState.OPEN:
                self._local.adopt_breaker(route, route_health.breaker_until, now)

    def _on_message(self, data: bytes | str) -> None:
        try:
            self._dispatch(json.loads(data))
        except (ValueError, KeyError, TypeError, AttributeError):
            # Not ours (another writer on the channel) or from a newer swerve: a message we
            # cannot read is dropped, never mistaken for a broken connection.
            _log.debug("swerve: ignored a message on %s it cannot read", self._wire.channel)

    def _dispatch(self, message: dict[str, Any]) -> None:
        route = message["route"]
        op = message["op"]
        if not isinstance(route, str):
            raise TypeError("route")
        mine = self._wire.mine(message)
        now = self._clock.time()
        local = self._local
        if op == "cool":
            local.adopt(route, cooling_from_message(message), now)
        elif op == "probe" and not mine:
            local.hold(route, float(message["lease_until"]), now)
        elif op == "release" and not mine:
            local.release_probe(route)
        elif op == "recover" and not mine:
            local.forget(route)
        elif op == "breaker":
            local.adopt_breaker(route, message.get("open_until"), now)
        elif op == "clear" and not mine:
            local.clear(route)
        elif op == "clear":
            # Our own clear, back after every message published before it: what those put
            # back into the local view since clear() (our own cooldown's echo) is older.
            local.forget(route)
            local.adopt_breaker(route, None, now)
        elif op == "drain" and not mine:
            local.drain(route, float(message["until"]), now)
