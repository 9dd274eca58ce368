"""What a :class:`~swerve.RedisHealth` keeps in Redis and says on its channel: the keys of a
route, the scripts that change them, the messages, and the fleet's view read back."""

from __future__ import annotations

import hashlib
import json
import re
import uuid
from typing import Any

from . import _redis_scripts as scripts
from ._breaker import BreakerState
from ._cooldown import Cooling, RouteHealth

__all__ = ["RedisWire", "cooling_from_message", "cooling_message"]


class RedisWire:
    """One fleet's keys and channel (``prefix``) on a redis-py ``client``."""

    def __init__(self, client: Any, prefix: str) -> None:
        if not prefix or any(c in "{}*?[]" or not c.isprintable() or c.isspace() for c in prefix):
            # the prefix is part of a hash tag and of SCAN patterns: braces or globs break both
            raise ValueError(
                f"RedisHealth prefix {prefix!r}: use letters, digits and punctuation other than "
                "{ } * ? [ ], and no spaces"
            )
        self._client = client
        self._prefix = prefix
        self.channel = f"{prefix}:events"
        self._me = uuid.uuid4().hex  # tells this process's own messages apart
        self._scripts = {
            name: client.register_script(getattr(scripts, name))
            for name in scripts.__all__  # registered once; EVALSHA after the first call
        }

    def keys(self, route: str, *names: str) -> list[str]:
        # One hash tag per route: a route's keys share a slot, so scripts run on Cluster.
        tag = route if "{" not in route and "}" not in route else _digest(route)
        return [f"{{{self._prefix}:{tag}}}:{name}" for name in names]

    def run(self, script: str, keys: list[str], args: list[Any]) -> Any:
        return self._scripts[script](keys=keys, args=args)

    def publish(self, message: dict[str, Any]) -> None:
        message["from"] = self._me
        self._client.publish(self.channel, json.dumps(message))

    def mine(self, message: dict[str, Any]) -> bool:
        """Whether this process published ``message``."""
        return message.get("from") == self._me

    def subscribe(self) -> Any:
        """A pub/sub connection listening on the channel."""
        pubsub = self._client.pubsub(ignore_subscribe_messages=True)
        pubsub.subscribe(self.channel)
        return pubsub

    def release_slot(self, key: str, token: str) -> None:
        """Give back the half-open breaker slot ``token`` holds in ``key``."""
        self._client.zrem(key, token)

    def cooling(self, route: str) -> Cooling | None:
        """``route``'s cooldown as Redis holds it, or None."""
        (key,) = self.keys(route, "cool")
        return _cooling(self._client.hgetall(key))

    def fleet_view(self, now: float) -> list[RouteHealth]:
        """Every route Redis holds health for, read now."""
        found: dict[str, RouteHealth] = {}
        for route, name in self._scan("cool"):
            cooling = _cooling(self._client.hgetall(name))
            if cooling is None or cooling.forget_at <= now:
                continue
            found[route] = RouteHealth(
                route,
                cooling.until if cooling.until > now else None,
                BreakerState.CLOSED,
                recovering=cooling.until <= now,
                reason=cooling.reason,
            )
        for route, name in self._scan("brk"):
            raw = self._client.hget(name, "open_until")
            open_until = float(raw) if raw else 0.0
            state = BreakerState.OPEN if open_until > now else BreakerState.HALF_OPEN
            base = found.get(route, RouteHealth(route, None, BreakerState.CLOSED))
            found[route] = RouteHealth(
                route,
                base.degraded_until,
                state,
                base.recovering,
                base.reason,
                breaker_until=open_until if state is BreakerState.OPEN else None,
            )
        return [found[r] for r in sorted(found)]

    def _scan(self, kind: str) -> list[tuple[str, str]]:
        """(route, key) of every key of ``kind`` under the prefix."""
        out = []
        for key in self._client.scan_iter(match=f"{{{self._prefix}:*}}:{kind}", count=500):
            name = _text(key)
            out.append((name[len(self._prefix) + 2 : name.rindex("}")], name))
        return out

    def prefixes(self, *, limit: int = 10_000) -> tuple[dict[str, int], bool]:
        """The prefixes swerve keys in this Redis are under, each with how many routes it
        holds, and whether the look was complete: a SCAN of at most ``limit`` matching keys
        (in batches of 500; never KEYS, which blocks the server), for ``swerve routes``."""
        routes: dict[str, set[str]] = {}
        for seen, key in enumerate(self._client.scan_iter(match="{*:*}:*", count=500)):
            if seen >= limit:
                return _counted(routes), False
            found = _prefix_of(_text(key))
            if found is not None:
                routes.setdefault(found[0], set()).add(found[1])
        return _counted(routes), True

    def close(self) -> None:
        self._client.close()


_KINDS = frozenset({"cool", "probe", "brk", "window", "half_open"})  # see keys()
_DIGEST_TAG = re.compile(r"(.+):[0-9a-f]{40}")


def _prefix_of(key: str) -> tuple[str, str] | None:
    """(prefix, route tag) of one of swerve's keys, ``{prefix:tag}:kind``; None for another's."""
    tag, close, kind = key[1:].rpartition("}:")
    if not close or kind not in _KINDS:
        return None
    if (digest := _DIGEST_TAG.fullmatch(tag)) is not None:
        return digest[1], tag[len(digest[1]) + 1 :]
    # The tag is the route, "provider/model": the prefix ends at the last ":" before its "/".
    prefix, colon, _ = tag.partition("/")[0].rpartition(":")
    return (prefix, tag[len(prefix) + 1 :]) if colon and prefix and "/" in tag else None


def _counted(routes: dict[str, set[str]]) -> dict[str, int]:
    return {prefix: len(tags) for prefix, tags in sorted(routes.items())}


def cooling_message(state: list[Any]) -> dict[str, Any]:
    """The fields of a ``cool`` message, from the state a script returned."""
    until, streak, forget_at, reason = state
    return {
        "until": float(_text(until)),
        "streak": int(streak),
        "forget_at": float(_text(forget_at)),
        "reason": _text(reason),
    }


def cooling_from_message(message: dict[str, Any]) -> Cooling:
    return Cooling(
        float(message["until"]),
        int(message["streak"]),
        float(message["forget_at"]),
        reason=str(message.get("reason", "")),
    )


def _cooling(state: dict[Any, Any]) -> Cooling | None:
    fields = {_text(k): _text(v) for k, v in state.items()}
    try:
        return Cooling(
            float(fields["until"]),
            int(fields.get("streak", "0")),
            float(fields.get("forget_at", fields["until"])),
            reason=fields.get("reason", ""),
        )
    except (KeyError, ValueError):
        return None


def _digest(route: str) -> str:
    return hashlib.sha1(route.encode(), usedforsecurity=False).hexdigest()


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
