"""Every Python block of README.md and docs/*.md runs, as written, against the fake provider."""

from __future__ import annotations

import pytest

from ._documents import Block, python_blocks
from .conftest import DocumentSessions

BLOCKS = python_blocks()


def test_every_document_with_python_is_read() -> None:
    assert {block.document_name for block in BLOCKS} >= {
        "README.md",
        "config.md",
        "fleet.md",
        "httpx.md",
        "langchain.md",
        "observability.md",
        "testing.md",
    }


@pytest.mark.parametrize("block", BLOCKS, ids=[block.id for block in BLOCKS])
def test_block_runs(block: Block, document_sessions: DocumentSessions) -> None:
    document_sessions.enter(block)
    block.run()
