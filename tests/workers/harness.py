"""Driving real worker processes from tests: start, signal, wait on conditions, read logs."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from taskfleet.protocol.connect import connect

from tests.polling import wait_for

REPO = Path(__file__).resolve().parents[2]

#: A short heartbeat so tests run in seconds (a test sets the queue's lease TTL itself).
FAST = ["--heartbeat-interval", "0.2"]
#: What waiting on a worker process takes: an interpreter start, a claim, a log line.
WORKER_TIMEOUT_S = 10.0
WORKER_INTERVAL_S = 0.02


def env_for(redis_url: str, runtime_dir: Path, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        {
            "PYTHONPATH": str(REPO),
            "TASKFLEET_REDIS_URL": redis_url,
            "TASKFLEET_RUNTIME_DIR": str(runtime_dir),
            "PYTHONUNBUFFERED": "1",
        }
    )
    env.update(extra)
    return env


def taskfleet(
    *args: str, env: dict[str, str], timeout: float = 30.0, check: bool = False
) -> subprocess.CompletedProcess[str]:
    """Run one ``python -m taskfleet`` command to completion."""
    return subprocess.run(
        [sys.executable, "-m", "taskfleet", *args],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=check,
    )


class WorkerProcess:
    """``taskfleet worker`` as a subprocess with its log in a file (no pipe to fill up)."""

    def __init__(
        self,
        *,
        redis_url: str,
        queue: str,
        handler: str,
        workdir: Path,
        pod: str = "pod-a",
        args: list[str] | None = None,
        prefix: list[str] | None = None,
        env: dict[str, str] | None = None,
        program: list[str] | None = None,
    ) -> None:
        """``program``: what runs ``worker ...`` (this tree's ``python -m taskfleet`` unless
        given; another release's ``taskfleet`` script, say)."""
        self.pod = pod
        self.runtime_dir = workdir / f"runtime-{pod}"
        self.log_path = workdir / f"worker-{pod}.log"
        self.env = env_for(redis_url, self.runtime_dir, TASKFLEET_POD_NAME=pod, **(env or {}))
        self.argv = [
            *(prefix or []),
            *(program or [sys.executable, "-m", "taskfleet"]),
            "worker",
            "--queue",
            queue,
            "--handler",
            handler,
            "--log-format",
            "json",
            *(FAST if args is None else args),
        ]
        self.process: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def start(self) -> WorkerProcess:
        self.starts += 1
        self._configure_lease_ttl()
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                self.argv, env=self.env, cwd=REPO, stdout=log, stderr=subprocess.STDOUT
            )
        return self

    def _configure_lease_ttl(self) -> None:
        """A worker only reads the queue's lease TTL: with ``--lease-ttl`` among the
        arguments, set it in the queue's config first, as the operator does for its pods."""
        if "--lease-ttl" not in self.argv:
            return
        ttl = self.argv[self.argv.index("--lease-ttl") + 1]
        queue = self.argv[self.argv.index("--queue") + 1]
        # a test of a refused or unreachable Redis: the worker meets that itself
        with (
            contextlib.suppress(redis.RedisError),
            connect(self.env["TASKFLEET_REDIS_URL"]) as client,
        ):
            client.hset(f"tf:{{{queue}}}:config", "lease_ttl_s", ttl)

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def events(self) -> list[dict[str, Any]]:
        """The worker's JSON log lines (other lines, e.g. from a dying interpreter, skipped)."""
        out = []
        for line in self.log_path.read_text(errors="replace").splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:
                continue
        return out

    def has_event(self, event: str, **fields: Any) -> bool:
        return any(
            e.get("event") == event and all(e.get(k) == v for k, v in fields.items())
            for e in self.events()
        )

    def wait_event(self, event: str, timeout: float = WORKER_TIMEOUT_S, **fields: Any) -> None:
        wait_for(
            lambda: self.has_event(event, **fields),
            timeout=timeout,
            interval=WORKER_INTERVAL_S,
            what=lambda: f"{event} {fields or ''} in {self.pod}'s log:\n{self.log_text()}",
        )

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def signal(self, signum: int = signal.SIGTERM) -> None:
        assert self.process is not None
        self.process.send_signal(signum)

    def wait(self, timeout: float = 15.0) -> int:
        assert self.process is not None
        try:
            return self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"worker {self.pod} still running:\n{self.log_text()}") from None

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None


class Fleet:
    """The worker processes of one test; ``close()`` kills whatever is still running."""

    def __init__(self, redis_url: str, queue: str, workdir: Path) -> None:
        self.redis_url = redis_url
        self.queue = queue
        self.workdir = workdir
        self.workers: list[WorkerProcess] = []

    def add(self, handler: str, *, pod: str = "pod-a", **kwargs: Any) -> WorkerProcess:
        worker = WorkerProcess(
            redis_url=self.redis_url,
            queue=self.queue,
            handler=handler,
            workdir=self.workdir,
            pod=pod,
            **kwargs,
        )
        self.workers.append(worker)
        return worker

    def logs(self) -> str:
        return "\n".join(f"--- {w.pod}\n{w.log_text()}" for w in self.workers)

    def close(self) -> None:
        for worker in self.workers:
            worker.kill()


@pytest.fixture
def fleet(redis_url: str, tmp_path: Path) -> Iterator[Fleet]:
    """Workers on the queue "jobs" of the per-test server, killed at teardown if still running."""
    fleet = Fleet(redis_url, "jobs", tmp_path)
    yield fleet
    fleet.close()
