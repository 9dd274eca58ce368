"""The public adapter and store API (issue 21): the LangChain adapter needs nothing private,
every public name is documented, and a store written against public names serves a Failover."""

from __future__ import annotations

import ast
import asyncio
import logging
import re
from collections.abc import Container
from pathlib import Path
from types import ModuleType

import pytest

import swerve
import swerve._failures
import swerve._health.store
import swerve._wire.rules
from swerve import Attempt, Failover, FallbackConfig, HealthStore, UpstreamError, adapters, stores
from swerve.stores import (
    Admission,
    Admitted,
    BreakerConfig,
    BreakerState,
    BreakerTransition,
    Cooldown,
    CooldownRule,
    Outcome,
    RouteHealth,
)
from swerve.testing import FakeClock

ROOT = Path(__file__).resolve().parents[1]
LANGCHAIN_SRC = ROOT / "integrations" / "langchain" / "src"
EXTENDING = ROOT / "docs" / "extending.md"
PUBLIC = (adapters, stores)


def _private_swerve_imports(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
            names: list[str] = []
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            modules = [node.module]
            names = [alias.name for alias in node.names]
        else:
            continue  # a relative import stays inside swerve_langchain
        for module in modules:
            parts = module.split(".")
            if parts[0] != "swerve":
                continue
            private = [p for p in parts[1:] if p.startswith("_")]
            private += [n for n in names if n.startswith("_")]
            if private:
                found.append(f"{path.name}:{node.lineno}: {module} {private}")
    return found


def test_the_langchain_adapter_imports_only_public_swerve_names() -> None:
    files = sorted(LANGCHAIN_SRC.rglob("*.py"))
    assert len(files) > 5  # the walk found the package
    assert [hit for path in files for hit in _private_swerve_imports(path)] == []


def test_the_walk_catches_private_imports(tmp_path: Path) -> None:
    # The check above is only as good as its walk: it must see every private form.
    bad = tmp_path / "bad.py"
    bad.write_text(
        "import swerve._failures\n"
        "from swerve._wire.rules import CACHE_CONTROL\n"
        "from swerve import _version\n"
        "from swerve.adapters import classify\n"
        "from . import _history\n"
    )
    hits = _private_swerve_imports(bad)
    assert [hit.split(":")[1] for hit in hits] == ["1", "2", "3"], hits


@pytest.mark.parametrize("module", PUBLIC, ids=lambda m: m.__name__)
def test_every_public_name_resolves_and_is_documented(module: ModuleType) -> None:
    assert module.__doc__
    documented = set(re.findall(r"`([A-Za-z_]\w*)", EXTENDING.read_text()))
    for name in module.__all__:
        assert getattr(module, name) is not None, name
        assert name in documented, f"{module.__name__}.{name} is not in docs/extending.md"


def test_public_names_are_the_objects_swerve_uses() -> None:
    for name in ("AttemptTimeout", "CircuitOpenError", "IncompleteStreamError", "InStreamError",
                 "MalformedStreamError", "UpstreamError", "classify"):  # fmt: skip
        assert getattr(adapters, name) is getattr(swerve._failures, name), name
    for name in ("CacheFix", "Downgrade", "EmptyTextFix", "Wire", "prepare_for_route"):
        assert getattr(adapters, name) is getattr(swerve._wire.rules, name), name
    for name in stores.__all__:
        if name != "BreakerConfig":
            assert getattr(stores, name) is getattr(swerve._health.store, name), name
    assert stores.BreakerConfig is swerve.BreakerConfig
    assert stores.HealthStore is swerve.HealthStore
    assert len(swerve.__all__) <= 25  # the top level stays on one screen


# --- a store written against public names only -------------------------------------------------
class DictHealth:
    """Route health in a dict; no breaker (every attempt is admitted)."""

    def __init__(self) -> None:
        self.cooling: dict[str, tuple[float, int]] = {}  # route -> (until, streak)
        self.leases: dict[str, float] = {}  # route -> when its probe's lease ends
        self.calls: list[str] = []

    def cool_down(self, route: str, now: float, rule: CooldownRule, reason: str = "") -> Cooldown:
        self.calls.append("cool_down")
        until, streak = self.cooling.get(route, (now, -1))
        streak = streak + 1 if until <= now else streak  # a failed probe grows it
        seconds = rule.seconds(streak)
        until = max(until, now + seconds)
        self.cooling[route] = (until, streak)
        self.leases.pop(route, None)
        return Cooldown(route, until, seconds, streak)

    def unavailable(self, now: float) -> Container[str]:
        return {r for r, (until, _) in self.cooling.items()
                if until > now or self.leases.get(r, 0.0) > now}  # fmt: skip

    def probe_due(self, route: str, now: float) -> bool:
        until, _ = self.cooling.get(route, (float("inf"), 0))
        return until <= now and self.leases.get(route, 0.0) <= now

    def claim_probe(self, route: str, now: float, lease_s: float) -> bool:
        self.calls.append("claim_probe")
        if not self.probe_due(route, now):
            return False
        self.leases[route] = now + lease_s
        return True

    async def aclaim_probe(self, route: str, now: float, lease_s: float) -> bool:
        return self.claim_probe(route, now, lease_s)

    def release_probe(self, route: str) -> None:
        self.leases.pop(route, None)

    def recovered(self, route: str, now: float) -> bool:
        if route in self.cooling and self.cooling[route][0] <= now:
            del self.cooling[route]
            self.leases.pop(route, None)
            self.calls.append("recovered")
            return True
        return False

    def admit(
        self, route: str, now: float, config: BreakerConfig, *, lease_s: float | None = None
    ) -> Admitted:
        return Admitted(Admission.ALLOWED, None)

    async def aadmit(
        self, route: str, now: float, config: BreakerConfig, *, lease_s: float | None = None
    ) -> Admitted:
        return self.admit(route, now, config, lease_s=lease_s)

    def record(
        self,
        route: str,
        outcome: Outcome,
        now: float,
        config: BreakerConfig,
        *,
        probe: bool,
        period: int | None = None,
    ) -> BreakerTransition | None:
        return None

    def snapshot(self, now: float) -> list[RouteHealth]:
        return [
            RouteHealth(r, until if until > now else None, BreakerState.CLOSED, until <= now)
            for r, (until, _) in self.cooling.items()
        ]

    def clear(self, route: str | None = None) -> None:
        for r in list(self.cooling) if route is None else [route]:
            self.cooling.pop(r, None)
            self.leases.pop(r, None)

    def drain(self, route: str, until: float, now: float) -> None:
        self.cooling[route] = (until, 0)

    def take_notices(self) -> list[tuple[str, str]]:
        return []


CONFIG = FallbackConfig(
    fallbacks={"primary/m": "backup/m"}, max_retries=0, cooldown_s=10.0, cooldown_max_s=40.0
)


class Upstream:
    """The primary fails while ``down``; the backup always answers."""

    def __init__(self) -> None:
        self.down = True
        self.tried: list[str] = []

    def answer(self, attempt: Attempt) -> str:
        self.tried.append(str(attempt.route))
        if attempt.route.provider == "primary" and self.down:
            raise UpstreamError(503)
        return f"from {attempt.route}"

    async def aanswer(self, attempt: Attempt) -> str:
        return self.answer(attempt)


def _through_an_outage(call: object, store: DictHealth, clock: FakeClock, up: Upstream) -> None:
    def run() -> str:
        if asyncio.iscoroutinefunction(call):
            return str(asyncio.run(call("primary/m", up.aanswer)).value)
        return str(call("primary/m", up.answer).value)  # type: ignore[operator]

    assert run() == "from backup/m"  # failed on the primary: swapped
    assert up.tried == ["primary/m", "backup/m"]
    assert "primary/m" in store.unavailable(clock.now)
    (health,) = store.snapshot(clock.now)
    assert health.degraded and health.degraded_until == clock.now + 10.0
    assert run() == "from backup/m" and up.tried[2:] == ["backup/m"]  # the cooldown holds
    clock.advance(10.0)  # the cooldown ends: the next call probes the primary, which is back
    up.down = False
    assert run() == "from primary/m"
    assert up.tried[3:] == ["primary/m"] and store.cooling == {}
    assert store.calls == ["cool_down", "claim_probe", "recovered"]


def test_a_store_written_against_public_names_serves_a_failover() -> None:
    store, clock, up = DictHealth(), FakeClock(), Upstream()
    assert isinstance(store, HealthStore)
    failover = Failover(CONFIG, health=store, clock=clock)
    _through_an_outage(failover.call, store, clock, up)


def test_a_store_written_against_public_names_serves_async_calls() -> None:
    store, clock, up = DictHealth(), FakeClock(), Upstream()
    failover = Failover(CONFIG, health=store, clock=clock)
    _through_an_outage(failover.acall, store, clock, up)


def test_a_failed_probe_grows_the_cooldown_in_that_store() -> None:
    store, clock, up = DictHealth(), FakeClock(), Upstream()
    failover = Failover(CONFIG, health=store, clock=clock)
    failover.call("primary/m", up.answer)
    clock.advance(10.0)
    assert failover.call("primary/m", up.answer).value == "from backup/m"  # the probe failed
    assert store.cooling["primary/m"] == (clock.now + 20.0, 1)


def test_a_store_without_learned_latency_serves_and_says_what_it_cannot_learn(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # The learned-latency methods are optional: a store without them serves every call, and a
    # config that reads them says once that its adaptive limit and quantile hedges do nothing.
    store, clock, up = DictHealth(), FakeClock(), Upstream()
    config = CONFIG.model_copy(update={"hedge_after": "p95"})
    failover = Failover(config, health=store, clock=clock)
    with caplog.at_level(logging.WARNING, logger="swerve"):
        _through_an_outage(failover.call, store, clock, up)
    (warning,) = [r for r in caplog.records if "learned latency" in r.getMessage()]
    assert "DictHealth keeps no learned latency" in warning.getMessage()
