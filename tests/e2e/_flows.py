"""The two failovers tests/e2e/traced_app.py runs, named once for the app and the tests."""

from __future__ import annotations

from dataclasses import dataclass

from swerve.testing import Fault


@dataclass(frozen=True, slots=True)
class Flow:
    """One failover: ``primary`` fails twice (one retry), then the call swaps to ``fallback``.

    Each route is served by a fake provider of that name (``fake_primary``...) under the
    model name the route's client sends (``model_primary``...).
    """

    name: str
    primary: str
    fallback: str
    model_primary: str
    model_fallback: str
    fake_primary: str
    fake_fallback: str


LANGCHAIN = Flow(
    "langchain",
    "openrouter/anthropic/claude-sonnet-5", "anthropic/claude-sonnet-5",
    "anthropic/claude-sonnet-5", "claude-sonnet-5",
    "lc-primary", "lc-fallback",
)  # fmt: skip
SDK = Flow(
    "sdk",
    "openrouter/openai/gpt-5-mini", "openai/gpt-5-mini",
    "openai/gpt-5-mini", "gpt-5-mini",
    "sdk-primary", "sdk-fallback",
)  # fmt: skip
FLOWS = (LANGCHAIN, SDK)

# The primary first echoes the request's headers, key included, in its 503, then fails again.
OUTAGE = (Fault.echo_headers(503), Fault.status(503))

# Distinctive fake keys: the tests scan everything Phoenix stored for them.
KEYS = {
    "langchain-primary": "sk-e2e-lcprimary-4f1c9a7d2b8e6035",
    "langchain-fallback": "sk-e2e-lcfallback-9a0b3c5d7e1f2468",
    "sdk-primary": "sk-e2e-sdkprimary-7d3e1a9c5b2f8046",
    "sdk-fallback": "sk-e2e-sdkfallback-2c8a6e4f0b1d9375",
    "sdk-client": "sk-e2e-sdkclient-5e7f9a1b3c0d2468",
}
