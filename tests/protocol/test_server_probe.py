"""One probe of the Redis server's settings (``protocol.serverprobe``): what it reads on
a real server, with CONFIG allowed or refused, and that the worker's start, the CLI and
the operator read the server through it and nowhere else."""

from __future__ import annotations

import ast
import asyncio
from pathlib import Path

import pytest
import redis
import redis.asyncio
import redis.exceptions as rx
from taskfleet.protocol.serverprobe import ServerSettings, probe, probe_async, settings_of

from tests.fixtures_redis import RedisServerFactory

REPO = Path(__file__).resolve().parents[2]


def test_the_policy_comes_from_config_get_else_from_info() -> None:
    assert settings_of({"maxmemory-policy": "allkeys-lru"}, None).eviction_policy == "allkeys-lru"
    from_info = settings_of(None, {"maxmemory_policy": "noeviction"})
    assert from_info.eviction_policy == "noeviction" and not from_info.evicts
    assert settings_of({b"maxmemory-policy": b"volatile-lru"}, {}).evicts
    assert settings_of({}, None) == ServerSettings(None, None, None, None)


def test_persistence_reads_aof_from_info_and_rdb_from_the_save_setting() -> None:
    both = settings_of({"save": "3600 1"}, {"aof_enabled": 1, "redis_version": "7.2.4"})
    assert (both.aof, both.rdb, both.persistent, both.version) == (True, True, True, "7.2.4")
    neither = settings_of({"save": ""}, {"aof_enabled": 0})
    assert (neither.aof, neither.rdb, neither.persistent) == (False, False, False)
    assert settings_of(None, {"aof_enabled": 0}).persistent is None  # save not known


class _ClusterRouted:
    """An asyncio client that routes as redis-py's ``RedisCluster`` does: by the command
    name in its routing table (``COMMAND_FLAGS``), else by a key it cannot find here."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, ...]] = []

    async def execute_command(self, *args: str) -> dict[str, str] | None:
        from redis.asyncio.cluster import RedisCluster

        if args[0].upper() not in RedisCluster.COMMAND_FLAGS:
            raise rx.RedisClusterException(f"no key to route {args[0]!r} by")
        self.sent.append(args)
        return {"maxmemory-policy": "allkeys-lru"} if args[0] == "CONFIG GET" else None


def test_the_async_probe_sends_config_get_as_one_command_name_a_cluster_client_routes() -> None:
    client = _ClusterRouted()
    found = asyncio.run(probe_async(client))  # type: ignore[arg-type]
    assert found.eviction_policy == "allkeys-lru"
    assert {sent[0] for sent in client.sent} == {"CONFIG GET", "INFO"}


def test_the_probe_reads_a_real_servers_settings_sync_and_async(
    redis_server_factory: RedisServerFactory,
) -> None:
    server = redis_server_factory(
        persistent=True, extra_args=["--maxmemory-policy", "allkeys-lru", "--save", "900 1"]
    )
    client = redis.Redis.from_url(server.url)
    version = client.info("server")["redis_version"]
    found = probe(client)
    assert found == ServerSettings("allkeys-lru", version, aof=True, rdb=True)
    assert found.evicts and found.persistent
    client.config_set("maxmemory-policy", "noeviction")
    client.config_set("appendonly", "no")
    client.config_set("save", "")

    async def read() -> ServerSettings:
        async with redis.asyncio.Redis.from_url(server.url) as aclient:
            return await probe_async(aclient)

    assert asyncio.run(read()) == ServerSettings("noeviction", version, aof=False, rdb=False)
    client.close()


def test_with_config_refused_the_probe_reads_the_policy_from_info(
    redis_server_factory: RedisServerFactory,
) -> None:
    server = redis_server_factory(
        persistent=False, extra_args=["--maxmemory-policy", "allkeys-lfu"]
    )
    admin = redis.Redis.from_url(server.url)
    admin.acl_setuser(
        "probe", enabled=True, passwords=["+pw"], commands=["+@all", "-config"], keys=["*"]
    )
    host, port = server.url.removeprefix("redis://").split("/")[0].split(":")
    limited = redis.Redis(host=host, port=int(port), username="probe", password="pw")
    with pytest.raises(rx.NoPermissionError):
        limited.config_get("maxmemory-policy")
    found = probe(limited)
    assert (found.eviction_policy, found.aof, found.rdb) == ("allkeys-lfu", False, None)
    with pytest.raises(rx.NoPermissionError):  # a caller may choose to raise what is refused
        probe(limited, refused=lambda exc: False)
    limited.close()
    admin.close()


#: The modules that read the server's settings, and the name of the probe each calls.
CALLERS = {
    "worker-image/taskfleet/worker/start.py": "probe_async",
    "worker-image/taskfleet/cli/queue_commands.py": "probe",
    "operator/taskfleet_operator/connections.py": "probe_server",
}


@pytest.mark.parametrize("path", sorted(CALLERS))
def test_each_caller_reads_the_server_through_the_probe(path: str) -> None:
    tree = ast.parse((REPO / path).read_text())
    imported = {
        alias.asname or alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module == "taskfleet.protocol.serverprobe"
        for alias in node.names
    }
    called = {
        node.func.id
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
    }
    assert CALLERS[path] in imported & called


def test_no_module_but_the_probe_asks_for_the_eviction_policy_itself() -> None:
    found = []
    for root in (REPO / "worker-image" / "taskfleet", REPO / "operator" / "taskfleet_operator"):
        for path in root.rglob("*.py"):
            if path.name == "serverprobe.py":
                continue
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Constant) and node.value in (
                    "maxmemory-policy",
                    "maxmemory_policy",
                ):
                    found.append(f"{path.relative_to(REPO)}:{node.lineno}")
    assert found == []
