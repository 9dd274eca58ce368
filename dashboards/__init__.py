"""swerve's Grafana dashboard and Prometheus alert rules, generated from code.

``python -m dashboards`` (from the repository root) writes the Grafana dashboard (built with
grafana-foundation-sdk for Grafana 11.x, a development tool only) to
``src/swerve/_dashboards/swerve.json``, where the wheel ships it, and ``alerts.yml`` (the
Prometheus alert rules for the demo's chain, ``fallbacks.json``) next to this file. The rule
generator and the metric names live in the wheel too (:mod:`swerve._dashboards`), so that
``swerve dashboards export`` works without this repository. ``tests/dashboards/`` checks that
the committed files equal what the code generates, runs the rules' promtool unit tests, and
proves the queries and the degraded-route alert against a real Prometheus scraping a real
swerve process.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

from swerve._dashboards import PROMETHEUS_NAMES, label

__all__ = ["HERE", "PROMETHEUS_NAMES", "label"]

HERE: Final = Path(__file__).parent
