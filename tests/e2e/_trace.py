"""Spans as Phoenix's REST API returns them (``/v1/projects/<project>/spans``), as trees."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

SPANS_PER_FLOW = 7  # the call, three attempts, an HTTP client span under each attempt

Span = dict[str, Any]  # name, context.{trace_id, span_id}, parent_id, attributes, events, ...


class Trace:
    """One trace's spans: exactly one root, children in the order they started."""

    def __init__(self, spans: Iterable[Span]) -> None:
        self.spans = list(spans)
        (self.root,) = (s for s in self.spans if s["parent_id"] is None)
        self.id: str = self.root["context"]["trace_id"]

    def children(self, span: Span) -> list[Span]:
        own = [s for s in self.spans if s["parent_id"] == span["context"]["span_id"]]
        return sorted(own, key=lambda s: str(s["start_time"]))


def traces(spans: Iterable[Span]) -> list[Trace]:
    by_id: dict[str, list[Span]] = {}
    for span in spans:
        by_id.setdefault(span["context"]["trace_id"], []).append(span)
    return [Trace(group) for group in by_id.values()]


@dataclass(frozen=True, slots=True)
class FailoverRun:
    """What tests/e2e/traced_app.py reported, and what Phoenix stored from it."""

    answers: dict[str, Any]  # the app's report: answers, and requests per fake provider
    spans: list[Span]  # every span Phoenix stored for the project
    traces: dict[str, Trace]  # by flow name, told apart by the route each call requested
