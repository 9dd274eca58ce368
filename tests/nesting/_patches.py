"""What the instrumentors patched, put back as it was.

OpenLLMetry's ``uninstrument()`` (0.62.4) leaves ``BaseCallbackManager.__init__`` and the
openai SDK's ``create`` methods wrapped: its callback handler would go on joining every
LangChain run, and its OpenAI wrapper every request, of the tests that run after these. So
the fixture snapshots the classes the families patch and restores them itself.
"""

from __future__ import annotations

import sys

_PATCHED_MODULES = ("langchain_core.callbacks", "openai.resources", "httpx2", "httpx")


def _classes() -> list[type]:
    return [
        value
        for name, module in list(sys.modules.items())
        if module is not None and name.startswith(_PATCHED_MODULES)
        for value in list(vars(module).values())
        if isinstance(value, type) and value.__module__ == name
    ]


class Snapshot:
    """The attributes of every class of the patched modules, to restore after the tests."""

    def __init__(self) -> None:
        self._saved = {cls: dict(vars(cls)) for cls in _classes()}

    def restore(self) -> list[str]:
        """Put back every attribute that changed; the names of those it put back."""
        restored = []
        for cls, saved in self._saved.items():
            for name, value in saved.items():
                if vars(cls).get(name) is not value:
                    setattr(cls, name, value)
                    restored.append(f"{cls.__qualname__}.{name}")
        return restored
