"""User rules (``Failover(classifiers=...)``) tried before the built-in :func:`classify`."""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Iterable

from .._telemetry.redact import printable, redact
from .classify import classify, exc_message
from .error_types import TOKEN_CHARS
from .errors import AttemptTimeout, CircuitOpenError
from .failure import Classifier, Failure, FailureKind

__all__ = ["Classifiers"]

_log = logging.getLogger("swerve")


class Classifiers:
    """User classifiers tried in order before :func:`classify`; the first Failure wins.

    A classifier that raises, returns something that is not a Failure, or a Failure whose
    fields have the wrong types (a ``kind`` that is a plain string, ``retry_after="5"``)
    counts as having returned None, and is logged once at WARNING: a bug in a rule never masks
    the upstream error. A rule runs inline, once per failure: its time counts against the
    call's deadline. swerve's own errors (a timeout it enforced, an open breaker) and
    cancellation are not offered to the rules: they mean the same whatever the upstream.
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
                if not isinstance(failure, Failure):
                    what = f"returned {type(failure).__name__}, not a Failure"
                elif (wrong := _wrong_field(failure)) is None:
                    return _safe(failure)
                else:
                    what = f"returned a Failure whose {wrong}"
                self._warn(index, rule, what)
        return classify(error, in_stream=in_stream)

    def _warn(self, index: int, rule: Classifier, what: str) -> None:
        if index in self._warned:
            return
        self._warned.add(index)
        name = getattr(rule, "__qualname__", None) or type(rule).__qualname__
        # The rule's name and its error's text are the user's: escaped, they cannot forge a
        # log line or repaint the terminal that shows it.
        _log.warning(
            "classifier %s %s; ignored (treated as None), the built-in rules apply",
            printable(redact(str(name), TOKEN_CHARS)),
            printable(redact(what)),
        )


def _wrong_field(failure: Failure) -> str | None:
    """What is wrong with a user's Failure (its field and the value's type), or None. Checked
    here, on the failure path, not in Failure itself, which every classification builds."""
    f = failure
    if not isinstance(f.kind, FailureKind):
        return f"kind is {type(f.kind).__name__}, not a FailureKind"
    if f.status is not None and (
        type(f.status) is not int or not 100 <= f.status <= 599  # bool is not a status
    ):
        return f"status is {_shown(f.status)}, not an HTTP status (100-599) or None"
    if f.retry_after is not None and (
        type(f.retry_after) not in (int, float)
        or not math.isfinite(f.retry_after)
        or f.retry_after < 0
    ):
        return f"retry_after is {_shown(f.retry_after)}, not seconds (a number >= 0) or None"
    if type(f.in_stream) is not bool:
        return f"in_stream is {type(f.in_stream).__name__}, not bool"
    for name in ("message", "error_type", "code"):
        value = getattr(f, name)
        if not isinstance(value, str) and not (name == "code" and value is None):
            return f"{name} is {type(value).__name__}, not str"
    return None


def _safe(failure: Failure) -> Failure:
    """The user's Failure with its texts made what a Failure promises (no credentials, no
    control characters, bounded), since spans and log lines carry them."""
    message = printable(redact(failure.message))
    code = None if failure.code is None else printable(redact(failure.code, 64))
    if message == failure.message and code == failure.code:
        return failure
    return dataclasses.replace(failure, message=message, code=code)


def _shown(value: object) -> str:
    """A value's type, and the value itself when it is a short number (never user text)."""
    if type(value) in (int, float):
        return f"{value!r}"
    return type(value).__name__


_OWN_ERRORS = (AttemptTimeout, CircuitOpenError)
