"""Real redis-server processes for tests.

A session-wide server (no persistence) backs most tests and is flushed per test; a
factory starts separate servers with persistence that a test may stop, start and
restart to exercise outages. Servers run in temp dirs on free ports, so parallel
engineers and CI runs never collide.
"""

from __future__ import annotations

import asyncio
import random
import shutil
import socket
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import redis
import redis.asyncio
from taskfleet import Queue
from taskfleet.protocol.connect import connect_queue_async
from taskfleet.protocol.keys import QueueKeys

REDIS_SERVER = shutil.which("redis-server") or "/usr/bin/redis-server"
START_DEADLINE_S = 10.0


def free_port() -> int:
    """A TCP port free right now (the server binds it a moment later; collisions are rare)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def free_cluster_port() -> int:
    """A free port for a cluster-enabled server: its bus port (+10000) must be free too."""
    rng = random.Random()
    for _ in range(200):
        port = rng.randrange(20000, 55535)
        if _bindable(port) and _bindable(port + 10000):
            return port
    raise RuntimeError("no free port pair for a cluster-enabled redis-server")


class RedisServer:
    """One redis-server subprocess that can be stopped and started again on the same port.

    With ``persistent=True`` the server writes an append-only file in its directory, so
    data survives ``restart()`` the way it does for a Redis with a volume in a cluster.
    With ``password`` it requires that password (``requirepass``) of the default user;
    ``admin()`` is a client that has it, ``url_as()`` a URL with any credentials.
    """

    def __init__(
        self,
        directory: Path,
        *,
        port: int | None = None,
        persistent: bool = False,
        extra_args: Sequence[str] = (),
        password: str | None = None,
    ):
        self.directory = directory
        self.port = port or free_port()
        self.persistent = persistent
        self.extra_args = tuple(extra_args)
        self.password = password
        self.process: subprocess.Popen[bytes] | None = None
        self.directory.mkdir(parents=True, exist_ok=True)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def url_as(self, user: str | None = None, password: str | None = None) -> str:
        """The server's URL with these credentials (none: as ``url``)."""
        if user is None and password is None:
            return self.url
        return f"redis://{user or ''}:{password or ''}@127.0.0.1:{self.port}/0"

    def admin(self) -> redis.Redis:
        """A client with the default user's password (the caller closes it)."""
        return redis.Redis(host="127.0.0.1", port=self.port, password=self.password)

    def _argv(self) -> list[str]:
        argv = [
            REDIS_SERVER,
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--dir",
            str(self.directory),
            "--daemonize",
            "no",
            "--logfile",
            str(self.directory / "redis.log"),
            "--save",
            "",
        ]
        if self.persistent:
            argv += ["--appendonly", "yes", "--appendfsync", "always"]
        else:
            argv += ["--appendonly", "no"]
        if self.password is not None:
            argv += ["--requirepass", self.password]
        return argv + list(self.extra_args)

    def start(self) -> None:
        if self.process is not None and self.process.poll() is None:
            return
        self.process = subprocess.Popen(
            self._argv(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        deadline = time.monotonic() + START_DEADLINE_S
        client = redis.Redis(
            host="127.0.0.1", port=self.port, socket_timeout=1.0, password=self.password
        )
        try:
            while True:
                if self.process.poll() is not None:
                    log = (self.directory / "redis.log").read_text(errors="replace")[-2000:]
                    raise RuntimeError(f"redis-server exited at start: {log}")
                try:
                    if client.ping():
                        return
                except redis.ConnectionError:  # includes BusyLoadingError while loading the AOF
                    pass
                if time.monotonic() > deadline:
                    raise RuntimeError(f"redis-server on port {self.port} did not answer")
                time.sleep(0.02)
        finally:
            client.close()

    def stop(self) -> None:
        """Stop the server (SIGTERM, then SIGKILL after a bound); idempotent."""
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=START_DEADLINE_S)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None

    def kill(self) -> None:
        """Kill the server without letting it save (an abrupt outage)."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self.process = None

    def restart(self) -> None:
        self.stop()
        self.start()

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """The session's shared redis-server (no persistence)."""
    server = RedisServer(tmp_path_factory.mktemp("redis"))
    server.start()
    yield server
    server.stop()


@pytest.fixture
def redis_url(redis_server: RedisServer) -> Iterator[str]:
    """URL of the shared server, flushed before each test so tests never see each other."""
    if not redis_server.running:
        redis_server.start()
    client = redis.Redis.from_url(redis_server.url)
    try:
        client.flushall()
    finally:
        client.close()
    yield redis_server.url


@pytest.fixture
def redis_client(redis_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url)
    yield client
    client.close()


class RedisServerFactory:
    """Starts separate, persistent servers; every one is stopped at the end of the test."""

    def __init__(self, base: Path):
        self.base = base
        self.servers: list[RedisServer] = []

    def __call__(
        self,
        *,
        persistent: bool = True,
        start: bool = True,
        port: int | None = None,
        extra_args: Sequence[str] = (),
        password: str | None = None,
    ) -> RedisServer:
        server = RedisServer(
            self.base / f"redis-{len(self.servers)}",
            port=port,
            persistent=persistent,
            extra_args=extra_args,
            password=password,
        )
        self.servers.append(server)
        if start:
            server.start()
        return server

    def close(self) -> None:
        for server in self.servers:
            server.stop()


@pytest.fixture
def redis_server_factory(tmp_path: Path) -> Iterator[RedisServerFactory]:
    """``redis_server_factory()`` -> a RedisServer with ``.url .stop() .start() .restart()``
    (``password=...``: one that requires it)."""
    factory = RedisServerFactory(tmp_path)
    yield factory
    factory.close()


class BlockingBroker:
    """A ``taskfleet.Broker`` driven from sync test code on an event loop of its own.

    Protocol tests read top to bottom like the scenario they check; the worker's own
    tests use the async Broker directly.
    """

    def __init__(self, runner: asyncio.Runner, url: str, queue: str, pod: str, incarnation: str):
        from taskfleet.worker.broker import Broker

        self._runner = runner
        self.client = runner.run(_async_client(url, queue))
        self.broker = Broker(queue, self.client, pod, incarnation)

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.broker, name)
        if not callable(method):
            return method

        def call(*args: Any, **kwargs: Any) -> Any:
            return self._runner.run(method(*args, **kwargs))

        return call

    def close(self) -> None:
        self._runner.run(self.broker.close())
        self._runner.run(self.client.aclose())


async def _async_client(url: str, queue: str) -> redis.asyncio.Redis:
    # as the worker connects: on a cluster, to the master of the queue's slot
    return await connect_queue_async(url, QueueKeys(queue).pending)


MakeBroker = Callable[..., BlockingBroker]


@pytest.fixture
def queue(redis_url: str) -> Iterator[Queue]:
    """The queue "jobs" on the per-test server; modules that need other settings override it."""
    q = Queue("jobs", redis_url=redis_url)
    yield q
    q.close()


def server_ms(client: redis.Redis) -> int:
    """The server's clock in milliseconds, the clock every score and deadline uses."""
    sec, usec = client.time()
    return int(sec) * 1000 + int(usec) // 1000


@pytest.fixture
def make_broker(redis_url: str) -> Iterator[MakeBroker]:
    """``make_broker(queue, pod="pod-a", incarnation="1", url=None)`` -> a BlockingBroker
    (on the shared server unless ``url`` names another)."""
    runner = asyncio.Runner()
    brokers: list[BlockingBroker] = []

    def make(
        queue: str, pod: str = "pod-a", incarnation: str = "1", *, url: str | None = None
    ) -> BlockingBroker:
        broker = BlockingBroker(runner, url or redis_url, queue, pod, incarnation)
        brokers.append(broker)
        return broker

    yield make
    for broker in brokers:
        broker.close()
    runner.close()
