"""FallbackConfig: names, defaults, camelCase, validation errors that name the field, env reload."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest

from swerve import BreakerConfig, ConfigError, FailureKind, FallbackConfig
from swerve._engine.config import EnvConfig

VAR = "SWERVE_TEST_FALLBACK_CONFIG"


def test_defaults() -> None:
    c = FallbackConfig()
    assert c.fallbacks == {}
    assert c.fallback_on == {408, 409, 429, 500, 502, 503, 504, 529}
    assert (c.max_retries, c.backoff_initial_s, c.backoff_factor, c.backoff_max_s) == (
        2,
        2.0,
        2.0,
        30.0,
    )
    assert c.jitter is True and c.retry_after_max_s == 60
    assert c.enabled


def test_coordinator_camel_case_keys() -> None:
    text = json.dumps(
        {
            "fallbackModelsByModel": {
                "openrouter/anthropic/claude-sonnet-5": "anthropic/claude-sonnet-5",
                "anthropic/claude-sonnet-5": "openrouter/anthropic/claude-sonnet-5",
            },
            "fallbackOnErrors": [429, 500, 502, 503, 504, 529, 402],
            "maxFallbackAttempts": 2,
            "maxUpstreamRetryAttempts": 3,
            "cooldownSeconds": 120,
        }
    )
    c = FallbackConfig.from_json(text)
    assert c.fallbacks["anthropic/claude-sonnet-5"] == "openrouter/anthropic/claude-sonnet-5"
    assert 402 in c.fallback_on
    assert (c.max_swaps, c.max_retries, c.cooldown_s) == (2, 3, 120)


def test_failure_kinds_and_growing_cooldowns_in_camel_case() -> None:
    c = FallbackConfig.from_json(
        json.dumps(
            {
                "fallbacksByFailure": {"context_overflow": {"openai/gpt-5-mini": "openai/gpt-5"}},
                "onFailure": {"timeout": "retry", "quota": "swap"},
                "cooldownSeconds": 20,
                "cooldownMaxSeconds": 240,
            }
        )
    )
    assert c.fallbacks_by_failure == {"context_overflow": {"openai/gpt-5-mini": "openai/gpt-5"}}
    actions = [
        c.action(k) for k in (FailureKind.TIMEOUT, FailureKind.QUOTA, FailureKind.OVERLOADED)
    ]
    assert actions == ["retry", "swap", "retry"]
    assert (c.cooldown_s, c.longest_cooldown_s) == (20, 240)


def test_cooldown_defaults_and_the_seeds_fixed_cooldown() -> None:
    default = FallbackConfig()
    assert (default.cooldown_s, default.longest_cooldown_s) == (10, 30)
    assert default.action(FailureKind.TIMEOUT) == "swap"
    # The seed's cooldownSeconds alone stays a fixed cooldown when it is the longer one.
    seed = FallbackConfig.from_mapping({"cooldownSeconds": 120})
    assert (seed.cooldown_s, seed.longest_cooldown_s) == (120, 120)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (
            {"fallbacks": {"claude": "anthropic/claude"}},
            "fallbacks: key 'claude' is not a 'provider/model' route",
        ),
        (
            {"fallbacks": {"a/b": "gpt-5"}},
            "fallbacks: fallbacks['a/b'] value 'gpt-5' is not a 'provider/model' route",
        ),
        ({"fallbacks": {"a/b": ["c/d", 7]}}, "fallbacks['a/b'][1]: 7 is not a string"),
        ({"fallbacks": {"a/b": 7}}, "fallbacks['a/b']: 7 is not a route or a list of routes"),
        ({"fallbacks": {"a/b": []}}, "fallbacks: fallbacks['a/b'] is an empty chain"),
        ({"fallbacks": {"a/b": "a/b"}}, "fallbacks: fallbacks['a/b'] names the route itself"),
        ({"max_swaps": -1}, "max_swaps: -1 is below 0"),
        ({"maxUpstreamRetryAttempts": 1.5}, "maxUpstreamRetryAttempts: 1.5 is not an integer"),
        ({"max_retries": None}, "max_retries: null is not an integer"),
        ({"max_retries": "3"}, "max_retries: '3' is not an integer"),
        ({"max_retries": "three"}, "max_retries: 'three' is not an integer"),
        ({"cooldownSeconds": -5}, "cooldownSeconds: -5 is below 0"),
        ({"cooldown_s": -5}, "cooldown_s: -5 is below 0"),
        ({"cooldown_s": "soon"}, "cooldown_s: 'soon' is not a number"),
        ({"jitter": "maybe"}, "jitter: 'maybe' is not true or false"),
        ({"fallback_on": [503, 99]}, "fallback_on: not HTTP statuses: 99"),
        ({"fallback_on": [503, "x"]}, "fallback_on[1]: 'x' is not an integer"),
        ({"fallback_on": "503"}, "fallback_on: '503' is not a list"),
        ({"retries": 3}, "retries: unknown key; did you mean 'max_retries'?"),
        ({"breaker": 5}, "breaker: 5 is not an object"),
        ({"breaker": {"min_calls": 0}}, "breaker.min_calls: 0 is below 1"),
        ({"breaker": {"failure_rate": 2}}, "breaker.failure_rate: 2 is above 1"),
        (
            {"breaker": {"open_s": 60, "max_open_s": 30}},
            "breaker: max_open_s (30) is below open_s (60); the open duration only grows",
        ),
        ({"attempt_timeout_s": 0}, "attempt_timeout_s: 0 is not above 0"),
        ({"deadline_s": float("inf")}, "deadline_s: inf is not a finite number"),
        ({"backoff_max_s": float("nan")}, "backoff_max_s: nan is not a finite number"),
        (
            {"onFailure": {"timeout": "later"}},
            "onFailure.timeout: 'later' is not one of 'retry', 'swap' or 'surface'",
        ),
        (
            {"onFailure": {"timeout": "swp"}},
            "onFailure.timeout: 'swp' is not one of 'retry', 'swap' or 'surface'; "
            "did you mean 'swap'?",
        ),
        (
            {"on_failure": {"hang": "swap"}},
            "on_failure.hang: 'hang' is not one of 'rate_limited', 'overloaded', "
            "'server_error', 'unavailable', 'transport', 'timeout', 'incomplete', "
            "'context_overflow', 'auth', 'quota', 'invalid_request', 'content_filter', "
            "'aborted', 'breaker_open' or 'unknown'",
        ),
        (
            {"on_failure": {"aborted": "swap"}},
            "on_failure: aborted: cancellation always surfaces; it is not configurable",
        ),
        (
            {"fallbacksByFailure": {"context_overflow": {"a/b": "gpt-5"}}},
            "fallbacksByFailure: fallbacks_by_failure['context_overflow']['a/b'] value "
            "'gpt-5' is not a 'provider/model' route",
        ),
        (
            {"cooldown_s": 60, "cooldown_max_s": 30},
            "cooldown_max_s (30) is below cooldown_s (60); set both to the same value for a "
            "fixed cooldown",
        ),
    ],
)
def test_validation_errors_name_the_field_and_the_value(
    data: dict[str, object], message: str
) -> None:
    with pytest.raises(ConfigError) as info:
        FallbackConfig.from_mapping(data, source="$X")
    assert str(info.value) == f"$X: {message}"


def test_bad_json_and_wrong_top_level() -> None:
    with pytest.raises(ConfigError, match=r"\$X: not valid JSON"):
        FallbackConfig.from_json("{nope", source="$X")
    with pytest.raises(ConfigError, match="expected a JSON object, got list"):
        FallbackConfig.from_json("[]", source="$X")


def test_from_env_unset_means_no_config(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(VAR, raising=False)
    assert FallbackConfig.from_env(VAR) is None
    monkeypatch.setenv(VAR, "   ")
    assert FallbackConfig.from_env(VAR) is None
    monkeypatch.setenv(VAR, '{"max_swaps": 1}')
    config = FallbackConfig.from_env(VAR)
    assert config is not None and config.max_swaps == 1
    monkeypatch.setenv(VAR, '{"max_swaps": "x"}')
    with pytest.raises(ConfigError, match=rf"\${VAR}: max_swaps"):
        FallbackConfig.from_env(VAR)


def test_env_config_rereads_on_change_and_keeps_last_good(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv(VAR, '{"max_retries": 1}')
    env = EnvConfig(VAR)
    first = env.current()
    assert first is not None and first.max_retries == 1 and env.generation == 0
    assert env.current() is first  # unchanged string: same object, no re-parse
    monkeypatch.setenv(VAR, '{"max_retries": 4}')
    second = env.current()
    assert second is not None and second.max_retries == 4 and env.generation == 1
    with caplog.at_level(logging.ERROR, logger="swerve"):
        monkeypatch.setenv(VAR, '{"max_retries": -1}')
        assert env.current() is second
    assert "keeping the last good config" in caplog.text and "max_retries" in caplog.text
    assert env.generation == 1
    monkeypatch.delenv(VAR)
    assert env.current() is None and env.generation == 2


def test_env_config_bad_at_start_is_loud(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(VAR, '{"fallbacks": {"a": "b/c"}}')
    with pytest.raises(ConfigError, match="key 'a'"):
        EnvConfig(VAR)


# --- config abuse (issue 9, B10) ----------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    ['{"fallbacks": ' + "[" * 100_000 + "]" * 100_000 + "}", "[" * 100_000, "{" * 100_000],
)
def test_deeply_nested_json_is_a_config_error_naming_the_source(
    text: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(ConfigError, match=r"^\$VAR: not valid JSON"):
        FallbackConfig.from_json(text, source="$VAR")
    monkeypatch.setenv(VAR, text)
    with pytest.raises(ConfigError, match=rf"^\${VAR}: "):
        FallbackConfig.from_env(VAR)


def test_an_integer_of_thousands_of_digits_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"^cfg: not valid JSON \(.*digits"):
        FallbackConfig.from_json('{"max_retries": ' + "9" * 5000 + "}", source="cfg")


@pytest.mark.parametrize("field", ["max_retries", "max_swaps"])
def test_budgets_are_bounded(field: str) -> None:
    # 10**400 retries once overflowed the float arithmetic of the call's time bound.
    with pytest.raises(ConfigError) as info:
        FallbackConfig.from_json(f'{{"{field}": 1{"0" * 400}}}', source="cfg")
    assert str(info.value) == f"cfg: {field}: (a number of about 401 digits) is above 10000"
    assert FallbackConfig.model_validate({field: 10_000}).call_bound_s < float("inf")


@pytest.mark.parametrize("literal", ["Infinity", "NaN", "1e400"])
@pytest.mark.parametrize(
    ("field", "where"),
    [
        ("backoff_factor", "backoff_factor"),  # once accepted Infinity: backoff slept forever
        ("cooldownSeconds", "cooldownSeconds"),  # the key as the document wrote it
        ('breaker": {"failure_rate', "breaker.failure_rate"),
    ],
)
def test_infinity_and_nan_are_refused_naming_the_field(
    field: str, where: str, literal: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = f'{{"{field}": {literal}}}' + ("}" if "breaker" in field else "")
    monkeypatch.setenv(VAR, text)
    with pytest.raises(ConfigError, match=rf"^\${VAR}: {where}: "):
        FallbackConfig.from_env(VAR)


def test_a_wait_longer_than_a_week_is_refused() -> None:
    # time.sleep(1e300) raises OverflowError: a wait that long is a hang by configuration.
    with pytest.raises(ConfigError) as info:
        FallbackConfig.from_mapping({"backoff_max_s": 1e300})
    assert str(info.value) == "config: backoff_max_s: 1e+300 is above 604800"
    assert FallbackConfig(backoff_max_s=7 * 24 * 3600).backoff_max_s == 604800


def test_a_chain_naming_a_route_twice_is_refused() -> None:
    # [b, b, c] never reached c: the walk stops at a route it has seen.
    with pytest.raises(ConfigError) as info:
        FallbackConfig.from_mapping({"fallbacks": {"a/m": ["b/m", "b/m", "c/m"]}})
    assert str(info.value) == "config: fallbacks: fallbacks['a/m'] names 'b/m' twice"


@pytest.mark.parametrize(
    "route", ["a/m\nINFO forged line", "a/\x1b[31mred", "a/m\r", "a\u2028/m", "a/\x00m"]
)
def test_route_names_with_control_characters_are_refused(route: str) -> None:
    from swerve._engine.routes import Route

    with pytest.raises(ValueError, match="control") as parsed:
        Route.parse(route)
    assert str(parsed.value) == f"route {route!r} contains a control or non-printable character"
    for data in ({"fallbacks": {route: "b/m"}}, {"fallbacks": {"b/m": [route]}}):
        with pytest.raises(ConfigError, match="contains a control or non-printable character"):
            FallbackConfig.from_mapping(data)


def test_error_messages_escape_keys_and_stay_bounded() -> None:
    with pytest.raises(ConfigError) as info:
        FallbackConfig.from_mapping({"\x1b[31mred\nINFO forged": 1})
    assert str(info.value) == r"config: '\x1b[31mred\nINFO forged': unknown key"
    with pytest.raises(ConfigError) as many:
        FallbackConfig.from_mapping({f"k{i}": i for i in range(1000)})
    assert str(many.value).endswith("; and 995 more") and len(str(many.value)) < 200


def test_a_bad_reload_logs_one_escaped_line(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv(VAR, '{"max_swaps": 1}')
    env = EnvConfig(VAR)
    monkeypatch.setenv(VAR, '{"fallbacks": {"a/m": "b/m\\n[model-fallback] forged"}}')
    with caplog.at_level(logging.ERROR, logger="swerve"):
        assert env.current() is not None and env.current().max_swaps == 1  # type: ignore[union-attr]
    (record,) = caplog.records
    assert "\n" not in record.getMessage() and "forged" in record.getMessage()


def test_cli_file_errors(tmp_path: object) -> None:
    from pathlib import Path

    from swerve._cli.file import load, read

    path = Path(str(tmp_path)) / "swerve.json"
    path.write_bytes(b'{"max_swaps": 1, "x": "\xff"}')
    with pytest.raises(ConfigError, match=r"swerve.json: not UTF-8 text \(byte 23\)"):
        read(path)
    path.write_text("[" * 100_000)
    with pytest.raises(ConfigError, match=r"swerve.json: not valid JSON \(nested too deeply\)"):
        read(path)
    with pytest.raises(ConfigError, match=r"f: upstreams\['a/m'\]: Upstream.base_url must be"):
        load({"upstreams": {"a/m": {"base_url": "ftp://x"}}}, "f")
    bad_header = {"base_url": "https://x.test", "headers": {"x-a": "v\r\nX-Evil: 1"}}
    with pytest.raises(ConfigError, match=r"headers\['x-a'\] contains a control character"):
        load({"upstreams": {"a/m": bad_header}}, "f")
    with pytest.raises(ConfigError, match=r"f: upstreams\['a/m\\n'\]: route .* contains a control"):
        load({"upstreams": {"a/m\n": {"base_url": "https://x.test"}}}, "f")


# --- errors that help (issue 12) ---------------------------------------------------------------

BAD = [
    ({"cooldown_s": -5}, "cooldown_s: -5 is below 0"),
    ({"max_retries": "three"}, "max_retries: 'three' is not an integer"),
    ({"retries": 3}, "retries: unknown key; did you mean 'max_retries'?"),
    (
        {"fallbacks": {"a/m": "b/m"}, "fallbackModelsByModel": {"a/m": "c/m"}},
        "fallbacks and fallbackModelsByModel are the same field, given twice; keep one",
    ),
    ({"breaker": {"min_call": 3}}, "breaker.min_call: unknown key; did you mean 'min_calls'?"),
]


@pytest.mark.parametrize(("data", "message"), BAD)
def test_every_way_to_build_a_config_gives_the_same_clean_message(
    data: dict[str, object], message: str, monkeypatch: pytest.MonkeyPatch, tmp_path: object
) -> None:
    from pathlib import Path

    from swerve._cli.file import read

    text = json.dumps(data)
    monkeypatch.setenv(VAR, text)
    path = Path(str(tmp_path)) / "swerve.json"
    path.write_text(text)
    ways = {
        "FallbackConfig": [
            lambda: FallbackConfig(**data),
            lambda: FallbackConfig.model_validate(data),
            lambda: FallbackConfig.model_validate_json(text),
        ],
        "config": [lambda: FallbackConfig.from_mapping(data)],
        "cfg": [lambda: FallbackConfig.from_json(text, source="cfg")],
        f"${VAR}": [lambda: FallbackConfig.from_env(VAR), lambda: EnvConfig(VAR)],
        str(path): [lambda: read(path)],
    }
    for source, builds in ways.items():
        for build in builds:
            with pytest.raises(ConfigError) as info:
                build()
            assert isinstance(info.value, ValueError)
            assert str(info.value) == f"{source}: {message}"
            assert info.value.__cause__ is None and info.value.__suppress_context__


def test_breaker_config_built_directly_raises_config_error() -> None:
    from swerve import BreakerConfig

    with pytest.raises(ConfigError) as info:
        BreakerConfig(min_calls=0)
    assert str(info.value) == "BreakerConfig: min_calls: 0 is below 1"
    with pytest.raises(ConfigError) as order:
        BreakerConfig(open_s=60, max_open_s=30)
    assert str(order.value) == (
        "BreakerConfig: max_open_s (30) is below open_s (60); the open duration only grows"
    )
    with pytest.raises(ConfigError) as validated:
        BreakerConfig.model_validate({"window": 5})
    assert str(validated.value) == "BreakerConfig: window: unknown key; did you mean 'window_s'?"
    # Nested, the section is named by its place in the document, once.
    with pytest.raises(ConfigError) as nested:
        FallbackConfig(breaker={"min_calls": 0})  # type: ignore[arg-type]
    assert str(nested.value) == "FallbackConfig: breaker.min_calls: 0 is below 1"


def test_no_message_carries_pydantic_wording_or_its_url() -> None:
    bad: list[dict[str, object]] = [d for d, _ in BAD] + [
        {"max_swaps": -1, "jitter": "x", "fallback_on": "y", "onFailure": {"t": 1}, "z": 1},
        {"fallbacks": {"a/m": [1, 2]}, "breaker": {"open_s": "x"}},
    ]
    for data in bad:
        with pytest.raises(ConfigError) as info:
            FallbackConfig.model_validate(data)
        text = str(info.value)
        assert "pydantic" not in text and "https://" not in text and "Input should" not in text
        assert "\n" not in text


def test_an_unknown_key_far_from_every_name_gets_no_guess() -> None:
    with pytest.raises(ConfigError) as info:
        FallbackConfig.from_mapping({"zzzz": 1})
    assert str(info.value) == "config: zzzz: unknown key"
    # camelCase and case slips find the alias the coordinators use
    with pytest.raises(ConfigError) as camel:
        FallbackConfig.from_mapping({"cooldownSecs": 1, "MaxSwaps": 1})
    assert str(camel.value) == (
        "config: cooldownSecs: unknown key; did you mean 'cooldownSeconds'?; "
        "MaxSwaps: unknown key; did you mean 'max_swaps'?"
    )


def test_a_field_given_under_both_names_is_named_as_one_field_twice() -> None:
    with pytest.raises(ConfigError) as info:
        FallbackConfig(max_swaps=1, maxFallbackAttempts=3)  # type: ignore[call-arg]
    assert str(info.value) == (
        "FallbackConfig: max_swaps and maxFallbackAttempts are the same field, given twice; "
        "keep one"
    )


# --- float fields are strict like the counts ----------------------------------------------------
@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"cooldown_s": "60"}, "cooldown_s: '60' is not a number"),
        ({"cooldownSeconds": "60"}, "cooldownSeconds: '60' is not a number"),
        ({"backoff_factor": "2"}, "backoff_factor: '2' is not a number"),
        ({"attempt_timeout_s": "5"}, "attempt_timeout_s: '5' is not a number"),
        ({"deadline_s": True}, "deadline_s: true is not a number"),
        ({"breaker": {"failure_rate": "0.5"}}, "breaker.failure_rate: '0.5' is not a number"),
        ({"breaker": {"open_s": "30"}}, "breaker.open_s: '30' is not a number"),
    ],
)
def test_float_fields_refuse_strings_and_bools(data: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=f"^FallbackConfig: {message}$".replace("(", r"\(")):
        FallbackConfig(**data)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")):
        FallbackConfig.model_validate_json(json.dumps(data))
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")):
        FallbackConfig.from_json(json.dumps(data), source="$X")


def test_float_fields_take_ints_and_json_numbers(monkeypatch: pytest.MonkeyPatch) -> None:
    c = FallbackConfig(cooldown_s=60, backoff_factor=3, attempt_timeout_s=5, breaker={"open_s": 1})  # type: ignore[arg-type]
    assert (c.cooldown_s, c.backoff_factor, c.attempt_timeout_s, c.breaker.open_s) == (60, 3, 5, 1)
    assert isinstance(c.cooldown_s, float)
    text = '{"cooldownSeconds": 60, "deadline_s": 2.5, "breaker": {"failure_rate": 1}}'
    assert FallbackConfig.model_validate_json(text).cooldown_s == 60.0
    monkeypatch.setenv(VAR, text)
    env = FallbackConfig.from_env(VAR)
    assert env is not None and (env.deadline_s, env.breaker.failure_rate) == (2.5, 1.0)
    assert FallbackConfig.model_validate_json(c.model_dump_json()) == c  # a dump reads back


def test_the_breakers_open_time_does_not_grow_unless_asked() -> None:
    # Unset, max_open_s is open_s: a dead route is probed every open_s, so a provider that
    # comes back is in use again within that long (issue 22: a page resolves within a minute).
    assert BreakerConfig().max_open_s == BreakerConfig().open_s == 30
    assert BreakerConfig(open_s=60).max_open_s == 60
    assert FallbackConfig.from_json('{"breaker": {"open_s": 45}}').breaker.max_open_s == 45
    assert BreakerConfig(open_s=10, max_open_s=120).max_open_s == 120  # growth, when asked
    with pytest.raises(ConfigError, match="max_open_s"):
        BreakerConfig(open_s=60, max_open_s=30)


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"hedge_after": "p42"}, "hedge_after: 'p42' is neither a number of seconds"),
        ({"hedge_after": -1}, "hedge_after: -1 is neither"),
        ({"hedge_after": True}, "hedge_after: True is neither"),
        ({"first_token_timeout_s": "fast"}, "first_token_timeout_s: 'fast' is neither"),
        ({"learned": {"floor_s": 5, "ceiling_s": 1}}, "learned: ceiling_s (1) is below floor_s"),
        ({"learned": {"hedge_budget": 2}}, "learned.hedge_budget: 2 is above 1"),
        ({"learned": {"min_samples": 0}}, "learned.min_samples"),
    ],
)
def test_tail_latency_options_name_what_was_wrong(given: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as info:
        FallbackConfig(**given)
    assert message in str(info.value)
    with pytest.raises(ConfigError):  # the same from JSON (the env var, `swerve config check`)
        FallbackConfig.from_json(json.dumps(given))


def test_tail_latency_options_parse_from_json() -> None:
    config = FallbackConfig.from_json(
        '{"hedge_after": "p95", "first_token_timeout_s": "adaptive", "learned": {"floor_s": 2}}'
    )
    assert config.hedge_after == "p95" and config.first_token_timeout_s == "adaptive"
    assert config.learned.floor_s == 2.0 and config.learned.ceiling_s == 60.0
    assert FallbackConfig(hedge_after=1).hedge_after == 1.0
