"""``scripts/uv`` (which the README's commands start with) gets uv onto a fresh machine whose only
Python is externally managed (PEP 668: Debian 12+, Ubuntu 23.04+, Homebrew), with pip or without
it, and installs nothing into that Python; and the README's demo command, as written, runs there
in a clean clone of the project.

The machine's Python is played by a copy of the interpreter that runs these tests, made a
"system" Python: its own prefix (not a venv: pip ignores the PEP 668 marker inside a venv), the
``EXTERNALLY-MANAGED`` marker in its stdlib directory, and only pip, or nothing, in its
site-packages. It is first on PATH and no uv is. The bootstrap runs for real against the package
index (PyPI), as a user's first run does; set SWERVE_TESTS_OFFLINE=1 to skip these tests offline.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
UV_VERSION = "0.13.9"  # scripts/uv's pin
PIP = "pip==26.3"  # the pip a current Debian/Homebrew-era user might have; any recent one does
TIMEOUT = 120  # seconds for one bootstrap: a ~18 MB wheel from the index
DEMO = "./scripts/uv run --locked --no-dev --extra cli swerve demo"  # the README's first command
DEMO_TIMEOUT = 300  # bootstrap, the locked environment (from uv's cache when warm), the demo
PRIMARY = "openrouter/anthropic/claude-sonnet-5"  # the demo's routes (swerve/_cli/demo.py)
FALLBACK = "anthropic/claude-sonnet-5"

online = pytest.mark.skipif(
    bool(os.environ.get("SWERVE_TESTS_OFFLINE")), reason="needs the package index (PyPI)"
)


def _uv() -> str:
    uv = os.environ.get("UV") or shutil.which("uv")  # `uv run` names itself in $UV
    assert uv, "uv is needed to put pip into the system Python"
    return uv


def _base_python() -> tuple[Path, Path]:
    """The interpreter under this test's venv, and its stdlib directory."""
    exe = Path(getattr(sys, "_base_executable", sys.executable)).resolve()
    stdlib = subprocess.run(
        [exe, "-c", "import sysconfig; print(sysconfig.get_path('stdlib'))"],
        capture_output=True, text=True, check=True, timeout=30,
    ).stdout.strip()  # fmt: skip
    return exe, Path(stdlib)


def _link_or_copy(src: str, dst: str) -> None:
    try:
        os.link(src, dst)  # the stdlib is ~3,500 files: linking them is what keeps this fast
    except OSError:
        shutil.copy2(src, dst)


def _system_python(prefix: Path, *, pip: bool) -> Path:
    """A Python installation of its own at ``prefix``, externally managed; its ``python3``."""
    exe, stdlib = _base_python()
    version = stdlib.name  # "python3.11"
    (prefix / "bin").mkdir(parents=True)
    python = prefix / "bin" / version
    shutil.copy2(exe, python)
    (prefix / "bin" / "python3").symlink_to(version)
    # Python finds its prefix from <exe>/../lib/pythonX.Y/os.py: the copy's own stdlib.
    shutil.copytree(
        stdlib,
        prefix / "lib" / version,
        symlinks=True,
        ignore=shutil.ignore_patterns("site-packages", "dist-packages", "test", "idlelib"),
        copy_function=_link_or_copy,
    )
    for lib in exe.parent.parent.glob("lib/libpython*"):  # a --enable-shared build's library
        _link_or_copy(str(lib), str(prefix / "lib" / lib.name))
    site = _python_path(python, "purelib")
    site.mkdir(parents=True, exist_ok=True)
    assert site.is_relative_to(prefix), site
    if pip:
        subprocess.run(
            [_uv(), "pip", "install", "-q", "--python", python, "--target", site, PIP],
            check=True, timeout=TIMEOUT, env=_user_env(prefix),
        )  # fmt: skip
    marker = _python_path(python, "stdlib") / "EXTERNALLY-MANAGED"
    assert marker.is_relative_to(prefix), marker
    marker.write_text("[externally-managed]\nError=Use your system's package manager.\n")
    return prefix / "bin" / "python3"


def _python_path(python: Path, name: str) -> Path:
    code = f"import sysconfig; print(sysconfig.get_path({name!r}))"
    out = subprocess.run([python, "-I", "-c", code], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    return Path(out.stdout.strip())


def _user_env(prefix: Path, **extra: str) -> dict[str, str]:
    """A user's shell: the system Python first on PATH, no uv on it, no venv of ours active."""
    system_dirs = [d for d in ("/usr/local/bin", "/usr/bin", "/bin") if Path(d).is_dir()]
    path = [str(prefix / "bin"), *(d for d in system_dirs if not (Path(d) / "uv").exists())]
    drop = ("PATH", "UV", "VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME", "SWERVE_TOOLS_DIR")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    return {**env, "PATH": os.pathsep.join(path), **extra}


def _snapshot(*dirs: Path) -> dict[str, tuple[int, int]]:
    # Files, without __pycache__: Python writes bytecode beside any module it imports (pip's
    # own, when pip runs), which installs nothing.
    return {
        str(p): (p.stat().st_size, p.stat().st_mtime_ns)
        for d in dirs
        for p in sorted(d.rglob("*"))
        if p.is_file() and not p.is_symlink() and "__pycache__" not in p.parts
    }


def _checkout(tmp_path: Path) -> Path:
    """A checkout holding only the bootstrap: it needs nothing else of the project."""
    (tmp_path / "checkout" / "scripts").mkdir(parents=True)
    shutil.copy2(ROOT / "scripts" / "uv", tmp_path / "checkout" / "scripts" / "uv")
    return tmp_path / "checkout"


def _bootstrap(checkout: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    # Called as the README calls it, so its `#!/usr/bin/env python3` finds the system Python.
    which_uv = "import shutil; print(shutil.which('uv'))"
    return subprocess.run(
        ["./scripts/uv", "run", "--no-project", "python", "-c", which_uv],
        cwd=checkout, env=env, capture_output=True, text=True, timeout=TIMEOUT,
    )  # fmt: skip


@online
@pytest.mark.parametrize("pip", [True, False], ids=["with-pip", "without-pip"])
def test_uv_comes_up_without_touching_an_externally_managed_python(
    tmp_path: Path, pip: bool
) -> None:
    python = _system_python(tmp_path / "system", pip=pip)
    env = _user_env(tmp_path / "system")
    assert shutil.which("uv", path=env["PATH"]) is None
    assert shutil.which("python3", path=env["PATH"]) == str(python)
    site, stdlib = _python_path(python, "purelib"), _python_path(python, "stdlib")
    has_pip = subprocess.run([python, "-m", "pip", "--version"], env=env, capture_output=True)
    assert (has_pip.returncode == 0) is pip
    if pip:
        # The copy is as externally managed as Debian's python3: pip refuses to install into it.
        refused = subprocess.run(
            [python, "-m", "pip", "install", "--dry-run", "uv"],
            env=env, capture_output=True, text=True, timeout=TIMEOUT,
        )  # fmt: skip
        assert refused.returncode != 0 and "externally-managed-environment" in refused.stderr
    before = _snapshot(site, stdlib)
    checkout = _checkout(tmp_path)
    tools = tmp_path / "tools"
    # The default place is .tools/ in the checkout; $SWERVE_TOOLS_DIR moves it.
    env_run = {**env, "SWERVE_TOOLS_DIR": str(tools)} if pip else env
    home = (tools if pip else checkout / ".tools") / f"uv-{UV_VERSION}"

    first = _bootstrap(checkout, env_run)

    assert first.returncode == 0, first.stderr
    assert f"installing uv {UV_VERSION} into {home}" in first.stderr
    # What uv starts finds that same uv on PATH.
    assert first.stdout.strip() == str(home / "bin" / "uv")
    uv = home / "bin" / "uv"
    version = subprocess.run([uv, "--version"], capture_output=True, text=True, timeout=30)
    assert version.stdout.split()[:2] == ["uv", UV_VERSION]
    # pip put it there with --target (a dist-info beside it); without pip, the wheel's binary.
    assert any(home.glob("uv-*.dist-info")) is pip
    assert _snapshot(site, stdlib) == before, "the system Python was changed"
    assert sorted(p.name for p in home.parent.iterdir()) == [home.name]  # no staging left

    again = _bootstrap(checkout, env_run)  # installed once, then reused
    assert again.returncode == 0, again.stderr
    assert "installing" not in again.stderr


def _readme_commands() -> list[str]:
    """Every command line of the README's ``sh`` blocks."""
    blocks = re.findall(r"^```sh\n(.*?)^```", (ROOT / "README.md").read_text(), re.M | re.S)
    return [line.strip() for block in blocks for line in block.splitlines()]


def _clean_clone(dest: Path) -> Path:
    """The project's tracked files as they are in the working tree (what a clone of the commit
    under test holds; nothing untracked: no .venv, no .tools)."""
    listed = subprocess.run(
        ["git", "-C", ROOT, "ls-files", "-z"], capture_output=True, timeout=30, check=False
    )
    if listed.returncode != 0:
        pytest.skip("needs the project's git checkout, to know its tracked files")
    for name in listed.stdout.decode().split("\0")[:-1]:  # each name ends in a NUL
        src = ROOT / name
        if not src.is_symlink() and not src.exists():  # deleted, not yet committed
            continue
        (dest / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dest / name, follow_symlinks=False)
    return dest


def _uv_cache() -> dict[str, str]:
    """This machine's uv cache, when it has one: the locked wheels come from it, not the index
    (uv locks its cache, so sharing it with a run in progress is safe)."""
    out = subprocess.run([_uv(), "cache", "dir"], capture_output=True, text=True, timeout=30)
    cache = out.stdout.strip()
    return {"UV_CACHE_DIR": cache} if out.returncode == 0 and Path(cache).is_dir() else {}


@online
@pytest.mark.slow
def test_the_readmes_demo_command_runs_in_a_clean_clone_on_an_externally_managed_python(
    tmp_path: Path,
) -> None:
    assert DEMO in _readme_commands(), "the README's demo command changed: change DEMO with it"
    # Debian's python3 as it comes, without python3-pip: the bootstrap downloads uv's wheel.
    python = _system_python(tmp_path / "system", pip=False)
    home = tmp_path / "home"
    home.mkdir()
    env = {
        k: v
        for k, v in _user_env(tmp_path / "system").items()
        if not k.startswith(("UV_", "XDG_"))  # the test runner's uv settings are not the user's
    }
    # PATH is the system Python's bin and nothing else: the command needs no other program
    # (not uv, not git, not a compiler). HOME is a new user's, so no uv config or managed
    # Python of this machine's is found; only its cache is reused.
    env.update(PATH=str(python.parent), HOME=str(home), **_uv_cache())
    site, stdlib = _python_path(python, "purelib"), _python_path(python, "stdlib")
    before = _snapshot(site, stdlib)
    checkout = _clean_clone(tmp_path / "swerve")

    run = subprocess.run(
        shlex.split(DEMO), cwd=checkout, env=env, capture_output=True, text=True,
        timeout=DEMO_TIMEOUT,
    )  # fmt: skip

    assert run.returncode == 0, run.stderr
    assert f"installing uv {UV_VERSION} into {checkout / '.tools'}" in run.stderr
    # The project's environment was made in the clone, on the system Python (no other found).
    cfg = (checkout / ".venv" / "pyvenv.cfg").read_text()
    assert re.search(rf"^home = {re.escape(str(python.parent))}$", cfg, re.M), cfg
    # The failover, as the demo tells it: 503s on the primary, a swap, the fallback answers;
    # then the error inside a 200 stream the client never sees; then traffic returns.
    out = run.stdout
    assert f"attempt 1  {PRIMARY}  ERROR 503 unavailable" in out, out
    assert re.search(rf"^ *\S+  swap {PRIMARY} -> {FALLBACK} ", out, re.M), out
    assert f"answer from {FALLBACK}: 'Hello from Claude, direct.'" in out, out
    assert f"attempt 1 probe  {PRIMARY}  ERROR 503 unavailable (in stream)" in out, out
    assert "the client never saw the error" in out, out
    assert f"answer from {PRIMARY}: 'Hello from Claude via OpenRouter.'" in out, out
    assert _snapshot(site, stdlib) == before, "the system Python was changed"


def _script() -> ModuleType:
    loader = importlib.machinery.SourceFileLoader("scripts_uv", str(ROOT / "scripts" / "uv"))
    spec = importlib.util.spec_from_loader(loader.name, loader)
    assert spec
    module = importlib.util.module_from_spec(spec)
    sys.modules[loader.name] = module  # where its dataclass looks itself up
    loader.exec_module(module)
    return module


# uv 0.13.9's wheels on PyPI, as its simple index names them.
WHEELS = [
    f"uv-{UV_VERSION}-py3-none-{tags}.whl"
    for tags in (
        "linux_armv6l",
        "macosx_10_12_x86_64",
        "macosx_11_0_arm64",
        "manylinux_2_17_aarch64.manylinux2014_aarch64.musllinux_1_1_aarch64",
        "manylinux_2_17_armv7l.manylinux2014_armv7l.musllinux_1_1_armv7l",
        "manylinux_2_17_i686.manylinux2014_i686",
        "manylinux_2_17_x86_64.manylinux2014_x86_64",
        "manylinux_2_28_aarch64",
        "musllinux_1_1_x86_64",
        "win_amd64",
    )
]


@pytest.mark.parametrize(
    ("here", "wheel"),
    [
        (("linux", "x86_64", "glibc 2.36"), "manylinux_2_17_x86_64.manylinux2014_x86_64"),
        (("linux", "x86_64", "musl"), "musllinux_1_1_x86_64"),
        (("linux", "aarch64", "glibc 2.36"), "manylinux_2_28_aarch64"),  # the newest that runs
        (("linux", "aarch64", "glibc 2.17"), "manylinux_2_17_aarch64.manylinux2014_aarch64."),
        (("linux", "x86_64", "glibc 2.12"), None),  # too old a glibc for any
        (("darwin", "arm64", None, "14.2"), "macosx_11_0_arm64"),
        (("darwin", "x86_64", None, "10.15"), "macosx_10_12_x86_64"),
        (("win32", "amd64"), "win_amd64"),
        (("linux", "s390x", "glibc 2.36"), None),
    ],
)
def test_the_download_picks_the_wheel_this_platform_runs(
    here: tuple[Any, ...], wheel: str | None
) -> None:
    script = _script()
    files = [(name, f"https://files.example/{name}", "0" * 64) for name in WHEELS]
    picked = script._pick_wheel(files, script.Platform(*here))
    if wheel is None:
        assert picked is None
    else:
        assert picked[0].startswith(f"uv-{UV_VERSION}-py3-none-{wheel}"), picked
