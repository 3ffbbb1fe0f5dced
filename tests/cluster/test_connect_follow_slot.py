"""A client pinned to a cluster slot (``connect_queue_async``) follows the slot with every
connection its pool made: idle in the pool, in use, and kept by the packed script calls.

One cluster-enabled node serving every slot; the slot "moved away" is played by pointing
the client and all its connections at a port nobody listens on, then ``follow_slot``
asks the node where the slot lives, as after a failover.
"""

from __future__ import annotations

import asyncio
from typing import Any

import redis
import redis.asyncio
from taskfleet.protocol.connect import connect_queue_async, follow_slot, pinned
from taskfleet.protocol.keys import QueueKeys
from taskfleet.protocol.queue_ops import Ops
from taskfleet.protocol.scripts import AsyncScripts

from tests.fixtures_redis import RedisServerFactory, free_cluster_port, free_port
from tests.polling import wait_for


def test_every_connection_of_a_pinned_client_follows_its_slot(
    redis_server_factory: RedisServerFactory,
) -> None:
    server = redis_server_factory(
        persistent=False, port=free_cluster_port(), extra_args=["--cluster-enabled", "yes"]
    )
    with redis.Redis.from_url(server.url) as admin:
        admin.execute_command("CLUSTER", "ADDSLOTSRANGE", 0, 16383)  # type: ignore[no-untyped-call]
        wait_for(lambda: b"cluster_state:ok" in admin.execute_command("CLUSTER", "INFO"))  # type: ignore[no-untyped-call]
    keys = QueueKeys("jobs")

    async def main() -> None:
        client = await connect_queue_async(f"{server.url}?cluster=true", keys.pending)
        try:
            assert pinned(client)
            pool: Any = client.connection_pool
            scripts = AsyncScripts.for_client(client)
            ops = Ops(keys)
            assert await scripts.run(ops.release("pod", [])) == 0  # kept by the packed calls
            idle = await pool.get_connection()
            held = await pool.get_connection()
            await pool.release(idle)
            # The slot "moves": everything points at a port where nobody answers.
            gone = free_port()
            pool.connection_kwargs["port"] = gone
            made = [*pool.taskfleet_made]
            assert len(made) >= 3
            for connection in made:
                connection.port = gone
            await pool.disconnect()

            await follow_slot(client)

            assert pool.connection_kwargs["port"] == server.port
            assert all(c.port == server.port for c in pool.taskfleet_made)
            await held.send_command("PING")
            assert await held.read_response() == b"PONG"
            await pool.release(held)
            assert await scripts.run(ops.release("pod", [])) == 0
            assert await client.ping()
        finally:
            await client.aclose()

    asyncio.run(main())
