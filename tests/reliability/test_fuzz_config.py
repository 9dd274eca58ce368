"""Fuzzing config loading: ``FallbackConfig.from_json`` / ``from_mapping`` / ``from_env``, the
env var's reload, and the CLI's config file (``swerve._cli.file.load`` / ``read``).

Whatever the input (huge numbers, NaN and Infinity, deep nesting, unicode, route names with
newlines or ANSI escapes), the result is a FallbackConfig whose every number is finite and
whose every route is printable, or a ConfigError whose message names its source, stays one
printable line, and is bounded in length. Never a RecursionError, an OverflowError, or any
other exception.
"""

from __future__ import annotations

import json
import logging
import math
import random
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from swerve import ConfigError, FallbackConfig
from swerve._cli.file import CliFile, load, read
from swerve._engine.config import EnvConfig
from swerve._engine.policy import backoff, walk
from swerve._engine.routes import Route

from ..test_policy import planned_wait_bound
from ._measure import fuzz

Report = Callable[..., None]

MAX_MESSAGE = 2000  # a ConfigError is a log line: this long at most


# --- what goes in -----------------------------------------------------------------------------

SCALARS = ["Infinity", "-Infinity", "NaN", "1e400", "-1e400", "1" * 5000, "1" * 400]
WEIRD_CHARS = ["\n", "\r", "\x1b[31m", "\x00", "\u2028", "\u200b", "\ud800", "\t", " ", "/"]

routes = st.one_of(
    # The last is fullwidth o/m: printable, so accepted.
    st.sampled_from(["a/m", "b/m", "c/m", "openrouter/anthropic/claude-sonnet-5", "\uff4f/\uff4d"]),
    # A good route with a control or odd character spliced in somewhere.
    st.tuples(
        st.sampled_from(["a/m", "b/m", "prov/model"]),
        st.sampled_from(WEIRD_CHARS),
        st.integers(0, 10),
    ).map(lambda t: t[0][: t[2]] + t[1] + t[0][t[2] :]),
    st.text(max_size=12),
)
numbers = st.one_of(
    st.integers(-5, 100),
    st.integers(),
    st.integers(10**300, 10**400),
    st.floats(),  # NaN and infinities included: json.dumps writes them as NaN / Infinity
    st.sampled_from([0.0, -0.0, 1e308, 5e-324]),
)
json_values = st.recursive(
    st.none() | st.booleans() | numbers | st.text(max_size=10) | routes,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=15,
)
chains = st.one_of(routes, st.lists(routes, max_size=5))
FIELDS = {
    "fallbacks": st.dictionaries(routes, chains, max_size=4),
    "fallbackModelsByModel": st.dictionaries(routes, chains, max_size=4),
    "fallbacks_by_failure": st.dictionaries(
        st.sampled_from(["context_overflow", "timeout", "aborted", "nope", "\x1b[2J"]),
        st.dictionaries(routes, chains, max_size=3),
        max_size=2,
    ),
    "on_failure": st.dictionaries(
        st.sampled_from(["timeout", "rate_limited", "aborted", "x\ny"]),
        st.sampled_from(["retry", "swap", "surface", "explode"]),
        max_size=3,
    ),
    "fallback_on": st.lists(numbers, max_size=5),
    "max_swaps": numbers,
    "maxUpstreamRetryAttempts": numbers,
    "max_retries": numbers,
    "cooldown_s": numbers,
    "cooldownMaxSeconds": numbers,
    "backoff_initial_s": numbers,
    "backoff_factor": numbers,
    "backoff_max_s": numbers,
    "jitter": st.booleans() | numbers,
    "retry_after_max_s": numbers,
    "attempt_timeout_s": numbers | st.none(),
    "first_token_timeout_s": numbers | st.none(),
    "stall_timeout_s": numbers | st.none(),
    "deadline_s": numbers | st.none(),
    "breaker": st.fixed_dictionaries(
        {},
        optional={
            k: numbers
            for k in (
                "window_s",
                "min_calls",
                "failure_rate",
                "open_s",
                "max_open_s",
                "half_open_probes",
            )
        },
    ),
}
documents = st.fixed_dictionaries(
    {},
    optional={
        **FIELDS,
        "\x1b[31mred": json_values,  # an unknown key that would repaint a terminal
        "line\nbreak": json_values,
    },
)

# Mostly valid documents at the edges of what is allowed, so that accepted configs are many and
# the checks on them (finite bounds, reachable chains) are exercised.
WEEK = 7 * 24 * 3600.0  # the longest wait or limit a config may set
good_routes = st.sampled_from(["a/m", "b/m", "c/m", "d/x/y", "\uff45/\uff4d"])
sane_documents = st.fixed_dictionaries(
    {},
    optional={
        "fallbacks": st.dictionaries(
            good_routes,
            good_routes | st.lists(good_routes, min_size=1, max_size=4, unique=True),
            max_size=4,
        ).map(lambda m: {k: v for k, v in m.items() if v != k and k not in v}),
        "max_retries": st.integers(0, 10_000),
        "max_swaps": st.integers(0, 10_000),
        "backoff_initial_s": st.floats(0, WEEK),
        "backoff_factor": st.floats(1, 1e300),
        "backoff_max_s": st.floats(0, WEEK),
        "retry_after_max_s": st.floats(0, WEEK),
        "cooldown_s": st.floats(0, 1e6),
        "attempt_timeout_s": st.floats(1e-300, WEEK),
        "breaker": st.fixed_dictionaries({}, optional={"min_calls": st.integers(1, 10**6)}),
    },
)


def _nest(depth: int, inner: str) -> str:
    return "[" * depth + inner + "]" * depth


texts = st.one_of(
    sane_documents.map(json.dumps),
    documents.map(json.dumps),  # NaN / Infinity literals included
    documents.map(lambda d: json.dumps(d, ensure_ascii=False)),
    st.tuples(st.sampled_from(list(FIELDS)), st.sampled_from(SCALARS)).map(
        lambda t: f'{{"{t[0]}": {t[1]}}}'
    ),
    st.integers(1, 200_000).map(lambda d: '{"fallbacks": ' + _nest(d, "") + "}"),
    st.integers(1, 200_000).map(lambda d: _nest(d, "{}")),
    json_values.map(json.dumps),
    st.text(max_size=40),
)


# --- what must come out -----------------------------------------------------------------------


def check_error(error: ConfigError, source: str) -> None:
    text = str(error)
    assert text.startswith(f"{source}: "), text
    # One printable line: a newline or an escape from the input would forge or repaint a log line.
    assert text.isprintable(), repr(text)
    assert len(text) <= MAX_MESSAGE, len(text)


def check_config(config: FallbackConfig) -> None:
    numbers = [
        config.cooldown_s,
        config.longest_cooldown_s,
        config.backoff_initial_s,
        config.backoff_factor,
        config.backoff_max_s,
        config.retry_after_max_s,
        config.call_bound_s,
        planned_wait_bound(config),
        *(
            t
            for t in (
                config.attempt_timeout_s,
                config.first_token_timeout_s,
                config.stall_timeout_s,
                config.deadline_s,
            )
            if t is not None
        ),
        config.breaker.window_s,
        config.breaker.failure_rate,
        config.breaker.open_s,
        config.breaker.max_open_s,
    ]
    assert all(math.isfinite(n) and n >= 0 for n in numbers), numbers
    for retries in (0, 1, config.max_retries, 10**6):
        wait = backoff(config, retries, random.Random(retries).random)  # not the global state
        assert math.isfinite(wait) and 0 <= wait <= config.backoff_max_s
    maps = [(None, config.fallbacks), *config.fallbacks_by_failure.items()]
    for kind, mapping in maps:
        for key, target in mapping.items():
            chain = [target] if isinstance(target, str) else target
            for route in (key, *chain):
                assert route.isprintable() and str(Route.parse(route)) == route
            assert len(set(chain)) == len(chain)  # no duplicates: every route is reachable
            assert list(walk(config, key, key, kind))[1 : len(chain) + 1] == chain


def outcome(parse: Callable[[], FallbackConfig | None], source: str) -> str:
    try:
        config = parse()
    except ConfigError as exc:
        check_error(exc, source)
        return "error"
    if config is not None:
        check_config(config)
    return "config"


# --- properties ----------------------------------------------------------------------------------


def test_from_json_gives_a_config_or_a_config_error(soak_s: float, figure: Report) -> None:
    seen = {"config": 0, "error": 0}

    @fuzz(soak_s, 400)
    @given(text=texts)
    def prop(text: str) -> None:
        seen[outcome(lambda: FallbackConfig.from_json(text, source="fuzz.json"), "fuzz.json")] += 1

    prop()
    figure(
        "config from JSON text: huge numbers, NaN/Infinity, deep nesting, unicode, odd routes",
        "0 exceptions other than ConfigError; errors one printable line naming the source",
        measured=f"{sum(seen.values())} documents ({seen['config']} accepted, "
        f"{seen['error']} refused), 0 escaped",
    )


def test_from_mapping_gives_a_config_or_a_config_error(soak_s: float, figure: Report) -> None:
    tried = 0

    @fuzz(soak_s, 300)
    @given(data=sane_documents | documents | json_values)
    def prop(data: object) -> None:
        nonlocal tried
        tried += 1
        outcome(lambda: FallbackConfig.from_mapping(data, source="mapping"), "mapping")

    prop()
    figure(
        "config from Python mappings",
        "0 exceptions other than ConfigError",
        measured=f"{tried} mappings, 0 escaped",
    )


def test_from_env_and_its_reload(
    soak_s: float, figure: Report, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    tried = 0
    var = "SWERVE_FUZZ_CONFIG"
    # The process environment cannot hold NUL or lone surrogates: only what it can hold.
    env_texts = texts.filter(
        lambda t: "\x00" not in t and not any(0xD800 <= ord(c) < 0xE000 for c in t)
    )

    @fuzz(soak_s, 200)
    @given(first=env_texts, second=env_texts)
    def prop(first: str, second: str) -> None:
        nonlocal tried
        tried += 1
        monkeypatch.setenv(var, first)
        if outcome(lambda: FallbackConfig.from_env(var), f"${var}") == "error":
            return
        env = EnvConfig(var)
        before = env.current()
        caplog.clear()
        monkeypatch.setenv(var, second)
        with caplog.at_level(logging.ERROR, logger="swerve"):
            after = env.current()  # a bad new value is logged and the last good one stays
        for record in caplog.records:
            assert record.getMessage().isprintable(), record.getMessage()
        if caplog.records:
            assert after is before
        elif after is not None:
            check_config(after)

    prop()
    figure(
        "config from an env var, then changed to another fuzzed value",
        "a config or ConfigError at start; a bad change logged as one printable line, "
        "the last good config kept",
        measured=f"{tried} pairs, 0 escaped, 0 unprintable log lines",
    )


upstream_specs = st.fixed_dictionaries(
    {},
    optional={
        "base_url": st.sampled_from(["https://api.test/v1", "ftp://x", "", "http://h\nx"])
        | st.text(max_size=10),
        "wire": st.sampled_from(["openai", "anthropic", "smoke"]),
        "api_key_env": st.text(max_size=5),
        "api_key": st.just("sk-should-not-be-here"),
        "headers": st.dictionaries(
            st.sampled_from(["x-a", "x\nb"]), st.sampled_from(["v", "v\r\nX-Evil: 1"])
        ),
        "model": st.text(max_size=5),
    },
)
files = st.one_of(
    (sane_documents | documents).flatmap(
        lambda d: st.fixed_dictionaries(
            {},
            optional={
                "upstreams": st.dictionaries(routes, upstream_specs, max_size=3) | json_values,
                "health": st.fixed_dictionaries(
                    {},
                    optional={
                        "url": st.sampled_from(
                            ["redis://h:6379/0", "redis://:pw@h", "http://[::1"]
                        ),
                        "url_env": st.text(max_size=4),
                        "prefix": st.text(max_size=4),
                    },
                )
                | json_values,
            },
        ).map(lambda extra: {**d, **extra})
    ),
    json_values,
)


def test_cli_file_load_gives_a_file_or_a_config_error(soak_s: float, figure: Report) -> None:
    seen = {"file": 0, "error": 0}

    @fuzz(soak_s, 300)
    @given(data=files)
    def prop(data: object) -> None:
        try:
            loaded = load(data, "swerve.json")
        except ConfigError as exc:
            check_error(exc, "swerve.json")
            seen["error"] += 1
            return
        assert isinstance(loaded, CliFile)
        check_config(loaded.config)
        for route, spec in loaded.upstreams.items():
            assert route.isprintable() and spec.base_url.startswith(("http://", "https://"))
            assert all(k.isprintable() and v.isprintable() for k, v in spec.headers.items())
        seen["file"] += 1

    prop()
    figure(
        "CLI config file (config, upstreams, health) from fuzzed JSON values",
        "a CliFile whose routes, URLs and headers are safe, or a ConfigError",
        measured=f"{sum(seen.values())} files ({seen['file']} accepted, {seen['error']} refused), "
        "0 escaped",
    )


def test_cli_file_read_from_disk(soak_s: float, figure: Report, tmp_path: Path) -> None:
    tried = 0
    path = tmp_path / "swerve.json"

    @fuzz(soak_s, 150)
    @given(raw=texts.map(lambda t: t.encode("utf-8", "surrogatepass")) | st.binary(max_size=64))
    def prop(raw: bytes) -> None:
        nonlocal tried
        tried += 1
        path.write_bytes(raw)
        try:
            loaded = read(path)
        except ConfigError as exc:
            check_error(exc, str(path))
            return
        check_config(loaded.config)

    prop()
    figure(
        "CLI config file read from disk: any bytes (non-UTF-8, deep nesting, huge numbers)",
        "a CliFile or a ConfigError naming the file",
        measured=f"{tried} files, 0 escaped",
    )


# Each float field, alone, given a number JSON can write but no wait or limit can be.
FLOAT_FIELDS = [
    "cooldown_s",
    "cooldown_max_s",
    "backoff_initial_s",
    "backoff_factor",
    "backoff_max_s",
    "retry_after_max_s",
    "attempt_timeout_s",
    "first_token_timeout_s",
    "stall_timeout_s",
    "deadline_s",
    "breaker.window_s",
    "breaker.failure_rate",
    "breaker.open_s",
    "breaker.max_open_s",
]


@pytest.mark.parametrize("literal", ["Infinity", "-Infinity", "NaN", "1e400"])
@pytest.mark.parametrize("field", FLOAT_FIELDS)
def test_every_float_field_refuses_infinity_and_nan(field: str, literal: str) -> None:
    section, _, name = field.rpartition(".")
    body = f'{{"{name}": {literal}}}'
    text = f'{{"{section}": {body}}}' if section else body
    with pytest.raises(ConfigError) as info:
        FallbackConfig.from_json(text, source="$SWERVE_FALLBACK_CONFIG")
    assert str(info.value).startswith(f"$SWERVE_FALLBACK_CONFIG: {field}: "), str(info.value)


def test_a_route_with_a_control_character_is_never_accepted(soak_s: float, figure: Report) -> None:
    tried = 0
    controls = st.characters(categories=["Cc", "Cf", "Cs", "Zl", "Zp", "Co", "Cn"])

    @fuzz(soak_s, 300)
    @given(route=st.sampled_from(["a/m", "openrouter/x/y"]), bad=controls, at=st.integers(0, 20))
    def prop(route: str, bad: str, at: int) -> None:
        nonlocal tried
        tried += 1
        name = route[:at] + bad + route[at:]
        with pytest.raises(ValueError, match="control or non-printable") as info:
            Route.parse(name)
        assert repr(name) in str(info.value) and str(info.value).isprintable()
        for data in ({"fallbacks": {name: "b/m"}}, {"fallbacks": {"b/m": [name]}}):
            with pytest.raises(ConfigError) as cfg:
                FallbackConfig.from_mapping(data, source="cfg")
            check_error(cfg.value, "cfg")
        with pytest.raises(ConfigError):
            load({"upstreams": {name: {"base_url": "https://x.test"}}}, "f.json")

    prop()
    figure(
        "route names with a control, format, separator or unassigned character",
        "0 accepted (Route.parse, config maps, CLI upstreams); errors show it escaped",
        measured=f"{tried} names, 0 accepted",
    )
