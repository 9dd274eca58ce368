"""What the transport reads of a response's headers (its type, length, encoding, and whether
it carries swerve's own), found by name searches instead of a loop: the same answers as
``Headers.get`` gives, whatever names surround them."""

from __future__ import annotations

import httpx
import httpx2
import pytest

from swerve._transport.reading import _described

CASES = [
    [],
    [(b"Content-Type", b"application/json"), (b"Content-Length", b"12")],
    # A provider's usual fifteen, the ones swerve reads among them.
    [(b"date", b"Thu"), (b"content-type", b"text/event-stream; charset=utf-8")]
    + [(f"x-ratelimit-{i}".encode(), b"1") for i in range(12)]
    + [(b"content-encoding", b"gzip")],
    # Names that only contain the ones swerve reads are not them.
    [(b"x-content-type-options", b"nosniff"), (b"X-Original-Content-Length", b"99")],
    [(b"x-content-type-options", b"nosniff"), (b"Content-Type", b"application/json")],
    # A name given twice: joined as Headers.get joins it.
    [(b"Content-Length", b"1"), (b"content-length", b"2"), (b"CONTENT-TYPE", b"a/b")],
    # swerve's own prefix: only at the start of a name.
    [(b"X-Swerve-Route", b"p/m")],
    [(b"upstream-x-swerve-route", b"p/m")],
    [(b"a", b"1"), (b"x-swerve-attempts", b"2")],
]


@pytest.mark.parametrize("raw", CASES)
@pytest.mark.parametrize("module", [httpx, httpx2])
def test_the_heads_read_are_what_headers_get_gives(raw: list[tuple[bytes, bytes]], module) -> None:  # type: ignore[no-untyped-def]
    headers = module.Headers(raw)

    def get(name: str) -> bytes | None:
        value = headers.get(name)
        return None if value is None else value.encode("latin-1")

    kind, length, encoding, marked = _described(headers)
    assert kind == (get("content-type") or b"")
    assert length == get("content-length")
    assert encoding == get("content-encoding")
    assert marked == any(k.lower().startswith("x-swerve-") for k in headers)
