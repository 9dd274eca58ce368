"""A redis-py client from a URL (plain, TLS, unix socket, Cluster or Sentinel), and the URL as
logs may show it (without its password)."""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import parse_qsl, quote, unquote, urlencode, urlsplit, urlunsplit

__all__ = ["client_from_url", "refused", "safe_url", "url_secrets"]


def client_from_url(url: str, *, timeout_s: float, **kwargs: Any) -> Any:
    """A client on ``url``: ``redis://`` or ``rediss://`` (TLS) or ``unix://``, with the
    password in the URL as redis-py reads it; ``?cluster=1`` for Redis Cluster;
    ``redis+sentinel://host:port[,host:port]/service`` for Sentinel. Every operation is
    bounded by ``timeout_s``; other keywords go to the redis-py client.

    A URL redis-py cannot read raises ValueError naming the URL without its credentials: never
    redis-py's own message when the URL holds any (it can quote a piece of the password)."""
    _check_userinfo(url)
    try:
        return _client(url, timeout_s=timeout_s, **kwargs)
    except ValueError as exc:
        detail = f"{type(exc).__name__}" if url_secrets(url) else f"{exc}"
        raise ValueError(f"cannot read the Redis URL {safe_url(url)}: {detail}") from None


def _client(url: str, *, timeout_s: float, **kwargs: Any) -> Any:
    import redis
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    options: dict[str, Any] = {
        "socket_timeout": timeout_s,
        "socket_connect_timeout": timeout_s,
        "retry": Retry(NoBackoff(), 0),  # swerve backs off itself, and never on a call
        **kwargs,
    }
    parts = urlsplit(url)
    query = dict(parse_qsl(parts.query))
    if parts.scheme in ("redis+sentinel", "rediss+sentinel"):
        from redis.sentinel import Sentinel

        hosts = [
            (h.rsplit(":", 1)[0], int(h.rsplit(":", 1)[1]) if ":" in h else 26379)
            for h in parts.netloc.rpartition("@")[2].split(",")
        ]
        service = parts.path.strip("/") or "mymaster"
        if parts.password:
            options["password"] = unquote(parts.password)
        if parts.scheme.startswith("rediss"):
            options["ssl"] = True
        sentinel = Sentinel(  # type: ignore[no-untyped-call]
            hosts, sentinel_kwargs={"socket_timeout": timeout_s}, **options
        )
        return sentinel.master_for(service, **options)  # type: ignore[no-untyped-call]
    if query.pop("cluster", "").lower() in ("1", "true", "yes"):
        rest = urlunsplit(parts._replace(query=urlencode(query)))
        return redis.RedisCluster.from_url(rest, **options)
    return redis.Redis.from_url(url, **options)


def _check_userinfo(url: str) -> None:
    """Refuse a URL whose credentials redis-py would read wrong: an unencoded ``/``, ``#`` or
    ``?`` in the password ends the host part early (urllib, which redis-py parses with, takes
    what follows for a path, a fragment or a query), so the password would be cut, the host
    lost, and pieces of the password quoted in errors."""
    _, sep, rest = url.partition("://")
    if sep and "@" in rest and "@" not in urlsplit(url).netloc:
        raise ValueError(
            f"cannot read the Redis URL {safe_url(url)}: its user or password holds an "
            "unencoded '/', '#' or '?' (percent-encode it: urllib.parse.quote(password, "
            "safe=''))"
        )


def _userinfo(rest: str) -> str | None:
    """The credentials part of a URL (after ``scheme://``), taken generously: everything up
    to the last ``@``. redis-py (urllib) ends the host part at the first ``/``, ``?`` or
    ``#``; a password holding one of those is still all before the last ``@``."""
    userinfo, at, _ = rest.rpartition("@")
    return userinfo if at else None


def url_secrets(url: str) -> list[str]:
    """Every secret ``url`` holds, longest first, for scrubbing text that may quote them: the
    credentials (whole, and as redis-py and urllib would read their password: raw, decoded,
    and the pieces an unencoded ``/``, ``#`` or ``?`` would cut it into), and any password in
    the query string."""
    _, _, rest = url.partition("://")
    found: set[str] = set()
    userinfo = _userinfo(rest)
    if userinfo:
        found.add(userinfo)
        password = userinfo.partition(":")[2] if ":" in userinfo else userinfo
        for text in (password, unquote(password)):
            found.add(text)
            found.update(p for p in re.split(r"[/?#]", text) if len(p) >= 3)
    query = rest.partition("?")[2]
    for key, value in parse_qsl(query, keep_blank_values=True):
        if "password" in key.lower() and value:
            found.update((value, quote(value, safe="")))
    return sorted((s for s in found if s), key=len, reverse=True)


def safe_url(url: str) -> str:
    """``url`` without its credentials (for logs, telemetry and CLI output): the password, in
    the userinfo or the query string, becomes ``***``; the user name stays. Masked from the
    parse (everything before the last ``@`` is credentials), not by a pattern over the text,
    so a password holding ``/``, ``#``, ``?`` or ``@`` goes whole."""
    scheme, sep, rest = url.partition("://")
    if not sep:  # not a URL: show it only if it cannot hold a secret
        return url if "@" not in url and "password" not in url.lower() else "***"
    userinfo = _userinfo(rest)
    host = rest if userinfo is None else rest.rpartition("@")[2]
    shown_user = ""
    if userinfo is not None:
        user, colon, _ = userinfo.partition(":")
        # a user name is shown, unless the text before the first ":" may be a password's
        keep = colon and not any(c in user for c in "/?#")
        shown_user = f"{user}:***@" if keep else ":***@"
    base, q, query = host.partition("?")
    if q and "password" in query.lower():
        pairs = parse_qsl(query, keep_blank_values=True)
        masked = [(k, "***" if "password" in k.lower() else v) for k, v in pairs]
        query = urlencode(masked, safe="*")
    return f"{scheme}://{shown_user}{base}{q}{query}"


def refused(exc: BaseException) -> bool:
    """Whether ``exc`` is the server refusing one command (a script's error, a key of the wrong
    type) rather than Redis being away: the connection is fine, so it is no reason to stop
    sharing and reconnect (which would not help, and would stop sharing for every route)."""
    from redis.exceptions import (
        ConnectionError,
        NoPermissionError,
        ReadOnlyError,
        ResponseError,
    )

    return isinstance(exc, ResponseError) and not isinstance(
        exc, ConnectionError | NoPermissionError | ReadOnlyError
    )
