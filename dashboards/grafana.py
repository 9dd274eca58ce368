"""swerve's Grafana dashboard, built with grafana-foundation-sdk (the Grafana 11.x flavour).

Every query reads the Prometheus names of swerve's metrics
(:data:`swerve._dashboards.PROMETHEUS_NAMES`) through the ``$datasource`` variable and filters on
the ``$route`` variable (all routes by default). ``python -m dashboards`` writes the result to
``src/swerve/_dashboards/swerve.json``, which the wheel ships.
"""

from __future__ import annotations

import json
from typing import Any, Final

from grafana_foundation_sdk.builders import common as common_builders
from grafana_foundation_sdk.builders import dashboard as dash
from grafana_foundation_sdk.builders import prometheus, statetimeline, table, timeseries
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import common
from grafana_foundation_sdk.models import dashboard as model
from grafana_foundation_sdk.models.prometheus import PromQueryFormat

from swerve._dashboards import PROMETHEUS_NAMES, label
from swerve._dashboards.rules import unavailable
from swerve._telemetry import names as t

__all__ = ["UID", "build", "render"]

UID: Final = "swerve-failover"
DATASOURCE: Final = model.DataSourceRef(type_val="prometheus", uid="${datasource}")
RATE: Final = "$__rate_interval"

DEGRADED: Final = PROMETHEUS_NAMES[t.METRIC_ROUTE_DEGRADED]
BREAKER: Final = PROMETHEUS_NAMES[t.METRIC_BREAKER_STATE]
SWAPS: Final = PROMETHEUS_NAMES[t.METRIC_SWAPS]
RETRIES: Final = PROMETHEUS_NAMES[t.METRIC_RETRIES]
ATTEMPTS: Final = PROMETHEUS_NAMES[t.METRIC_ATTEMPTS]
ADDED_LATENCY: Final = PROMETHEUS_NAMES[t.METRIC_ADDED_LATENCY]
FIRST_CHUNK: Final = PROMETHEUS_NAMES[t.METRIC_TIME_TO_FIRST_CHUNK]
STORE_UP: Final = PROMETHEUS_NAMES[t.METRIC_STORE_UP]
SKIPS: Final = PROMETHEUS_NAMES[t.METRIC_ROUTE_SKIPS]
COOLDOWNS: Final = PROMETHEUS_NAMES[t.METRIC_COOLDOWNS]
PROBES: Final = PROMETHEUS_NAMES[t.METRIC_PROBES]
DECLINED: Final = PROMETHEUS_NAMES[t.METRIC_SWAPS_DECLINED]
WASTED_TOKENS: Final = PROMETHEUS_NAMES[t.METRIC_FAILOVER_TOKENS]
TOKENS: Final = PROMETHEUS_NAMES[t.METRIC_TOKENS]
COST: Final = PROMETHEUS_NAMES[t.METRIC_COST]
CALL_DURATION: Final = PROMETHEUS_NAMES[t.METRIC_CALL_DURATION]
ATTEMPT_DURATION: Final = PROMETHEUS_NAMES[t.METRIC_ATTEMPT_DURATION]
HEDGES: Final = PROMETHEUS_NAMES[t.METRIC_HEDGES]
HEDGE_WINS: Final = PROMETHEUS_NAMES[t.METRIC_HEDGE_WINS]
LEARNED_LIMITS: Final = PROMETHEUS_NAMES[t.METRIC_LEARNED_LIMITS]
LEARNED: Final = PROMETHEUS_NAMES[t.METRIC_LEARNED_FIRST_CHUNK]

ROUTE: Final = label(t.ROUTE)
REQUESTED: Final = label(t.ROUTE_REQUESTED)
FROM: Final = label(t.ROUTE_FROM)
TO: Final = label(t.ROUTE_TO)
REASON: Final = label(t.REASON)
OUTCOME: Final = label(t.ATTEMPT_OUTCOME)
ERROR_TYPE: Final = label(t.ERROR_TYPE)
STORE: Final = label(t.STORE)
PROBE_OUTCOME: Final = label(t.PROBE_OUTCOME)
TOKEN_TYPE: Final = label(t.GEN_AI_TOKEN_TYPE)
WINNER: Final = label(t.HEDGE_WINNER)
QUANTILE: Final = label(t.QUANTILE)


def _processes(up: int) -> str:
    """Processes whose shared store is (``up=1``) or is not (``0``) sharing, by store; 0 when
    no process has a shared store at all (``or on() vector(0)`` adds it only then), so a
    fleet on in-memory stores shows a flat 0 rather than no data."""
    return f"count by ({STORE}) ({STORE_UP} == {up}) or on() vector(0)"


def _on(label_name: str) -> str:
    """A selector that keeps the routes chosen in the ``$route`` variable."""
    return "{" + f'{label_name}=~"$route"' + "}"


def _or_zero(expr: str, label_name: str) -> str:
    """``expr``, or a single 0 (its ``label_name`` reading ``none``) when it has no series: for
    decisions a healthy fleet, or a plain outage, never makes, so the panel reads 0, not
    "No data". ``on()`` adds the 0 only when ``expr`` is empty."""
    return f'{expr} or on() label_replace(vector(0), "{label_name}", "none", "", "")'


def _error_rate() -> str:
    """Failed calls / all calls, by requested route, from the call duration histogram's count
    (a failed call carries error.type). A route with calls and no failure reads 0: the
    numerator falls back to the calls times 0, since a sum over no failed series is empty."""
    calls = f"{CALL_DURATION}_count"
    every = f"sum by ({REQUESTED}) (rate({calls}{_on(REQUESTED)}[{RATE}]))"
    failed_selector = "{" + f'{REQUESTED}=~"$route", {ERROR_TYPE}!=""' + "}"
    failed = f"sum by ({REQUESTED}) (rate({calls}{failed_selector}[{RATE}]))"
    return f"(\n  {failed}\n  or {every} * 0\n)\n/ {every}"


def _alerts() -> str:
    """swerve's alerts per alert and route: 2 firing, 1 pending (firing wins)."""
    selector = "{" + f'alertname=~"Swerve.+", {ROUTE}=~"$route", alertstate="%s"' + "}"
    return (
        f"max by (alertname, {ROUTE}) (\n  ALERTS{selector % 'firing'} * 2\n"
        f"  or ALERTS{selector % 'pending'}\n)"
    )


def _query(expr: str, legend: str, ref: str = "A") -> prometheus.Dataquery:
    return (
        prometheus.Dataquery()
        .expr(expr)
        .legend_format(legend)
        .ref_id(ref)
        .range()
        .datasource(DATASOURCE)
    )


def _per_minute(metric: str, by: list[str], on: str) -> str:
    return f"sum by ({', '.join(by)}) (rate({metric}{_on(on)}[{RATE}])) * 60"


def _quantiles(metric: str, by: str) -> list[prometheus.Dataquery]:
    return [
        _query(
            f"histogram_quantile({q}, sum by (le, {by}) (rate({metric}_bucket{_on(by)}[{RATE}])))",
            f"p{round(q * 100)} {{{{{by}}}}}",
            ref,
        )
        for q, ref in ((0.5, "A"), (0.95, "B"))
    ]


def _legend() -> common_builders.VizLegendOptions:
    return (
        common_builders.VizLegendOptions()
        .display_mode(common.LegendDisplayMode.TABLE)
        .placement(common.LegendPlacement.RIGHT)
        .show_legend(True)
        .calcs(["lastNotNull", "max"])
    )


def _states(*states: tuple[int, str, str]) -> list[model.ValueMapping]:
    options = {
        str(value): model.ValueMappingResult(text=text, color=color, index=i)
        for i, (value, text, color) in enumerate(states)
    }
    return [model.ValueMap(options=options)]


def _health_timeline(
    title: str, description: str, expr: str, legend: str = f"{{{{{ROUTE}}}}}"
) -> statetimeline.Panel:
    return (
        statetimeline.Panel()
        .title(title)
        .description(description)
        .datasource(DATASOURCE)
        .with_target(_query(expr, legend))
        .show_value(common.VisibilityMode.NEVER)
        .merge_values(True)
        .min(0)
        .height(8)
        .span(8)
    )


def _rate_panel(
    title: str, description: str, expr: str, legend: str, *more: prometheus.Dataquery
) -> timeseries.Panel:
    panel = (
        timeseries.Panel()
        .title(title)
        .description(description)
        .datasource(DATASOURCE)
        .with_target(_query(expr, legend))
        .unit("short")
        .min(0)
        .legend(_legend())
        .height(8)
        .span(12)
    )
    for query in more:
        panel = panel.with_target(query)
    return panel


def _latency_panel(title: str, description: str, queries: list[prometheus.Dataquery]) -> Any:
    panel = (
        timeseries.Panel()
        .title(title)
        .description(description)
        .datasource(DATASOURCE)
        .unit("s")
        .min(0)
        .legend(_legend())
        .height(8)
        .span(12)
    )
    for query in queries:
        panel = panel.with_target(query)
    return panel


def build() -> dash.Dashboard:
    """The dashboard, as an SDK builder (``.build()`` gives the model)."""
    route_variable = (
        dash.QueryVariable("route")
        .label("Route")
        .description("swerve routes (provider/model) that made attempts")
        .datasource(DATASOURCE)
        .query(f"label_values({ATTEMPTS}, {ROUTE})")
        .refresh(model.VariableRefresh.ON_TIME_RANGE_CHANGED)
        .sort(model.VariableSort.ALPHABETICAL_ASC)
        .multi(True)
        .include_all(True)
        .all_value(".*")
        .current(model.VariableOption(text="All", value="$__all"))
    )
    degraded_table = (
        table.Panel()
        .title("Currently degraded routes")
        .description(
            "Routes calls walk past right now, per scrape target: cooling down after a failure "
            "(swerve.route.degraded) or behind an open circuit breaker (swerve.breaker.state). "
            "The same condition as the SwerveRouteDegraded alert."
        )
        .datasource(DATASOURCE)
        .with_target(
            _query(unavailable(f"job, instance, {ROUTE}", _on(ROUTE)), "")
            .instant()
            .format(PromQueryFormat.TABLE)
        )
        .with_transformation(
            model.DataTransformerConfig(
                id_val="organize",
                options={
                    "excludeByName": {"Time": True},
                    "renameByName": {ROUTE: "route", "Value": "state"},
                    "indexByName": {ROUTE: 0, "Value": 1, "instance": 2, "job": 3},
                },
            )
        )
        .mappings(_states((1, "cooling down", "orange"), (2, "breaker open", "red")))
        .no_value("No route is degraded")
        .height(8)
        .span(12)
    )
    store_panel = (
        timeseries.Panel()
        .title("Health store")
        .description(
            "Processes sharing route health through their shared store (Redis), and processes "
            "not sharing it, by store (swerve.store.up). While a store is away its processes "
            "fall back to learning every outage for themselves; the SwerveHealthNotShared alert "
            "fires when that lasts. 0 and 0 when no process uses a shared store."
        )
        .datasource(DATASOURCE)
        .with_target(_query(_processes(1), f"sharing {{{{{STORE}}}}}", "A"))
        .with_target(_query(_processes(0), f"not sharing {{{{{STORE}}}}}", "B"))
        .unit("short")
        .decimals(0)
        .min(0)
        .legend(_legend())
        .height(8)
        .span(12)
    )
    board = (
        dash.Dashboard("swerve: LLM failover")
        .uid(UID)
        .description(
            "Route health, error rate, calls moved away, latency, cooldowns and token waste, "
            "from swerve's OpenTelemetry metrics (Prometheus names). Generated by "
            "dashboards/grafana.py."
        )
        .tags(["swerve", "llm", "failover", "opentelemetry"])
        .editable()
        .tooltip(model.DashboardCursorSync.CROSSHAIR)
        .refresh("30s")
        .time("now-1h", "now")
        .timezone(common.TimeZoneBrowser)
        .with_variable(
            dash.DatasourceVariable("datasource")
            .label("Data source")
            .type("prometheus")
            .description("The Prometheus that scrapes swerve's metrics")
        )
        .with_variable(route_variable)
        # Read top to bottom: is anything down, what do callers see, what does it cost.
        .with_row(dash.Row("Route health"))
        .with_panel(
            _health_timeline(
                "Degraded routes",
                "1 while a route cools down after a failure (swerve.route.degraded): calls walk "
                "past it to the next route of their chain.",
                f"max by ({ROUTE}) ({DEGRADED}{_on(ROUTE)})",
            ).mappings(_states((0, "healthy", "green"), (1, "degraded", "red")))
        )
        .with_panel(
            _health_timeline(
                "Circuit breaker state",
                "Per-route circuit breaker (swerve.breaker.state): closed, half-open (one probe "
                "let through) or open (calls skip the route).",
                f"max by ({ROUTE}) ({BREAKER}{_on(ROUTE)})",
            ).mappings(
                _states((0, "closed", "green"), (1, "half-open", "yellow"), (2, "open", "red"))
            )
        )
        .with_panel(
            _health_timeline(
                "swerve alerts (route and chain)",
                "swerve's alerts as this Prometheus evaluates them (its ALERTS series), by alert "
                "and route: SwerveChainDegraded is a requested route with no healthy route left "
                "in its chain. Empty when no alert is pending or firing, or when this "
                "Prometheus does not load swerve's alerts.yml.",
                _alerts(),
                f"{{{{alertname}}}} {{{{{ROUTE}}}}}",
            ).mappings(_states((1, "pending", "yellow"), (2, "firing", "red")))
        )
        .with_panel(degraded_table)
        .with_panel(store_panel)
        .with_row(dash.Row("Errors and calls moved away"))
        .with_panel(
            timeseries.Panel()
            .title("Error rate by requested route")
            .description(
                "Failed calls / all calls, by the route the caller asked for "
                "(swerve.call.duration's count, failed calls carry error.type): what callers "
                "see after every retry and swap. 0 while failover hides an outage."
            )
            .datasource(DATASOURCE)
            .with_target(_query(_error_rate(), f"{{{{{REQUESTED}}}}}"))
            .unit("percentunit")
            .min(0)
            .max(1)
            .legend(_legend())
            .height(8)
            .span(12)
        )
        .with_panel(
            _rate_panel(
                "Calls moved away per minute (skips + swaps) by route",
                "Calls that did not stay on a route: walked past it while it was degraded "
                "(swerve.route_skips) or swapped away from it after a failure (swerve.swaps, "
                "by the route left). In a one-route outage skips dominate: after the first "
                "cooldown calls skip the route instead of failing on it.",
                _per_minute(SKIPS, [ROUTE], ROUTE),
                f"{{{{{ROUTE}}}}} skipped",
                _query(_per_minute(SWAPS, [FROM], FROM), f"{{{{{FROM}}}}} swapped away", "B"),
            )
        )
        .with_panel(
            _rate_panel(
                "Swaps per minute (from -> to, reason)",
                "Calls moved from one route to another (swerve.swaps), by the route left, the "
                "route taken and the failure kind that caused the swap.",
                _per_minute(SWAPS, [FROM, TO, REASON], FROM),
                f"{{{{{FROM}}}}} -> {{{{{TO}}}}} ({{{{{REASON}}}}})",
            )
        )
        .with_panel(
            _rate_panel(
                "Retries per minute by route and error type",
                "Same-route retries after a failure and a backoff (swerve.retries).",
                _per_minute(RETRIES, [ROUTE, ERROR_TYPE], ROUTE),
                f"{{{{{ROUTE}}}}} {{{{{ERROR_TYPE}}}}}",
            )
        )
        .with_panel(
            _rate_panel(
                "Attempt outcomes per minute by route and error type",
                "Every attempt (swerve.attempts) by route, outcome (success, failure, rejected "
                "by an open breaker, aborted) and error type.",
                _per_minute(ATTEMPTS, [ROUTE, OUTCOME, ERROR_TYPE], ROUTE),
                f"{{{{{ROUTE}}}}} {{{{{OUTCOME}}}}} {{{{{ERROR_TYPE}}}}}",
            ).span(24)
        )
        .with_row(dash.Row("Latency"))
        .with_panel(
            _latency_panel(
                "Call duration by requested route (p50 / p95)",
                "Logical calls as the caller waits for them (swerve.call.duration): every "
                "attempt, backoff and swap included, by requested route.",
                _quantiles(CALL_DURATION, REQUESTED),
            )
        )
        .with_panel(
            _latency_panel(
                "Attempt duration by route (p50 / p95)",
                "One attempt on one route (swerve.attempt.duration), whatever its outcome: a "
                "route failing fast reads low here and shows in the error and skip panels.",
                _quantiles(ATTEMPT_DURATION, ROUTE),
            )
        )
        .with_panel(
            _latency_panel(
                "Added latency from failover (p50 / p95)",
                "Call duration minus the serving attempt's (swerve.call.added_latency): what "
                "retries, waits and failed attempts cost the caller. Recorded only for calls "
                "that took more than one attempt, by requested route.",
                _quantiles(ADDED_LATENCY, REQUESTED),
            )
        )
        .with_panel(
            _latency_panel(
                "Time to first chunk (p50 / p95)",
                "From the start of a streaming attempt to its first content chunk "
                "(swerve.stream.time_to_first_chunk), by route.",
                _quantiles(FIRST_CHUNK, ROUTE),
            )
        )
        .with_row(dash.Row("Tail latency: hedges and learned limits"))
        .with_panel(
            _latency_panel(
                "Learned time to first chunk by route (p50 / p95 / p99)",
                "What swerve learned of each route's time to first chunk on streams "
                "(swerve.route.first_chunk.learned, shared through the health store): what "
                'hedge_after="p95" waits for and the adaptive first-token limit is made of.',
                [
                    _query(
                        f"max by ({ROUTE}, {QUANTILE}) ({LEARNED}{_on(ROUTE)})",
                        f"{{{{{ROUTE}}}}} {{{{{QUANTILE}}}}}",
                    )
                ],
            ).span(8)
        )
        .with_panel(
            _rate_panel(
                "Hedges per minute and their wins",
                "Streams whose first chunk was late and that started the same request on "
                "another route (swerve.hedges, by route hedged from and to), and which side "
                "delivered first (swerve.hedge_wins: hedge or primary, by the winning route). "
                "Hedges stay within learned.hedge_budget of a route's stream calls. 0 (none) "
                "when nothing hedged.",
                _or_zero(_per_minute(HEDGES, [FROM, TO], FROM), FROM),
                f"hedged {{{{{FROM}}}}} -> {{{{{TO}}}}}",
                _query(
                    _or_zero(_per_minute(HEDGE_WINS, [ROUTE, WINNER], ROUTE), ROUTE),
                    f"won by {{{{{ROUTE}}}}} ({{{{{WINNER}}}}})",
                    "B",
                ),
            ).span(8)
        )
        .with_panel(
            _rate_panel(
                "Learned first-token timeouts per minute by route",
                "Stream attempts that waited longer than the limit learned for their route "
                '(first_token_timeout_s="adaptive", swerve.learned_limits) and failed over. '
                "0 (none) when no attempt ran out of its learned limit.",
                _or_zero(_per_minute(LEARNED_LIMITS, [ROUTE], ROUTE), ROUTE),
                f"{{{{{ROUTE}}}}}",
            ).span(8)
        )
        .with_row(dash.Row("Cooldowns, probes and declined swaps"))
        .with_panel(
            _rate_panel(
                "Cooldowns per minute by route",
                "Cooldowns started or extended after a failure (swerve.cooldowns): each takes "
                "the route out of the chain walk until it ends. 0 (none) when no route cooled "
                "down.",
                _or_zero(_per_minute(COOLDOWNS, [ROUTE], ROUTE), ROUTE),
                f"{{{{{ROUTE}}}}}",
            ).span(8)
        )
        .with_panel(
            _rate_panel(
                "Recovery probes per minute by route and outcome",
                "Calls let through to a route whose cooldown ended (swerve.probes): success "
                "(healthy again), failure (cooled down again, for longer) or inconclusive. 0 "
                "(none) when no route was probed.",
                _or_zero(_per_minute(PROBES, [ROUTE, PROBE_OUTCOME], ROUTE), ROUTE),
                f"{{{{{ROUTE}}}}} {{{{{PROBE_OUTCOME}}}}}",
            ).span(8)
        )
        .with_panel(
            _rate_panel(
                "Swaps declined per minute by route and reason",
                "Failures surfaced to the caller instead of swapped (swerve.swaps_declined), by "
                "the route that failed and why: not_qualifying (an error swerve does not act "
                "on), effects (replaying is unsafe), swap_budget, no_fallback, deadline, or "
                "mid_stream (output already reached the consumer). 0 (none) when every "
                "failure swapped.",
                _or_zero(_per_minute(DECLINED, [ROUTE, REASON], ROUTE), ROUTE),
                f"{{{{{ROUTE}}}}} {{{{{REASON}}}}}",
            ).span(8)
        )
        .with_row(dash.Row("Tokens, waste and cost"))
        .with_panel(
            _rate_panel(
                "Tokens used by failed attempts per minute by route and type",
                "Input and output tokens that failed attempts reported (swerve.failover.tokens): "
                "work paid for and thrown away. Only what a provider reported counts: a 5xx or "
                "429 reports none, a stream that broke midway does. 0 (none) when no failed "
                "attempt reported usage.",
                _or_zero(_per_minute(WASTED_TOKENS, [ROUTE, TOKEN_TYPE], ROUTE), ROUTE),
                f"{{{{{ROUTE}}}}} {{{{{TOKEN_TYPE}}}}}",
            ).span(8)
        )
        .with_panel(
            _rate_panel(
                "Tokens per minute by route and what they were spent on",
                "Every token a provider reported (swerve.tokens), by route: success for the "
                "answers calls got, failure for attempts that failed (failover's cost). 0 "
                "(none) when no provider reported usage.",
                _or_zero(_per_minute(TOKENS, [ROUTE, OUTCOME], ROUTE), ROUTE),
                f"{{{{{ROUTE}}}}} {{{{{OUTCOME}}}}}",
            ).span(8)
        )
        .with_panel(
            _rate_panel(
                "Cost per hour by route and what it was spent on",
                "What those tokens cost at the prices given to swerve.Telemetry(prices=...) "
                "(swerve.cost), by route: success for answers, failure for failover's cost. 0 "
                "(none) with no prices, or no usage reported.",
                _or_zero(_per_minute(COST, [ROUTE, OUTCOME], ROUTE) + " * 60", ROUTE),
                f"{{{{{ROUTE}}}}} {{{{{OUTCOME}}}}}",
            ).span(8)
        )
    )
    for number, panel in enumerate(board.build().panels or [], 1):  # stable ids, in grid order
        panel.id_val = number
    return board


def render() -> str:
    """The dashboard JSON, as committed in ``src/swerve/_dashboards/swerve.json``."""
    data: dict[str, Any] = json.loads(JSONEncoder().encode(build().build()))
    return json.dumps(data, indent=2, sort_keys=True) + "\n"
