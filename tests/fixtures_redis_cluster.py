"""A real Redis Cluster for tests: 3 masters and 3 replicas, redis-server processes on
loopback, clustered by ``redis-cli --cluster create``.

One cluster serves the session (starting it costs about a second); each test gets it
flushed, with every node running and ``cluster_state:ok`` everywhere. Tests that fail a
master over (``failover``) or kill one (``kill_master``) leave the roles changed: the
fixture reads the topology from the cluster each time, never from what it started.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from redis.crc import key_slot

from tests.fixtures_redis import RedisServer, free_cluster_port

REDIS_CLI = shutil.which("redis-cli") or "/usr/bin/redis-cli"
#: How long a node may be silent before the others call it failed (ms): short, so a
#: killed master's replica takes over within a couple of seconds.
NODE_TIMEOUT_MS = 1000
READY_DEADLINE_S = 30.0


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class LocalRedisCluster:
    """Six cluster-enabled redis-servers; ``url`` names one node with ``?cluster=true``."""

    def __init__(self, base: Path) -> None:
        args = [
            "--cluster-enabled",
            "yes",
            "--cluster-node-timeout",
            str(NODE_TIMEOUT_MS),
            "--cluster-config-file",
            "nodes.conf",
        ]
        self.servers = [
            RedisServer(base / f"node-{i}", port=free_cluster_port(), extra_args=args)
            for i in range(6)
        ]

    @property
    def url(self) -> str:
        return self.url_of(self.servers[0])

    def url_of(self, server: RedisServer, query: str = "") -> str:
        return f"redis://127.0.0.1:{server.port}/0?cluster=true" + (f"&{query}" if query else "")

    def start(self) -> None:
        for server in self.servers:
            server.start()
        subprocess.run(
            [
                REDIS_CLI,
                "--cluster",
                "create",
                *(f"127.0.0.1:{s.port}" for s in self.servers),
                "--cluster-replicas",
                "1",
                "--cluster-yes",
            ],
            check=True,
            capture_output=True,
            timeout=60,
        )
        self.wait_ok()

    def stop(self) -> None:
        for server in self.servers:
            server.stop()

    def client(self, server: RedisServer) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=server.port, socket_timeout=2.0)

    def _ask(self, server: RedisServer, *command: object) -> object:
        client = self.client(server)
        try:
            return client.execute_command(*command)  # type: ignore[no-untyped-call]
        finally:
            client.close()

    def wait_ok(self, deadline_s: float = READY_DEADLINE_S) -> None:
        """Until every running node says cluster_state:ok, agrees on the masters, and
        every master has its replica attached and in sync."""
        deadline = time.monotonic() + deadline_s
        last = ""
        while time.monotonic() < deadline:
            try:
                running = [s for s in self.servers if s.running]
                states = [_text(self._ask(s, "CLUSTER", "INFO")) for s in running]
                views = {self._masters_view(s) for s in running}
                settled = all("cluster_state:ok" in st for st in states) and len(views) == 1
                if settled and self._replicas_synced():
                    return
                last = f"views={views}"
            except (redis.RedisError, OSError) as exc:
                last = repr(exc)
            time.sleep(0.05)
        raise RuntimeError(f"the Redis Cluster did not settle: {last}")

    def _masters_view(self, server: RedisServer) -> tuple[tuple[int, int, int], ...]:
        slots = self._ask(server, "CLUSTER", "SLOTS")
        assert isinstance(slots, list)
        return tuple(sorted((int(r[0]), int(r[1]), int(r[2][1])) for r in slots))

    def replication(self, server: RedisServer) -> dict[str, object]:
        client = self.client(server)
        try:
            return client.info("replication")
        finally:
            client.close()

    def _replicas_synced(self) -> bool:
        for master in self.masters():
            info = self.replication(master)
            replica = info.get("slave0")
            if info.get("connected_slaves") != 1 or not isinstance(replica, dict):
                return False
            if replica.get("state") != "online":
                return False
        return True

    def by_port(self, port: int) -> RedisServer:
        return next(s for s in self.servers if s.port == port)

    def masters(self) -> list[RedisServer]:
        """The masters now, by the slot range they serve (lowest first)."""
        view = self._masters_view(next(s for s in self.servers if s.running))
        return [self.by_port(port) for _, _, port in view]

    def master_of(self, key: str) -> RedisServer:
        slot = key_slot(key.encode())
        view = self._masters_view(next(s for s in self.servers if s.running))
        return next(self.by_port(p) for lo, hi, p in view if lo <= slot <= hi)

    def replica_of(self, master: RedisServer) -> RedisServer:
        for server in self.servers:
            if server is master or not server.running:
                continue
            info = self.replication(server)
            if info.get("role") == "slave" and info.get("master_port") == master.port:
                return server
        raise LookupError(f"no replica of the master on port {master.port}")

    def queue_names(self, prefix: str = "q") -> list[str]:
        """One queue name per master, in ``masters()`` order (each hashes to its slots)."""
        view = self._masters_view(next(s for s in self.servers if s.running))
        names: list[str | None] = [None] * len(view)
        i = 0
        while any(n is None for n in names):
            name = f"{prefix}{i}"
            slot = key_slot(f"tf:{{{name}}}:pending".encode())
            at = next(k for k, (lo, hi, _) in enumerate(view) if lo <= slot <= hi)
            if names[at] is None:
                names[at] = name
            i += 1
        return [n for n in names if n is not None]

    def failover(self, master: RedisServer) -> RedisServer:
        """``CLUSTER FAILOVER`` on ``master``'s replica (a planned switch, nothing lost);
        returns the new master once the cluster has settled."""
        replica = self.replica_of(master)
        self._ask(replica, "CLUSTER", "FAILOVER")
        self._wait_role(replica, "master")
        self.wait_ok()
        return replica

    def kill_master(self, master: RedisServer) -> RedisServer:
        """SIGKILL ``master``; returns its replica once it was elected master (the killed
        node stays down: ``revive`` starts it again, as a replica)."""
        replica = self.replica_of(master)
        master.kill()
        self._wait_role(replica, "master")
        return replica

    def revive(self, server: RedisServer) -> None:
        server.start()
        self.wait_ok()

    def _wait_role(self, server: RedisServer, role: str) -> None:
        deadline = time.monotonic() + READY_DEADLINE_S
        while time.monotonic() < deadline:
            try:
                if self.replication(server).get("role") == role:
                    return
            except (redis.RedisError, OSError):
                pass
            time.sleep(0.05)
        raise RuntimeError(f"node on port {server.port} did not become {role}")

    def ensure_healthy(self) -> None:
        for server in self.servers:
            if not server.running:
                server.start()
        self.wait_ok()

    def flush(self) -> None:
        for master in self.masters():
            self._ask(master, "FLUSHALL")
            self._ask(master, "SCRIPT", "FLUSH")


@pytest.fixture(scope="session")
def redis_cluster_session(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[LocalRedisCluster]:
    cluster = LocalRedisCluster(tmp_path_factory.mktemp("redis-cluster"))
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def redis_cluster(redis_cluster_session: LocalRedisCluster) -> LocalRedisCluster:
    """The session's Redis Cluster, every node up and settled, every master flushed."""
    redis_cluster_session.ensure_healthy()
    redis_cluster_session.flush()
    return redis_cluster_session
