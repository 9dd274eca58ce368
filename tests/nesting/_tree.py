"""A finished trace read as a tree: parents, ancestors, and which spans are whose."""

from __future__ import annotations

from collections.abc import Sequence

from opentelemetry.sdk.trace import ReadableSpan

from swerve._telemetry import names as n

from ._families import Family

SWERVE_SCOPE = n.INSTRUMENTATION_NAME


class Tree:
    def __init__(self, spans: Sequence[ReadableSpan], family: Family) -> None:
        self.spans = list(spans)
        self.family = family
        self._by_id = {s.context.span_id: s for s in self.spans if s.context}

    def named(self, name: str) -> list[ReadableSpan]:
        return [s for s in self.spans if s.name == name]

    def one(self, name: str) -> ReadableSpan:
        (span,) = self.named(name)
        return span

    def scoped(self, scope: str) -> list[ReadableSpan]:
        return [s for s in self.spans if _scope(s) == scope]

    @property
    def call(self) -> ReadableSpan:
        (span,) = [
            s for s in self.scoped(SWERVE_SCOPE) if n.ROUTE_REQUESTED in (s.attributes or {})
        ]
        return span

    @property
    def attempts(self) -> list[ReadableSpan]:
        found = [s for s in self.spans if n.ATTEMPT_NUMBER in (s.attributes or {})]
        return sorted(found, key=lambda s: (s.attributes or {})[n.ATTEMPT_NUMBER])  # type: ignore[no-any-return]

    def parent(self, span: ReadableSpan) -> ReadableSpan | None:
        return self._by_id.get(span.parent.span_id) if span.parent else None

    def ancestors(self, span: ReadableSpan) -> list[ReadableSpan]:
        out = []
        while (up := self.parent(span)) is not None:
            out.append(up)
            span = up
        return out

    def children(self, span: ReadableSpan) -> list[ReadableSpan]:
        sid = span.context.span_id if span.context else None
        return [s for s in self.spans if s.parent and s.parent.span_id == sid]

    def llm_spans(self, scope: str) -> list[ReadableSpan]:
        """The spans the family's instrumentation of ``scope`` marks as LLM calls."""
        return [s for s in self.scoped(scope) if self.family.marks_llm(s)]

    def http_spans(self) -> list[ReadableSpan]:
        return [s for s in self.scoped("opentelemetry.instrumentation.httpx")]


def _scope(span: ReadableSpan) -> str:
    return span.instrumentation_scope.name if span.instrumentation_scope else ""


def trace_ids(spans: Sequence[ReadableSpan]) -> set[int]:
    return {s.context.trace_id for s in spans if s.context}
