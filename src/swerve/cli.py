"""``swerve demo`` and ``swerve config check``."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from opentelemetry.sdk.trace import SpanProcessor

from ._config import DEFAULT_ENV_VAR, ConfigError, FallbackConfig
from ._engine import HEALTH_PREFIX_VAR, HEALTH_URL_VAR
from ._failures import FailureKind, status_kind
from ._policy import next_route

if TYPE_CHECKING:
    from opentelemetry.sdk.metrics import MeterProvider
    from rich.console import Console

    from ._health import RouteHealth

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="swerve", description="Failover for LLM calls.")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="run a scripted outage against a built-in fake provider")
    demo.add_argument("--fast", action="store_true", help="shorter waits (for tests)")
    demo.add_argument(
        "--metrics-port",
        type=int,
        metavar="N",
        help="serve swerve's metrics for Prometheus on http://127.0.0.1:N/metrics (0: any port)",
    )
    demo.add_argument(
        "--hold",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="with --metrics-port, keep serving metrics this long after the script",
    )
    config = sub.add_parser("config", help="configuration tools")
    config_sub = config.add_subparsers(dest="config_command", required=True)
    check = config_sub.add_parser("check", help="validate a config and print its chains")
    source = check.add_mutually_exclusive_group()
    source.add_argument("--env", metavar="VAR", help=f"read JSON from VAR ({DEFAULT_ENV_VAR})")
    source.add_argument("file", nargs="?", type=Path, help="a JSON config file")
    health = sub.add_parser(
        "health", help="probe every route of a config file with a minimal real completion"
    )
    health.add_argument("file", type=Path, help="JSON config with an 'upstreams' section")
    health.add_argument("--timeout", type=float, default=20.0, help="seconds per probe")
    _add_routes(sub)
    args = parser.parse_args(argv)
    if args.command == "demo":
        return _demo(fast=args.fast, metrics_port=args.metrics_port, hold=args.hold)
    if args.command == "health":
        return _health(args.file, args.timeout)
    if args.command == "routes":
        return _routes(args)
    return _config_check(args.file, args.env)


# --- health -------------------------------------------------------------------------------------
def _health(file: Path, timeout: float) -> int:
    from ._cli_file import read
    from ._probe import SKIP_ENV, probe

    try:
        loaded = read(file)
        config, upstreams = loaded.config, loaded.resolve_upstreams()
    except OSError as exc:
        print(f"error: cannot read {file}: {exc.strerror}", file=sys.stderr)
        return 2
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if not upstreams:
        print(f"error: {file} declares no upstreams", file=sys.stderr)
        return 2
    try:
        from rich.console import Console
        from rich.progress import Progress
        from rich.table import Table
        from rich.text import Text
    except ImportError:
        print("swerve health needs rich: pip install 'swerve[cli]'", file=sys.stderr)
        return 2
    console = Console(highlight=False)
    with Progress(console=console, transient=True) as progress:
        task = progress.add_task("probing routes", total=len(upstreams))
        results = probe(
            upstreams, config, timeout=timeout, on_done=lambda _: progress.advance(task)
        )
    table = Table("route", "status", "latency", "error")
    for r in results:
        colour = "green" if r.ok else "red"
        latency = f"{r.latency_s * 1000:.0f} ms" if r.latency_s is not None else "-"
        # route and error are text from the config and the upstream, never rich markup
        table.add_row(Text(r.route), Text(r.status, style=colour), latency, Text(r.error))
    console.print(table)
    if os.environ.get(SKIP_ENV, "") not in ("", "0", "false"):
        console.print(f"[dim]{SKIP_ENV} is set: reachability only, no completions[/]")
    return 1 if any(not r.ok for r in results) else 0


# --- routes -------------------------------------------------------------------------------------
_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def _add_routes(sub: Any) -> None:
    # --url/--prefix/--timeout are accepted before or after `clear`/`drain`; SUPPRESS keeps a
    # subcommand's unset option from overwriting the value given before it.
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--url",
        default=argparse.SUPPRESS,
        help=f"the fleet's Redis (default: the config file's, else ${HEALTH_URL_VAR})",
    )
    common.add_argument(
        "--config",
        type=Path,
        default=argparse.SUPPRESS,
        metavar="FILE",
        help="a config file whose 'health' section names the fleet's Redis and prefix",
    )
    common.add_argument(
        "--prefix",
        default=argparse.SUPPRESS,
        help=(
            f"the fleet's key prefix (default: the config file's, else ${HEALTH_PREFIX_VAR}, "
            "else 'swerve')"
        ),
    )
    common.add_argument(
        "--timeout",
        type=float,
        default=argparse.SUPPRESS,
        metavar="SECONDS",
        help="bound on connecting and on each Redis operation (default: 2)",
    )
    routes = sub.add_parser(
        "routes",
        parents=[common],
        help="the fleet's shared route health (RedisHealth): show, clear, drain",
        description="Without a subcommand: print every route the fleet holds health for.",
    )
    routes_sub = routes.add_subparsers(dest="routes_command")
    clear = routes_sub.add_parser(
        "clear", parents=[common], help="end a route's cooldown and close its breaker, fleet-wide"
    )
    clear.add_argument("route", type=_route_arg, metavar="ROUTE", help="provider/model")
    drain = routes_sub.add_parser(
        "drain", parents=[common], help="take a route out of service on purpose, fleet-wide"
    )
    drain.add_argument("route", type=_route_arg, metavar="ROUTE", help="provider/model")
    drain.add_argument(
        "--for",
        dest="duration",
        type=_duration_arg,
        required=True,
        metavar="DURATION",
        help="how long: 90s, 10m, 2h, or plain seconds",
    )


def _route_arg(value: str) -> str:
    from ._routes import Route

    try:
        return str(Route.parse(value))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _duration_arg(value: str) -> float:
    text = value.strip().lower()
    unit = _UNITS.get(text[-1:]) if text else None
    number = text[:-1] if unit is not None else text
    try:
        seconds = float(number) * (unit or 1.0)
    except ValueError:
        seconds = float("nan")
    if not seconds > 0 or seconds == float("inf"):
        raise argparse.ArgumentTypeError(
            f"{value!r} is not a duration: use 90s, 10m, 2h, or plain seconds"
        )
    return seconds


def _routes(args: argparse.Namespace) -> int:
    file_url = file_prefix = None
    if (path := getattr(args, "config", None)) is not None:
        from ._cli_file import read

        try:
            loaded = read(path)
            file_url = loaded.health_url() if getattr(args, "url", None) is None else None
            file_prefix = loaded.health.prefix if loaded.health is not None else None
        except OSError as exc:
            print(f"error: cannot read {path}: {exc.strerror}", file=sys.stderr)
            return 2
        except ConfigError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
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
    widths = _column_widths(headers, [row[:5] for row in rows], console.width)
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
    headers: Sequence[str], rows: Sequence[Sequence[str]], room: int
) -> list[int] | None:
    """Widths for a table of ``rows`` in ``room`` columns where no route is cut and no word is
    split (the first column never wraps, the others wrap between words); None if none fit."""
    cells = [[h, *(row[i] for row in rows)] for i, h in enumerate(headers)]
    natural = [max(len(c) for c in column) for column in cells]
    least = [natural[0]] + [max(len(w) for c in column for w in c.split()) for column in cells[1:]]
    room -= 3 * (len(headers) - 1)  # between two columns: a space, a separator, a space
    if sum(least) > room:
        return None
    widths, spare = list(least), room - sum(least)
    for i in (2, 1, 4, 3):  # what is left goes to until, state, why, breaker, in that order
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


# --- config check -------------------------------------------------------------------------------
def _config_check(file: Path | None, var: str | None) -> int:
    try:
        loaded = None
        if file is not None:
            from ._cli_file import read

            try:
                loaded = read(file)
            except OSError as exc:
                print(f"error: cannot read {file}: {exc.strerror}", file=sys.stderr)
                return 2
            config: FallbackConfig | None = loaded.config
            where = str(file)
        else:
            var = var or DEFAULT_ENV_VAR
            config = FallbackConfig.from_env(var)
            where = f"${var}"
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if config is None:
        print(f"{where} is not set: swerve passes every call straight through.")
        return 0
    print(f"{where}: valid")
    if not config.enabled:
        print("max_swaps is 0: swerve is off, calls pass straight through.")
    print(
        f"retries per route: {config.max_retries}, swaps per call: {config.max_swaps}, "
        f"statuses: {_statuses(config)}"
    )
    print(
        f"cooldown: {config.cooldown_s:g}s, doubling per failed probe up to "
        f"{config.longest_cooldown_s:g}s; one probe per route when it ends"
    )
    print(f"a call takes at most {config.call_bound_s:g}s, waits included")
    print("on failure (an HTTP status not in the list above always surfaces):")
    for kind, what in _policy_table(config):
        print(f"  {kind:<17} {what}")
    if config.fallbacks:
        print("chains:")
    for route in config.fallbacks:
        print(f"  {' -> '.join(_chain(config, route))}")
    if loaded is not None and loaded.upstreams:
        print(f"upstreams: {', '.join(loaded.upstreams)} (probe them with `swerve health`)")
    if loaded is not None and loaded.health is not None:
        spec = loaded.health
        url = spec.url if spec.url is not None else f"${spec.url_env}"
        print(f"shared health: {url}, prefix {spec.prefix or 'swerve'!r} (see `swerve routes`)")
    return 0


def _statuses(config: FallbackConfig) -> str:
    if callable(config.fallback_on):  # only from Python: a JSON config holds a status list
        return "decided by a fallback_on function"
    return str(sorted(config.fallback_on))


_ACTION_TEXT = {"retry": "retry, then swap", "swap": "swap at once", "surface": "surface"}


def _policy_table(config: FallbackConfig) -> list[tuple[str, str]]:
    """Each failure kind and what it does under ``config``, as `swerve config check` shows it."""
    rows = []
    for kind in FailureKind:
        if kind is FailureKind.ABORTED:
            continue
        act = config.action(kind)
        what = _ACTION_TEXT[act]
        if kind is FailureKind.RATE_LIMITED and act == "retry":
            what += f" (waits a Retry-After up to {config.retry_after_max_s:g}s; longer swaps)"
        listed = [
            str(status)
            for status in ([] if callable(config.fallback_on) else sorted(config.fallback_on))
            if status_kind(status) is kind and act == "surface" and kind not in config.on_failure
        ]
        if listed:
            what += f"; HTTP {', '.join(listed)} swap at once (listed in fallback_on)"
        mapping = config.fallbacks_by_failure.get(kind)
        if mapping:
            routes = ", ".join(f"{k} -> {v}" for k, v in mapping.items())
            what += f"; from a mapped route it swaps: {routes}"
        rows.append((kind.value, what))
    return rows


def _chain(config: FallbackConfig, requested: str) -> list[str]:
    """The order a call for ``requested`` would try routes in, up to the swap budget."""
    chain, current = [requested], requested
    for _ in range(config.max_swaps):
        target = next_route(config, requested, current)
        if target is None:
            break
        chain.append(target)
        current = target
    return chain


# --- demo ---------------------------------------------------------------------------------------
PRIMARY = "openrouter/anthropic/claude-sonnet-5"
FALLBACK = "anthropic/claude-sonnet-5"


def _demo(*, fast: bool, metrics_port: int | None = None, hold: float = 0.0) -> int:
    try:
        from rich.console import Console
    except ImportError:
        print("swerve demo needs rich: pip install 'swerve[cli]'", file=sys.stderr)
        return 2
    console = Console(highlight=False)
    try:
        with _metrics_server(console, metrics_port) as meter_provider:
            _run_demo(console, fast=fast, meter_provider=meter_provider, hold=hold)
    except _MissingExporter:
        print(
            "swerve demo --metrics-port needs opentelemetry-exporter-prometheus: "
            "pip install 'swerve[cli]'",
            file=sys.stderr,
        )
        return 2
    except KeyboardInterrupt:
        return 130
    return 0


class _MissingExporter(Exception):
    pass


@contextlib.contextmanager
def _metrics_server(console: Console, port: int | None) -> Iterator[MeterProvider | None]:
    """A meter provider whose metrics Prometheus can scrape on 127.0.0.1:``port`` (or None)."""
    if port is None:
        yield None
        return
    try:
        from opentelemetry.exporter.prometheus import PrometheusMetricReader
        from prometheus_client import CollectorRegistry, start_http_server
    except ImportError:
        raise _MissingExporter from None
    from opentelemetry.sdk.metrics import MeterProvider

    registry = CollectorRegistry()
    meter_provider = MeterProvider(metric_readers=[PrometheusMetricReader(registry=registry)])
    server, thread = start_http_server(port, addr="127.0.0.1", registry=registry)
    console.print(f"metrics at http://127.0.0.1:{server.server_port}/metrics")
    try:
        yield meter_provider
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
        meter_provider.shutdown()


def _run_demo(
    console: Console, *, fast: bool, meter_provider: MeterProvider | None = None, hold: float = 0.0
) -> None:
    import httpx
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from ._engine import Attempt, Failover, StreamSpec
    from ._failures import InStreamError
    from ._health import MemoryHealth
    from ._telemetry import Telemetry
    from .testing import FakeProvider, Fault, Reply

    scale = 0.1 if fast else 1.0
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    live = _Timeline(console)
    tracer_provider.add_span_processor(live)
    if os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT"):
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        tracer_provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        console.print(
            f"[dim]also exporting spans to {os.environ['OTEL_EXPORTER_OTLP_ENDPOINT']}[/]"
        )

    config = FallbackConfig(
        fallbacks={PRIMARY: FALLBACK, FALLBACK: PRIMARY},
        max_retries=2,
        max_swaps=1,
        cooldown_s=3 * scale,
        backoff_initial_s=0.4 * scale,
        jitter=False,
    )

    def sleep(seconds: float) -> None:
        live.flush()  # show the retry decision before waiting it out
        time.sleep(seconds)

    telemetry = Telemetry(tracer_provider, meter_provider)
    failover = Failover(config, MemoryHealth(), telemetry=telemetry, sleep=sleep)

    with FakeProvider() as fake, httpx.Client() as client:
        fake.set_reply("openrouter", Reply(text="Hello from Claude via OpenRouter."))
        fake.set_reply("anthropic", Reply(text="Hello from Claude, direct."))

        def url(attempt: Attempt) -> str:
            return f"{fake.url(attempt.route.provider)}/v1/chat/completions"

        def complete(attempt: Attempt) -> str:
            body = {"model": attempt.route.model, "messages": [{"role": "user", "content": "hi"}]}
            response = client.post(url(attempt), json=body, timeout=attempt.timeout or 30)
            response.raise_for_status()
            return str(response.json()["choices"][0]["message"]["content"])

        def chunks(attempt: Attempt) -> Iterator[dict[str, Any]]:
            body = {
                "model": attempt.route.model,
                "messages": [{"role": "user", "content": "hi"}],
                "stream": True,
            }
            with client.stream("POST", url(attempt), json=body) as response:
                response.raise_for_status()
                for line in response.iter_lines():
                    if not line.startswith("data:"):
                        continue
                    data = line[5:].strip()
                    if data == "[DONE]":
                        yield {"done": True}
                        continue
                    chunk = json.loads(data)
                    if "error" in chunk:
                        raise InStreamError(chunk, route=str(attempt.route))
                    yield chunk

        spec: StreamSpec[dict[str, Any]] = StreamSpec(
            part=lambda c: "text" if _delta(c) else None, is_finish=lambda c: "done" in c
        )

        console.rule("[bold]swerve demo[/]: a scripted outage on a fake provider (no network)")
        console.print(f"chain: {PRIMARY} <-> {FALLBACK}; {config.max_retries} retries per route")

        console.rule("1. the primary returns 503s")
        fake.set_fault("openrouter", Fault.status(503))
        result = failover.call(PRIMARY, complete)
        live.flush()
        console.print(f"[green]answer[/] from [bold]{result.route}[/]: {result.value!r}")

        console.rule("2. the next call starts on the healthy route")
        result = failover.call(PRIMARY, complete)
        live.flush()
        console.print(
            f"[green]answer[/] from [bold]{result.route}[/] after {len(result.attempts)} attempt, "
            f"{fake.requests('openrouter')} requests to the primary so far"
        )

        console.rule("3. cooldown over: one probe; the primary streams an error inside a 200")
        _wait_out_cooldown(failover, PRIMARY)
        fake.set_fault("openrouter", Fault.error_before_content("openrouter", 503))
        fake.set_fault("anthropic", Fault.ok())
        stream = failover.stream(PRIMARY, chunks, spec)
        text = "".join(_delta(c) for c in stream if isinstance(c, dict))
        live.flush()
        console.print(f"[green]streamed[/] from [bold]{stream.route}[/]: {text!r}")

        console.rule("4. recovery: the next probe succeeds and traffic returns")
        _wait_out_cooldown(failover, PRIMARY)
        fake.set_fault("openrouter", Fault.ok())
        result = failover.call(PRIMARY, complete)
        live.flush()
        console.print(f"[green]answer[/] from [bold]{result.route}[/]: {result.value!r}")

    tracer_provider.shutdown()  # flushes an OTLP exporter, if any
    console.rule("trace")
    _print_trace(console, exporter.get_finished_spans())
    if meter_provider is not None and hold > 0:
        # Inside the demo's scope: the route gauges report the health store while it lives.
        console.print(f"serving metrics for {hold:g}s more (Ctrl-C stops)")
        time.sleep(hold)


def _wait_out_cooldown(failover: Any, route: str) -> None:
    """Sleep until ``route``'s cooldown (which grows after a failed probe) is over."""
    for health in failover.health.snapshot(time.time()):
        if health.route == route and health.degraded_until is not None:
            time.sleep(max(health.degraded_until - time.time(), 0.0) + 0.01)


def _delta(chunk: dict[str, Any]) -> str:
    choices = chunk.get("choices") or [{}]
    return str((choices[0].get("delta") or {}).get("content") or "")


class _Timeline(SpanProcessor):
    """A span processor that prints attempts and decisions as they happen."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.call: Any = None
        self.printed = 0
        self.t0 = time.monotonic()

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        if span.name.startswith("swerve "):
            self.call, self.printed = span, 0
            self.t0 = time.monotonic()
        else:
            self.flush()  # decisions taken before this attempt began

    def on_end(self, span: Any) -> None:
        attrs = span.attributes or {}
        if "swerve.attempt.number" in attrs:
            outcome = attrs.get("swerve.attempt.outcome", "?")
            colour = "green" if outcome == "success" else "red"
            detail = attrs.get("error.type", "")
            self._line(
                f"attempt {attrs['swerve.attempt.number']} on {attrs['swerve.route']}: "
                f"[{colour}]{outcome}[/] {detail}"
            )
        self.flush()

    def flush(self) -> None:
        if self.call is None:
            return
        events = list(self.call.events)
        for event in events[self.printed :]:
            self._line(_describe_event(event.name, dict(event.attributes or {})))
        self.printed = len(events)

    def _line(self, text: str) -> None:
        self.console.print(f"[dim]{time.monotonic() - self.t0:6.2f}s[/]  {text}")


def _describe_event(name: str, a: dict[str, Any]) -> str:
    short = name.removeprefix("swerve.")
    if short == "retry":
        delay = a["swerve.retry.delay_s"]
        return f"[yellow]retry[/] {a['swerve.route']} in {delay:.2f}s ({a['error.type']})"
    if short == "swap":
        move = f"{a['swerve.route.from']} -> {a['swerve.route.to']}"
        return f"[magenta]swap[/] {move} ({a['swerve.reason']})"
    if short == "cooldown":
        return f"[blue]cooldown[/] {a['swerve.route']} for {a['swerve.cooldown.seconds']:.1f}s"
    if short == "route_skipped":
        return f"[blue]skip[/] {a['swerve.route']} (degraded)"
    if short == "swap_declined":
        return f"[red]surface[/] error on {a['swerve.route']} ({a['swerve.reason']})"
    rest = ", ".join(f"{k.removeprefix('swerve.')}={v}" for k, v in a.items())
    return f"{short} {rest}"


def _print_trace(console: Console, spans: Sequence[Any]) -> None:
    from rich.tree import Tree

    children: dict[int | None, list[Any]] = {}
    for span in spans:
        parent = span.parent.span_id if span.parent else None
        children.setdefault(parent, []).append(span)

    def add(tree: Tree, span: Any) -> None:
        ms = (span.end_time - span.start_time) / 1e6
        status = "" if span.status.is_ok else " [red]ERROR[/]"
        route = (span.attributes or {}).get("swerve.route")
        where = f" on {route}" if route else ""
        node = tree.add(f"[bold]{span.name}[/]{where} {ms:.0f} ms{status}")
        # Attempts and decisions in the order they happened.
        items = [(e.timestamp, 1, e) for e in span.events]
        items += [(c.end_time, 0, c) for c in children.get(span.context.span_id, [])]
        for _, is_event, item in sorted(items, key=lambda i: (i[0], i[1])):
            if is_event:
                attrs = dict(item.attributes or {})
                node.add(f"[dim]{_describe_event(item.name, attrs)}[/]")
            else:
                add(node, item)

    root = Tree("spans")
    for span in sorted(children.get(None, []), key=lambda s: s.start_time):
        add(root, span)
    console.print(root)


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
