"""Every Python block of README.md, docs/*.md and integrations/langchain/README.md runs, as
written, against the fake provider (and the real services a page names)."""

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
        "integrations/langchain/README.md",
    }


# The last block of each document: after it, the document's checks (tests/docs/conftest.py).
LAST = {block.document_name: block for block in BLOCKS}


@pytest.mark.parametrize("block", BLOCKS, ids=[block.id for block in BLOCKS])
def test_block_runs(block: Block, document_sessions: DocumentSessions) -> None:
    document_sessions.enter(block)
    try:
        block.run()
    finally:
        if LAST[block.document_name] is block:
            document_sessions.check()
