"""swerve for LangChain: failover chat models, runnables and agents.

* :class:`FailoverChatModel`: a ``BaseChatModel`` over several route models.
* :func:`with_failover`: the same for any runnable (declines a swap once a tool ran).
* :class:`FailoverMiddleware`: a ``create_agent`` middleware (needs the ``agents`` extra).
* :func:`classify_langchain_error`: how swerve reads LangChain integrations' errors, for a
  ready ``Failover(classifiers=[...])`` passed as ``failover=``.

swerve's time limits hold in sync calls too (:class:`SwerveTimeoutWarning` when a sync attempt
had to be abandoned); :data:`RESULT_EVENT` names who answered a :func:`with_failover` call.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._callbacks import RESULT_EVENT, STREAM_RESET_EVENT
from ._chat import RESET_KEY, FailoverChatModel
from ._errors import ProviderStreamError, classify_langchain_error
from ._failover import SwerveRetryWarning
from ._limits import SwerveTimeoutWarning
from ._runnable import RunnableFailover, with_failover
from ._version import __version__

if TYPE_CHECKING:
    from ._middleware import FailoverMiddleware

__all__ = [
    "RESET_KEY",
    "RESULT_EVENT",
    "STREAM_RESET_EVENT",
    "FailoverChatModel",
    "FailoverMiddleware",
    "ProviderStreamError",
    "RunnableFailover",
    "SwerveRetryWarning",
    "SwerveTimeoutWarning",
    "__version__",
    "classify_langchain_error",
    "with_failover",
]


_AGENTS_HINT = (
    "FailoverMiddleware needs langchain (v1): "
    "install swerve-langchain's agents extra (README: Use it in your project)"
)


def __getattr__(name: str) -> Any:
    if name == "FailoverMiddleware":  # langchain (v1) is the optional "agents" extra
        try:
            from ._middleware import FailoverMiddleware
        except ImportError as exc:
            missing = exc.name or ""
            if missing != "langchain" and not missing.startswith("langchain."):
                raise  # something else is broken: its own error says what
            raise ImportError(_AGENTS_HINT, name=missing) from exc
        return FailoverMiddleware
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
