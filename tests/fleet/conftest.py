"""Fixtures for fleets sharing route health through a real Redis.

``redis_server`` is a real ``redis-server`` on 127.0.0.1 (a free port, a temporary directory,
no persistence) that a test can kill, pause, resume and restart; ``start_redis`` starts more
(with a password, on a given port, or not yet). ``redis_cluster`` is a three-master Redis
Cluster. ``fleet`` starts worker processes (tests/fleet/worker.py) against them and the fake
provider. Everything started here is killed at teardown, whatever the test did to it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from swerve.testing import FakeProvider, Reply

from ._fleet import Worker, stop_all
from ._servers import RedisCluster, RedisServer


@pytest.fixture
def start_redis(tmp_path: Path) -> Iterator[Callable[..., RedisServer]]:
    """``start_redis(requirepass=None, port=None, start=True)``: another real Redis."""
    servers: list[RedisServer] = []

    def start(*, start: bool = True, **kwargs: Any) -> RedisServer:
        server = RedisServer(tmp_path / f"redis{len(servers)}", start=False, **kwargs)
        servers.append(server)  # registered first: stopped at teardown even if it fails
        if start:
            server.start()
        return server

    yield start
    for server in servers:
        server.stop()


@pytest.fixture
def redis_server(start_redis: Callable[..., RedisServer]) -> RedisServer:
    return start_redis()


@pytest.fixture
def redis_cluster(tmp_path: Path) -> Iterator[RedisCluster]:
    cluster = RedisCluster(tmp_path / "cluster")
    yield cluster
    cluster.stop()


@pytest.fixture
def fake() -> Iterator[FakeProvider]:
    with FakeProvider() as server:
        for name in ("primary", "fallback"):
            server.set_reply(name, Reply(text=f"from {name}"))
        yield server


@pytest.fixture
def fleet(
    tmp_path: Path, redis_server: RedisServer, fake: FakeProvider
) -> Iterator[Callable[..., list[Worker]]]:
    """``fleet(config, n, modes=("sync",))``: ``n`` worker processes started at once (mode
    ``modes[i % len(modes)]``), each ready and sharing health before it is returned."""
    started: list[Worker] = []
    prefix = f"fleet-{tmp_path.name}"

    def start(config: dict[str, Any], n: int, modes: tuple[str, ...] = ("sync",)) -> list[Worker]:
        base = f"http://127.0.0.1:{fake.port}"
        workers = []
        for i in range(n):
            spec = {
                "redis": redis_server.url,
                "prefix": prefix,
                "fake": base,
                "config": config,
                "mode": modes[i % len(modes)],
            }
            worker = Worker(f"worker{len(started)}-{spec['mode']}", spec, tmp_path)
            started.append(worker)
            workers.append(worker)
        for worker in workers:
            worker.ready()
        return workers

    yield start
    stop_all(started)
