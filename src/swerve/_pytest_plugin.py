"""swerve's pytest plugin, registered as ``swerve`` through the pytest11 entry point: the
``fake_provider`` fixture.

pytest loads this module in every test run of an environment where swerve is installed, so it
must cost nothing until a test asks for the fixture: it lives outside :mod:`swerve.testing`
(whose import brings the fake server and the OpenTelemetry SDK), and imports it only then.
``-p no:swerve`` turns it off.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from swerve.testing import FakeProvider

__all__ = ["fake_provider"]


@pytest.fixture
def fake_provider() -> Iterator[FakeProvider]:
    """A started :class:`~swerve.testing.FakeProvider`, stopped after the test."""
    from swerve.testing import FakeProvider

    with FakeProvider() as fake:
        yield fake
