"""Send the docs' real provider URLs to the fake provider, below every client.

The blocks in the docs name real endpoints (``https://openrouter.ai/api/v1``...), as a reader
copies them. Under test, the innermost httpx / httpx2 transports rewrite a request for a known
provider host to the same path on :class:`~swerve.testing.FakeProvider`, like a hosts-file
entry: the SDKs, swerve's transport and its routing all still see the URL the text wrote.
A request to any other host that is not local fails the test.
"""

from __future__ import annotations

from typing import Any

import httpx
import httpx2
import pytest

from swerve.testing import FakeProvider

__all__ = ["PROVIDER_HOSTS", "redirect_providers"]

# host -> the fake provider's name for it; the fake serves /<name>/v1/chat/completions and
# /<name>/v1/messages, so everything before the API version (OpenRouter's /api) is dropped.
PROVIDER_HOSTS = {
    "openrouter.ai": "openrouter",
    "api.anthropic.com": "anthropic",
    "api.together.xyz": "together",
    "api.openai.com": "openai",
}


_LOCAL_HOSTS = {"127.0.0.1", "localhost"}


def _rewrite(request: Any, fake: FakeProvider) -> None:
    host = request.url.host
    provider = PROVIDER_HOSTS.get(host)
    if provider is None:
        # The docs' tests never leave the machine: a block that reaches another host fails.
        if host not in _LOCAL_HOSTS:
            raise AssertionError(f"a doc block sent a request to {host}: add it to PROVIDER_HOSTS")
        return
    path = request.url.path
    version = path.find("/v1/")
    tail = path[version:] if version >= 0 else path
    request.url = request.url.copy_with(
        scheme="http", host="127.0.0.1", port=fake.port, path=f"/{provider}{tail}"
    )


def redirect_providers(monkeypatch: pytest.MonkeyPatch, fake: FakeProvider) -> None:
    """Patch the sync and async pool transports of httpx and httpx2 for the test's duration."""
    for module in (httpx, httpx2):
        sync_send = module.HTTPTransport.handle_request
        async_send = module.AsyncHTTPTransport.handle_async_request

        def handle_request(self: Any, request: Any, _send: Any = sync_send) -> Any:
            _rewrite(request, fake)
            return _send(self, request)

        async def handle_async_request(self: Any, request: Any, _send: Any = async_send) -> Any:
            _rewrite(request, fake)
            return await _send(self, request)

        monkeypatch.setattr(module.HTTPTransport, "handle_request", handle_request)
        monkeypatch.setattr(module.AsyncHTTPTransport, "handle_async_request", handle_async_request)
