"""``swerve dashboards export``: write the shipped Grafana dashboard, the alert rules and the
Alertmanager config for them."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from .._engine.config import FallbackConfig

__all__ = ["add_parser", "export"]

ALERTS_FILE = "alerts.yml"


def add_parser(sub: Any) -> None:
    """Register ``dashboards export`` on the ``swerve`` command's subparsers."""
    dashboards = sub.add_parser(
        "dashboards", help="swerve's Grafana dashboard, Prometheus alert rules, Alertmanager config"
    )
    dashboards_sub = dashboards.add_subparsers(dest="dashboards_command", required=True)
    export = dashboards_sub.add_parser(
        "export",
        help=(
            "write swerve.json (Grafana dashboard), alerts.yml (Prometheus rules) and "
            "alertmanager.yml (Alertmanager config) into DIR"
        ),
    )
    export.add_argument("directory", type=Path, metavar="DIR", help="created if missing")
    export.add_argument(
        "--config",
        type=Path,
        metavar="FILE",
        help="add one alert rule per chain of this JSON config (without it: the generic rules)",
    )


def export(directory: Path, config_file: Path | None) -> int:
    try:
        from .._dashboards import ALERTMANAGER_FILE, DASHBOARD_FILE, alertmanager, dashboard
        from .._dashboards.rules import alert_rules, render
    except ModuleNotFoundError as exc:
        if exc.name != "yaml":
            raise
        print(
            "swerve dashboards export needs pyyaml: "
            "install swerve's cli extra (README: Use it in your project)",
            file=sys.stderr,
        )
        return 2
    if config_file is None:
        config, source = FallbackConfig(), "no config (no chain rules: see --config)"
    else:
        from .file import read_or_exit_code

        # The same file `swerve config check` and `swerve health` read.
        found = read_or_exit_code(config_file, lambda f: f.config, invalid=1)
        if isinstance(found, int):
            return found
        config, source = found, config_file.name
    rules = alert_rules(config)
    written = [directory / DASHBOARD_FILE, directory / ALERTS_FILE, directory / ALERTMANAGER_FILE]
    try:
        directory.mkdir(parents=True, exist_ok=True)
        written[0].write_text(dashboard(), encoding="utf-8")
        written[1].write_text(render(rules, source), encoding="utf-8")
        written[2].write_text(alertmanager(), encoding="utf-8")
    except OSError as exc:
        print(f"error: cannot write into {directory}: {exc.strerror}", file=sys.stderr)
        return 2
    chains = len(rules["groups"][1]["rules"])
    print(f"wrote {written[0]} (the Grafana dashboard)")
    print(f"wrote {written[1]} (Prometheus alert rules: the generic ones, {chains} for chains)")
    print(f"wrote {written[2]} (an Alertmanager config for them: set its webhook url)")
    return 0
