"""What a user installs: both distributions built from this checkout, installed into a fresh
virtual environment that holds none of the development tools, and used there the way the docs
say: ``swerve demo`` (the ``cli`` extra alone), ``import swerve_langchain`` (the ``langchain``
extra) and ``swerve dashboards export``; the README's demo command and its "Use it in your
project" commands, run as written. Also what PyPI shows and what the sdist carries.

The venv gets the locked versions (as constraints) so that the run is repeatable and served from
uv's cache; the distributions' own bounds still have to admit them.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tarfile
import zipfile
from dataclasses import dataclass
from email import message_from_string
from email.message import Message
from pathlib import Path

import pytest
import yaml

from swerve._dashboards import dashboard

ROOT = Path(__file__).resolve().parents[1]
VERSION_PARTS = ("swerve-0.1.0", "swerve_langchain-0.1.0")
TIMEOUT = 300  # seconds for one build or install, PyPI included on a cold cache
REPO = "https://github.com/swerve-dev/swerve"


def _uv() -> str:
    uv = os.environ.get("UV") or shutil.which("uv")  # `uv run` names itself in $UV
    assert uv, "uv is needed to build and install (scripts/test installs it)"
    return uv


def _run(
    *args: str | Path, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    # A user's shell: nothing of the checkout on the path, no venv of ours active.
    drop = ("PYTHONPATH", "VIRTUAL_ENV", "UV_PROJECT_ENVIRONMENT")
    env = {**{k: v for k, v in os.environ.items() if k not in drop}, **(env or {})}
    run = subprocess.run(
        [str(a) for a in args], cwd=cwd, env=env, capture_output=True, text=True, timeout=TIMEOUT
    )
    assert run.returncode == 0, f"{args} failed:\n{run.stdout}\n{run.stderr}"
    return run


@dataclass(frozen=True)
class Built:
    dist: Path

    def one(self, pattern: str) -> Path:
        (path,) = self.dist.glob(pattern)
        return path


@dataclass(frozen=True)
class Venv:
    root: Path
    work: Path

    def bin(self, name: str) -> Path:
        return self.root / "bin" / name


def _readme_sh_lines() -> list[str]:
    """Every command line of the README's ``sh`` blocks, without its trailing comment."""
    blocks = re.findall(r"^```sh\n(.*?)^```", (ROOT / "README.md").read_text(), re.M | re.S)
    lines = (line.split("  #", 1)[0].strip() for block in blocks for line in block.splitlines())
    return [line for line in lines if line and not line.startswith("#")]


def _readme_line(*starts: str) -> list[str]:
    """The README's one command line that starts with ``starts``, as arguments."""
    (line,) = [ln for ln in _readme_sh_lines() if shlex.split(ln)[: len(starts)] == list(starts)]
    return shlex.split(line)


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    dist = tmp_path_factory.mktemp("dist")
    # The README's build command: each distribution's sdist, then its wheel built from that
    # sdist, as a user's pip would build from PyPI's sdist.
    command = _readme_line("./scripts/uv", "build")
    assert command[2:] == ["--all-packages", "--out-dir", "dist"], command
    _run(_uv(), "build", "-q", *command[2:-1], dist, cwd=ROOT)
    return Built(dist)


@pytest.fixture(scope="module")
def locked(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The locked versions, as pip constraints: the venvs are repeatable and served from uv's
    cache."""
    path = tmp_path_factory.mktemp("locked") / "locked.txt"
    export = _run(
        _uv(), "export", "--frozen", "-q", "--no-dev", "--all-extras", "--all-packages",
        "--no-emit-workspace", "--no-hashes", cwd=ROOT,
    )  # fmt: skip
    path.write_text(export.stdout)
    return path


@pytest.fixture(scope="module")
def venv(built: Built, locked: Path, tmp_path_factory: pytest.TempPathFactory) -> Venv:
    work = tmp_path_factory.mktemp("user")
    root = work / "venv"
    _run(_uv(), "venv", "-q", "--python", sys.executable, root, cwd=work)
    swerve_wheel = built.one("swerve-*.whl")
    _run(
        _uv(), "pip", "install", "-q", "--python", root / "bin/python", "--constraint", locked,
        f"swerve[cli,langchain] @ {swerve_wheel.as_uri()}", built.one("swerve_langchain-*.whl"),
        cwd=work,
    )  # fmt: skip
    return Venv(root, work)


@pytest.fixture(scope="module")
def cli_venv(built: Built, locked: Path, tmp_path_factory: pytest.TempPathFactory) -> Venv:
    """The built wheel with the ``cli`` extra and nothing else, installed as the README's
    "Use it in your project" says (uv's pip, for speed: the requirement is the same)."""
    work = tmp_path_factory.mktemp("cli-user")
    root = work / "venv"
    _run(_uv(), "venv", "-q", "--python", sys.executable, root, cwd=work)
    command = _readme_line("pip", "install", "./dist/swerve-0.1.0-py3-none-any.whl[cli]")
    (wheel,) = [a.replace("./dist/", f"{built.dist}/") for a in command[2:]]
    _run(
        _uv(), "pip", "install", "-q", "--python", root / "bin/python", "--constraint", locked,
        wheel, cwd=work,
    )  # fmt: skip
    return Venv(root, work)


def _importable(python: Path, *modules: str, cwd: Path) -> list[str]:
    code = (
        "import importlib.util as u, json\n"
        f"print(json.dumps([m for m in {modules!r} if u.find_spec(m)]))"
    )
    found: list[str] = json.loads(_run(python, "-c", code, cwd=cwd).stdout)
    return found


DEV_ONLY = ("pytest", "hypothesis", "mypy", "ruff", "grafana_foundation_sdk", "sybil")


def _metadata(wheel: Path) -> Message:
    with zipfile.ZipFile(wheel) as zf:
        (name,) = [n for n in zf.namelist() if n.endswith(".dist-info/METADATA")]
        return message_from_string(zf.read(name).decode())


# --- what the sdist and the wheels carry ----------------------------------------------------------
def test_sdist_carries_the_license_and_no_ci_bench_or_lock(built: Built) -> None:
    with tarfile.open(built.one("swerve-*.tar.gz")) as tar:
        top = {Path(name).parts[1] for name in tar.getnames() if len(Path(name).parts) > 1}
    assert {"LICENSE", "README.md", "pyproject.toml", "src"} <= top
    assert not top & {".ci", "bench", "uv.lock"}


def test_wheels_carry_license_dashboard_and_plugin(built: Built) -> None:
    for wheel, prefix in zip(sorted(built.dist.glob("*.whl")), VERSION_PARTS, strict=True):
        with zipfile.ZipFile(wheel) as zf:
            names = set(zf.namelist())
            assert f"{prefix}.dist-info/licenses/LICENSE" in names
            assert b"Copyright (c) 2026 the swerve authors" in zf.read(
                f"{prefix}.dist-info/licenses/LICENSE"
            )
    with zipfile.ZipFile(built.one("swerve-*.whl")) as zf:
        names = set(zf.namelist())
        assert "swerve/_dashboards/swerve.json" in names
        assert zf.read("swerve/_dashboards/swerve.json").decode() == dashboard()
        assert "swerve/_dashboards/alertmanager.yml" in names  # `dashboards export` writes it
        assert not [n for n in names if n.startswith("dashboards/")]  # the repo's generators
        entry_points = zf.read("swerve-0.1.0.dist-info/entry_points.txt").decode()
    assert "[pytest11]\nswerve = swerve._pytest_plugin" in entry_points


def test_metadata_bounds_both_ways_and_a_description_whose_links_work_on_pypi(
    built: Built,
) -> None:
    swerve = _metadata(built.one("swerve-*.whl"))
    adapter = _metadata(built.one("swerve_langchain-*.whl"))
    assert "swerve-langchain<0.2,>=0.1; extra == 'langchain'" in swerve.get_all("Requires-Dist", [])
    assert "swerve<0.2,>=0.1" in adapter.get_all("Requires-Dist", [])
    for meta in (swerve, adapter):
        assert meta["License-Expression"] == "MIT"
        urls = dict(u.split(", ", 1) for u in meta.get_all("Project-URL", []))
        assert {"Homepage", "Documentation", "Issues"} <= set(urls)
        assert all(u.startswith(REPO) for u in urls.values())
        assert "Typing :: Typed" in meta.get_all("Classifier", [])
        description = meta.get_payload()
        assert isinstance(description, str)
        targets = re.findall(r"\]\(([^)\s]+)\)", description)
        assert targets, "the description has links"
        assert [t for t in targets if not t.startswith((f"{REPO}/", "https://", "#"))] == []
        assert "/../" not in description
    assert f"]({REPO}/blob/main/docs/concepts.md)" in swerve.get_payload()


# --- a fresh venv without the development tools -------------------------------------------------
def test_the_venv_holds_the_wheels_and_no_development_tool(venv: Venv) -> None:
    code = (
        "import importlib.util as u, swerve, swerve_langchain\n"
        "print(swerve.__file__, swerve_langchain.__file__)\n"
        "print([m for m in ('pytest', 'grafana_foundation_sdk', 'dashboards') if u.find_spec(m)])"
    )
    out = _run(venv.bin("python"), "-c", code, cwd=venv.work).stdout.splitlines()
    assert all(p.startswith(str(venv.root)) for p in out[0].split())
    assert out[1] == "[]"


def test_swerve_demo_runs_from_the_cli_extra_alone(cli_venv: Venv) -> None:
    # Every import the demo makes (rich, the OTel SDK, httpx, swerve.testing's fake provider)
    # comes from swerve's dependencies and the cli extra: nothing else is there.
    others = ("swerve_langchain", "langchain_core", "redis", *DEV_ONLY)
    assert _importable(cli_venv.bin("python"), *others, cwd=cli_venv.work) == []
    # Its optional paths too: $OTEL_EXPORTER_OTLP_ENDPOINT's exporter, --metrics-port's.
    cli = ["rich", "yaml", "opentelemetry.exporter.otlp.proto.http.trace_exporter"]
    assert _importable(cli_venv.bin("python"), *cli, cwd=cli_venv.work) == cli
    demo = (cli_venv.bin("swerve"), "demo", "--fast", "--metrics-port", "0")
    out = _run(*demo, cwd=cli_venv.work).stdout
    assert "metrics at http://127.0.0.1:" in out
    assert "swap" in out and "served by anthropic/claude-sonnet-5" in out


def test_the_readme_demo_command_runs_without_the_dev_group(tmp_path: Path) -> None:
    (line,) = [ln for ln in _readme_sh_lines() if ln.endswith(" swerve demo")]
    command = shlex.split(line)
    assert command[:2] == ["./scripts/uv", "run"], command
    assert "--no-dev" in command and "--locked" in command  # the lock, without the dev group
    # As written, from the checkout, but into an environment of its own (not the project's
    # .venv, which other tests use): uv's own setting for that.
    env = {"UV_PROJECT_ENVIRONMENT": str(tmp_path / "env")}
    out = _run(ROOT / "scripts/uv", *command[1:], "--fast", cwd=ROOT, env=env).stdout
    assert "swap" in out
    python = tmp_path / "env/bin/python"
    assert _importable(python, "rich", "swerve", cwd=tmp_path) == ["rich", "swerve"]
    assert _importable(python, "swerve_langchain", "redis", *DEV_ONLY, cwd=tmp_path) == []


def test_use_it_in_your_project_with_uv_add(tmp_path: Path) -> None:
    """The README's ``uv add`` lines, from a fresh uv project of the user's own."""
    app = tmp_path / "app"
    app.mkdir()
    env = {"UV_PYTHON": sys.executable}
    _run(_uv(), "init", "-q", "--bare", "--name", "app", cwd=app, env=env)
    adds = [shlex.split(ln) for ln in _readme_sh_lines() if ln.startswith("uv add ")]
    assert len(adds) == 2, adds
    for add in adds:
        args = [a.replace("/path/to/swerve", str(ROOT)) for a in add[1:]]
        _run(_uv(), *args, "-q", cwd=app, env=env)
    code = "import swerve, redis, rich; from swerve_langchain import FailoverMiddleware"
    _run(_uv(), "run", "-q", "python", "-c", code, cwd=app, env=env)
    assert _importable(app / ".venv/bin/python", *DEV_ONLY, cwd=app) == []


def test_swerve_dashboards_export_writes_the_dashboard_and_rules(venv: Venv) -> None:
    config = venv.work / "fallbacks.json"
    config.write_text(json.dumps({"fallbackModelsByModel": {"a/x": ["b/y"]}}))
    for args, chains in (((), []), (("--config", config), ["a/x -> b/y"])):
        out = venv.work / f"export{len(args)}"
        _run(venv.bin("swerve"), "dashboards", "export", out, *args, cwd=venv.work)
        assert (out / "swerve.json").read_text() == dashboard()
        assert json.loads((out / "swerve.json").read_text())["panels"]
        groups = yaml.safe_load((out / "alerts.yml").read_text())["groups"]
        assert [g["name"] for g in groups] == ["swerve", "swerve-chains"]
        assert [r["labels"]["swerve_chain"] for r in groups[1]["rules"]] == chains
