"""httpx or httpx2: the one seam where the two client libraries differ, typed once.

A client built on httpx sends ``httpx.Request`` objects and catches ``httpx`` errors; one built
on httpx2 (the current openai and anthropic SDKs) sends and catches httpx2's. The transports
answer each request in its own library. :class:`Flavour` names everything they take from it,
so the rest of swerve reads one typed module, never an ``Any``.
"""

from __future__ import annotations

import importlib
from typing import Any, Protocol, cast

__all__ = ["Flavour", "flavour_named", "flavour_of"]


class Flavour(Protocol):
    """What swerve uses of the ``httpx`` or ``httpx2`` module (both satisfy it as they are).

    The classes are ``type[Any]``: the two modules' classes share names and signatures but no
    base, so no narrower type holds both.
    """

    @property
    def __name__(self) -> str: ...

    # Messages and their parts.
    @property
    def Request(self) -> type[Any]: ...

    @property
    def Response(self) -> type[Any]: ...

    @property
    def URL(self) -> type[Any]: ...

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
