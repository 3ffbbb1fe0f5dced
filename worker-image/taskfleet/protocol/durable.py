"""A script call that waits for replicas (``WAIT``) before it counts as written.

Redis replicates asynchronously: a master that acknowledged a write and died before
sending it on takes the write with it when its replica is promoted. ``WAIT N T``, sent
on the connection that made the write, blocks until N replicas confirm everything that
connection wrote, or T ms pass, and answers how many confirmed. So the script and the
WAIT go out together in one pipeline on one connection to the node that holds the
queue's slot (on a cluster: the slot's master, found from the cluster client's map).

What a WAIT that times out means: the write happened on the master and is not undone
(Redis cannot); it is merely not confirmed replicated. ``run_and_wait`` reports the
count, and the caller says so (the producer raises ``NotReplicated``, the worker logs).

Protocol layer.
"""

from __future__ import annotations

import time
from typing import Any, TypeVar

import redis
import redis.asyncio
import redis.exceptions as rx
from redis.cluster import RedisCluster

from taskfleet.protocol.connect import CLUSTER_EVENTS, Durability, SyncClient
from taskfleet.protocol.scripts import AsyncScripts, Op, SyncScripts

__all__ = ["run_and_wait", "run_and_wait_async"]

T = TypeVar("T")
#: Tries of a waited write on a cluster whose slot is moving (about 6 s in all).
CLUSTER_ATTEMPTS = 6
_MOVING: tuple[type[BaseException], ...] = (*CLUSTER_EVENTS, rx.ConnectionError, rx.TimeoutError)


def _node_client(client: SyncClient, key: str) -> redis.Redis:
    if isinstance(client, RedisCluster):
        return client.get_redis_connection(
            client.get_node_from_key(key)  # type: ignore[no-untyped-call]
        )
    return client


def _pipelined(target: redis.Redis, sha: str, op: Op[Any], durability: Durability) -> list[Any]:
    pipe = target.pipeline(transaction=False)
    send: Any = pipe.execute_command
    send("EVALSHA", sha, len(op.keys), *op.keys, *op.args)
    send("WAIT", durability.replicas, durability.timeout_ms)
    return pipe.execute(raise_on_error=False)


def run_and_wait(scripts: SyncScripts, op: Op[T], durability: Durability) -> tuple[T, int]:
    """Run ``op`` and wait for ``durability.replicas``; returns (reply, replicas that confirmed).

    On a cluster, a slot in motion (MOVED, CLUSTERDOWN, TRYAGAIN, a dead master) is waited
    out for a few seconds with the cluster's map refreshed: every script a producer
    sends this way is safe to send twice (an enqueue of an id that exists changes nothing).
    """
    client = scripts.client
    script = scripts.script(op.script)
    key = op.keys[0]
    attempts = CLUSTER_ATTEMPTS if isinstance(client, RedisCluster) else 1
    for attempt in range(attempts):
        try:
            target = _node_client(client, key)
            raw, acked = _pipelined(target, script.sha, op, durability)
            if isinstance(raw, rx.NoScriptError):
                script.sha = target.script_load(script.script)
                raw, acked = _pipelined(target, script.sha, op, durability)
            if isinstance(raw, Exception):
                raise raw
            if isinstance(acked, Exception):
                raise acked
            if (other := op.instead(raw)) is not None:
                return run_and_wait(scripts, other, durability)
            return op.decode(raw), int(acked)
        except _MOVING:
            if attempt == attempts - 1:
                raise
            assert isinstance(client, RedisCluster)
            time.sleep(min(0.1 * 2**attempt, 2.0))
            try:
                client.nodes_manager.initialize()
            except (rx.RedisError, OSError):
                continue
    raise AssertionError("unreachable")


async def run_and_wait_async(
    scripts: AsyncScripts, op: Op[T], durability: Durability
) -> tuple[T, int]:
    """``run_and_wait`` on an asyncio client of one node (a worker's, pinned to its slot).

    Errors are raised as they come: the worker's outage gate waits them out.
    """
    client = scripts.client
    script = scripts.script(op.script)

    async def pipelined() -> list[Any]:
        pipe = client.pipeline(transaction=False)
        pipe.execute_command("EVALSHA", script.sha, len(op.keys), *op.keys, *op.args)
        pipe.execute_command("WAIT", durability.replicas, durability.timeout_ms)
        return await pipe.execute(raise_on_error=False)

    raw, acked = await pipelined()
    if isinstance(raw, rx.NoScriptError):
        script.sha = await client.script_load(script.script)
        raw, acked = await pipelined()
    if isinstance(raw, Exception):
        raise raw
    if isinstance(acked, Exception):
        raise acked
    if (other := op.instead(raw)) is not None:
        return await run_and_wait_async(scripts, other, durability)
    return op.decode(raw), int(acked)
