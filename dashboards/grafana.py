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

ROUTE: Final = label(t.ROUTE)
REQUESTED: Final = label(t.ROUTE_REQUESTED)
FROM: Final = label(t.ROUTE_FROM)
TO: Final = label(t.ROUTE_TO)
REASON: Final = label(t.REASON)
OUTCOME: Final = label(t.ATTEMPT_OUTCOME)
ERROR_TYPE: Final = label(t.ERROR_TYPE)
STORE: Final = label(t.STORE)


def _processes(up: int) -> str:
    """Processes whose shared store is (``up=1``) or is not (``0``) sharing, by store; 0 when
    no process has a shared store at all (``or on() vector(0)`` adds it only then), so a
    fleet on in-memory stores shows a flat 0 rather than no data."""
    return f"count by ({STORE}) ({STORE_UP} == {up}) or on() vector(0)"


def _on(label_name: str) -> str:
    """A selector that keeps the routes chosen in the ``$route`` variable."""
    return "{" + f'{label_name}=~"$route"' + "}"


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


def _health_timeline(title: str, description: str, expr: str) -> statetimeline.Panel:
    return (
        statetimeline.Panel()
        .title(title)
        .description(description)
        .datasource(DATASOURCE)
        .with_target(_query(expr, f"{{{{{ROUTE}}}}}"))
        .show_value(common.VisibilityMode.NEVER)
        .merge_values(True)
        .min(0)
        .height(8)
        .span(12)
    )


def _rate_panel(title: str, description: str, expr: str, legend: str) -> timeseries.Panel:
    return (
        timeseries.Panel()
        .title(title)
        .description(description)
        .datasource(DATASOURCE)
        .with_target(_query(expr, legend))
        .unit("short")
        .min(0)
        .legend(_legend())
        .height(8)
        .span(24)
    )


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
        .span(24)
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
        .span(24)
    )
    board = (
        dash.Dashboard("swerve: LLM failover")
        .uid(UID)
        .description(
            "Route health, swaps, retries and the latency failover adds, from swerve's "
            "OpenTelemetry metrics (Prometheus names). Generated by dashboards/grafana.py."
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
        .with_panel(degraded_table)
        .with_panel(store_panel)
        .with_row(dash.Row("Failover decisions"))
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
            ).span(12)
        )
        .with_panel(
            _rate_panel(
                "Attempt outcomes per minute by route and error type",
                "Every attempt (swerve.attempts) by route, outcome (success, failure, rejected "
                "by an open breaker, aborted) and error type.",
                _per_minute(ATTEMPTS, [ROUTE, OUTCOME, ERROR_TYPE], ROUTE),
                f"{{{{{ROUTE}}}}} {{{{{OUTCOME}}}}} {{{{{ERROR_TYPE}}}}}",
            ).span(12)
        )
        .with_row(dash.Row("Latency"))
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
    )
    for number, panel in enumerate(board.build().panels or [], 1):  # stable ids, in grid order
        panel.id_val = number
    return board


def render() -> str:
    """The dashboard JSON, as committed in ``dashboards/swerve.json``."""
    data: dict[str, Any] = json.loads(JSONEncoder().encode(build().build()))
    return json.dumps(data, indent=2, sort_keys=True) + "\n"
