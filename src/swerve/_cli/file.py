"""The CLI's config file: a FallbackConfig plus an ``upstreams`` section (``swerve health``) and
a ``health`` section (the fleet's shared store, for ``swerve routes``). Secrets are named by
environment variable, never written in the file."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, TypeVar
from urllib.parse import urlsplit

from pydantic import ConfigDict, Field

from .._engine.config import CheckedModel, ConfigError, FallbackConfig
from .._engine.routes import Route
from .._transport.upstream import check_chains
from ..httpx import Upstream

T = TypeVar("T")

__all__ = ["CliFile", "HealthSpec", "UpstreamSpec", "load", "read"]


class UpstreamSpec(CheckedModel):
    """An upstream as written in a config file: the key is named, never written."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    base_url: str
    wire: Literal["openai", "anthropic"] = "openai"
    api_key_env: str | None = None
    model: str | None = None
    headers: dict[str, str] = Field(default_factory=dict)


class HealthSpec(CheckedModel):
    """The fleet's shared store: its Redis URL, written (without a password) or named by an
    environment variable, and its key prefix."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    url: str | None = None
    url_env: str | None = None
    prefix: str | None = None


@dataclass(frozen=True, slots=True)
class CliFile:
    config: FallbackConfig
    upstreams: Mapping[str, UpstreamSpec]
    health: HealthSpec | None
    source: str

    def unset_variables(self, *, upstreams: bool = True, health: bool = True) -> list[str]:
        """Each variable the file names (``api_key_env``, ``health.url_env``) that is unset or
        empty now, as ``where: $VAR is not set``. The one check behind ``swerve config check``,
        ``swerve health`` (the upstreams' keys) and ``swerve routes`` (the health URL)."""
        missing: list[str] = []  # every one at once: fixing them one run at a time is slow
        if upstreams:
            for route, spec in self.upstreams.items():
                if spec.api_key_env and not os.environ.get(spec.api_key_env, "").strip():
                    missing.append(f"upstreams[{route!r}]: ${spec.api_key_env} is not set")
        env = self.health.url_env if health and self.health is not None else None
        if env and not os.environ.get(env, "").strip():
            missing.append(f"health.url_env: ${env} is not set")
        return missing

    def require_variables(self, *, upstreams: bool = True, health: bool = True) -> None:
        """Raise a ConfigError naming every unset variable of :meth:`unset_variables`."""
        missing = self.unset_variables(upstreams=upstreams, health=health)
        if missing:
            raise ConfigError(f"{self.source}: {'; '.join(missing)}")

    def resolve_upstreams(self) -> dict[str, Upstream]:
        """The upstreams, with their keys read from the environment now."""
        self.require_variables(health=False)
        return {
            route: Upstream(
                spec.base_url,
                spec.wire,
                os.environ[spec.api_key_env].strip() if spec.api_key_env else None,
                spec.model,
                spec.headers,
            )
            for route, spec in self.upstreams.items()
        }

    def health_url(self) -> str | None:
        """The shared store's URL (read from ``url_env`` now), or None without a ``health``."""
        if self.health is None:
            return None
        if self.health.url is not None:
            return self.health.url
        assert self.health.url_env is not None  # load() checked that one of them is set
        self.require_variables(upstreams=False)
        return os.environ[self.health.url_env].strip()


def read_or_exit_code(path: Path, then: Callable[[CliFile], T], *, invalid: int = 2) -> T | int:
    """``then(read(path))``, or, printed to stderr why not, the command's exit code: 2 for a
    file that cannot be read, ``invalid`` for one that holds a bad config."""
    try:
        return then(read(path))
    except OSError as exc:
        print(f"error: cannot read {path}: {exc.strerror}", file=sys.stderr)
        return 2
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return invalid


def read(path: Path) -> CliFile:
    """Read and check a config file; OSError if it cannot be read, ConfigError if it is wrong."""
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text (byte {exc.start})") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path}: not valid JSON ({exc.msg} at line {exc.lineno})") from None
    except RecursionError:
        raise ConfigError(f"{path}: not valid JSON (nested too deeply)") from None
    except ValueError as exc:  # an integer of more digits than Python converts
        raise ConfigError(f"{path}: not valid JSON ({exc})") from None
    return load(data, str(path))


def load(data: object, source: str) -> CliFile:
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: expected a JSON object, got {type(data).__name__}")
    data = dict(data)
    raw_upstreams = data.pop("upstreams", {})
    raw_health = data.pop("health", None)
    config = FallbackConfig.from_mapping(data, source=source)
    if not isinstance(raw_upstreams, dict):
        raise ConfigError(f"{source}: upstreams: expected an object of route -> upstream")
    upstreams = {route: _upstream(route, spec, source) for route, spec in raw_upstreams.items()}
    health = None if raw_health is None else _health(raw_health, source)
    if upstreams:  # the same refusal the transport makes when it is built on this file
        try:
            check_chains(config, {route: spec.wire for route, spec in upstreams.items()})
        except ValueError as exc:
            raise ConfigError(f"{source}: upstreams: {exc}") from None
    return CliFile(config, upstreams, health, source)


def _upstream(route: str, spec: object, source: str) -> UpstreamSpec:
    where = f"{source}: upstreams[{route!r}]"
    if isinstance(spec, dict) and "api_key" in spec:
        raise ConfigError(
            f"{where}: api_key does not belong in a file; put the key in an environment "
            "variable and name it in api_key_env"
        )
    try:
        Route.parse(route)
        parsed = UpstreamSpec.parsed(spec, source, at=("upstreams", route))
        for name, value in parsed.headers.items():
            # A CR or LF in a header would split it into forged headers on the wire.
            if not (name.isprintable() and value.isprintable()):
                raise ValueError(f"headers[{name!r}] contains a control character")
        # What the transport will check when it is built, checked now, with the file's name.
        Upstream(parsed.base_url, parsed.wire, None, parsed.model, parsed.headers)
        return parsed
    except ConfigError:
        raise
    except ValueError as exc:
        raise ConfigError(f"{where}: {exc}") from None


def _health(spec: object, source: str) -> HealthSpec:
    where = f"{source}: health"
    parsed = HealthSpec.parsed(spec, source, at=("health",))
    if (parsed.url is None) == (parsed.url_env is None):
        raise ConfigError(f"{where}: give exactly one of url and url_env")
    if parsed.url is not None:
        try:
            parts = urlsplit(parsed.url)
        except ValueError as exc:
            raise ConfigError(f"{where}.url: {exc}") from None
        if parts.password is not None or "password" in parts.query.lower():
            # Never echo the URL: it holds the secret we are refusing to keep.
            raise ConfigError(
                f"{where}.url: a password does not belong in a file; put the whole URL in an "
                "environment variable and name it in url_env"
            )
    return parsed
