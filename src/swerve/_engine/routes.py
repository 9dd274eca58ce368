"""Routes: ``provider/model``, the unit of health."""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["MAX_ROUTE_CHARS", "Route", "shown_route"]

MAX_ROUTE_CHARS = 256
"""The longest route name: a name is kept per route (caches, health stores, metric labels),
so a name of any length would let a caller hold any amount of memory."""


@dataclass(frozen=True, slots=True)
class Route:
    """A ``provider/model`` pair. The provider is the first segment, the model the rest.

    ``openrouter/anthropic/claude-sonnet-5`` is provider ``openrouter``, model
    ``anthropic/claude-sonnet-5``.
    """

    provider: str
    model: str
    name: str = field(init=False, repr=False, compare=False)
    """``provider/model``, as ``str(route)`` gives it: built once (it is on every call's
    path: health keys, attributes)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "name", f"{self.provider}/{self.model}")

    @classmethod
    def parse(cls, value: str | Route) -> Route:
        """Parse ``provider/model``; raise :class:`ValueError` naming the value otherwise.

        Control and other non-printable characters (newlines, ANSI escapes, lone surrogates)
        are refused, so a route name is always safe to print; so is a name longer than
        :data:`MAX_ROUTE_CHARS` (256) characters.
        """
        if isinstance(value, Route):
            return value
        if not isinstance(value, str):
            raise ValueError(f"route must be a 'provider/model' string, got {type(value).__name__}")
        if len(value) > MAX_ROUTE_CHARS:
            raise ValueError(
                f"route {shown_route(value)} is {len(value)} characters long; "
                f"the longest route name is {MAX_ROUTE_CHARS}"
            )
        if not value.isprintable():
            # A route name reaches log lines, span attributes and metric labels: a newline or
            # an ANSI escape in it could forge a log line or repaint a terminal. repr() shows
            # the offending character escaped.
            raise ValueError(f"route {value!r} contains a control or non-printable character")
        provider, sep, model = value.partition("/")
        if not sep or not provider.strip() or not model.strip() or value != value.strip():
            raise ValueError(f"route {value!r} is not 'provider/model'")
        return cls(provider, model)

    def __str__(self) -> str:
        return self.name


def shown_route(value: str) -> str:
    """``value`` as an error message names it: its repr, cut short when it is long (an error
    naming a 100 KB route must not be 100 KB itself)."""
    if len(value) <= 80:
        return repr(value)
    return f"{value[:60]!r}..."
