"""Failures: anything that went wrong on an attempt becomes a :class:`Failure`.

The names live in one module each: the record and its kinds (``failure``), the exceptions that
carry a failure (``errors``), the ``error.type`` vocabulary (``error_types``), Retry-After
(``retry_after``), and classification (``classify``: the built-in :func:`classify`, and
:class:`Classifiers`, the user's rules tried before it). This package's face gathers them: the
rest of swerve imports failures from here.
"""

from __future__ import annotations

from .classify import Classifiers, classify
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
