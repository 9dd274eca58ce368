"""One set-up per document: its blocks share a namespace, a fake provider the docs' real
URLs are sent to, the API keys they read, and a clean process-wide health store."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager

import pytest
from sybil import Document

from swerve import Failover
from swerve.testing import FakeProvider

from ._documents import Block
from ._placeholders import API_KEY_VARS, placeholders
from ._process_globals import contained_globals
from ._redirect import redirect_providers


def _clear_process_health() -> None:
    # The docs build Failovers without health=, so they share the process-wide store; a
    # cooldown one document (or another test) learnt must not decide where the next starts.
    Failover().health.clear()


@contextmanager
def _document_setup(block: Block) -> Iterator[None]:
    with FakeProvider() as fake, pytest.MonkeyPatch.context() as mp:
        for var in ("SWERVE_FALLBACK_CONFIG", "SWERVE_HEALTH_URL", "SWERVE_HEALTH_PREFIX"):
            mp.delenv(var, raising=False)
        for var in API_KEY_VARS:
            mp.setenv(var, "test-key")
        redirect_providers(mp, fake)
        block.document.namespace.update(placeholders(block.document_name, fake))
        _clear_process_health()
        try:
            with contained_globals(mp):
                yield
        finally:
            # What the blocks built (a transport claims its route names in the process-wide
            # store while it lives) must not outlive the document.
            block.document.namespace.clear()
            gc.collect()
            _clear_process_health()


class DocumentSessions:
    """The set-up of the document whose blocks are running; the blocks of one document run one
    after another (in file order), so a new document ends the last one's set-up."""

    def __init__(self) -> None:
        self._stack = ExitStack()
        self._current: Document | None = None

    def enter(self, block: Block) -> None:
        if block.document is self._current:
            return
        self.close()
        self._stack.enter_context(_document_setup(block))
        self._current = block.document

    def close(self) -> None:
        self._stack.close()
        self._current = None


@pytest.fixture(scope="module")
def document_sessions() -> Iterator[DocumentSessions]:
    sessions = DocumentSessions()
    yield sessions
    sessions.close()
