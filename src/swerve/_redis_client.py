"""A redis-py client from a URL (plain, TLS, unix socket, Cluster or Sentinel), and the URL as
logs may show it (without its password)."""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

__all__ = ["client_from_url", "safe_url"]


def client_from_url(url: str, *, timeout_s: float, **kwargs: Any) -> Any:
    """A client on ``url``: ``redis://`` or ``rediss://`` (TLS) or ``unix://``, with the
    password in the URL as redis-py reads it; ``?cluster=1`` for Redis Cluster;
    ``redis+sentinel://host:port[,host:port]/service`` for Sentinel. Every operation is
    bounded by ``timeout_s``; other keywords go to the redis-py client."""
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
            options["password"] = parts.password
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


def safe_url(url: str) -> str:
    """``url`` without its password (for logs, telemetry and CLI output)."""
    parts = urlsplit(url)
    # redis-py also reads a password from the query string (``?password=...``).
    secret_query = "password" in parts.query.lower()
    if parts.password is None and not secret_query:
        return url
    if parts.password is not None:
        netloc = parts.netloc.rpartition("@")
        user = parts.username or ""
        parts = parts._replace(netloc=f"{user}:***@{netloc[2]}")
    if secret_query:
        query = parse_qsl(parts.query, keep_blank_values=True)
        masked = [(k, "***" if "password" in k.lower() else v) for k, v in query]
        parts = parts._replace(query=urlencode(masked, safe="*"))
    return urlunsplit(parts)
