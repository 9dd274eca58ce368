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
from .failures import FailureKind, status_kind
from .policy import next_route

if TYPE_CHECKING:
    from opentelemetry.sdk.metrics import MeterProvider
    from rich.console import Console

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
    args = parser.parse_args(argv)
    if args.command == "demo":
        return _demo(fast=args.fast, metrics_port=args.metrics_port, hold=args.hold)
    if args.command == "health":
        return _health(args.file, args.timeout)
    return _config_check(args.file, args.env)


# --- health -------------------------------------------------------------------------------------
def _health(file: Path, timeout: float) -> int:
    from ._probe import SKIP_ENV, load_file, probe

    try:
        data = json.loads(file.read_text())
        config, upstreams = load_file(data, str(file))
    except OSError as exc:
        print(f"error: cannot read {file}: {exc.strerror}", file=sys.stderr)
        return 2
    except ValueError as exc:  # ConfigError, or JSON that does not parse
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if not upstreams:
        print(f"error: {file} declares no upstreams", file=sys.stderr)
        return 2
    try:
        from rich.console import Console
        from rich.progress import Progress
        from rich.table import Table
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
        table.add_row(r.route, f"[{colour}]{r.status}[/]", latency, r.error)
    console.print(table)
    if os.environ.get(SKIP_ENV, "") not in ("", "0", "false"):
        console.print(f"[dim]{SKIP_ENV} is set: reachability only, no completions[/]")
    return 1 if any(not r.ok for r in results) else 0


# --- config check -------------------------------------------------------------------------------
def _config_check(file: Path | None, var: str | None) -> int:
    try:
        if file is not None:
            try:
                text = file.read_text()
            except OSError as exc:
                print(f"error: cannot read {file}: {exc.strerror}", file=sys.stderr)
                return 2
            config: FallbackConfig | None = FallbackConfig.from_json(text, source=str(file))
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
        f"statuses: {sorted(config.fallback_on)}"
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
    return 0


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
            for status in sorted(config.fallback_on)
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
    from .failures import InStreamError
    from .health import MemoryHealth
    from .telemetry import Telemetry
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
