"""Failures: anything that went wrong on an attempt becomes a :class:`Failure`.

The names live in one module each: the record and its kinds (``_failure``), the exceptions
that carry a failure (``_failure_errors``), the ``error.type`` vocabulary (``_error_types``),
Retry-After (``_retry_after``), the built-in :func:`classify` (``_classify``) and the user rules
tried before it (``_classifiers``). This module gathers them: the rest of swerve, its adapters
and its tests import failures from here.
"""

from __future__ import annotations

from .classifiers import Classifiers
from .classify import classify
from .error_types import KNOWN_ERROR_TYPES, status_kind
from .errors import (
    AttemptTimeout,
    CircuitOpenError,
    IncompleteStreamError,
    InStreamError,
    MalformedStreamError,
    UpstreamError,
)
from .failure import Classifier, Failure, FailureKind, FailurePredicate
from .retry_after import RETRY_AFTER_MAX_S, parse_retry_after

__all__ = [
    "KNOWN_ERROR_TYPES",
    "RETRY_AFTER_MAX_S",
    "AttemptTimeout",
    "CircuitOpenError",
    "Classifier",
    "Classifiers",
    "Failure",
    "FailureKind",
    "FailurePredicate",
    "InStreamError",
    "IncompleteStreamError",
    "MalformedStreamError",
    "UpstreamError",
    "classify",
    "parse_retry_after",
    "status_kind",
]
