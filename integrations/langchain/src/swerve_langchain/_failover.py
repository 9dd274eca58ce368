"""The :class:`swerve.Failover` a wrapper (the chat model, the runnable wrapper) runs on.

Built to read LangChain's errors; left to do all the retrying (route models that retry by
themselves hide failures from it, and are warned about); its :class:`swerve.Result` told as
LangChain metadata (:func:`summary`).
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

from langchain_core.runnables import Runnable, RunnableBinding

from swerve import Failover, FallbackConfig, HealthStore, Result

from ._errors import classify_langchain_error

__all__ = ["SwerveRetryWarning", "make_failover", "summary", "warn_retries"]


class SwerveRetryWarning(UserWarning):
    """A route model retries by itself (its SDK's ``max_retries`` is not 0), which hides
    failures from swerve and delays failover."""


def make_failover(
    failover: Failover | None, config: FallbackConfig | None, health: HealthStore | None
) -> Failover:
    """The engine a wrapper runs on: ``failover`` as given, or one built on ``config`` and
    ``health``; either way it reads LangChain's errors (:func:`classify_langchain_error`,
    tried before any rules the Failover already has)."""
    if failover is not None:
        if config is not None or health is not None:
            raise ValueError("pass either failover or config/health, not both")
        return failover.with_classifiers(classify_langchain_error)
    return Failover(config, health, classifiers=[classify_langchain_error])


def warn_retries(models: Mapping[str, Runnable[Any, Any]], stacklevel: int = 3) -> None:
    """Warn once per wrapper when route models retry by themselves."""
    retrying = []
    for route, value in models.items():
        model = value
        while isinstance(model, RunnableBinding):
            model = model.bound
        if not hasattr(model, "max_retries"):
            continue
        retries = model.max_retries
        if retries is None or (isinstance(retries, int) and retries != 0):
            retrying.append(f"{route} (max_retries={retries})")
    if retrying:
        warnings.warn(
            "swerve: route models retry by themselves, which hides failures from swerve and "
            f"delays failover: {', '.join(retrying)}. Build them with max_retries=0 and let "
            "swerve's config (max_retries, backoff) do the retrying.",
            SwerveRetryWarning,
            stacklevel=stacklevel,
        )


def summary(result: Result[Any]) -> dict[str, Any]:
    """The ``swerve`` entry of ``response_metadata``: the routes asked for and served, the
    retries and swaps, and (when there were any) the degraded routes the call walked past,
    each with who learned its cooldown: ``this_failover``, or ``elsewhere`` (another wrapper
    on the same health store, another process through Redis, an operator)."""
    info: dict[str, Any] = {
        "requested": str(result.requested),
        "served": str(result.route),
        "retries": result.retries,
        "swaps": result.swaps,
    }
    if result.skipped:
        info["skipped"] = [{"route": str(s.route), "learned": s.learned} for s in result.skipped]
    return info
