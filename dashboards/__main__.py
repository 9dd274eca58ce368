"""``python -m dashboards``: regenerate swerve.json and alerts.yml (or rules for your config).

Without arguments, writes ``src/swerve/_dashboards/swerve.json`` (the dashboard the wheel ships)
and ``dashboards/alerts.yml`` (chain rules for ``dashboards/fallbacks.json``, the demo's chain).
``--config FILE`` prints the rules for your own fallback config instead (the same JSON as
``$SWERVE_FALLBACK_CONFIG``); ``swerve dashboards export`` does the same from an installed
swerve.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from swerve import ConfigError, FallbackConfig
from swerve import _dashboards as shipped
from swerve._dashboards import rules

from . import HERE, grafana

DASHBOARD = Path(shipped.__file__).parent / shipped.DASHBOARD_FILE
ALERTS = HERE / "alerts.yml"
EXAMPLE_CONFIG = HERE / "fallbacks.json"


def shipped_rules() -> str:
    """The text of the committed alerts.yml."""
    config = FallbackConfig.from_json(EXAMPLE_CONFIG.read_text(), source=str(EXAMPLE_CONFIG))
    return rules.render(rules.alert_rules(config), "dashboards/fallbacks.json")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dashboards", description=__doc__)
    parser.add_argument(
        "--config", type=Path, help="print alert rules for this fallback config (JSON) instead"
    )
    args = parser.parse_args(argv)
    if args.config is not None:
        try:
            config = FallbackConfig.from_json(args.config.read_text(), source=str(args.config))
        except (OSError, ConfigError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        sys.stdout.write(rules.render(rules.alert_rules(config), args.config.name))
        return 0
    DASHBOARD.write_text(grafana.render())
    ALERTS.write_text(shipped_rules())
    print(f"wrote {DASHBOARD} and {ALERTS}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
