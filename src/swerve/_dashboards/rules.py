"""swerve's Prometheus alert rules, from one definition.

:func:`alert_rules` builds the rule file as data; :func:`render` writes it as YAML. Durations
and thresholds come from :class:`Timing`: the shipped ``alerts.yml`` uses :data:`DEFAULT_TIMING`,
and the end-to-end test renders the very same rules with short durations so that it runs in
seconds.

Two groups:

``swerve``
    Generic rules, one alert per route (and ``job``) however many processes report it: a route
    degraded too long, a high swap rate away from a route, a breaker open; and one per shared
    health store that processes cannot reach.

``swerve-chains``
    One rule per chain of a :class:`~swerve.FallbackConfig` (the JSON you give swerve in
    ``$SWERVE_FALLBACK_CONFIG``): it fires when every route a call for the chain's requested
    route could start on is unavailable at once (cooling down, or its breaker open) in the same
    process, which is when swerve has nowhere healthy to send the call and it will fail. swerve
    exports no chain metric, so the chains come from the config, walked exactly as the engine
    walks them (:func:`chain`); regenerate this group whenever the config changes.

Every process of a fleet exports its own series (``instance`` differs). With a shared store
(:class:`~swerve.RedisHealth`) they all report the same state, and with the default in-memory
store a real outage shows up in most of them; either way one degraded route is one alert, not
one per process: each rule first takes the per-process view (``by (job, instance, ...)``), then
counts the processes in it (``count by (job, ...)``), so ``$value`` is how many processes see
the condition. A chain is judged inside each process first, because routes down in different
processes (each with its own in-memory store) do not add up to a dead chain.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Final

import yaml  # comes with the cli extra

from .._engine.config import FallbackConfig
from .._engine.policy import walk
from .._telemetry import names as t
from . import PROMETHEUS_NAMES, label

__all__ = ["DEFAULT_TIMING", "Timing", "alert_rules", "chain", "render", "unavailable"]

DEGRADED: Final = PROMETHEUS_NAMES[t.METRIC_ROUTE_DEGRADED]
BREAKER: Final = PROMETHEUS_NAMES[t.METRIC_BREAKER_STATE]
SWAPS: Final = PROMETHEUS_NAMES[t.METRIC_SWAPS]
STORE_UP: Final = PROMETHEUS_NAMES[t.METRIC_STORE_UP]
STORE: Final = label(t.STORE)
ROUTE: Final = label(t.ROUTE)
ROUTE_FROM: Final = label(t.ROUTE_FROM)
BREAKER_OPEN: Final = t.BREAKER_STATE_VALUES["open"]
DOCS: Final = "https://github.com/swerve-dev/swerve/blob/main/docs/observability.md"

# A process's view is judged per scrape target, then the fleet (one job) gives one alert.
TARGET: Final = "job, instance"
FLEET: Final = "job"


@dataclass(frozen=True)
class Timing:
    """Durations (Prometheus syntax) and thresholds of the rules."""

    degraded_for: str = "5m"
    """SwerveRouteDegraded: how long a route stays unavailable before the alert fires."""
    swap_window: str = "5m"
    """SwerveHighSwapRate: the window the swap rate is measured over."""
    swaps_per_minute: float = 10
    """SwerveHighSwapRate: swaps per minute away from one route that count as high."""
    swap_for: str = "5m"
    chain_for: str = "1m"
    """SwerveChainDegraded: how long every route of a chain is unavailable before it fires."""
    breaker_for: str = "0s"
    """SwerveBreakerOpen: 0s fires on the first evaluation that sees the breaker open (a
    breaker stays open for ``breaker.open_s``, 30 s by default, then probes)."""
    store_for: str = "5m"
    """SwerveHealthNotShared: how long a process decides alone (its shared store, such as
    RedisHealth, unreachable) before the alert fires; brief reconnects stay quiet."""


DEFAULT_TIMING: Final = Timing()


def chain(config: FallbackConfig, requested: str) -> list[str]:
    """Every route a call for ``requested`` may start on, in the order the engine tries them.

    The engine starts a call on the first route of this walk that is neither cooling down nor
    behind an open breaker, and on ``requested`` itself when none is left: then the call fails.
    """
    return list(walk(config, requested, requested))


def unavailable(by: str, selector: str = "") -> str:
    """PromQL for the routes calls walk past, as the engine sees them: cooling down (value 1),
    or behind an open breaker (value 2). ``selector`` is a label selector such as ``{a="b"}``.

    Both gauges count: in a sustained outage a breaker that keeps re-opening holds the route
    out of service while its cooldown has already lapsed (the degraded gauge reads 0).
    """
    return (
        f"max by ({by}) ({DEGRADED}{selector}) == 1\n"
        f"or max by ({by}) ({BREAKER}{selector}) == {BREAKER_OPEN}"
    )


def _processes(expr: str) -> str:
    """PromQL counting, per route and job, the processes in which ``expr`` (a per-process
    selection by ``job, instance, swerve_route``) holds: one series per route for the fleet."""
    return f"count by ({FLEET}, {ROUTE}) (\n  " + expr.replace("\n", "\n  ") + "\n)\n"


def _generic(timing: Timing) -> list[dict[str, Any]]:
    rate = f'rate({SWAPS}[{timing.swap_window}]), "{ROUTE}", "$1", "{ROUTE_FROM}", "(.*)"'
    per_process = f"{TARGET}, {ROUTE}"
    processes = "{{ $value }} process(es) of {{ $labels.job }}"
    return [
        {
            "alert": "SwerveRouteDegraded",
            "expr": _processes(unavailable(per_process)),
            "for": timing.degraded_for,
            "labels": {"severity": "warning"},
            "annotations": {
                "summary": (
                    f"swerve route {{{{ $labels.{ROUTE} }}}} degraded for more than "
                    f"{timing.degraded_for}"
                ),
                "description": (
                    f"{{{{ $labels.{ROUTE} }}}} has been cooling down or behind an open breaker "
                    f"for more than {timing.degraded_for} (now in {processes}): calls for it "
                    "start on its fallback instead (or fail, when it has none)."
                ),
            },
        },
        {
            "alert": "SwerveHighSwapRate",
            "expr": (
                f"sum by ({FLEET}, {ROUTE}) (\n  label_replace({rate})\n) * 60\n"
                f"> {timing.swaps_per_minute:g}\n"
            ),
            "for": timing.swap_for,
            "labels": {"severity": "warning"},
            "annotations": {
                "summary": f"swerve swaps away from {{{{ $labels.{ROUTE} }}}} at a high rate",
                "description": (
                    f'{{{{ $value | printf "%.1f" }}}} swaps per minute away from '
                    f"{{{{ $labels.{ROUTE} }}}}, all processes of {{{{ $labels.job }}}} together, "
                    f"over the last {timing.swap_window} (threshold "
                    f"{timing.swaps_per_minute:g}): the route keeps failing and its calls pay for "
                    "retries and a second route."
                ),
            },
        },
        {
            "alert": "SwerveBreakerOpen",
            "expr": _processes(f"max by ({per_process}) ({BREAKER}) == {BREAKER_OPEN}"),
            "for": timing.breaker_for,
            "labels": {"severity": "warning"},
            "annotations": {
                "summary": f"swerve circuit breaker open for {{{{ $labels.{ROUTE} }}}}",
                "description": (
                    f"The circuit breaker of {{{{ $labels.{ROUTE} }}}} is open in {processes}: "
                    "too many of its attempts failed, and calls skip it until a half-open probe "
                    "succeeds."
                ),
            },
        },
        {
            "alert": "SwerveHealthNotShared",
            "expr": (
                f"count by ({FLEET}, {STORE}) (\n"
                f"  min by ({TARGET}, {STORE}) ({STORE_UP}) == 0\n)\n"
            ),
            "for": timing.store_for,
            "labels": {"severity": "warning"},
            "annotations": {
                "summary": "swerve processes cannot share route health",
                "description": (
                    f"{processes} have not reached the shared health store "
                    f"{{{{ $labels.{STORE} }}}} for more than {timing.store_for}: they still "
                    "answer every call, but each learns every outage for itself, as if it ran "
                    "alone."
                ),
            },
        },
    ]


def _chain_rule(routes: list[str], timing: Timing) -> dict[str, Any]:
    requested, arrow = routes[0], " -> ".join(routes)
    selectors = ["{" + f"{ROUTE}={json.dumps(route)}" + "}" for route in routes]
    terms = ["(\n  " + unavailable(TARGET, s).replace("\n", "\n  ") + "\n)" for s in selectors]
    listed = ", ".join(routes[:-1]) + (" and " if len(routes) > 1 else "") + routes[-1]
    dead = f"\nand on ({TARGET}) ".join(terms)  # in one process: routes of several do not add up
    return {
        "alert": "SwerveChainDegraded",
        "expr": f"count by ({FLEET}) (\n  " + dead.replace("\n", "\n  ") + "\n)\n",
        "for": timing.chain_for,
        "labels": {"severity": "critical", ROUTE: requested, "swerve_chain": arrow},
        "annotations": {
            "summary": f"every route of the swerve chain for {requested} is degraded",
            "description": (
                f"In {{{{ $value }}}} process(es) of {{{{ $labels.job }}}}, {listed} are all "
                f"cooling down or behind an open breaker: calls for {requested} there have no "
                "healthy route left and will fail until one recovers."
            ),
        },
    }


def alert_rules(config: FallbackConfig, timing: Timing = DEFAULT_TIMING) -> dict[str, Any]:
    """The rule file: generic rules, plus one chain rule per route ``config`` maps."""
    chains = [chain(config, requested) for requested in config.fallbacks] if config.enabled else []
    return {
        "groups": [
            {"name": "swerve", "rules": _generic(timing)},
            {"name": "swerve-chains", "rules": [_chain_rule(c, timing) for c in chains]},
        ]
    }


class _Dumper(yaml.SafeDumper):
    """Block style for multi-line strings (PromQL), so the file reads like a hand-written one."""


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def render(rules: dict[str, Any], source: str) -> str:
    """``rules`` as a YAML rule file, with a header naming what it was generated from."""
    header = (
        f"# swerve alert rules for {source}, generated by `swerve dashboards export`\n"
        "# (`python -m dashboards` in swerve's repository). Regenerate them when the config\n"
        f"# changes; do not edit by hand. See {DOCS}\n"
    )
    body = yaml.dump(rules, Dumper=_Dumper, sort_keys=False, width=100, allow_unicode=True)
    return header + body
