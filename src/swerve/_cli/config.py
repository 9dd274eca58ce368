"""``swerve config check``: validate a config and print what it does on failure."""

from __future__ import annotations

import difflib
import os
import sys
from pathlib import Path

from .._engine.config import DEFAULT_ENV_VAR, ConfigError, FallbackConfig
from .._engine.policy import walk
from .._failures import FailureKind, status_kind

__all__ = ["check"]


def check(file: Path | None, var: str | None, *, allow_unset: bool = False) -> int:
    if file is None and var is None and not os.environ.get(DEFAULT_ENV_VAR, "").strip():
        # Nothing named, nothing found: "valid" here would pass a deployment whose config
        # never arrived. Say what to give instead.
        if not allow_unset:
            print(
                f"error: nothing to check: ${DEFAULT_ENV_VAR} is not set{_empty(DEFAULT_ENV_VAR)}"
                f"{_near_var(DEFAULT_ENV_VAR)}\n"
                "pass a config file (swerve config check swerve.json), name the variable that "
                "holds one (--env VAR), or add --allow-unset if an unset variable is what you "
                "mean (calls then pass straight through)",
                file=sys.stderr,
            )
            return 2
        var = DEFAULT_ENV_VAR
    # A variable named on purpose must hold a config: unset, it is usually a misspelt name,
    # and "valid" would hide that.
    if var is not None and not os.environ.get(var, "").strip() and not allow_unset:
        print(f"error: ${var} is not set{_empty(var)}{_near_var(var)}", file=sys.stderr)
        print("(--allow-unset accepts it: calls then pass straight through)", file=sys.stderr)
        return 2
    try:
        loaded = None
        if file is not None:
            from .file import read

            try:
                loaded = read(file)
            except OSError as exc:
                print(f"error: cannot read {file}: {exc.strerror}", file=sys.stderr)
                return 2
            config: FallbackConfig | None = loaded.config
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
    # The variables the file names are checked as `swerve health` and `swerve routes` check
    # them (one check, shared): a file whose keys are missing here is not a working deployment.
    unset = loaded.unset_variables() if loaded is not None else []
    if unset and not allow_unset:
        print(f"error: {where}: {'; '.join(unset)}", file=sys.stderr)
        print(
            "(set them; or, to check the file alone, where its secrets are not set, add "
            "--allow-unset)",
            file=sys.stderr,
        )
        return 2
    print(f"{where}: valid")
    if unset:
        print(f"not set here (accepted with --allow-unset): {'; '.join(unset)}")
    if not config.enabled:
        print("max_swaps is 0: swerve is off, calls pass straight through.")
    print(
        f"retries per route: {config.max_retries}, swaps per call: {config.max_swaps}, "
        f"statuses: {_statuses(config)}"
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
    cycles = 0
    for route in config.fallbacks:
        line = " -> ".join(_chain(config, route))
        if (cycle := _cycle(config, route)) is not None:
            cycles += 1
            line += f"   (a cycle: {cycle[0]} falls back to {cycle[1]})"
        print(f"  {line}")
    if cycles:
        swaps = f"{config.max_swaps} swap{'s' if config.max_swaps != 1 else ''}"
        print(f"a cycle is valid: a call walks it as shown, one route per swap, until its {swaps}")
        print("(max_swaps) are spent; passing over cooling routes, it goes round a cycle once only")
    if loaded is not None and loaded.upstreams:
        print(f"upstreams: {', '.join(loaded.upstreams)} (probe them with `swerve health`)")
    if loaded is not None and loaded.health is not None:
        spec = loaded.health
        url = spec.url if spec.url is not None else f"${spec.url_env}"
        print(f"shared health: {url}, prefix {spec.prefix or 'swerve'!r} (see `swerve routes`)")
    return 0


def _statuses(config: FallbackConfig) -> str:
    if callable(config.fallback_on):  # only from Python: a JSON config holds a status list
        return "decided by a fallback_on function"
    return str(sorted(config.fallback_on))


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
            for status in ([] if callable(config.fallback_on) else sorted(config.fallback_on))
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
    """The order a call for ``requested`` tries routes in when every attempt fails."""
    return list(walk(config, requested, requested, max_swaps=config.max_swaps))


def _cycle(config: FallbackConfig, requested: str) -> tuple[str, str] | None:
    """``(last, back)`` when the chain of ``requested`` comes round again: after ``last``, the
    map leads back to ``back``, a route already on the chain."""
    once = list(walk(config, requested, requested))  # each route once: the cycle guard
    more = list(walk(config, requested, requested, max_swaps=len(once)))  # one step further
    return (once[-1], more[-1]) if len(more) > len(once) else None


def _empty(var: str) -> str:
    return " (it is empty)" if var in os.environ else ""


def _near_var(var: str) -> str:
    """``; did you mean $NAME?`` for the set variable closest to ``var``, if one is close."""
    names = [name for name, value in os.environ.items() if value.strip()]
    match = difflib.get_close_matches(var, names, n=1, cutoff=0.8)
    return f"; did you mean ${match[0]}?" if match else ""
