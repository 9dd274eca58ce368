"""Configuration: :class:`FallbackConfig` (pydantic) and the env-var source that re-reads it."""

from __future__ import annotations

import json
import logging
import math
import os
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any, Literal, Self, TypeVar

from pydantic import (
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    SerializationInfo,
    SerializerFunctionWrapHandler,
    ValidationError,
    ValidationInfo,
    ValidatorFunctionWrapHandler,
    WrapValidator,
    field_serializer,
    field_validator,
    model_serializer,
    model_validator,
)

from .._failures import FailureKind, FailurePredicate
from .config_errors import Loc, describe
from .routes import MAX_ROUTE_CHARS, Route, shown_route

__all__ = [
    "DEFAULT_ACTIONS",
    "DEFAULT_ENV_VAR",
    "Action",
    "BreakerConfig",
    "CheckedModel",
    "ConfigError",
    "EnvConfig",
    "FallbackConfig",
    "LearnedConfig",
]

DEFAULT_ENV_VAR = "SWERVE_FALLBACK_CONFIG"
DEFAULT_FALLBACK_ON = frozenset({408, 409, 429, 500, 502, 503, 504, 529})

Action = Literal["retry", "swap", "surface"]
"""What a failure of a kind does: ``retry`` the route (then swap once the retries are spent),
``swap`` at once, or ``surface`` the error."""

# What each failure means, by default. A hang is rarely for one request only, so a timeout
# swaps at once; a server that says when to come back (Retry-After) is retried; a property of
# the prompt or the account surfaces, because another route would fail the same way.
DEFAULT_ACTIONS: dict[FailureKind, Action] = {
    FailureKind.TIMEOUT: "swap",
    FailureKind.RATE_LIMITED: "retry",
    FailureKind.OVERLOADED: "retry",
    FailureKind.SERVER_ERROR: "retry",
    FailureKind.UNAVAILABLE: "retry",
    FailureKind.TRANSPORT: "retry",
    FailureKind.INCOMPLETE: "retry",
    FailureKind.BREAKER_OPEN: "swap",
    FailureKind.CONTEXT_OVERFLOW: "surface",
    FailureKind.CONTENT_FILTER: "surface",
    FailureKind.INVALID_REQUEST: "surface",
    FailureKind.AUTH: "surface",
    FailureKind.QUOTA: "surface",
    FailureKind.UNKNOWN: "surface",
}
# One attempt's allowance in the default bound of a call when attempt_timeout_s is unset:
# the default request timeout of the openai and anthropic SDKs.
DEFAULT_ATTEMPT_ALLOWANCE_S = 600.0
# The longest the default cooldown grows to, unless cooldown_s is already longer.
DEFAULT_COOLDOWN_MAX_S = 30.0

FallbackMap = dict[str, str | list[str]]
_T = TypeVar("_T")

_log = logging.getLogger("swerve")

# Counts are bounded: budgets beyond these are a typo, and an unbounded integer overflows the
# float arithmetic of the call's time bound (10**400 retries is valid JSON).
MAX_COUNT = 10_000
MAX_MIN_CALLS = 1_000_000
NonNegInt = Annotated[int, Field(ge=0, le=MAX_COUNT, strict=True)]
# Finite and at most a week: an infinite wait or limit is a hang by configuration, and so is
# 1e300 s (time.sleep refuses it with an OverflowError that would mask the upstream's error).
# Every float field is finite (JSON's Infinity / NaN literals and 1e400 are refused with the
# field's name).
MAX_SECONDS = 7 * 24 * 3600.0
# Strict like the counts: a number, never a string ("60") or a bool; an int is a number. JSON
# documents (model_validate_json, the env var) give numbers as numbers, so they still parse.
PosFloat = Annotated[float, Field(gt=0, le=MAX_SECONDS, allow_inf_nan=False, strict=True)]
NonNegFloat = Annotated[float, Field(ge=0, le=MAX_SECONDS, allow_inf_nan=False, strict=True)]


def _keep_predicate(value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
    """``fallback_on`` parsed once: a function is kept as it is, anything else must be a set
    of statuses (all a JSON document can give)."""
    if callable(value):
        return value
    return handler(value)


if TYPE_CHECKING:
    FallbackOn = frozenset[int] | FailurePredicate
else:  # pydantic validates (and documents) the status list; a function passes as it is
    FallbackOn = Annotated[frozenset[int], WrapValidator(_keep_predicate)]


class ConfigError(ValueError):
    """A configuration is invalid; the message names the source, the field and the value."""


class CheckedModel(BaseModel):
    """A model whose every way in (``Model(...)``, ``model_validate``, ``model_validate_json``,
    ``model_validate_strings``) raises :class:`ConfigError` naming the model, never pydantic's
    own ``ValidationError`` (with its wording and URL footer)."""

    # Hidden from the type checker so that callers keep pydantic's typed signatures.
    if not TYPE_CHECKING:

        def __init__(self, /, **data: Any) -> None:
            type(self).validated(type(self).__name__, (), super().__init__, **data)

        # It only validates, as BaseModel's does: without this mark pydantic would call it for
        # nested sections and model_validate too, and wrap its ConfigError in its own error.
        __init__.__pydantic_base_init__ = True

        @classmethod
        def model_validate(cls, *args: Any, **kwargs: Any) -> Self:
            return cls.validated(cls.__name__, (), super().model_validate, *args, **kwargs)

        @classmethod
        def model_validate_json(cls, *args: Any, **kwargs: Any) -> Self:
            return cls.validated(cls.__name__, (), super().model_validate_json, *args, **kwargs)

        @classmethod
        def model_validate_strings(cls, *args: Any, **kwargs: Any) -> Self:
            return cls.validated(cls.__name__, (), super().model_validate_strings, *args, **kwargs)

    @classmethod
    def validated(
        cls, source: str, at: Loc, validate: Callable[..., _T], *args: Any, **kwargs: Any
    ) -> _T:
        """``validate(*args, **kwargs)``, its ValidationError raised as a :class:`ConfigError`
        from ``source`` (the one translation); ``at`` is where this model's section sits in
        the document."""
        try:
            return validate(*args, **kwargs)
        except ValidationError as exc:
            raise ConfigError(f"{source}: {describe(exc, cls, at)}") from None

    @classmethod
    def parsed(cls, data: object, source: str, at: Loc = ()) -> Self:
        """``data`` validated; a :class:`ConfigError` names ``source`` (not the model)."""
        return cls.validated(source, at, super().model_validate, data)


class BreakerConfig(CheckedModel):
    """Per-route circuit breaker settings (one breaker per route, these settings for all)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    enabled: bool = True
    window_s: PosFloat = 60.0
    """Sliding window over which the failure rate is measured."""
    min_calls: Annotated[int, Field(ge=1, le=MAX_MIN_CALLS, strict=True)] = 10
    """Attempts needed in the window before the breaker may open."""
    failure_rate: Annotated[float, Field(gt=0, le=1, allow_inf_nan=False, strict=True)] = 0.5
    """Open when failures / attempts in the window reach this."""
    open_s: PosFloat = 30.0
    """How long the breaker stays open the first time."""
    max_open_s: PosFloat = 30.0
    """Bound on the open duration, which doubles on each failed half-open probe. Unset, the
    same as ``open_s``: a dead route is probed every ``open_s``, so a provider that comes back
    is in use again within about that long (and a page about it resolves within a minute at
    the defaults); raise it to probe a long-dead route less often."""
    half_open_probes: Annotated[int, Field(ge=1, le=MAX_COUNT, strict=True)] = 1
    """Probe calls let through at once while half-open."""

    @model_validator(mode="before")
    @classmethod
    def _max_open_follows_open(cls, data: Any) -> Any:
        # Unset, the bound is the open time itself (no growth), whatever open_s is set to.
        if isinstance(data, dict) and "max_open_s" not in data:
            given = data.get("open_s")
            # Only a number: a bad open_s is reported as it is, under its own name.
            if isinstance(given, int | float) and not isinstance(given, bool):
                return {**data, "max_open_s": given}
        return data

    @model_validator(mode="after")
    def _open_bounds(self) -> Self:
        if self.max_open_s < self.open_s:
            raise ValueError(
                f"max_open_s ({self.max_open_s:g}) is below open_s ({self.open_s:g}); "
                "the open duration only grows"
            )
        return self


QUANTILES = {"p50": 0.5, "p75": 0.75, "p90": 0.9, "p95": 0.95, "p99": 0.99}
"""The learned figures a hedge may wait for, by name."""
Quantile = Literal["p50", "p75", "p90", "p95", "p99"]


class LearnedConfig(CheckedModel):
    """How the limits learned from each route's latency read it: its time to first chunk on
    streams, kept by the health store (``first_token_timeout_s="adaptive"``, ``hedge_after``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    min_samples: Annotated[int, Field(ge=1, le=MAX_MIN_CALLS, strict=True)] = 20
    """First chunks a route must have delivered (in the store's window) before its learned
    figures are used; until then the adaptive limit is ``ceiling_s`` and no call hedges."""
    multiplier: Annotated[float, Field(ge=1, le=1000, allow_inf_nan=False, strict=True)] = 2.0
    """The adaptive first-token limit: the route's learned p99 times this."""
    floor_s: PosFloat = 1.0
    """The adaptive limit is never shorter (a fast route's p99 of 0.2 s would cut its slow
    but healthy answers)."""
    ceiling_s: PosFloat = 60.0
    """The adaptive limit is never longer; it is the limit until a route has ``min_samples``."""
    hedge_budget: Annotated[float, Field(gt=0, le=1, allow_inf_nan=False, strict=True)] = 0.1
    """The share of a route's stream calls that may hedge, in any minute (per process): a slow
    provider cannot double the spend. Room for ``hedge_after="p95"``, which by definition
    hedges about 5 % of healthy calls, and the slow tail beside them."""

    @model_validator(mode="after")
    def _bounds(self) -> Self:
        if self.ceiling_s < self.floor_s:
            raise ValueError(f"ceiling_s ({self.ceiling_s:g}) is below floor_s ({self.floor_s:g})")
        return self


class FallbackConfig(CheckedModel):
    """What swerve does when a route fails. Immutable; every field has a default.

    Accepts the camelCase keys agent coordinators already ship (``fallbackModelsByModel``,
    ``fallbackOnErrors``, ``maxFallbackAttempts``, ``maxUpstreamRetryAttempts``,
    ``cooldownSeconds``) as well as the snake_case names.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    fallbacks: FallbackMap = Field(
        default_factory=dict, validation_alias=AliasChoices("fallbacks", "fallbackModelsByModel")
    )
    """Route -> sibling route, or an ordered chain of routes to try after it."""
    fallbacks_by_failure: dict[FailureKind, FallbackMap] = Field(
        default_factory=dict,
        validation_alias=AliasChoices("fallbacks_by_failure", "fallbacksByFailure"),
    )
    """Failure kind -> a map like ``fallbacks``, followed for failures of that kind (e.g.
    ``context_overflow`` to a larger-window model), even for kinds that otherwise surface."""
    on_failure: dict[FailureKind, Action] = Field(
        default_factory=dict, validation_alias=AliasChoices("on_failure", "onFailure")
    )
    """Failure kind -> ``retry``, ``swap`` or ``surface``, over :data:`DEFAULT_ACTIONS`."""
    fallback_on: FallbackOn = Field(
        default=DEFAULT_FALLBACK_ON,
        validation_alias=AliasChoices("fallback_on", "fallbackOnErrors"),
    )
    """HTTP statuses (as a response or inside a stream) that qualify for retry and swap; or,
    from Python, a function ``(Failure) -> bool`` asked about every failure (True: act on it
    by its kind's action, as a listed status does; False: surface it). A function is left out
    of a JSON dump (``model_dump_json``): JSON can only hold the status list."""
    max_swaps: NonNegInt = Field(
        default=2, validation_alias=AliasChoices("max_swaps", "maxFallbackAttempts")
    )
    """Swap budget per call; 0 turns swerve off entirely (calls pass straight through)."""
    max_retries: NonNegInt = Field(
        default=2, validation_alias=AliasChoices("max_retries", "maxUpstreamRetryAttempts")
    )
    """Same-route retries, counted since the last swap."""
    cooldown_s: NonNegFloat = Field(
        default=10.0, validation_alias=AliasChoices("cooldown_s", "cooldownSeconds")
    )
    """The first cooldown of a failed route; it doubles each time the route's recovery probe
    fails, up to ``cooldown_max_s``, and a success resets it."""
    cooldown_max_s: NonNegFloat | None = Field(
        default=None, validation_alias=AliasChoices("cooldown_max_s", "cooldownMaxSeconds")
    )
    """The longest cooldown, Retry-After included (default: 30 s, or ``cooldown_s`` if
    longer). Equal to ``cooldown_s``, every cooldown has the same length."""
    backoff_initial_s: NonNegFloat = 2.0
    backoff_factor: Annotated[float, Field(ge=1, allow_inf_nan=False, strict=True)] = 2.0
    backoff_max_s: NonNegFloat = 30.0
    jitter: bool = True
    """Full jitter: each wait is uniform in [0, backoff]."""
    retry_after_max_s: NonNegFloat = 60.0
    """Cap on waits the server asks for with Retry-After."""
    attempt_timeout_s: PosFloat | None = None
    first_token_timeout_s: PosFloat | Literal["adaptive"] | None = None
    """How long a stream attempt may wait for its first content chunk; ``"adaptive"``: the
    route's learned p99 times ``learned.multiplier``, within ``learned.floor_s`` and
    ``learned.ceiling_s`` (and ``ceiling_s`` until the route has ``learned.min_samples``)."""
    stall_timeout_s: PosFloat | None = None
    deadline_s: PosFloat | None = None
    """Total time per call, waits included (default: :attr:`call_bound_s`, from the budgets)."""
    breaker: BreakerConfig = Field(default_factory=BreakerConfig)
    hedge_after: PosFloat | Quantile | None = None
    """Hedged streams (off by default): when a stream attempt's first chunk has not come this
    many seconds after it began, or after the route's learned quantile (``"p95"``), the same
    request starts on the route a swap would go to, and whichever delivers content first
    serves the call; the other is closed. Never for a pinned call or one whose attempt had
    effects, and at most ``learned.hedge_budget`` of a route's stream calls a minute."""
    learned: LearnedConfig = Field(default_factory=LearnedConfig)

    @field_validator("first_token_timeout_s", "hedge_after", mode="before")
    @classmethod
    def _seconds_or_word(cls, value: object, info: ValidationInfo) -> object:
        # One message for a value that is neither of a union's two forms (pydantic would give
        # one per form, named by its internal tags).
        words = ("adaptive",) if info.field_name == "first_token_timeout_s" else tuple(QUANTILES)
        if value is None or value in words:
            return value
        if (
            isinstance(value, int | float)
            and not isinstance(value, bool)
            and 0 < value <= MAX_SECONDS  # first: a huge JSON integer is no float
            and math.isfinite(value)
        ):
            return value
        shown = " or ".join(repr(w) for w in words)
        # Bounded: a JSON integer may have thousands of digits, a string any length.
        if isinstance(value, int) and not -(10**9) < value < 10**9:
            given = "(a huge number)"
        else:
            given = repr(value) if len(repr(value)) <= 40 else f"{repr(value)[:37]}..."
        raise ValueError(
            f"{given} is neither a number of seconds in (0, {MAX_SECONDS:g}] nor {shown}"
        )

    @field_validator("fallbacks")
    @classmethod
    def _routes(cls, value: FallbackMap) -> FallbackMap:
        return _check_map(value, "fallbacks")

    @field_validator("fallbacks_by_failure")
    @classmethod
    def _kind_routes(cls, value: dict[FailureKind, FallbackMap]) -> dict[FailureKind, FallbackMap]:
        if FailureKind.ABORTED in value:
            raise ValueError("aborted: a cancelled call never moves to another route")
        for kind, mapping in value.items():
            _check_map(mapping, f"fallbacks_by_failure[{kind.value!r}]")
        return value

    @field_validator("on_failure")
    @classmethod
    def _actions(cls, value: dict[FailureKind, Action]) -> dict[FailureKind, Action]:
        if FailureKind.ABORTED in value:
            raise ValueError("aborted: cancellation always surfaces; it is not configurable")
        return value

    @model_validator(mode="after")
    def _cooldown_bounds(self) -> Self:
        if self.cooldown_max_s is not None and self.cooldown_max_s < self.cooldown_s:
            raise ValueError(
                f"cooldown_max_s ({self.cooldown_max_s:g}) is below cooldown_s "
                f"({self.cooldown_s:g}); set both to the same value for a fixed cooldown"
            )
        return self

    def action(self, kind: FailureKind) -> Action:
        """What a failure of ``kind`` does under this config (``aborted`` always surfaces)."""
        if kind is FailureKind.ABORTED:
            return "surface"
        return self.on_failure.get(kind) or DEFAULT_ACTIONS.get(kind, "surface")

    @property
    def longest_cooldown_s(self) -> float:
        """``cooldown_max_s`` as it applies: its default is 30 s, or ``cooldown_s`` if longer."""
        if self.cooldown_max_s is not None:
            return self.cooldown_max_s
        return max(self.cooldown_s, DEFAULT_COOLDOWN_MAX_S)

    @property
    def call_bound_s(self) -> float:
        """The longest one call may take, waits and restarts included: ``deadline_s`` when set,
        else every attempt the budgets allow at its time limit (``attempt_timeout_s``, or 600 s
        when unset) plus every wait at its cap."""
        if self.deadline_s is not None:
            return self.deadline_s
        attempt = self.attempt_timeout_s or DEFAULT_ATTEMPT_ALLOWANCE_S
        wait = max(self.backoff_max_s, self.retry_after_max_s)
        per_route = (self.max_retries + 1) * attempt + self.max_retries * wait
        bound = (self.max_swaps + 1) * per_route
        return bound if math.isfinite(bound) else DEFAULT_ATTEMPT_ALLOWANCE_S

    @field_validator("fallback_on")
    @classmethod
    def _statuses(cls, value: FallbackOn) -> FallbackOn:
        if callable(value):
            return value
        bad = sorted(s for s in value if not 100 <= s <= 599)
        if bad:
            # A few, and none of unbounded length: JSON allows integers of thousands of digits.
            shown = [str(s) if -(10**9) < s < 10**9 else "(a huge number)" for s in bad[:5]]
            more = f" and {len(bad) - 5} more" if len(bad) > 5 else ""
            raise ValueError(f"not HTTP statuses: {', '.join(shown)}{more}")
        return value

    @field_serializer("fallback_on")
    def _dump_fallback_on(self, value: FallbackOn, info: SerializationInfo) -> object:
        if callable(value):
            return None if info.mode_is_json() else value  # dropped below from JSON
        return sorted(value) if info.mode_is_json() else value

    @model_serializer(mode="wrap")
    def _dump(self, handler: SerializerFunctionWrapHandler, info: SerializationInfo) -> object:
        data = handler(self)
        if info.mode_is_json() and callable(self.fallback_on) and isinstance(data, dict):
            data.pop("fallback_on", None)  # a function has no JSON form
        return data

    @property
    def enabled(self) -> bool:
        """False when ``max_swaps`` is 0: swerve adds nothing to calls."""
        return self.max_swaps > 0

    @classmethod
    def from_json(cls, text: str, *, source: str = "config") -> FallbackConfig:
        """Parse a JSON document; :class:`ConfigError` names ``source`` and the bad field."""
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConfigError(
                f"{source}: not valid JSON ({exc.msg} at line {exc.lineno})"
            ) from None
        except RecursionError:
            raise ConfigError(f"{source}: not valid JSON (nested too deeply)") from None
        except ValueError as exc:  # an integer of more digits than Python converts
            raise ConfigError(f"{source}: not valid JSON ({exc})") from None
        return cls.from_mapping(data, source=source)

    @classmethod
    def from_mapping(cls, data: object, *, source: str = "config") -> FallbackConfig:
        if not isinstance(data, dict):
            raise ConfigError(f"{source}: expected a JSON object, got {type(data).__name__}")
        try:
            return cls.parsed(data, source)
        except RecursionError:  # a self-referencing mapping handed in from Python
            raise ConfigError(f"{source}: nested too deeply (or refers to itself)") from None

    @classmethod
    def from_env(cls, var: str = DEFAULT_ENV_VAR) -> FallbackConfig | None:
        """Read the JSON config in ``var``; None when the variable is unset or blank."""
        text = os.environ.get(var, "")
        if not text.strip():
            return None
        return cls.from_json(text, source=f"${var}")


def _check_map(value: FallbackMap, name: str) -> FallbackMap:
    for key, target in value.items():
        _check_route(key, f"key {_shown(key)}")
        targets = [target] if isinstance(target, str) else target
        if not targets:
            raise ValueError(f"{name}[{key!r}] is an empty chain")
        seen: set[str] = set()
        for item in targets:
            _check_route(item, f"{name}[{_shown(key)}] value {_shown(item)}")
            if item == key:
                raise ValueError(f"{name}[{key!r}] names the route itself")
            # The walk visits each route once, so a repeat would end the chain there and
            # every route after it would never be reached.
            if item in seen:
                raise ValueError(f"{name}[{key!r}] names {item!r} twice")
            seen.add(item)
    return value


def _shown(value: object) -> str:
    """A route key or value as an error names it: short, whatever its length."""
    return shown_route(value) if isinstance(value, str) else repr(value)


def _check_route(value: object, where: str) -> None:
    try:
        Route.parse(value)  # type: ignore[arg-type]
    except ValueError:
        if isinstance(value, str) and len(value) > MAX_ROUTE_CHARS:
            raise ValueError(
                f"{where} is {len(value)} characters long; the longest route name is "
                f"{MAX_ROUTE_CHARS}"
            ) from None
        if isinstance(value, str) and not value.isprintable():
            raise ValueError(f"{where} contains a control or non-printable character") from None
        raise ValueError(f"{where} is not a 'provider/model' route") from None


class EnvConfig:
    """A config read from an env var and re-read whenever the variable's string changes.

    A change (including unset -> set) bumps :attr:`generation`, which the engine uses to clear
    cooldowns. A new value that does not parse is logged once and the last good config stays,
    so a bad edit never takes failover away from calls already relying on it.
    """

    def __init__(self, var: str = DEFAULT_ENV_VAR) -> None:
        self.var = var
        self._lock = threading.Lock()
        self._text = os.environ.get(var, "")
        self._config = FallbackConfig.from_env(var)  # a bad config at start is an error, loudly
        self.generation = 0

    def current(self) -> FallbackConfig | None:
        text = os.environ.get(self.var, "")
        if text == self._text:  # the hot path: one dict lookup and a string compare
            return self._config
        with self._lock:
            if text != self._text:
                self._reload(text)
            return self._config

    def _reload(self, text: str) -> None:
        self._text = text
        try:
            config = FallbackConfig.from_json(text, source=f"${self.var}") if text.strip() else None
        except ConfigError as exc:
            _log.error("ignoring new value of $%s, keeping the last good config: %s", self.var, exc)
            return
        self._config = config
        self.generation += 1
