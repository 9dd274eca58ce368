"""swerve's Prometheus alert rules, from one definition.

:func:`alert_rules` builds the rule file as data; :func:`render` writes it as YAML. Durations
and thresholds come from :class:`Timing`: the shipped ``alerts.yml`` uses :data:`DEFAULT_TIMING`,
and the end-to-end test renders the very same rules with short durations so that it runs in
seconds.

Two groups:

``swerve``
    Generic rules, one alert per route (and ``job``) however many processes report it: a route
    out of service that calls are being moved away from (SwerveRouteDegraded, the page for one
    route down); and one per shared health store that processes cannot reach.

``swerve-chains``
    One rule per chain of a :class:`~swerve.FallbackConfig` (the JSON you give swerve in
    ``$SWERVE_FALLBACK_CONFIG``): it fires when every route a call for the chain's requested
    route could start on is unavailable at once (cooling down, or its breaker open) in the same
    process, which is when swerve has nowhere healthy to send the call and it will fail. swerve
    exports no chain metric, so the chains come from the config, walked exactly as the engine
    walks them (:func:`chain`); regenerate the rules whenever the config changes.

Every process of a fleet exports its own series (``instance`` differs). With a shared store
(:class:`~swerve.RedisHealth`) they all report the same state, and with the default in-memory
store a real outage shows up in most of them; either way one degraded route is one alert, not
one per process: each rule first takes the per-process view (``by (job, instance, ...)``), then
counts the processes in it (``count by (job, ...)``), so ``$value`` is how many processes see
the condition. A chain is judged inside each process first, because routes down in different
processes (each with its own in-memory store) do not add up to a dead chain.

Timing (docs/observability.md, "Alerts", has the budget): every page needs its condition on two
evaluations in a row (``for`` of one evaluation interval), which a blip of one cooldown shorter
than the interval cannot give; pages use gauges, which say "now", so nothing outlives the
outage; a counter is read only to ask whether calls still move away from a route, and only
together with a gauge.
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

__all__ = [
    "DEFAULT_TIMING",
    "Timing",
    "alert_rules",
    "chain",
    "moved_away",
    "render",
    "unavailable",
]

DEGRADED: Final = PROMETHEUS_NAMES[t.METRIC_ROUTE_DEGRADED]
BREAKER: Final = PROMETHEUS_NAMES[t.METRIC_BREAKER_STATE]
SWAPS: Final = PROMETHEUS_NAMES[t.METRIC_SWAPS]
SKIPS: Final = PROMETHEUS_NAMES[t.METRIC_ROUTE_SKIPS]
STORE_UP: Final = PROMETHEUS_NAMES[t.METRIC_STORE_UP]
STORE: Final = label(t.STORE)
ROUTE: Final = label(t.ROUTE)
ROUTE_FROM: Final = label(t.ROUTE_FROM)
BREAKER_OPEN: Final = t.BREAKER_STATE_VALUES["open"]
DOCS: Final = "https://github.com/swerve-dev/swerve/blob/main/docs/observability.md"
ROUTE_ALERT: Final = "SwerveRouteDegraded"

# A process's view is judged per scrape target, then the fleet (one job) gives one alert.
TARGET: Final = "job, instance"
FLEET: Final = "job"
PER_ROUTE: Final = f"{TARGET}, {ROUTE}"


@dataclass(frozen=True)
class Timing:
    """Durations (Prometheus syntax) of the rules. The defaults fit a 15 s scrape and
    evaluation interval; the end-to-end tests use the same rules with a 1 s one."""

    degraded_for: str = "15s"
    """SwerveRouteDegraded: one evaluation interval, so the route must be out on two
    evaluations in a row. A blip (one 429 cooling the route for less than an interval) is
    seen by one evaluation at most and never pages."""
    moved_window: str = "1m"
    """SwerveRouteDegraded: how recently calls must have moved away from the route (skipped it
    or swapped away from it). Several scrapes long so that a quiet moment between calls does
    not resolve the alert; it never outlasts the outage, since the route must also be out now."""
    chain_for: str = "15s"
    """SwerveChainDegraded: one evaluation interval, as for a route."""
    chain_keep_firing_for: str = "15s"
    """SwerveChainDegraded: one evaluation interval after its chain works again. The route
    rules are another group, evaluated at another moment of the interval: this keeps a route
    alert that fired before its chain died muted until it has seen the recovery too."""
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
    """PromQL for the routes calls walk past, as the engine sees them: cooling down or awaiting
    their recovery probe (degraded 1), or behind an open breaker (breaker state 2).
    ``selector`` is a label selector such as ``{a="b"}``.

    Both gauges count: in a sustained outage a breaker that keeps re-opening holds the route
    out of service while its cooldown has already lapsed (the degraded gauge reads 0).
    """
    return (
        f"max by ({by}) ({DEGRADED}{selector}) == 1\n"
        f"or max by ({by}) ({BREAKER}{selector}) == {BREAKER_OPEN}"
    )


def moved_away(window: str) -> str:
    """PromQL for the routes (per process) that calls moved away from within ``window``:
    skipped (the route cooling or its breaker open, after the first cooldown of an outage) or
    swapped away from (its attempts failed).

    A counter exported only from its first increment has no earlier sample for ``increase``
    to compare with; such a series, new within the window, counts as moved too (the ``unless
    ... offset`` terms). With a zero sample from the start the ``increase`` terms suffice.
    """
    swaps_from = f'"{ROUTE}", "$1", "{ROUTE_FROM}", "(.*)"'
    return (
        f"sum by ({PER_ROUTE}) (increase({SKIPS}[{window}])) > 0\n"
        f"or sum by ({PER_ROUTE}) (\n"
        f"  label_replace(increase({SWAPS}[{window}]), {swaps_from})\n"
        ") > 0\n"
        f"or count by ({PER_ROUTE}) ({SKIPS} unless {SKIPS} offset {window})\n"
        f"or count by ({PER_ROUTE}) (\n"
        f"  label_replace({SWAPS} unless {SWAPS} offset {window}, {swaps_from})\n"
        ")"
    )


def _indent(expr: str) -> str:
    return "  " + expr.replace("\n", "\n  ")


def _processes(expr: str) -> str:
    """PromQL counting, per route and job, the processes in which ``expr`` (a per-process
    selection by ``job, instance, swerve_route``) holds: one series per route for the fleet."""
    return f"count by ({FLEET}, {ROUTE}) (\n" + _indent(expr) + "\n)\n"


def _dead(routes: list[str]) -> str:
    """PromQL for the processes (``job, instance``) in which every route of ``routes`` is
    unavailable at once."""
    selectors = ["{" + f"{ROUTE}={json.dumps(route)}" + "}" for route in routes]
    terms = ["(\n" + _indent(unavailable(TARGET, s)) + "\n)" for s in selectors]
    return f"\nand on ({TARGET}) ".join(terms)  # in one process: routes of several do not add up


def _route_rule(chains: list[list[str]], timing: Timing) -> dict[str, Any]:
    out = "(\n" + _indent(unavailable(PER_ROUTE)) + "\n)"
    moved = "(\n" + _indent(moved_away(timing.moved_window)) + "\n)"
    expr = f"{out}\nand on ({PER_ROUTE}) {moved}"
    if chains:
        # A dead chain is the chain alert's: its requested route's own alert does not start
        # then (so it cannot page before the chain alert, whatever the evaluation order). One
        # already firing stays firing, muted by Alertmanager, so it does not resolve while the
        # outage has only grown.
        # Nor within moved_window after it: the moves the dead chain made (swaps away from
        # its fallback) are no evidence once it works again, and a fallback nobody calls stays
        # awaiting its probe.
        window = timing.moved_window
        # The instant term too: a subquery's last step is aligned to the interval, up to one
        # evaluation old, and the chain must count from the evaluation that first sees it.
        dead = "\nor ".join(
            f"label_replace(\n{_indent(_dead(c))}\n"
            f"  or max_over_time((\n{_indent(_indent(_dead(c)))}\n  )[{window}:])\n"
            f', "{ROUTE}", {json.dumps(c[0])}, "", "")'
            for c in chains
        )
        firing = f'ALERTS{{alertname="{ROUTE_ALERT}", alertstate="firing"}}'
        expr = (
            f"(\n{_indent(expr)}\n)\nunless on ({PER_ROUTE}) (\n"
            + _indent(f"(\n{_indent(dead)}\n)\nunless on ({FLEET}, {ROUTE}) {firing}")
            + "\n)"
        )
    processes = "{{ $value }} process(es) of {{ $labels.job }}"
    return {
        "alert": ROUTE_ALERT,
        "expr": _processes(expr),
        "for": timing.degraded_for,
        "labels": {"severity": "warning"},
        "annotations": {
            "summary": f"swerve route {{{{ $labels.{ROUTE} }}}} is down: calls move away from it",
            "description": (
                f"{{{{ $labels.{ROUTE} }}}} is cooling down, awaiting its recovery probe or "
                f"behind an open breaker in {processes}, and calls there moved away from it "
                f"(skipped it or swapped away) within {timing.moved_window}: they are served by "
                "its fallback, after a retry and a swap for the first ones."
            ),
        },
    }


def _store_rule(timing: Timing) -> dict[str, Any]:
    processes = "{{ $value }} process(es) of {{ $labels.job }}"
    return {
        "alert": "SwerveHealthNotShared",
        "expr": (
            f"count by ({FLEET}, {STORE}) (\n  min by ({TARGET}, {STORE}) ({STORE_UP}) == 0\n)\n"
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
    }


def _chain_rule(routes: list[str], timing: Timing) -> dict[str, Any]:
    requested, arrow = routes[0], " -> ".join(routes)
    listed = ", ".join(routes[:-1]) + (" and " if len(routes) > 1 else "") + routes[-1]
    return {
        "alert": "SwerveChainDegraded",
        "expr": f"count by ({FLEET}) (\n" + _indent(_dead(routes)) + "\n)\n",
        "for": timing.chain_for,
        "keep_firing_for": timing.chain_keep_firing_for,
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
    """The rule file: the route and store rules, plus one chain rule per route ``config``
    maps (the route rule knows the chains too: it leaves a dead chain to the chain rule)."""
    chains = [chain(config, requested) for requested in config.fallbacks] if config.enabled else []
    return {
        "groups": [
            {"name": "swerve", "rules": [_route_rule(chains, timing), _store_rule(timing)]},
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
