"""pytest plugin (registered as ``swerve`` via the pytest11 entry point): the ``fake_provider``
fixture."""

from collections.abc import Iterator

import pytest

from swerve.testing import FakeProvider

__all__ = ["fake_provider"]


@pytest.fixture
def fake_provider() -> Iterator[FakeProvider]:
    """A started :class:`~swerve.testing.FakeProvider`, stopped after the test."""
    with FakeProvider() as fake:
        yield fake
