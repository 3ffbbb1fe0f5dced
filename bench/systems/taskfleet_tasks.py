"""taskfleet: the reference no-op task, in a module of its own.

A worker imports its handlers' module and nothing else of the caller's: like a user's
tasks module, this one needs nothing of taskfleet (the adapter's producer side, with its
``Queue`` and ``AsyncQueue``, lives in ``taskfleet_bench``), so a worker's cold start
loads the worker alone.
"""

from __future__ import annotations

import os
from typing import Any

import redis.asyncio as aioredis
from harness import DONE_KEY, record_done


def noop(payload: dict[str, Any]) -> None:
    """The reference task as most users write it: sync, run in the worker's threads."""
    record_done()


_async_clients: dict[int, aioredis.Redis] = {}


async def anoop(payload: dict[str, Any]) -> None:
    """The same single write from an async handler, on the worker's event loop."""
    client = _async_clients.get(os.getpid())
    if client is None:
        url = os.environ["BENCH_REDIS_URL"]
        client = _async_clients[os.getpid()] = aioredis.Redis.from_url(url)
    await client.rpush(DONE_KEY, os.getpid())
