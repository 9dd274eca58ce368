"""``swerve health`` (probe each route of a config file) and ``swerve routes`` (the fleet's
shared route health: show, clear, drain)."""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ._failover import HEALTH_PREFIX_VAR, HEALTH_URL_VAR

if TYPE_CHECKING:
    from rich.console import Console

    from ._health import RouteHealth
    from ._probe import Probe

__all__ = ["health", "routes"]


def health(file: Path, timeout: float) -> int:
    from ._cli_file import read_or_exit_code
    from ._probe import SKIP_ENV, probe

    loaded = read_or_exit_code(file, lambda f: (f.config, f.resolve_upstreams()))
    if isinstance(loaded, int):
        return loaded
    config, upstreams = loaded
    if not upstreams:
        print(f"error: {file} declares no upstreams", file=sys.stderr)
        return 2
    try:
        from rich.console import Console
        from rich.progress import Progress
    except ImportError:
        print("swerve health needs rich: pip install 'swerve[cli]'", file=sys.stderr)
        return 2
    console = Console(highlight=False)
    with Progress(console=console, transient=True) as progress:
        task = progress.add_task("probing routes", total=len(upstreams))
        results = probe(
            upstreams, config, timeout=timeout, on_done=lambda _: progress.advance(task)
        )
    _print_probes(console, results)
    if os.environ.get(SKIP_ENV, "") not in ("", "0", "false"):
        console.print(f"[dim]{SKIP_ENV} is set: reachability only, no completions[/]")
    return 1 if any(not r.ok for r in results) else 0


def _print_probes(console: Console, results: Sequence[Probe]) -> None:
    from rich import box
    from rich.padding import Padding
    from rich.table import Table
    from rich.text import Text

    headers = ("route", "status", "latency", "error")
    rows = [_probe_row(r) for r in results]
    # As in `swerve routes`: a route name is never cut or folded; the error wraps between
    # words; when even that does not fit, one block per route.
    widths = _column_widths(headers, [row[:4] for row in rows], console.width, (3, 2, 1))
    if widths is None:
        for route, status, latency, error, style in rows:
            # route and error are text from the config and the upstream, never rich markup
            console.print(Text(route, style="bold"), soft_wrap=True)
            console.print(Text.assemble("  status: ", (status, style), f"  latency: {latency}"))
            console.print(Padding(Text(f"error: {error}"), (0, 0, 0, 2), expand=False))
        return
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    for name, width in zip(headers, widths, strict=True):
        table.add_column(name, width=width, no_wrap=name == "route", overflow="fold")
    for route, status, latency, error, style in rows:
        table.add_row(Text(route), Text(status, style=style), latency, Text(error))
    console.print(table)


def _probe_row(r: Probe) -> tuple[str, str, str, str, str]:
    """A probe's line in `swerve health`: route, status, latency, error (and a style)."""
    latency = f"{r.latency_s * 1000:.0f} ms" if r.latency_s is not None else "-"
    return r.route, r.status, latency, r.error or "-", "green" if r.ok else "red"


def routes(args: argparse.Namespace) -> int:
    file_url = file_prefix = None
    if (path := getattr(args, "config", None)) is not None:
        from ._cli_file import CliFile, read_or_exit_code

        def fleet(f: CliFile) -> tuple[str | None, str | None]:
            url = f.health_url() if getattr(args, "url", None) is None else None
            return url, f.health.prefix if f.health is not None else None

        found = read_or_exit_code(path, fleet)
        if isinstance(found, int):
            return found
        file_url, file_prefix = found
    url = getattr(args, "url", None) or file_url or os.environ.get(HEALTH_URL_VAR, "").strip()
    if not url:
        print(
            f"error: no fleet to read: set ${HEALTH_URL_VAR} (the Redis URL the fleet shares "
            "health through), pass --url, or name a config file with a 'health' section",
            file=sys.stderr,
        )
        return 2
    prefix = (
        getattr(args, "prefix", None)
        or file_prefix
        or os.environ.get(HEALTH_PREFIX_VAR, "")
        or "swerve"
    )
    timeout = getattr(args, "timeout", 2.0)
    try:
        from rich.console import Console
    except ImportError:
        print("swerve routes needs rich: pip install 'swerve[cli]'", file=sys.stderr)
        return 2
    try:
        import redis
    except ImportError:
        print("swerve routes needs redis: pip install 'swerve[redis]'", file=sys.stderr)
        return 2
    from redis.exceptions import RedisClusterException

    from ._redis import RedisHealth, safe_url

    where = safe_url(url)
    unreachable = (redis.RedisError, RedisClusterException, OSError)

    def fail(exc: Exception) -> None:
        print(
            f"error: cannot use the fleet's Redis at {where}: {type(exc).__name__}: "
            f"{_scrub(str(exc), url)}",
            file=sys.stderr,
        )

    try:  # a Cluster client connects here already
        store = RedisHealth.from_url(url, prefix=prefix, timeout_s=timeout)
    except unreachable as exc:
        fail(exc)
        return 1
    except ValueError as exc:  # a URL redis-py cannot read
        print(f"error: {where}: {_scrub(str(exc), url)}", file=sys.stderr)
        return 2
    console = Console(highlight=False, markup=False)  # route names are text, never markup
    try:
        store.wait_until_shared(timeout)  # an operation below raises the reason if it failed
        now = time.time()
        if args.routes_command == "clear":
            store.clear(args.route)
            console.print(f"cleared {args.route}", soft_wrap=True)
            console.print(
                f"its cooldown and breaker are over across the fleet ({where}, prefix "
                f"{prefix!r}); each process reports it as a swerve.operator event on its next call"
            )
        elif args.routes_command == "drain":
            until = now + args.duration
            store.drain(args.route, until, now)
            console.print(f"drained {args.route} until {_when(until, now)}", soft_wrap=True)
            console.print(
                f"calls across the fleet ({where}, prefix {prefix!r}) walk past it until then; "
                "each process reports it as a swerve.operator event on its next call; "
                "`swerve routes clear` ends it early"
            )
        else:
            _print_view(console, store.fleet_view(), now, where, prefix)
    except unreachable as exc:
        fail(exc)
        return 1
    finally:
        store.close()
    return 0


def _print_view(
    console: Console, view: Sequence[RouteHealth], now: float, where: str, prefix: str
) -> None:
    from rich import box
    from rich.table import Table
    from rich.text import Text

    if not view:
        console.print(f"every route is healthy in {where} (prefix {prefix!r})", soft_wrap=True)
        return
    console.print(f"{len(view)} route(s) degraded in {where} (prefix {prefix!r}):", soft_wrap=True)
    headers = ("route", "state", "until", "breaker", "why")
    rows = [_row(h, now) for h in view]
    # A route name is what an operator copies into `swerve routes clear`: never cut or folded.
    # The other columns wrap between words; when even that does not fit, one block per route.
    widths = _column_widths(headers, [row[:5] for row in rows], console.width, (2, 1, 4, 3))
    if widths is None:
        for route, state, until, breaker, why, style in rows:
            console.print(Text(route, style="bold"), soft_wrap=True)
            console.print(Text.assemble("  state: ", (state, style)))
            console.print(f"  until: {until}\n  breaker: {breaker}\n  why: {why}")
        return
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    for name, width in zip(headers, widths, strict=True):
        table.add_column(name, width=width, no_wrap=name == "route", overflow="fold")
    for route, state, until, breaker, why, style in rows:
        table.add_row(route, Text(state, style=style), until, breaker, why)
    console.print(table)


def _column_widths(
    headers: Sequence[str], rows: Sequence[Sequence[str]], room: int, spare_to: Sequence[int]
) -> list[int] | None:
    """Widths for a table of ``rows`` in ``room`` columns where no route is cut and no word is
    split (the first column never wraps, the others wrap between words); None if none fit.
    What is left goes to the columns ``spare_to``, in that order."""
    cells = [[h, *(row[i] for row in rows)] for i, h in enumerate(headers)]
    natural = [max(len(c) for c in column) for column in cells]
    least = [natural[0]] + [max(len(w) for c in column for w in c.split()) for column in cells[1:]]
    room -= 3 * (len(headers) - 1)  # between two columns: a space, a separator, a space
    if sum(least) > room:
        return None
    widths, spare = list(least), room - sum(least)
    for i in spare_to:
        extra = min(spare, natural[i] - widths[i])
        widths[i] += extra
        spare -= extra
    return widths


def _row(h: RouteHealth, now: float) -> tuple[str, str, str, str, str, str]:
    """A route's line in `swerve routes`: route, state, until, breaker, why (and a style)."""
    from ._health import BreakerState

    if h.degraded_until is not None:
        state, style = ("drained", "yellow") if h.reason == "drained" else ("cooling", "red")
    elif h.recovering:
        state, style = "recovering (awaiting a probe)", "yellow"
    elif h.breaker is BreakerState.OPEN:
        state, style = "breaker open", "red"
    else:
        state, style = "half-open", "yellow"
    at = h.degraded_until if h.degraded_until is not None else h.breaker_until
    until = _when(at, now) if at is not None else "-"
    breaker = h.breaker.value.replace("_", "-")
    return h.route, state, until, breaker, h.reason or "-", style


def _when(at: float, now: float) -> str:
    """``at`` as local time (with the date when not today) and as "in Ns"."""
    local = time.localtime(at)
    fmt = "%H:%M:%S" if local[:3] == time.localtime(now)[:3] else "%Y-%m-%d %H:%M:%S"
    return f"{time.strftime(fmt, local)} (in {max(at - now, 0.0):.0f}s)"


def _scrub(text: str, url: str) -> str:
    """``text`` without the URL's password, should redis-py ever echo it."""
    from urllib.parse import unquote, urlsplit

    password = urlsplit(url).password
    for secret in {password, unquote(password)} if password else ():
        text = text.replace(secret, "***")
    return text
