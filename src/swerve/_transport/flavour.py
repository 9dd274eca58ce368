"""httpx or httpx2: the one seam where the two client libraries differ, typed once.

A client built on httpx sends ``httpx.Request`` objects and catches ``httpx`` errors; one built
on httpx2 (the current openai and anthropic SDKs) sends and catches httpx2's. The transports
answer each request in its own library. :class:`Flavour` names everything they take from it,
so the rest of swerve reads one typed module, never an ``Any``.
"""

from __future__ import annotations

import importlib
from collections.abc import AsyncIterator, Callable, Iterator, MutableMapping
from typing import Any, Protocol, cast

__all__ = [
    "URL",
    "Flavour",
    "Headers",
    "Request",
    "Response",
    "flavour_named",
    "flavour_of",
]


# The messages, typed by what swerve reads of them (as opentelemetry-instrumentation-httpx types
# them): httpx's and httpx2's classes both satisfy these as they are.


class Headers(Protocol):
    """A message's headers: by name (case-insensitive), and ``raw``, as sent (bytes)."""

    @property
    def raw(self) -> list[tuple[bytes, bytes]]: ...

    def get(self, key: str, default: Any = None) -> Any: ...

    def __iter__(self) -> Iterator[str]: ...

    def __contains__(self, key: Any) -> bool: ...

    def __setitem__(self, key: str, value: str) -> None: ...

    def __delitem__(self, key: str) -> None: ...


class URL(Protocol):
    @property
    def scheme(self) -> str: ...

    @property
    def host(self) -> str: ...

    @property
    def port(self) -> int | None: ...

    @property
    def path(self) -> str: ...

    @property
    def netloc(self) -> bytes: ...


class Request(Protocol):
    @property
    def method(self) -> str: ...

    @property
    def url(self) -> URL: ...

    @property
    def headers(self) -> Headers: ...

    @property
    def extensions(self) -> MutableMapping[str, Any]: ...

    @property
    def content(self) -> bytes: ...

    def read(self) -> bytes: ...


class Response(Protocol):
    """A response: swerve reads its body sync or async, by its transport's mode."""

    @property
    def status_code(self) -> int: ...

    @property
    def headers(self) -> Headers: ...

    @property
    def stream(self) -> object: ...

    def read(self) -> bytes: ...

    async def aread(self) -> bytes: ...

    def iter_bytes(self) -> Iterator[bytes]: ...

    def iter_raw(self) -> Iterator[bytes]: ...

    def aiter_bytes(self) -> AsyncIterator[bytes]: ...

    def aiter_raw(self) -> AsyncIterator[bytes]: ...

    def close(self) -> None: ...

    async def aclose(self) -> None: ...


class Flavour(Protocol):
    """What swerve uses of the ``httpx`` or ``httpx2`` module (both satisfy it as they are).

    The messages are built through the protocols above; the other classes are ``type[Any]``:
    the two modules' classes share names and signatures but no base, so no narrower type holds
    both.
    """

    @property
    def __name__(self) -> str: ...

    # Messages and their parts.
    @property
    def Request(self) -> Callable[..., Request]: ...

    @property
    def Response(self) -> Callable[..., Response]: ...

    @property
    def URL(self) -> Callable[..., URL]: ...

    @property
    def Headers(self) -> Callable[..., Headers]:
        """Given another ``Headers``, a copy of its list: no header is normalized again."""
        ...

    @property
    def SyncByteStream(self) -> type[Any]: ...

    @property
    def AsyncByteStream(self) -> type[Any]: ...

    @property
    def ByteStream(self) -> type[Any]:
        """A body held in memory (a response built with ``content=``)."""
        ...

    # The inner transports swerve makes when an Upstream names none.
    @property
    def HTTPTransport(self) -> type[Any]: ...

    @property
    def AsyncHTTPTransport(self) -> type[Any]: ...

    @property
    def create_ssl_context(self) -> Callable[..., Any]:
        """The TLS context ``HTTPTransport()`` builds by default."""
        ...

    # The errors a client of this flavour catches.
    @property
    def HTTPError(self) -> type[Any]: ...

    @property
    def TimeoutException(self) -> type[Any]: ...

    @property
    def ReadTimeout(self) -> type[Any]: ...

    @property
    def ConnectError(self) -> type[Any]: ...

    @property
    def RemoteProtocolError(self) -> type[Any]: ...

    @property
    def DecodingError(self) -> type[Any]: ...

    @property
    def RequestNotRead(self) -> type[Any]: ...


_BY_CLASS: dict[type, Flavour] = {}
_BY_NAME: dict[str, Flavour] = {}


def flavour_named(name: str) -> Flavour:
    """The module ``httpx`` or ``httpx2`` (imported only once a client of it is seen)."""
    flavour = _BY_NAME.get(name)
    if flavour is None:
        flavour = _BY_NAME[name] = cast(Flavour, importlib.import_module(name))
    return flavour


def flavour_of(obj: object) -> Flavour:
    """The flavour a request, response or error comes from."""
    cls = type(obj)
    flavour = _BY_CLASS.get(cls)
    if flavour is None:
        flavour = _BY_CLASS[cls] = flavour_named(cls.__module__.partition(".")[0])
    return flavour
