"""Redis in the cluster, reached from the test process through ``kubectl port-forward``.

A port-forward is the one path into a Service that works on every cluster (kind, the local
cluster, a cloud). It dies with its pod's container and sometimes on its own, so every
call goes through `PortForward.call`, which restarts the forward and retries until a
deadline instead of letting a flaky tunnel pass for a lost task.
"""

from __future__ import annotations

import re
import subprocess
import threading
import time
from collections.abc import Callable
from typing import IO, TypeVar

import redis

from e2e.lib.kube import KUBECTL

__all__ = ["PortForward"]

T = TypeVar("T")
_FORWARDING = re.compile(r"Forwarding from 127\.0\.0\.1:(\d+)")


class PortForward:
    """``kubectl port-forward <target> :<port>`` kept alive, plus a Redis client through it."""

    def __init__(self, namespace: str, target: str, remote_port: int = 6379):
        self.namespace = namespace
        self.target = target
        self.remote_port = remote_port
        self.process: subprocess.Popen[str] | None = None
        self.local_port: int | None = None
        self._client: redis.Redis | None = None
        self._drainer: threading.Thread | None = None
        self._lock = threading.Lock()

    def start(self, timeout: float = 30) -> None:
        self.stop()
        process = subprocess.Popen(
            [KUBECTL, "-n", self.namespace, "port-forward", self.target, f":{self.remote_port}"],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        port = _read_port(process, timeout)
        if port is None:
            process.kill()
            output = process.communicate()[0]
            raise RuntimeError(f"port-forward to {self.target} did not start: {output.strip()}")
        self.process = process
        self.local_port = port
        # Drain kubectl's output so a chatty tunnel never blocks on a full pipe.
        self._drainer = threading.Thread(target=_drain, args=(process.stdout,), daemon=True)
        self._drainer.start()
        self._client = redis.Redis(
            host="127.0.0.1",
            port=port,
            socket_timeout=5,
            socket_connect_timeout=5,
            decode_responses=True,
        )

    def stop(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None
        if self.process is not None:
            if self.process.poll() is None:
                self.process.terminate()
                try:
                    self.process.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    self.process.kill()
                    self.process.wait()
            # kubectl is gone: the drainer reads to EOF, then the pipe can be closed.
            if self._drainer is not None:
                self._drainer.join(timeout=5)
                self._drainer = None
            if self.process.stdout is not None:
                self.process.stdout.close()
            self.process = None

    @property
    def url(self) -> str:
        """The forwarded Redis URL (valid until the next restart of the forward)."""
        if self.local_port is None:
            raise RuntimeError("port-forward not started")
        return f"redis://127.0.0.1:{self.local_port}/0"

    def client(self) -> redis.Redis:
        with self._lock:
            if self._client is None or self.process is None or self.process.poll() is not None:
                self.start()
            assert self._client is not None
            return self._client

    def call(self, fn: Callable[[redis.Redis], T], *, timeout: float = 60) -> T:
        """Run ``fn(client)``, restarting the forward on connection errors until ``timeout``."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                return fn(self.client())
            except (redis.ConnectionError, redis.TimeoutError, RuntimeError):
                if time.monotonic() >= deadline:
                    raise
                with self._lock:
                    self.stop()
                time.sleep(1)


def _read_port(process: subprocess.Popen[str], timeout: float) -> int | None:
    """The local port kubectl reports, or None if it exits or stays silent past ``timeout``."""
    found: list[int] = []
    assert process.stdout is not None
    stdout = process.stdout

    def reader() -> None:
        for line in stdout:
            match = _FORWARDING.search(line)
            if match:
                found.append(int(match.group(1)))
                return

    thread = threading.Thread(target=reader, daemon=True)
    thread.start()
    thread.join(timeout)
    return found[0] if found else None


def _drain(stream: IO[str] | None) -> None:
    if stream is None:
        return
    for _ in stream:
        pass
