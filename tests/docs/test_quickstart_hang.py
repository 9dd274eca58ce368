"""The README quickstart, exactly as written, against a primary that never answers: with no
swerve time limit the client keeps httpx's own timeout, the attempt ends as a timeout, and
the call is served by the fallback (it must not hang)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from swerve import Failover, FailureKind
from swerve.testing import FakeProvider, Fault

from ._documents import Block, python_blocks
from ._placeholders import placeholders

PRIMARY = "openrouter/anthropic/claude-sonnet-5"
FALLBACK = "anthropic/claude-sonnet-5"


def _quickstart() -> Block:
    (block,) = [
        b
        for b in python_blocks()
        if b.document_name == "README.md" and "failover.call(" in b.source
    ]
    return block


@pytest.fixture
def clean_process_health() -> Iterator[None]:
    # The quickstart builds its Failover without health=: the process-wide store.
    Failover().health.clear()
    yield
    Failover().health.clear()


@pytest.mark.usefixtures("clean_process_health")
def test_quickstart_swaps_away_from_a_hanging_primary(fake_provider: FakeProvider) -> None:
    fake_provider.set_fault("openrouter", Fault.hang())
    block = _quickstart()
    namespace = placeholders("README.md", fake_provider)

    exec(compile(block.source, f"README.md:{block.example.line}", "exec"), namespace)

    result = namespace["result"]
    assert str(result.route) == FALLBACK
    assert str(result.requested) == PRIMARY
    assert [record.outcome for record in result.attempts] == ["failure", "success"]
    failure = result.attempts[0].failure
    assert failure is not None and failure.kind is FailureKind.TIMEOUT
    assert fake_provider.requests("openrouter") == 1
