"""Fleet processes for the tests: tests/fleet/worker.py as real subprocesses, spoken to over
stdin/stdout with one JSON object a line, every read bounded by a timeout."""

from __future__ import annotations

import contextlib
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO, Any

from ._servers import wait_for

WORKER = Path(__file__).with_name("worker.py")
P, F = "primary/model-a", "fallback/model-b"


class Worker:
    """One fleet process. :meth:`send` then :meth:`answer` (or :meth:`ask`, both at once);
    :meth:`kill` is ``kill -9``; :meth:`stop` (teardown) leaves no process behind."""

    def __init__(self, name: str, spec: dict[str, Any], logs: Path) -> None:
        self.name = name
        self.stderr_path = logs / f"{name}.stderr"
        with self.stderr_path.open("w") as stderr:
            self.proc = subprocess.Popen(
                [sys.executable, str(WORKER), json.dumps(spec)],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr, text=True,
                env={"PATH": "", "PYTHONUNBUFFERED": "1"},
            )  # fmt: skip
        assert self.proc.stdout is not None
        self._lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._pump, args=(self.proc.stdout,), daemon=True).start()

    def _pump(self, stream: IO[str]) -> None:
        for line in stream:
            self._lines.put(line)
        self._lines.put("")  # EOF

    def ready(self, timeout: float = 20.0) -> dict[str, Any]:
        answer = self.answer(timeout)
        assert answer.get("ready") and answer.get("sharing"), f"{self.name} not sharing: {answer}"
        return answer

    def send(self, **command: Any) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(command) + "\n")
        self.proc.stdin.flush()

    def answer(self, timeout: float = 20.0) -> dict[str, Any]:
        try:
            line = self._lines.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"{self.name} did not answer within {timeout:g}s") from None
        return self._parse(line)

    def _parse(self, line: str) -> dict[str, Any]:
        if not line:
            raise AssertionError(f"{self.name} exited:\n{self.stderr()}")
        answer: dict[str, Any] = json.loads(line)
        assert "error" not in answer, f"{self.name}: {answer['error']}\n{self.stderr()}"
        return answer

    def poll(self) -> dict[str, Any] | None:
        """An answer if one has arrived, else None (without waiting)."""
        try:
            line = self._lines.get_nowait()
        except queue.Empty:
            return None
        return self._parse(line)

    def ask(self, timeout: float = 20.0, **command: Any) -> dict[str, Any]:
        self.send(**command)
        return self.answer(timeout)

    def call(self, route: str = P, at: float | None = None) -> dict[str, Any]:
        return self.ask(cmd="call", route=route, at=at)

    def health(self) -> dict[str, Any]:
        return self.ask(cmd="health")

    def sees(self, route: str, **expected: Any) -> bool:
        """Whether this process's view of ``route`` has every ``expected`` field."""
        view = self.health()["health"].get(route, {})
        return all(view.get(k) == v for k, v in expected.items())

    def wait_until_sees(self, route: str, timeout: float = 5.0, **expected: Any) -> None:
        wait_for(
            f"{self.name} to see {route} as {expected}",
            lambda: self.sees(route, **expected),
            timeout,
        )

    def stderr(self) -> str:
        return self.stderr_path.read_text() if self.stderr_path.exists() else ""

    def kill(self) -> None:
        """``kill -9``: no cleanup of any kind runs in the process."""
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)

    def close(self) -> None:
        """Close stdin: the worker finishes and exits (:meth:`stop` waits for it)."""
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            with contextlib.suppress(BrokenPipeError):
                self.proc.stdin.close()

    def stop(self) -> None:
        self.close()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)


def stop_all(workers: list[Worker]) -> None:
    """Stop every worker, letting them all exit at once."""
    for worker in workers:
        worker.close()
    for worker in workers:
        worker.stop()


def calls_to(route: str, answers: list[dict[str, Any]]) -> int:
    """Attempts the answered calls made on ``route``, fleet-wide."""
    return sum(a["route"] == route for answer in answers for a in answer["attempts"])


def events(answers: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    """Attributes of the ``name`` events on the answered calls' spans."""
    return [attrs for answer in answers for event, attrs in answer["events"] if event == name]


def start_together(workers: list[Worker], at: float, route: str = P) -> None:
    """Ask every worker to call ``route`` at the moment ``at`` (epoch seconds): a race."""
    assert at > time.time(), "the moment to start at has passed already"
    for worker in workers:
        worker.send(cmd="call", route=route, at=at)
