"""``AsyncQueue``: the producer API for asyncio applications, on ``redis.asyncio``.

Every call of ``Queue``, each a coroutine (``follow``: an async iterator): the same
plans (``facade``), run on an asyncio client (``runner.asyncs``), so the same arguments,
checks, scripts, replies and errors.
"""

from __future__ import annotations

import redis.asyncio

from taskfleet.producer import (
    control,
    enqueueing,
    flowcontrol,
    grouping,
    operating,
    quotas,
    reading,
    scheduling,
    waiting,
)
from taskfleet.producer.facade import runs_every_call
from taskfleet.producer.runner import AsyncRunner, async_stream, asyncs
from taskfleet.protocol.connect import Durability, durability, is_cluster, redis_py_url
from taskfleet.protocol.errors import InvalidArgument
from taskfleet.protocol.redisurl import parse_redis_url
from taskfleet.protocol.scripts import AsyncScripts, release
from taskfleet.protocol.tasks import Task

__all__ = ["AsyncQueue"]


@runs_every_call
class AsyncQueue(AsyncRunner):
    """One named queue in Redis, for asyncio producers (``Queue``'s calls, awaited).

    Create it anywhere; its connections open on first use, in the running loop. Close it
    with ``await queue.aclose()`` or ``async with``.
    """

    def __init__(
        self,
        name: str,
        redis_url: str = "redis://localhost:6379/0",
        *,
        client: redis.asyncio.Redis | None = None,
    ) -> None:
        if client is None:
            parsed = parse_redis_url(redis_url)  # InvalidRedisURL: one line, never the URL
            if is_cluster(parsed) or durability(parsed).waits:
                raise InvalidArgument(
                    "AsyncQueue serves one Redis server without WAIT for now; for "
                    "?cluster=true or ?wait_replicas=N use Queue"
                )
            redis_url = redis_py_url(redis_url)
        self.client = client if client is not None else redis.asyncio.Redis.from_url(redis_url)
        self._bind(name, self.client, Durability())
        self._owns_client = client is None
        self._scripts = AsyncScripts.for_client(self.client)

    def __repr__(self) -> str:
        return f"AsyncQueue({self.name!r})"  # never the URL: it may hold a password

    async def aclose(self) -> None:
        if self._owns_client:
            release(self.client)
            await self.client.aclose()

    async def close(self) -> None:
        """``aclose`` (``Queue.close``'s name, awaited)."""
        await self.aclose()

    async def __aenter__(self) -> AsyncQueue:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # Each call below is its feature's plan, run on this client: see ``facade.CALLS``.
    enqueue = asyncs(enqueueing.enqueue)
    enqueue_result = asyncs(enqueueing.enqueue_result)
    enqueue_many = asyncs(enqueueing.enqueue_many)
    enqueue_flow = asyncs(enqueueing.enqueue_flow)
    add_children = asyncs(enqueueing.add_children)

    get = asyncs(reading.get)
    stats = asyncs(reading.stats)
    workers = asyncs(reading.workers)
    held_by = asyncs(reading.held_by)
    holdings = asyncs(reading.holdings)
    exists = asyncs(reading.exists)
    config = asyncs(reading.config)
    wait = asyncs(waiting.wait)

    cancel = asyncs(control.cancel)
    cancel_many = asyncs(control.cancel_many)
    cancel_group = asyncs(control.cancel_group)
    retry = asyncs(control.retry)
    purge_tasks = asyncs(control.purge_tasks)
    follow = async_stream(control.follow, Task)

    flow = asyncs(flowcontrol.flow)
    cancel_flow = asyncs(flowcontrol.cancel_flow)
    retry_flow = asyncs(flowcontrol.retry_flow)

    set_group = asyncs(grouping.set_group)
    group_settings = asyncs(grouping.group_settings)
    groups = asyncs(grouping.groups)

    pause_claims = asyncs(quotas.pause_claims)
    resume_claims = asyncs(quotas.resume_claims)
    set_budget = asyncs(quotas.set_budget)
    quota = asyncs(quotas.quota)

    schedule = asyncs(scheduling.schedule)
    put_schedule = asyncs(scheduling.put_schedule)
    unschedule = asyncs(scheduling.unschedule)
    get_schedule = asyncs(scheduling.get_schedule)
    schedules = asyncs(scheduling.schedules)
    pause_schedule = asyncs(scheduling.pause_schedule)
    resume_schedule = asyncs(scheduling.resume_schedule)
    fire_due_schedules = asyncs(scheduling.fire_due_schedules)

    configure = asyncs(operating.configure)
    requeue_pod = asyncs(operating.requeue_pod)
    repair = asyncs(operating.repair)
    sweep = asyncs(operating.sweep)
    purge = asyncs(operating.purge)

    list = asyncs(control.list_tasks)  # last: it shadows the builtin in this class body
