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

from .._engine.failover import HEALTH_PREFIX_VAR, HEALTH_URL_VAR
from .._telemetry.redact import printable

if TYPE_CHECKING:
    from rich.console import Console

    from .._engine.config import FallbackConfig
    from .._health.redis import RedisHealth
    from .._health.store import RouteHealth
    from .probe import Probe

__all__ = ["health", "routes"]


def health(file: Path, timeout: float) -> int:
    from .file import read_or_exit_code
    from .probe import SKIP_ENV, probe

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
        print(
            "swerve health needs rich: install swerve's cli extra (README: Use it in your project)",
            file=sys.stderr,
        )
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
    # The error is the upstream's text: escaped, its ESC/OSC sequences print as text, never
    # reach the terminal (the route comes from the config file, checked printable, escaped too)
    return (
        printable(r.route),
        printable(r.status),
        latency,
        printable(r.error or "-"),
        "green" if r.ok else "red",
    )


def routes(args: argparse.Namespace) -> int:
    file_url = file_prefix = None
    config: FallbackConfig | None = None  # the chains a drain is checked against
    if (path := getattr(args, "config", None)) is not None:
        from .file import CliFile, read_or_exit_code

        def fleet(f: CliFile) -> tuple[str | None, str | None, FallbackConfig]:
            url = f.health_url() if getattr(args, "url", None) is None else None
            return url, f.health.prefix if f.health is not None else None, f.config

        found = read_or_exit_code(path, fleet)
        if isinstance(found, int):
            return found
        file_url, file_prefix, config = found
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
        print(
            "swerve routes needs rich: install swerve's cli extra (README: Use it in your project)",
            file=sys.stderr,
        )
        return 2
    try:
        import redis
    except ImportError:
        print(
            "swerve routes needs redis: "
            "install swerve's redis extra (README: Use it in your project)",
            file=sys.stderr,
        )
        return 2
    from redis.exceptions import RedisClusterException

    from .._health.redis import RedisHealth, safe_url
    from .._health.redis_wire import MAX_DRAIN_S

    if args.routes_command == "drain" and not args.duration <= MAX_DRAIN_S:
        # Refused before anything is written: Redis could not expire such a key anyway.
        print(
            f"error: drain {args.route} --for {args.duration:g}s: the longest drain is "
            f"{MAX_DRAIN_S:g}s ({MAX_DRAIN_S / 86400:g} days); drain again later to extend it",
            file=sys.stderr,
        )
        return 2

    where = printable(safe_url(url))
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
            if not args.force and _drain_refused(args.route, path, config, store, now):
                return 3
            until = now + args.duration
            store.drain(args.route, until, now)
            console.print(f"drained {args.route} until {_when(until, now)}", soft_wrap=True)
            console.print(
                f"calls across the fleet ({where}, prefix {prefix!r}) walk past it until then; "
                "each process reports it as a swerve.operator event on its next call; "
                "`swerve routes clear` ends it early"
            )
        else:
            view = store.fleet_view()
            _print_view(console, view, now, where, prefix)
            if not view:
                _print_other_prefixes(console, store, prefix)
    except unreachable as exc:
        fail(exc)
        return 1
    finally:
        store.close()
    return 0


def _drain_refused(
    route: str, path: Path | None, config: FallbackConfig | None, store: RedisHealth, now: float
) -> bool:
    """Whether draining ``route`` would leave a chain of the config with no healthy route
    (said on stderr, with how to go ahead). A call on such a chain goes to its routes anyway,
    dead or not, and pays their retries: the drain would make things worse, not safer."""
    from .._engine.config import DEFAULT_ENV_VAR, ConfigError, FallbackConfig
    from .._engine.policy import walk
    from .._health.store import BreakerState

    if config is None and path is None:
        try:
            config = FallbackConfig.from_env(DEFAULT_ENV_VAR)
        except ConfigError as exc:
            print(f"note: {exc}", file=sys.stderr)
    if config is None:
        print(
            "note: could not check that the drain leaves each chain a healthy route: no config "
            f"(pass --config FILE, or set ${DEFAULT_ENV_VAR})",
            file=sys.stderr,
        )
        return False
    view = {h.route: h for h in store.fleet_view()}
    down = {
        r for r, h in view.items() if h.degraded_until is not None or h.breaker is BreakerState.OPEN
    }
    stranded = []
    for requested in config.fallbacks:
        chain = list(walk(config, requested, requested))
        if route in chain and all(r == route or r in down for r in chain):
            stranded.append(chain)
    if not stranded:
        return False
    for chain in stranded:
        states = ", ".join(
            f"{r} {'drained (this drain)' if r == route else _state(view[r], now)}" for r in chain
        )
        print(
            f"error: draining {route} leaves no healthy route for calls to {chain[0]}: "
            f"{' -> '.join(chain)} ({states})",
            file=sys.stderr,
        )
    print(
        "such calls would try these routes anyway and pay their retries; not drained. "
        "`swerve routes clear` a route you know is back, or pass --force to drain anyway",
        file=sys.stderr,
    )
    return True


def _state(h: RouteHealth, now: float) -> str:
    """``cooling until 14:30:45 (in 58s)``: a route's state, as one phrase."""
    _, state, until, *_ = _row(h, now)
    return state if until == "-" else f"{state} until {until}"


def _print_other_prefixes(console: Console, store: RedisHealth, prefix: str) -> None:
    """Under an empty prefix: the prefixes that hold routes here, if any, and how to pick one
    (an operator who forgot the fleet's prefix should not read "healthy" and stop)."""
    # The store's own wire: it already holds the connection and knows the key layout.
    found, complete = store._wire.prefixes()
    others = {p: n for p, n in found.items() if p != prefix}
    if not others:
        return
    listed = ", ".join(
        f"{printable(repr(p))} ({n} route{'s' if n != 1 else ''})" for p, n in others.items()
    )
    more = "" if complete else " (and maybe more: the look was bounded)"
    console.print(f"other prefixes in this Redis hold route health: {listed}{more}", soft_wrap=True)
    console.print(
        "pick one with --prefix NAME (or the config file's health.prefix, or "
        f"${HEALTH_PREFIX_VAR})",
        soft_wrap=True,
    )


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
    from .._health.store import BreakerState

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
    # Read from Redis: checked there already, escaped here too (a terminal is no place to trust)
    return printable(h.route), state, until, breaker, printable(h.reason or "-"), style


def _when(at: float, now: float) -> str:
    """``at`` as local time (with the date when not today) and as "in Ns"."""
    try:
        local = time.localtime(at)
    except (OverflowError, OSError, ValueError):  # the store bounds times; never a traceback
        return f"(in {at - now:.3g}s)"
    fmt = "%H:%M:%S" if local[:3] == time.localtime(now)[:3] else "%Y-%m-%d %H:%M:%S"
    return f"{time.strftime(fmt, local)} (in {max(at - now, 0.0):.0f}s)"


def _scrub(text: str, url: str) -> str:
    """``text`` without the URL's credentials, should redis-py ever echo them (or a piece)."""
    from .._health.redis_client import url_secrets
    from .._telemetry.redact import scrub

    return printable(scrub(text, url_secrets(url)))
