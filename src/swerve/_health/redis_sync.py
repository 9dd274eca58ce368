"""The background half of a :class:`~swerve.RedisHealth`: a writer thread that takes this
process's changes to Redis, and a reader thread that applies the fleet's (from the pub/sub
channel) to the local view, resyncs it on every (re)connect, and notices Redis going away.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import select
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Any

from .._engine.clock import Clock
from .._engine.config import BreakerConfig
from .._telemetry import names as n
from .._telemetry.decisions import StoreChanged
from .._telemetry.redact import printable
from .._telemetry.telemetry import Telemetry
from .breaker import Outcome
from .latency import DEFAULT_WINDOW_S, LatencySketch
from .memory import DEFAULT_MAX_ROUTES, MemoryHealth
from .redis_client import refused
from .redis_wire import (
    Bounds,
    Message,
    RedisWire,
    Rejected,
    cooling_message,
    latency_from_reply,
    message_from_json,
)

__all__ = ["RedisSync"]

_log = logging.getLogger("swerve")
_RECONNECT_MIN_S = 0.1
_MAX_OPS = 10_000
_REJECT_LOG_EVERY_S = 10.0  # one log line per this long, however many values are dropped
_RESUBSCRIBE_MAX, _RESUBSCRIBE_WINDOW_S = 5, 60.0  # channel reopenings without a reconnect
_COUNTS_EVERY_S = 0.25  # successes reach the fleet's breaker windows at this pace at most
_SETTLE_S = 0.25  # the longest an async call waits for the writer to share its decision
# The longest a call waits for the reader to apply what the channel holds: long enough for a
# reader thread the OS has not scheduled yet on a loaded machine, paid only while a message waits.
_CATCH_UP_S = 0.02
# Learned latency: this process's new counts go with the writer's next batch, and come back as
# the fleet's; routes it has not observed lately are read back at this pace (real time).
_LATENCY_READ_EVERY_S = 10.0
_LATENCY_TTL_MS = int(2 * DEFAULT_WINDOW_S * 1000)  # two windows: all a quantile reads


class _Resubscribe(Exception):
    """The channel's connection closed while Redis still answers commands."""


_Op = tuple[str, str, tuple[Any, ...], "concurrent.futures.Future[None] | None"]
"""A change for the writer: op, route, its arguments, and what an async call waits on."""


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
        bounds: Bounds,
    ) -> None:
        self._wire = wire
        self.bounds = bounds
        self._local = local
        self._clock = clock
        self._telemetry = telemetry
        self._description = description
        self._reconnect_max_s = reconnect_max_s
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._ops: deque[_Op] = deque(maxlen=_MAX_OPS)
        self._unsent: list[concurrent.futures.Future[None]] = []  # async calls' decisions
        self._counts: dict[str, _Counts] = {}
        # route -> first-chunk times observed here and not yet in Redis (two windows at most)
        self._latency: dict[str, LatencySketch] = {}
        self._latency_read_at = time.monotonic()
        self._failed = False  # a failure is counted and not yet sent: the writer goes at once
        self._up: bool | None = None  # None until the first connect settles it
        self.settled = threading.Event()  # the first connect synced, or failed
        self._rejected_since_log = 0
        self._resubscribed: list[float] = []  # monotonic times the channel was reopened
        self._fd = -1  # the channel's socket, while subscribed (polled, never read, by calls)
        self._busy = False  # the reader is taking what the channel holds and applying it
        self._progress = 0  # the reader's reads so far: a call waiting in catch_up watches it
        self._heard = threading.Condition(threading.Lock())
        self._reject_logged_at = -_REJECT_LOG_EVERY_S
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

    def catch_up(self) -> None:
        """Before a call decides: what the channel already holds is applied first. A peer's
        cooldown, published just before this call began (calls one after another across the
        fleet), sits in this socket's buffer while the reader thread waits for the GIL the
        calling thread holds; deciding now would send one more request to the dead route.
        Costs one non-reading poll of the socket when nothing is pending (a new poll object
        each time: one may not be polled from two threads at once); waits _CATCH_UP_S at most,
        so a flood on the channel never holds a call up for longer. A message is either still
        in the socket (the poll sees it) or being taken and applied by the reader (``_busy``,
        set before it reads a byte): the socket first, then the flag, so none slips between."""
        fd = self._fd
        if fd < 0:
            return
        deadline = 0.0
        while True:
            seen = self._progress
            try:
                poller = select.poll()
                poller.register(fd, select.POLLIN)
                if not poller.poll(0) and not self._busy:
                    return
            except (OSError, ValueError):  # the reader closed it meanwhile: nothing to wait for
                return
            now = time.monotonic()
            deadline = deadline or now + _CATCH_UP_S
            if now >= deadline:
                return
            with self._heard:
                if self._progress == seen:
                    self._heard.wait(deadline - now)

    def _echoed(self, seen: int) -> None:
        """After a delivered publish: wait (_CATCH_UP_S at most) until this store's own reader
        has taken something from the channel since ``seen``: its copy of the message. The
        PING's answer only says Redis wrote the copies out; a loaded machine's kernel may hand
        them over later. Redis writes them in one pass, later subscribers first, and a host's
        loopback delivers in order: by then a peer on this host that subscribed after this
        store (another store of this process, a process started later) has its copy."""
        deadline = time.monotonic() + _CATCH_UP_S
        with self._heard:
            while self._progress == seen:
                left = deadline - time.monotonic()
                if left <= 0:
                    return
                self._heard.wait(left)

    def lost(self, exc: BaseException) -> None:
        """A Redis operation failed: calls run on the local view until the reader reconnects."""
        self._set_up(False, type(exc).__name__)

    def reject(self, rejected: Rejected) -> None:
        """A value read from Redis failed validation (or was cut to its bound): counted, and
        logged escaped, at most one line per _REJECT_LOG_EVERY_S. Never raised: one bad value
        must not fail a call nor stop sharing."""
        self._telemetry.store_rejected.add_bounded(
            1, {n.STORE: self._description, n.REASON: rejected.reason}
        )
        with self._lock:
            self._rejected_since_log += 1
            now = time.monotonic()
            if now - self._reject_logged_at < _REJECT_LOG_EVERY_S:
                return
            count, self._rejected_since_log = self._rejected_since_log, 0
            self._reject_logged_at = now
        _log.warning(
            "dropped a value read from %s (%s: %s)%s",
            printable(self._description),
            rejected.reason,
            rejected.detail,  # escaped and cut by the wire's checks
            f"; {count - 1} more since the last such line" if count > 1 else "",
        )

    def send(self, op: str, route: str, args: tuple[Any, ...]) -> None:
        """Queue a change for the writer."""
        if self._up is False:
            return  # merged back from the local view when Redis returns
        with self._wake:
            self._ops.append((op, route, args, None))
            self._wake.notify()

    def send_now(self, op: str, route: str, args: tuple[Any, ...]) -> None:
        """Apply a change on the calling thread, before the call that decided it goes on, so
        the next call anywhere in the fleet already finds it in Redis (and on the channel).
        One bounded round trip, on a failure path only. Inside an event loop, or while Redis
        is not up, it goes to the writer instead: a loop must never block on Redis."""
        if self._up is not True:
            self.send(op, route, args)
            return
        if _in_event_loop():  # the writer shares it; the call awaits that in asettle()
            done: concurrent.futures.Future[None] = concurrent.futures.Future()
            with self._wake:
                self._unsent = [f for f in self._unsent if not f.done()]
                self._unsent.append(done)
                self._ops.append((op, route, args, done))
                self._wake.notify()
            return
        try:
            self._checked(route, self._apply, op, route, args)
        except Exception as exc:  # Redis away: the reader reconnects and merges this back
            self.lost(exc)

    async def asettle(self) -> None:
        """For an async call, after a decision: wait (never blocking the loop; _SETTLE_S at
        most, so a slow Redis costs a call no more than a sync call's round trip) until the
        writer has shared what async calls decided, as :meth:`send_now` does at once for a
        sync call. The fleet's next call then finds it."""
        with self._wake:
            pending = [asyncio.wrap_future(f) for f in self._unsent if not f.done()]
        if pending:
            await asyncio.wait(pending, timeout=_SETTLE_S)

    def count(self, route: str, outcome: Outcome, config: BreakerConfig) -> None:
        """Add an attempt's outcome to the fleet's breaker window (in batches, by the writer)."""
        with self._wake:
            counts = self._counts.get(route)
            if counts is None:
                counts = self._counts[route] = _Counts(0, 0, config)
            counts.ok += outcome is Outcome.SUCCESS
            if outcome is Outcome.FAILURE:
                # A failure may open the fleet's breaker: sent at once. Successes wait for the
                # next batch: a writer woken by every healthy call would make a Redis round trip
                # per call, and take the GIL from the calls while it does.
                counts.fail += 1
                self._failed = True
                self._wake.notify()

    def opened(self, route: str, open_until: float, config: BreakerConfig) -> None:
        """This process's breaker for ``route`` opened: sent at once. The outcomes not yet
        counted are the ones that opened it, and the fleet's window empties as it opens: sent
        after it, by a writer that runs late, they would open it again."""
        with self._wake:
            self._counts.pop(route, None)
        self.send_now("breaker", route, (open_until, config))

    def observe_latency(self, route: str, seconds: float, now: float) -> None:
        """A time to first chunk: in the local view at once, and in the writer's next batch.
        While Redis is away the batch waits (two windows of counts per route at most), and
        goes when it is back."""
        with self._wake:  # with the view: an adopt of the fleet's counts sees both or neither
            self._local.observe_first_chunk(route, seconds, now)
            pending = self._latency.get(route)
            if pending is None:
                if len(self._latency) >= DEFAULT_MAX_ROUTES:
                    return  # bounded: the view still has it, the fleet not
                pending = self._latency[route] = LatencySketch()
            pending.observe(seconds, now)

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
        self.settled.set()
        self._telemetry.emit(StoreChanged(self._description, up, reason))

    # -- the writer thread ----------------------------------------------------------------------
    def _write(self) -> None:
        while not self._stop.is_set():
            with self._wake:
                if not self._ops and not self._failed:
                    self._wake.wait(timeout=_COUNTS_EVERY_S)
                self._failed = False
                ops, self._ops = list(self._ops), deque(maxlen=_MAX_OPS)
                counts, self._counts = self._counts, {}
                latency: dict[str, LatencySketch] = {}
                if self._up:  # else kept for when Redis is back
                    latency, self._latency = self._latency, {}
            try:
                if self._up:
                    for op, route, args, _ in ops:
                        self._checked(route, self._apply, op, route, args)
                    for route, c in counts.items():
                        self._checked(route, self._account, route, c)
                    self._share_latency(latency)
            except Exception as exc:
                self.lost(exc)
            finally:  # shared, or left to the merge on reconnect: no call waits any longer
                for *_, done in ops:
                    if done is not None and not done.done():
                        done.set_result(None)

    def _checked(self, route: str, do: Any, *args: Any) -> None:
        """``do(*args)`` for ``route``. A script error (the server answered, refusing one
        route's bad data) is that route's problem, counted, never a lost connection: a
        reconnect would not fix it, and would stop sharing for every route."""
        try:
            do(*args)
        except Exception as exc:
            if not refused(exc):
                raise
            self.reject(Rejected("script", f"a script failed on {route!r}: {_first(exc)}"))

    def _apply(self, op: str, route: str, args: tuple[Any, ...]) -> None:
        wire = self._wire
        if op == "cool":
            now, base, longest, floor, reason = args
            state = wire.run(
                "COOL",
                wire.keys(route, "cool", "probe"),
                [repr(now), repr(base), repr(longest), repr(floor), reason,
                 repr(self.bounds.drain_s)],
            )  # fmt: skip
            seen = self._progress
            wire.publish({"op": "cool", "route": route, **cooling_message(state)}, delivered=True)
            self._echoed(seen)
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
            self._wire.publish(
                {"op": "breaker", "route": route, "open_until": fleet}, delivered=True
            )

    # -- learned latency ------------------------------------------------------------------------
    def _share_latency(self, latency: dict[str, LatencySketch]) -> None:
        """This process's new counts into the fleet's, and the fleet's back into the view;
        every other route in the view read back now and then. At most once: a batch whose
        round trip failed is not sent again (it may have been counted)."""
        for route, pending in latency.items():
            newest = pending.windows[-1] if pending.windows else None
            if newest is not None:
                self._checked(route, self._sync_latency, route, newest, pending)
        if time.monotonic() - self._latency_read_at < _LATENCY_READ_EVERY_S:
            return
        self._latency_read_at = time.monotonic()
        for route in self._local.first_chunk_routes():
            view = self._local.first_chunks(route)
            if route not in latency and view is not None and view.windows:
                self._checked(route, self._sync_latency, route, view.windows[-1], None)

    def _sync_latency(self, route: str, newest: int, pending: LatencySketch | None) -> None:
        """Add ``pending`` to ``route``'s hashes of windows ``newest`` and the one before, and
        adopt what they hold: the fleet's counts, this process's included."""
        windows = (newest - 1, newest)
        adds = tuple({} if pending is None else pending.counts(w) for w in windows)
        reply = self._wire.latency(route, windows, adds, _LATENCY_TTL_MS)
        fleet = LatencySketch()
        refused_windows = []
        for window, item in zip(windows, reply, strict=False):
            got = latency_from_reply(item, route, window)
            if isinstance(got, Rejected):
                self.reject(got)  # that window stays as this process knows it
                refused_windows.append(window)
            else:
                fleet.merge(got)
        now = self._clock.time()
        with self._wake:
            view = self._local.first_chunks(route)
            if view is not None:
                for window in refused_windows:
                    fleet.add_counts(view.counts(window), window)
            unsent = self._latency.get(route)  # observed since the batch was taken
            if unsent is not None:
                fleet.merge(unsent)
            self._local.adopt_first_chunks(route, fleet, now)

    def _resync_latency(self) -> None:
        """The fleet's learned latency, for every route Redis holds it for: a process that
        starts knows what the fleet learned before its first call."""
        found = self._wire.latency_windows(DEFAULT_MAX_ROUTES, self.reject)
        current = LatencySketch().window(self._clock.time())
        for route, windows in found.items():
            newest = max(windows)
            if newest > current + 1:  # a later window than any clock of the fleet's could be
                self.reject(Rejected("out_of_bounds", f"latency of {route!r} in window {newest}"))
            elif newest >= current - 1:  # older ones are forgotten already (and expire)
                self._checked(route, self._sync_latency, route, newest, None)

    # -- the reader thread: pub/sub, resync, reconnects ------------------------------------------
    def _read(self) -> None:
        backoff = _RECONNECT_MIN_S
        while not self._stop.is_set():
            pubsub = None
            try:
                pubsub = self._wire.subscribe()
                self._fd = _socket_fd(pubsub)
                self._merge_local()
                self._resync()
                self._set_up(True)
                backoff = _RECONNECT_MIN_S
                last_ping = last_heard = time.monotonic()
                waiter = _waiter(self._fd)
                while not self._stop.is_set():
                    if waiter is not None:
                        waiter.poll(500)  # until the channel has something; nothing is read
                    self._busy = True
                    try:
                        if self._take(pubsub, 0.0 if waiter is not None else 0.5):
                            last_heard = time.monotonic()
                    except Exception as exc:
                        if self._may_resubscribe():
                            raise _Resubscribe from exc
                        raise
                    finally:
                        self._busy = False
                        with self._heard:  # applied: a call waiting in catch_up may decide
                            self._progress += 1
                            self._heard.notify_all()
                    if time.monotonic() - last_ping > 1.0:
                        # A ping only sends: its pong comes back as a message. A paused server
                        # shows up here, as a ping that went a whole interval unanswered.
                        if last_heard < last_ping:
                            raise ConnectionError("redis did not answer a ping")
                        pubsub.ping()
                        last_ping = time.monotonic()
                    if self._up is False:  # the writer or a claim lost it: reconnect
                        raise ConnectionError("redis operation failed")
            except _Resubscribe as again:
                # Redis closed the channel's connection alone (a message over its pub/sub
                # output buffer limit, 32 MB by default, does that) while commands still work:
                # subscribe again and resync at once, still sharing, instead of a reconnect.
                _log.info(
                    "the channel's connection to %s closed (%s); subscribed again",
                    self._description,
                    type(again.__cause__).__name__,
                )
            except Exception as exc:
                self.lost(exc)
                self._stop.wait(backoff)
                backoff = min(backoff * 2, self._reconnect_max_s)
            finally:
                self._fd = -1
                if pubsub is not None:
                    try:
                        pubsub.close()
                    except Exception:  # already broken: nothing left to close cleanly
                        _log.debug("swerve: closing a broken pub/sub connection failed")

    def _take(self, pubsub: Any, wait: float) -> bool:
        """Read and apply everything the channel holds, redis-py's own buffer included (a
        message left there would not wake the poll); True if anything (a pong too) came."""
        heard = False
        message = pubsub.get_message(timeout=wait)
        while True:
            if message is not None:  # a message or a pong: the server is alive
                heard = True
                if message.get("type") == "message":
                    self._on_message(message["data"])
            connection = pubsub.connection
            if connection is None or not connection.can_read(timeout=0):
                return heard
            message = pubsub.get_message(timeout=0)

    def _may_resubscribe(self) -> bool:
        """Whether the channel's connection may be opened again without a reconnect: the
        command connection answers, and it has not happened too often lately (a server that
        keeps dropping it gets the full reconnect, with its backoff)."""
        now = time.monotonic()
        self._resubscribed = [t for t in self._resubscribed if now - t < _RESUBSCRIBE_WINDOW_S]
        if len(self._resubscribed) >= _RESUBSCRIBE_MAX or self._up is not True:
            return False
        try:
            self._wire.ping()
        except Exception:
            return False
        self._resubscribed.append(now)
        return True

    def _merge_local(self) -> None:
        """Health learned while Redis was away goes back in, never shortening anything:
        cooldowns, and open breakers (a Redis that restarted empty would otherwise send the
        whole fleet back to a route whose breaker this process still holds open)."""
        now = self._clock.time()
        for health in self._local.snapshot(now):
            route = health.route
            cooling = self._local.cooling(route, now)
            if cooling is not None:
                self._checked(route, self._merge_one, route, now, cooling, self.bounds)
            open_until = self._local.breaker_open_until(route)
            if open_until is not None and open_until > now:
                self._checked(route, self._merge_breaker, route, open_until)

    def _merge_breaker(self, route: str, open_until: float) -> None:
        # ACCOUNT with this process's opening: the server keeps the later of the two ends.
        longest = self.bounds.open_s
        config = BreakerConfig(open_s=min(BreakerConfig().open_s, longest), max_open_s=longest)
        self._account(route, _Counts(0, 0, config), open_until=open_until)

    def _merge_one(self, route: str, now: float, cooling: Any, bounds: Bounds) -> None:
        state = self._wire.run(
            "MERGE",
            self._wire.keys(route, "cool"),
            [repr(cooling.until), cooling.streak, repr(cooling.forget_at), cooling.reason,
             repr(now), repr(bounds.cooldown_s), repr(bounds.drain_s)],
        )  # fmt: skip
        self._wire.publish({"op": "cool", "route": route, **cooling_message(state)})

    def _resync(self) -> None:
        """The fleet's whole state into the local view: cooldowns, open breakers, and
        half-open ones (a process that joins while the fleet probes a breaker must not send
        every call to the route: its own breaker turns half-open too, and its probes ask the
        fleet's slots)."""
        now = self._clock.time()
        coolings, breakers = self._wire.fleet_state(now, self.bounds, self.reject)
        for route, cooling in coolings.items():
            self._local.adopt(route, cooling, now)
        for route, open_until in breakers.items():
            if self._local.breaker_open_until(route) != open_until:
                self._local.adopt_breaker(route, open_until, now)
        self._resync_latency()

    def _on_message(self, data: bytes | str) -> None:
        now = self._clock.time()
        message = message_from_json(data, now, self.bounds)
        if isinstance(message, Rejected):
            # Not ours (another writer on the channel), from a newer swerve, or hostile: a
            # message we cannot read is dropped, never mistaken for a broken connection.
            self.reject(message)
            return
        # What the route's keys hold is applied, not what the message says. A Redis error
        # here is the connection's (WRONGTYPE comes back as a rejection): the reader's loop.
        backed = self._wire.backed(message, now, self.bounds)
        if isinstance(backed, Rejected):
            # Our own message, superseded before its echo came back (a clear after a
            # cooldown), is no news: dropped without a warning.
            if backed.reason != "unbacked" or message.sender != self._wire.me:
                self.reject(backed)
            return
        message = backed
        if message.bounded:
            self.reject(Rejected("out_of_bounds", f"a {message.op} message for {message.route} "
                                 "ends later than its bound allows: cut to the bound"))  # fmt: skip
        try:
            self._dispatch(message)
        except Exception as exc:  # checked already: a bug here must not stop sharing either
            self.reject(Rejected("value", f"a {message.op} message: {type(exc).__name__}"))

    def _dispatch(self, message: Message) -> None:
        route, op = message.route, message.op
        mine = message.sender == self._wire.me
        now = self._clock.time()
        local = self._local
        if op == "cool" and message.cooling is not None:
            local.adopt(route, message.cooling, now)
        elif op == "probe" and not mine and message.at is not None:
            local.hold(route, message.at, now)
        elif op == "release" and not mine:
            local.release_probe(route)
        elif op == "recover" and not mine:
            local.forget(route)
        elif op == "breaker":
            local.adopt_breaker(route, message.at, now)
        elif op == "clear" and not mine:
            local.clear(route)
        elif op == "clear":
            # Our own clear, back after every message published before it: what those put
            # back into the local view since clear() (our own cooldown's echo) is older.
            local.forget(route)
            local.adopt_breaker(route, None, now)
        elif op == "drain" and not mine and message.cooling is not None:
            cooling = message.cooling
            if cooling.reason == "drained" and cooling.until > now:
                local.drain(route, cooling.until, now)
            else:  # cooled since (the drain's time kept, or cut to the bound): a cooldown
                local.adopt(route, cooling, now)


def _waiter(fd: int) -> select.poll | None:
    """A poll object for the reader's own waits on the channel's socket (None: no socket known,
    redis-py waits instead)."""
    if fd < 0:
        return None
    waiter = select.poll()
    waiter.register(fd, select.POLLIN | select.POLLERR | select.POLLHUP)
    return waiter


def _socket_fd(pubsub: Any) -> int:
    """The file descriptor of a redis-py pub/sub connection's socket, or -1 (no catch-up) when
    this redis-py keeps it elsewhere: redis-py has no public accessor for it."""
    sock = getattr(getattr(pubsub, "connection", None), "_sock", None)
    try:
        return int(sock.fileno()) if sock is not None else -1
    except (OSError, AttributeError, TypeError, ValueError):
        return -1


def _in_event_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def _first(exc: BaseException, limit: int = 120) -> str:
    """The first line of an error from Redis, escaped and cut, for a log line."""
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    text = text.encode("ascii", "backslashreplace").decode()
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)[:limit]
