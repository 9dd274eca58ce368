"""``swerve demo``: a scripted outage against the built-in fake provider, printed live."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from opentelemetry.sdk.trace import SpanProcessor

from .._engine.config import FallbackConfig
from .._telemetry import names as n

if TYPE_CHECKING:
    from opentelemetry.sdk.metrics import MeterProvider
    from rich.console import Console

__all__ = ["demo"]


PRIMARY = "openrouter/anthropic/claude-sonnet-5"
FALLBACK = "anthropic/claude-sonnet-5"
_PIPED_WIDTH = 10_000  # no line of the demo comes near it
_PIPED_RULE_WIDTH = 80


def demo(*, fast: bool, metrics_port: int | None = None, hold: float = 0.0) -> int:
    try:
        from rich.console import Console
    except ImportError:
        print(
            "swerve demo needs rich: install swerve's cli extra (README: Use it in your project)",
            file=sys.stderr,
        )
        return 2
    console = Console(highlight=False)
    if not console.is_terminal:
        # Piped output (CI logs) has no screen edge: a line broken mid-route reads as two.
        console = Console(highlight=False, soft_wrap=True, width=_PIPED_WIDTH)
    try:
        with _logs_in(console), _metrics_server(console, metrics_port) as meter_provider:
            _run_demo(console, fast=fast, meter_provider=meter_provider, hold=hold)
    except _MissingExporter:
        print(
            "swerve demo --metrics-port needs opentelemetry-exporter-prometheus: "
            "install swerve's cli extra (README: Use it in your project)",
            file=sys.stderr,
        )
        return 2
    except KeyboardInterrupt:
        return 130
    return 0


class _MissingExporter(Exception):
    pass


class _ConsoleLog(logging.Handler):
    """swerve's log lines (the ``[model-fallback]`` line operators grep for) shown in the demo's
    own output, in order with the rest, instead of on stderr by Python's last-resort handler."""

    def __init__(self, console: Console) -> None:
        super().__init__(logging.INFO)
        self.console = console

    def emit(self, record: logging.LogRecord) -> None:
        self.console.print(
            f"  log  {record.levelname} {record.getMessage()}", style="dim", markup=False
        )


@contextlib.contextmanager
def _logs_in(console: Console) -> Iterator[None]:
    log = logging.getLogger("swerve")
    handler, level, propagate = _ConsoleLog(console), log.level, log.propagate
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    log.propagate = False
    try:
        yield
    finally:
        log.removeHandler(handler)
        log.setLevel(level)
        log.propagate = propagate


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

    from .._engine.clock import SystemClock
    from .._engine.failover import Failover
    from .._engine.results import Attempt, StreamSpec
    from .._failures import InStreamError
    from .._health.store import MemoryHealth
    from .._telemetry.telemetry import Telemetry
    from ..testing import FakeProvider, Fault, Reply

    scale = 0.1 if fast else 1.0
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    # The status line of every attempt's response, as the client read it off the wire.
    heads: dict[tuple[str, int], str] = {}
    live = _Timeline(console, heads)
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

    class FlushingClock(SystemClock):
        def sleep(self, seconds: float) -> None:
            live.flush()  # show the retry decision before waiting it out
            time.sleep(seconds)

    # The fake's messages hold no secrets: recorded, they let the spans tell the whole story.
    telemetry = Telemetry(tracer_provider, meter_provider, record_messages=True)
    failover = Failover(config, MemoryHealth(), telemetry=telemetry, clock=FlushingClock())

    with FakeProvider() as fake, httpx.Client() as client:
        fake.set_reply("openrouter", Reply(text="Hello from Claude via OpenRouter."))
        fake.set_reply("anthropic", Reply(text="Hello from Claude, direct."))

        def post(attempt: Attempt, response: httpx.Response) -> None:
            heads[str(attempt.route), attempt.number] = (
                f"{response.status_code} {response.reason_phrase}"
            )
            response.raise_for_status()

        def url(attempt: Attempt) -> str:
            return f"{fake.url(attempt.route.provider)}/v1/chat/completions"

        def complete(attempt: Attempt) -> str:
            body = {"model": attempt.route.model, "messages": [{"role": "user", "content": "hi"}]}
            response = client.post(url(attempt), json=body, timeout=attempt.timeout_or(30.0))
            post(attempt, response)
            return str(response.json()["choices"][0]["message"]["content"])

        def chunks(attempt: Attempt) -> Iterator[_Chunk]:
            """Each chunk comes tagged with the route whose response it was read from."""
            body = {
                "model": attempt.route.model,
                "messages": [{"role": "user", "content": "hi"}],
                "stream": True,
            }
            route = str(attempt.route)
            with client.stream("POST", url(attempt), json=body) as response:
                post(attempt, response)
                for line in response.iter_lines():
                    if not line.startswith("data:"):
                        continue
                    data = line[5:].strip()
                    if data == "[DONE]":
                        yield route, {"done": True}
                        continue
                    chunk = json.loads(data)
                    if "error" in chunk:
                        raise InStreamError(chunk, route=route)
                    yield route, chunk

        spec: StreamSpec[_Chunk] = StreamSpec(
            part=lambda c: "text" if _delta(c[1]) else None, is_finish=lambda c: "done" in c[1]
        )

        _rule(console, "[bold]swerve demo[/]: a scripted outage on a fake provider (no network)")
        console.print(f"chain: {PRIMARY} <-> {FALLBACK}; {config.max_retries} retries per route")

        _rule(console, "1. the primary returns 503s")
        fake.set_fault("openrouter", Fault.status(503))
        result = failover.call(PRIMARY, complete)
        live.flush()
        console.print(f"[green]answer[/] from [bold]{result.route}[/]: {result.value!r}")

        _rule(console, "2. the next call starts on the healthy route")
        result = failover.call(PRIMARY, complete)
        live.flush()
        console.print(
            f"[green]answer[/] from [bold]{result.route}[/] after {len(result.attempts)} attempt, "
            f"{fake.requests('openrouter')} requests to the primary so far"
        )

        _rule(console, "3. cooldown over: one probe; the primary streams an error inside a 200")
        _wait_out_cooldown(failover, PRIMARY)
        fake.set_fault("openrouter", Fault.error_before_content("openrouter", 503))
        fake.set_fault("anthropic", Fault.ok())
        stream = failover.stream(PRIMARY, chunks, spec)
        read = list(stream)  # what the client's own loop sees
        live.flush()
        tagged = [c for c in read if isinstance(c, tuple)]
        text = "".join(_delta(chunk) for _, chunk in tagged)
        console.print(f"[green]streamed[/] from [bold]{stream.route}[/]: {text!r}")
        console.print(_client_view(tagged, resets=len(read) - len(tagged)))

        _rule(console, "4. recovery: the next probe succeeds and traffic returns")
        _wait_out_cooldown(failover, PRIMARY)
        fake.set_fault("openrouter", Fault.ok())
        result = failover.call(PRIMARY, complete)
        live.flush()
        console.print(f"[green]answer[/] from [bold]{result.route}[/]: {result.value!r}")

    tracer_provider.shutdown()  # flushes an OTLP exporter, if any
    _rule(console, "trace")
    _print_trace(console, exporter.get_finished_spans())
    if meter_provider is not None and hold > 0:
        # Inside the demo's scope: the route gauges report the health store while it lives.
        console.print(f"serving metrics for {hold:g}s more (Ctrl-C stops)")
        time.sleep(hold)


_Chunk = tuple[str, dict[str, Any]]  # (the route it was read from, the parsed SSE chunk)


def _rule(console: Console, title: str) -> None:
    """A section heading: the terminal's width, or 80 columns when piped (never unbounded)."""
    from rich.rule import Rule

    console.print(Rule(title), width=None if console.is_terminal else _PIPED_RULE_WIDTH)


def _client_view(tagged: Sequence[_Chunk], resets: int) -> str:
    """What the client's stream held: the routes its chunks came from, and any reset."""
    routes = sorted({route for route, _ in tagged})
    whence = ", ".join(routes)
    if resets or len(routes) != 1:
        seen = f"{len(tagged)} chunks from {whence}, {resets} stream resets"
        return f"[red]the client saw the switch[/]: {seen}"
    return (
        f"[green]the client never saw the error[/]: its stream raised nothing, "
        f"and all {len(tagged)} chunks it read came from [bold]{whence}[/]"
    )


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

    def __init__(self, console: Console, heads: dict[tuple[str, int], str]) -> None:
        self.console = console
        self.heads = heads
        self.call: Any = None
        self.printed = 0
        self.t0 = time.monotonic()

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        if n.ROUTE_REQUESTED in (span.attributes or {}):  # a call (its span starts with it)
            self.call, self.printed = span, 0
            self.t0 = time.monotonic()
        else:
            self.flush()  # decisions taken before this attempt began

    def on_end(self, span: Any) -> None:
        attrs = span.attributes or {}
        if n.ATTEMPT_NUMBER in attrs:
            self._line(_attempt_label(attrs))
            if attrs.get(n.FAILURE_IN_STREAM):
                head = self.heads.get((attrs[n.ROUTE], attrs[n.ATTEMPT_NUMBER]), "?")
                self._line(f"    {_in_stream_story(attrs, head)}")
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


def _attempt_label(a: Mapping[str, Any]) -> str:
    """An attempt, route first: the route is what failed or served, not the model it names."""
    probe = " probe" if a.get(n.ATTEMPT_PROBE) else ""
    label = f"attempt {a[n.ATTEMPT_NUMBER]}{probe}  [bold]{a[n.ROUTE]}[/]  "
    if a.get(n.ATTEMPT_OUTCOME) == "success":
        return label + "[green]ok[/]"
    status = a.get(n.HTTP_RESPONSE_STATUS_CODE, a.get(n.ERROR_TYPE, ""))
    kind = a.get(n.FAILURE_KIND, "")
    what = f"{status} {kind}" if kind and kind != status else f"{status}"
    where = " (in stream)" if a.get(n.FAILURE_IN_STREAM) else ""
    return label + f"[red]ERROR {what}{where}[/]"


def _in_stream_story(a: Mapping[str, Any], head: str) -> str:
    """How an error inside a stream arrived: after a successful status line, as an event."""
    from rich.markup import escape

    error = " ".join(str(a[k]) for k in (n.HTTP_RESPONSE_STATUS_CODE, n.FAILURE_MESSAGE) if k in a)
    story = f"the response was HTTP {head}, then an error event arrived in the stream: {error}"
    return escape(story)  # the provider's message is not markup


def _describe_event(name: str, a: dict[str, Any]) -> str:
    short = name.removeprefix("swerve.")
    if short == "retry":
        return f"[yellow]retry[/] {a[n.ROUTE]} in {a[n.RETRY_DELAY]:.2f}s ({a[n.ERROR_TYPE]})"
    if short == "swap":
        return f"[magenta]swap[/] {a[n.ROUTE_FROM]} -> {a[n.ROUTE_TO]} ({a[n.REASON]})"
    if short == "cooldown":
        return f"[blue]cooldown[/] {a[n.ROUTE]} for {a[n.COOLDOWN_SECONDS]:.1f}s"
    if short == "route_skipped":
        return f"[blue]skip[/] {a[n.ROUTE]} (degraded)"
    if short == "swap_declined":
        return f"[red]surface[/] error on {a[n.ROUTE]} ({a[n.REASON]})"
    if short == "probe":
        verdict = "succeeded" if a.get(n.PROBE_OUTCOME) == "success" else "failed"
        return f"[blue]probe[/] {a[n.ROUTE]} {verdict}"
    rest = ", ".join(f"{k.removeprefix('swerve.')}={v}" for k, v in a.items())
    return f"{short} {rest}"


def _print_trace(console: Console, spans: Sequence[Any]) -> None:
    from rich.tree import Tree

    children: dict[int | None, list[Any]] = {}
    for span in spans:
        parent = span.parent.span_id if span.parent else None
        children.setdefault(parent, []).append(span)

    def add(tree: Tree, span: Any) -> None:
        node = tree.add(_span_label(span))
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


def _span_label(span: Any) -> str:
    """A call: its span name (the model asked for) and where it was served. An attempt:
    route and outcome (its span's name says the route again), its duration dimmer."""
    ms = f"{(span.end_time - span.start_time) / 1e6:.0f} ms"
    attrs = span.attributes or {}
    if n.ATTEMPT_NUMBER in attrs:
        return f"{_attempt_label(attrs)}  [dim]{ms}[/]"
    status = "" if span.status.is_ok else " [red]ERROR[/]"
    served = attrs.get(n.ROUTE_SERVED)
    where = f"  served by [bold]{served}[/]" if served else ""
    return f"[bold]{span.name}[/] {ms}{status}{where}"
