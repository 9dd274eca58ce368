"""Pinned environments for the frameworks that cannot share swerve's lock, and the runner of
their recipes there.

instructor and LlamaIndex's OpenAI LLM need the openai SDK below 3; the lock has openai 3. Each
gets its own environment in uv's cache (``uv tool run --from <pin> --with ...``, as
tests/e2e/_tools.py does), with swerve installed editable from this checkout, made once by
./scripts/test and reused offline. A test runs its recipe there as a subprocess: this file,
run as ``python _envs.py run`` with the program on stdin, sends the recipe's real provider URLs
to the test's FakeProvider (like tests/docs/_redirect.py: a hosts-file entry below every
client) and runs it. Standard library only at import: the pinned environments have no pytest.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from swerve.testing import Fault

ROOT = Path(__file__).resolve().parents[2]
FRAMEWORKS_MD = ROOT / "docs" / "frameworks.md"

OPENAI_2 = "openai==2.54.0"  # the newest openai below 3
ENVS = {
    "instructor": ("instructor==1.17.0", OPENAI_2),
    "llama-index": ("llama-index-core==0.14.25", "llama-index-llms-openai==0.8.3", OPENAI_2),
}

# host -> the fake provider's name for it (as tests/docs/_redirect.py).
PROVIDER_HOSTS = {"api.openai.com": "openai", "openrouter.ai": "openrouter"}
PORT_VAR = "SWERVE_FAKE_PROVIDER_PORT"

# What the recipes read from the environment: keys (the fake takes any), and the time an
# attempt may take.
RECIPE_KEYS = {
    "OPENAI_API_KEY": "test-key-openai",
    "OPENROUTER_API_KEY": "test-key-openrouter",
}


def recipe_env(fault: Fault) -> dict[str, str]:
    """The recipes' environment for a primary failing by ``fault``. A hang is ended by the
    attempt's time limit: short, yet long enough for a first request's lazy imports and connect
    on a busy machine (0.5 s was not, with two test workers). Any other fault leaves the limit
    long, so a loaded machine cannot time out an attempt that answers (2 s once did)."""
    return {**RECIPE_KEYS, "LLM_TIMEOUT_S": "2" if fault.kind == "hang" else "30"}


def uv() -> str:
    path = os.environ.get("UV") or shutil.which("uv")  # `uv run` names itself in $UV
    assert path, "uv is not installed: ./scripts/test installs it"
    return path


def _run(name: str) -> list[str]:
    first, *rest = ENVS[name]
    withs = [arg for spec in rest for arg in ("--with", spec)]
    return [
        *(uv(), "tool", "run", "--quiet", "--python", sys.executable, "--from", first),
        *withs,
        *("--with-editable", str(ROOT)),
    ]


@functools.cache
def python(name: str) -> tuple[str, ...]:
    """``python`` in the pinned environment ``name`` (offline once it exists: online, uv
    re-checks every pin with the index)."""
    run = _run(name)
    probe = [*run, "--offline", "python", "-c", "pass"]
    cached = subprocess.run(probe, capture_output=True, timeout=120, check=False).returncode == 0
    return (*run, *(["--offline"] if cached else []), "python")


def recipe(name: str) -> str:
    """The one Python block between ``<!-- fw:name -->`` and its closing marker."""
    text = FRAMEWORKS_MD.read_text()
    section = text.split(f"<!-- fw:{name} -->", 1)[1].split(f"<!-- /fw:{name} -->", 1)[0]
    (block,) = re.findall(r"^```python\n(.*?)^```$", section, re.S | re.M)
    return block


def run(name: str, program: str, port: int, **env: str) -> subprocess.CompletedProcess[str]:
    """``program`` run in ``name``'s environment, its provider URLs sent to 127.0.0.1:port."""
    child_env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    child_env.update({PORT_VAR: str(port), "PYTHONDONTWRITEBYTECODE": "", **env})
    child_env.pop("VIRTUAL_ENV", None)  # the pinned environment, not the project's
    command = [*python(name), str(Path(__file__).resolve()), "run"]
    return subprocess.run(
        command, input=program, capture_output=True, text=True, env=child_env, timeout=300
    )


def install() -> None:
    """Make each pinned environment now (./scripts/test calls this before pytest, so the
    one-time download is not inside a test's time)."""
    for name in ENVS:
        subprocess.run([*_run(name), "python", "-c", "pass"], check=True, timeout=1200)


def _redirect() -> None:
    """Inside the pinned environment: rewrite requests for PROVIDER_HOSTS to the fake provider,
    in httpx's pool transports (under swerve's transport, so routing still sees the real URLs);
    any other non-local host fails the run."""
    import httpx

    port = int(os.environ[PORT_VAR])

    def rewrite(request: Any) -> None:
        host = request.url.host
        if host in ("127.0.0.1", "localhost"):
            return
        provider = PROVIDER_HOSTS.get(host)
        if provider is None:
            raise AssertionError(f"the recipe sent a request to {host}")
        path = request.url.path
        tail = path[path.find("/v1/") :] if "/v1/" in path else path
        request.url = request.url.copy_with(
            scheme="http", host="127.0.0.1", port=port, path=f"/{provider}{tail}"
        )

    sync_send = httpx.HTTPTransport.handle_request
    async_send = httpx.AsyncHTTPTransport.handle_async_request

    def handle_request(self: Any, request: Any) -> Any:
        rewrite(request)
        return sync_send(self, request)

    async def handle_async_request(self: Any, request: Any) -> Any:
        rewrite(request)
        return await async_send(self, request)

    httpx.HTTPTransport.handle_request = handle_request  # type: ignore[method-assign]
    httpx.AsyncHTTPTransport.handle_async_request = handle_async_request  # type: ignore[method-assign]


if __name__ == "__main__":
    if sys.argv[1:] == ["run"]:
        _redirect()
        exec(compile(sys.stdin.read(), "<recipe>", "exec"), {"__name__": "__main__"})
    else:
        install()
