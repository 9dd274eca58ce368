"""User rules (``Failover(classifiers=...)``) tried before the built-in :func:`classify`."""

from __future__ import annotations

import logging
from collections.abc import Iterable

from ._classify import classify, exc_message
from ._error_types import TOKEN_CHARS
from ._failure import Classifier, Failure
from ._failure_errors import AttemptTimeout, CircuitOpenError
from ._redact import redact

__all__ = ["Classifiers"]

_log = logging.getLogger("swerve")


class Classifiers:
    """User classifiers tried in order before :func:`classify`; the first Failure wins.

    A classifier that raises (or returns something that is not a Failure) counts as having
    returned None, and is logged once at WARNING: a bug in a rule never masks the upstream
    error. swerve's own errors (a timeout it enforced, an open breaker) and cancellation are
    not offered to the rules: they mean the same whatever the upstream.
    """

    __slots__ = ("_rules", "_warned")

    def __init__(self, rules: Iterable[Classifier] = ()) -> None:
        self._rules = tuple(rules)
        for rule in self._rules:
            if not callable(rule):
                raise TypeError(f"a classifier must be callable, not {type(rule).__name__}")
        self._warned: set[int] = set()

    def after(self, first: Iterable[Classifier]) -> Classifiers:
        """These rules with ``first`` tried before them (a rule already here is kept once)."""
        new = tuple(rule for rule in first if rule not in self._rules)
        return Classifiers((*new, *self._rules)) if new else self

    def __call__(self, error: BaseException, *, in_stream: bool = False) -> Failure:
        if self._rules and isinstance(error, Exception) and not isinstance(error, _OWN_ERRORS):
            for index, rule in enumerate(self._rules):
                try:
                    failure = rule(error)
                except Exception as problem:
                    what = f"raised {type(problem).__name__}: {exc_message(problem)}"
                    self._warn(index, rule, what)
                    continue
                if failure is None:
                    continue
                if isinstance(failure, Failure):
                    return failure
                self._warn(index, rule, f"returned {type(failure).__name__}, not a Failure")
        return classify(error, in_stream=in_stream)

    def _warn(self, index: int, rule: Classifier, what: str) -> None:
        if index in self._warned:
            return
        self._warned.add(index)
        name = getattr(rule, "__qualname__", None) or type(rule).__qualname__
        _log.warning(
            "classifier %s %s; ignored (treated as None), the built-in rules apply",
            redact(str(name), TOKEN_CHARS),
            redact(what),
        )


_OWN_ERRORS = (AttemptTimeout, CircuitOpenError)
