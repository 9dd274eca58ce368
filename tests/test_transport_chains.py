"""The transports refuse, when built, every route a call could reach and they cannot serve."""

from __future__ import annotations

import pytest

from swerve import FallbackConfig
from swerve.httpx import AsyncFailoverTransport, FailoverTransport, Upstream

OPENAI = "http://127.0.0.1:1/v1"  # never connected to: these transports are only built
A, B, C = "pa/model", "pb/model", "pc/model"


@pytest.mark.parametrize("transport", [FailoverTransport, AsyncFailoverTransport])
def test_a_route_past_the_swap_budget_is_checked(transport: type[FailoverTransport]) -> None:
    # One swap reaches C: a call for A starts on it while A and B cool down, or swaps to it
    # while B does. The check once stopped after max_swaps steps of the chain, and let it pass.
    config = FallbackConfig(fallbacks={A: [B, C]}, max_swaps=1)
    ab = {A: Upstream(OPENAI), B: Upstream(OPENAI)}
    with pytest.raises(ValueError, match=rf"route {B} falls back to {C}, which has no Upstream"):
        transport(ab, config)
    cross = {**ab, C: Upstream("http://127.0.0.1:1", wire="anthropic")}
    with pytest.raises(ValueError, match=rf"{B} \(openai wire\) falls back to {C} \(anthropic"):
        transport(cross, config)
    transport({**ab, C: Upstream(OPENAI)}, config)


def test_a_config_that_turns_swerve_off_checks_nothing() -> None:
    config = FallbackConfig(fallbacks={A: [B, C]}, max_swaps=0)  # calls pass straight through
    FailoverTransport({A: Upstream(OPENAI)}, config)
