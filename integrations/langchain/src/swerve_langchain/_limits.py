"""swerve's time limits in sync code, which cannot be cancelled.

Two ways, by what the route model allows:

* a model whose SDK takes a per-request timeout (ChatOpenAI and its subclasses, ChatAnthropic,
  ChatOpenRouter) gets one on each call: the smaller of its own and the attempt's remaining
  time, so the SDK itself ends a hung request;
* any other wait (another model, a runnable, every sync stream) runs in a worker thread that
  the caller stops waiting for at the limit; the attempt then fails as a timeout, and the
  thread, abandoned, runs on until its call ends by itself.
"""

from __future__ import annotations

import contextlib
import contextvars
import math
import queue
import threading
import time
import warnings
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from langchain_core.runnables import RunnableBinding

from swerve import Attempt, FallbackConfig, PartKind
from swerve.adapters import AttemptTimeout

__all__ = [
    "SwerveTimeoutWarning",
    "SyncLimits",
    "bounded_call",
    "bounded_stream",
    "has_request_timeout",
    "request_timeout",
    "warn_no_limit",
]

T = TypeVar("T")


class SwerveTimeoutWarning(UserWarning):
    """A route's wait is not bounded as swerve's time limits would bound it. Either:

    * at a call: a sync attempt ran into one of swerve's time limits on a route swerve cannot
      stop (a model without a per-request timeout, or a runnable): swerve stopped waiting,
      failed the attempt as a timeout and moved on; the abandoned call runs on in a
      background thread until it ends by itself;
    * at construction (once per wrapper): the wrapper's config sets no time limit (neither
      ``attempt_timeout_s`` nor ``deadline_s``) and some route has no timeout of its own, so
      a request that hangs there is waited for as long as its client waits (LangChain builds
      the openai and anthropic clients with no timeout at all) before swerve can fail over.
    """


@dataclass(frozen=True, slots=True)
class SyncLimits:
    """One sync attempt's limits, in seconds from its start (None: no such limit)."""

    end: float | None
    """The attempt's own limit or the call's deadline, whichever is sooner."""
    end_name: str
    first_token: float | None
    stall: float | None

    @classmethod
    def of(cls, config: FallbackConfig | None, attempt: Attempt) -> SyncLimits | None:
        """The limits the config sets for ``attempt``; None when it sets none (the derived
        call bound alone is left to the clients' own timeouts, as before)."""
        if config is None or not config.enabled:
            return None
        end = attempt.timeout_or(None)
        own = config.attempt_timeout_s
        name = "deadline" if end is not None and (own is None or end < own - 1e-6) else "attempt"
        # The attempt's own first-token limit: the config's, or one learned for its route.
        limits = cls(end, name, attempt.first_token_timeout, config.stall_timeout_s)
        if end is None and limits.first_token is None and limits.stall is None:
            return None
        return limits

    def unary(self) -> tuple[str, float] | None:
        """The bound of a whole answer: the attempt's end, or the stall limit counted from the
        attempt's start (as the async engine bounds a unary attempt)."""
        pairs = ((self.end_name, self.end), ("stall", self.stall))
        found = [(s, n) for n, s in pairs if s is not None]
        if not found:
            return None
        seconds, name = min(found)
        return name, seconds

    def per_request(self, stream: bool) -> float | None:
        """The timeout to hand a route model's SDK: per read, so never stricter than swerve's
        own limits (a stream's reads come at least as often as its chunks)."""
        if not stream:
            bound = self.unary()
            return bound[1] if bound is not None else None
        return self.end if self.end is not None else self.stall


# -- per-request timeouts -----------------------------------------------------------------------
def _family(model: object) -> str | None:
    """Which per-request timeout a LangChain chat model's SDK takes, by its class (read by
    name, so no optional integration is imported)."""
    for cls in type(model).__mro__:
        module = cls.__module__.split(".")[0]
        if module == "langchain_openai" and cls.__name__ == "BaseChatOpenAI":
            return "openai"  # openai SDK: create(timeout=...), from the call's kwargs
        if module == "langchain_anthropic" and cls.__name__ == "ChatAnthropic":
            return "anthropic"  # anthropic SDK: messages.create(timeout=...)
        if module == "langchain_openrouter" and cls.__name__ == "ChatOpenRouter":
            return "openrouter"  # openrouter SDK: chat.send(timeout_ms=...)
    return None


def _capped(own: Any, seconds: float) -> Any:
    """``own`` (a client timeout: a number, an ``httpx.Timeout``, None for none) with every
    part at most ``seconds``. Never None: that would turn the client's timeout off."""
    if isinstance(own, int | float) and not isinstance(own, bool):
        return min(float(own), seconds)
    parts = ("connect", "read", "write", "pool")
    if all(hasattr(own, p) for p in parts):  # an httpx.Timeout
        capped = {p: seconds if getattr(own, p) is None else min(getattr(own, p), seconds)
                  for p in parts}  # fmt: skip
        return type(own)(**capped)
    return seconds  # none, or a form the SDKs do not document: swerve's alone


def _client_timeout(model: Any, attr: str) -> Any:
    try:
        return getattr(getattr(model, attr), "timeout", None)
    except Exception:  # a client that cannot be built fails the call itself, with its reason
        return None


def request_timeout(model: object, call: dict[str, Any], seconds: float | None) -> dict[str, Any]:
    """The call kwargs that hold ``model``'s request to ``seconds``: empty when its SDK takes
    no per-request timeout (the caller bounds the wait itself) or there is no limit."""
    if seconds is None:
        return {}
    seconds = max(seconds, 0.001)  # a limit already spent still times out, never "no limit"
    m: Any = model
    family = _family(model)
    if family == "openai":
        own = call["timeout"] if "timeout" in call else _client_timeout(m, "root_client")
        return {"timeout": _capped(own, seconds)}
    if family == "anthropic":
        own = call["timeout"] if "timeout" in call else _client_timeout(m, "_client")
        return {"timeout": _capped(own, seconds)}
    if family == "openrouter":
        ms = max(math.ceil(seconds * 1000), 1)
        owns = [call.get("timeout_ms"), getattr(m, "request_timeout", None)]
        config = getattr(getattr(m, "client", None), "sdk_configuration", None)
        owns.append(getattr(config, "timeout_ms", None))
        return {"timeout_ms": min([ms, *(o for o in owns if isinstance(o, int) and o > 0)])}
    return {}


def has_request_timeout(model: object) -> bool:
    return _family(model) is not None


# -- no limit at all ----------------------------------------------------------------------------
def _bounds(timeout: Any) -> bool:
    """Whether a client timeout ends a request that hangs waiting for its answer: a read
    limit, in any of the forms the SDKs take."""
    if timeout is None or isinstance(timeout, bool):
        return False
    if isinstance(timeout, int | float):
        return timeout > 0  # langchain-anthropic reads 0 or less as "the SDK's default"
    if isinstance(timeout, tuple | list):
        return len(timeout) > 1 and timeout[1] is not None  # (connect, read[, write, pool])
    if hasattr(timeout, "read"):  # an httpx.Timeout
        return timeout.read is not None
    return True  # a form the SDKs do not document: trust that it bounds


def _has_own_timeout(value: object) -> bool:
    """Whether a route's model (or a binding of one) ends a hung request by itself, by the
    timeout its calls would get with no limit of swerve's: one bound on the route, else the
    model's own (as :func:`request_timeout` reads them). Other models and runnables: no."""
    bound: dict[str, Any] = {}
    model: Any = value
    while isinstance(model, RunnableBinding):
        bound = {**model.kwargs, **bound}  # an outer binding's kwargs win, as in a call
        model = model.bound
    family = _family(model)
    if family == "openai":
        if "timeout" in bound:
            return _bounds(bound["timeout"])
        own = _client_timeout(model, "root_client")
        return _bounds(own if own is not None else getattr(model, "request_timeout", None))
    if family == "anthropic":
        if "timeout" in bound:
            return _bounds(bound["timeout"])
        return _bounds(getattr(model, "default_request_timeout", None))
    if family == "openrouter":
        config = getattr(getattr(model, "client", None), "sdk_configuration", None)
        owns = [bound.get("timeout_ms"), getattr(model, "request_timeout", None)]
        return any(_bounds(o) for o in [*owns, getattr(config, "timeout_ms", None)])
    return False


def warn_no_limit(
    config: FallbackConfig | None, routes: Mapping[str, object], stacklevel: int = 3
) -> None:
    """Warn once per wrapper when ``config`` (a fixed one: None is read from the environment
    per call) sets no attempt or call time limit and a route has no timeout of its own: a
    hung request there holds the call, sync or async, for as long as its client waits."""
    if config is None or not config.enabled:
        return
    if config.attempt_timeout_s is not None or config.deadline_s is not None:
        return
    unbounded = [
        f"{route} ({type(_unbound(value)).__name__})"
        for route, value in routes.items()
        if not _has_own_timeout(value)
    ]
    if unbounded:
        warnings.warn(
            "swerve: the config sets no time limit (attempt_timeout_s, deadline_s) and these "
            f"routes have no timeout of their own: {', '.join(unbounded)}. A request that "
            "hangs there holds the call until its client gives up, and only then can swerve "
            "fail over: ChatOpenAI, ChatAnthropic and ChatOpenRouter built without a timeout "
            "never give up (LangChain turns off the openai and anthropic SDKs' 600 s default); "
            "other models and runnables, only if their insides set a timeout. Set "
            'attempt_timeout_s in the FallbackConfig (docs/langchain.md, "Limits").',
            SwerveTimeoutWarning,
            stacklevel=stacklevel,
        )


def _unbound(value: object) -> object:
    while isinstance(value, RunnableBinding):
        value = value.bound
    return value


# -- worker threads -----------------------------------------------------------------------------
def _abandon(what: str, limit: str, seconds: float) -> AttemptTimeout:
    warnings.warn(
        f"swerve: {what} ran past the {limit.replace('_', ' ')} time limit ({seconds:.3g}s) and "
        "cannot be stopped from sync code; swerve stopped waiting and moved on, and the call "
        "runs on in a background thread until it ends by itself. Give the route model a "
        "timeout of its own, or call it with ainvoke/astream (which cancel).",
        SwerveTimeoutWarning,
        stacklevel=2,
    )
    return AttemptTimeout(limit, seconds)


def bounded_call(
    fn: Callable[[], T], bound: tuple[str, float], what: str,
    on_abandon: Callable[[], None] | None = None,
) -> T:  # fmt: skip
    """``fn()`` run in a worker thread (in a copy of this context: the attempt's span, the
    run's callbacks), waited for at most ``bound``'s seconds; past them the attempt fails as
    an :class:`AttemptTimeout` of that limit, after ``on_abandon()``."""
    limit, seconds = bound
    done = threading.Event()
    box: list[tuple[bool, Any]] = []
    context = contextvars.copy_context()

    def work() -> None:
        try:
            box.append((True, context.run(fn)))
        except BaseException as exc:  # handed to the caller, whatever it is
            box.append((False, exc))
        finally:
            done.set()

    threading.Thread(target=work, name="swerve-attempt", daemon=True).start()
    if not done.wait(max(seconds, 0.0)):
        if on_abandon is not None:
            on_abandon()
        raise _abandon(what, limit, seconds)
    ok, value = box[0]
    if ok:
        return value  # type: ignore[no-any-return]
    raise value


class _End:
    pass


_END = _End()


@dataclass(frozen=True, slots=True)
class _Raised:
    error: BaseException


class _BoundedStream(Generic[T]):
    """An attempt's stream read in a worker thread; each wait for the next chunk ends at the
    soonest limit (the attempt's end, the first token until content began, the stall)."""

    def __init__(
        self, open_stream: Callable[[], Iterator[T]], limits: SyncLimits,
        part: Callable[[T], PartKind | None], what: str | None,
        on_abandon: Callable[[], None] | None,
    ) -> None:  # fmt: skip
        self._open = open_stream
        self._limits = limits
        self._part = part
        self._what = what
        self._on_abandon = on_abandon
        self._queue: queue.SimpleQueue[T | _End | _Raised] = queue.SimpleQueue()
        self._stop = threading.Event()
        self._started = False
        self._ended = False
        self._committed = False
        self._t0 = self._last = time.monotonic()

    def __iter__(self) -> _BoundedStream[T]:
        return self

    def _work(self) -> None:
        source: Iterator[T] | None = None
        try:
            source = iter(self._open())
            for item in source:
                if self._stop.is_set():
                    return
                self._queue.put(item)
            self._queue.put(_END)
        except BaseException as exc:  # handed to the reader, whatever it is
            self._queue.put(_Raised(exc))
        finally:
            close = getattr(source, "close", None)
            if close is not None:
                with contextlib.suppress(Exception):  # a stream given up: its close is moot
                    close()

    def _next_wait(self) -> tuple[str, float] | None:
        now, lim = time.monotonic(), self._limits
        ends = []
        if lim.end is not None:
            ends.append((self._t0 + lim.end, lim.end_name))
        if not self._committed and lim.first_token is not None:
            ends.append((self._t0 + lim.first_token, "first_token"))
        if lim.stall is not None:
            ends.append((self._last + lim.stall, "stall"))
        if not ends:
            return None
        end, name = min(ends)
        return name, end - now

    def __next__(self) -> T:
        if self._ended:
            raise StopIteration
        if not self._started:
            self._started = True
            context = contextvars.copy_context()
            threading.Thread(
                target=context.run, args=(self._work,), name="swerve-stream", daemon=True
            ).start()
        wait = self._next_wait()
        try:
            item = self._queue.get(timeout=max(wait[1], 0.0) if wait else None)
        except queue.Empty:
            assert wait is not None  # an unbounded get never times out
            self.close()
            name = wait[0]
            took = time.monotonic() - (self._last if name == "stall" else self._t0)
            if self._on_abandon is not None:
                self._on_abandon()
            if self._what is not None:
                raise _abandon(self._what, name, took) from None
            raise AttemptTimeout(name, took) from None
        if isinstance(item, _End):
            self._ended = True
            raise StopIteration
        if isinstance(item, _Raised):
            self._ended = True
            raise item.error
        self._last = time.monotonic()
        if not self._committed and self._part(item) is not None:
            self._committed = True
        return item

    def close(self) -> None:
        """Stop reading: the worker closes the stream at its next chunk (or when its client's
        own timeout ends the wait)."""
        self._ended = True
        self._stop.set()


def bounded_stream(
    open_stream: Callable[[], Iterator[T]], limits: SyncLimits,
    part: Callable[[T], PartKind | None], what: str | None,
    on_abandon: Callable[[], None] | None = None,
) -> Iterator[T]:  # fmt: skip
    """``open_stream()``'s chunks, read in a worker thread and waited for within ``limits``.
    ``what`` names the call in the :class:`SwerveTimeoutWarning` a limit raises; None when
    the call ends by itself soon after (its SDK got a per-request timeout): no warning."""
    return _BoundedStream(open_stream, limits, part, what, on_abandon)
