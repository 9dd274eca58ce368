"""Real Redis for the fleet tests: ``redis-server`` processes on 127.0.0.1, each on a free port
with its own temporary directory and no persistence, and bounded polling (no fixed sleeps that
a slow machine could break)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from pathlib import Path

import redis

from .._local import binary, free_port, wait_for


class RedisServer:
    """One ``redis-server`` on 127.0.0.1:``port`` (free unless given), data in ``home``, never
    saved to disk. :meth:`kill`, :meth:`pause`, :meth:`resume` and :meth:`restart` are the
    faults a fleet lives through; :meth:`stop` (teardown) always leaves no process behind."""

    def __init__(
        self,
        home: Path,
        *,
        port: int | None = None,
        requirepass: str | None = None,
        extra: tuple[str, ...] = (),
        start: bool = True,
    ) -> None:
        self.home = home
        home.mkdir(parents=True, exist_ok=True)
        self.port = port or free_port()
        self.requirepass = requirepass
        self.extra = extra
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = home / "redis.log"
        if start:
            self.start()

    @property
    def url(self) -> str:
        auth = f":{self.requirepass}@" if self.requirepass else ""
        return f"redis://{auth}127.0.0.1:{self.port}/0"

    def client(self) -> redis.Redis:
        """A plain redis-py client (for the test to look inside)."""
        return redis.Redis(
            host="127.0.0.1", port=self.port, password=self.requirepass, socket_timeout=2,
            socket_connect_timeout=2,
        )  # fmt: skip

    def start(self) -> None:
        """Start the server (empty) and wait until it answers PING."""
        assert self.proc is None or self.proc.poll() is not None, "already running"
        for leftover in ("dump.rdb", "appendonly.aof"):
            with contextlib.suppress(FileNotFoundError):
                (self.home / leftover).unlink()
        args = [
            binary("redis-server"),
            "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.home),
            "--save", "", "--appendonly", "no", "--daemonize", "no",
            "--logfile", str(self.log), *self.extra,
        ]  # fmt: skip
        if self.requirepass:
            args += ["--requirepass", self.requirepass]
        self.proc = subprocess.Popen(
            args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT
        )
        try:
            wait_for(f"redis-server on port {self.port}", self._answers, timeout=10)
        except AssertionError:
            log = self.log.read_text() if self.log.exists() else ""
            self.stop()
            raise AssertionError(f"redis-server did not start:\n{log[-2000:]}") from None

    def _answers(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            log = self.log.read_text() if self.log.exists() else ""
            raise AssertionError(f"redis-server exited ({self.proc.returncode}):\n{log[-2000:]}")
        client = redis.Redis(
            host="127.0.0.1", port=self.port, password=self.requirepass, socket_timeout=0.5,
            socket_connect_timeout=0.5,
        )  # fmt: skip
        try:
            return bool(client.ping())
        except redis.RedisError:
            return False
        finally:
            client.close()

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def kill(self) -> None:
        """SIGKILL: the server is gone at once, with everything it held."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=10)

    def pause(self) -> None:
        """SIGSTOP: the server keeps its sockets and answers nothing."""
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGSTOP)

    def resume(self) -> None:
        """SIGCONT after :meth:`pause`."""
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGCONT)

    def restart(self) -> None:
        """Kill the server (if alive) and start a new, empty one on the same port."""
        self.kill()
        self.start()

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)  # also ends a stopped (paused) process
        self.proc.wait(timeout=10)


class RedisCluster:
    """A local Redis Cluster of three masters (no replicas), each a :class:`RedisServer` with
    its own directory and nodes file, created with ``redis-cli --cluster create``."""

    def __init__(self, home: Path) -> None:
        self.nodes: list[RedisServer] = []
        try:
            for i in range(3):
                cluster = (
                    "--cluster-enabled", "yes",
                    "--cluster-config-file", "nodes.conf",  # in the node's own directory
                    "--cluster-port", str(free_port()),  # the bus port, free too
                    "--cluster-node-timeout", "5000",
                )  # fmt: skip
                self.nodes.append(RedisServer(home / f"node{i}", extra=cluster))
            create = subprocess.run(
                [binary("redis-cli"), "--cluster", "create",
                 *(f"127.0.0.1:{n.port}" for n in self.nodes),
                 "--cluster-replicas", "0", "--cluster-yes"],
                capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL,
            )  # fmt: skip
            assert create.returncode == 0, f"redis-cli --cluster create failed:\n{create.stdout}"
            wait_for("cluster_state:ok on every node", self._ok, timeout=20, poll=0.05)
        except BaseException:
            self.stop()
            raise

    @property
    def url(self) -> str:
        """Any node's URL, with ``?cluster=1`` as :meth:`swerve.RedisHealth.from_url` reads it."""
        return f"redis://127.0.0.1:{self.nodes[0].port}/0?cluster=1"

    def _ok(self) -> bool:
        for node in self.nodes:
            client = node.client()
            try:
                info = client.execute_command("CLUSTER INFO")  # type: ignore[no-untyped-call]
            except redis.RedisError:
                return False
            finally:
                client.close()
            # redis-py parses the reply into a dict; older versions hand back the text.
            if isinstance(info, dict):
                state = info.get("cluster_state")
            else:
                text = info.decode() if isinstance(info, bytes) else str(info)
                state = "ok" if "cluster_state:ok" in text else text
            if state not in ("ok", b"ok"):
                return False
        return True

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()
