"""The ``swerve`` command: its arguments, and ``main`` handing each command to its module."""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ._cli import config as _cli_config
from ._cli import dashboards as _cli_dashboards
from ._cli import demo as _cli_demo
from ._cli import health as _cli_health
from ._engine.config import DEFAULT_ENV_VAR
from ._engine.failover import HEALTH_PREFIX_VAR, HEALTH_URL_VAR

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="swerve", description="Failover for LLM calls.")
    parser.add_argument(
        "--version", action=_Version, nargs=0, help="print swerve's version (and its adapters')"
    )
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
    check.add_argument(
        "--allow-unset",
        action="store_true",
        help=(
            "an unset or empty config variable is valid (calls pass straight through); with a "
            "file, variables it names (api_key_env, url_env) may be unset"
        ),
    )
    health = sub.add_parser(
        "health", help="probe every route of a config file with a minimal real completion"
    )
    health.add_argument("file", type=Path, help="JSON config with an 'upstreams' section")
    health.add_argument("--timeout", type=float, default=20.0, help="seconds per probe")
    _add_routes(sub)
    _cli_dashboards.add_parser(sub)
    args = parser.parse_args(argv)
    if args.command == "demo":
        return _cli_demo.demo(fast=args.fast, metrics_port=args.metrics_port, hold=args.hold)
    if args.command == "health":
        return _cli_health.health(args.file, args.timeout)
    if args.command == "routes":
        return _cli_health.routes(args)
    if args.command == "dashboards":
        return _cli_dashboards.export(args.directory, args.config)
    return _cli_config.check(args.file, args.env, allow_unset=args.allow_unset)


class _Version(argparse.Action):
    """``swerve --version``: one line per installed distribution (argparse's own action would
    fold them into one)."""

    def __call__(self, parser: argparse.ArgumentParser, *_: Any) -> None:
        from importlib.metadata import PackageNotFoundError, version

        from ._version import __version__

        lines = [f"swerve {__version__}"]
        for adapter in ("swerve-langchain",):
            with contextlib.suppress(PackageNotFoundError):  # not installed: nothing to say
                lines.append(f"{adapter} {version(adapter)}")
        print("\n".join(lines))
        parser.exit()


# --- routes: arguments (checked while parsing) ----------------------------------------------
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
    drain.add_argument(
        "--force",
        action="store_true",
        help="drain even when it leaves a chain of the config with no healthy route",
    )


def _route_arg(value: str) -> str:
    from ._engine.routes import Route

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


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
