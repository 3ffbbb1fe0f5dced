"""``AsyncQueue``: the producer API for asyncio applications, on ``redis.asyncio``.

Every call of ``Queue``, each a coroutine (``follow``: an async iterator): the same
plans (``facade``), run on an asyncio client (``runner.asyncs``), so the same arguments,
checks, scripts, replies and errors.
"""

from __future__ import annotations

import redis.asyncio

from taskfleet.producer.facade import Plans, runs_every_call
from taskfleet.producer.runner import AsyncRunner, async_stream, asyncs
from taskfleet.protocol.connect import Durability, durability, is_cluster, redis_py_url
from taskfleet.protocol.errors import InvalidArgument
from taskfleet.protocol.events import QueueEvent
from taskfleet.protocol.output import OutputChunk
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
    enqueue = asyncs(Plans.enqueue)
    enqueue_result = asyncs(Plans.enqueue_result)
    enqueue_many = asyncs(Plans.enqueue_many)
    enqueue_flow = asyncs(Plans.enqueue_flow)
    add_children = asyncs(Plans.add_children)

    get = asyncs(Plans.get)
    stats = asyncs(Plans.stats)
    workers = asyncs(Plans.workers)
    held_by = asyncs(Plans.held_by)
    holdings = asyncs(Plans.holdings)
    exists = asyncs(Plans.exists)
    config = asyncs(Plans.config)
    wait = asyncs(Plans.wait)

    cancel = asyncs(Plans.cancel)
    cancel_many = asyncs(Plans.cancel_many)
    cancel_group = asyncs(Plans.cancel_group)
    promote = asyncs(Plans.promote)
    promote_many = asyncs(Plans.promote_many)
    retry = asyncs(Plans.retry)
    purge_tasks = asyncs(Plans.purge_tasks)
    follow = async_stream(Plans.follow, Task)
    stream = async_stream(Plans.stream, OutputChunk)
    configure_events = asyncs(Plans.configure_events)
    events = async_stream(Plans.events, QueueEvent)

    flow = asyncs(Plans.flow)
    cancel_flow = asyncs(Plans.cancel_flow)
    retry_flow = asyncs(Plans.retry_flow)

    set_group = asyncs(Plans.set_group)
    group_settings = asyncs(Plans.group_settings)
    groups = asyncs(Plans.groups)
    set_fair_by = asyncs(Plans.set_fair_by)
    fair_by = asyncs(Plans.fair_by)

    pause_claims = asyncs(Plans.pause_claims)
    resume_claims = asyncs(Plans.resume_claims)
    set_budget = asyncs(Plans.set_budget)
    quota = asyncs(Plans.quota)

    schedule = asyncs(Plans.schedule)
    put_schedule = asyncs(Plans.put_schedule)
    unschedule = asyncs(Plans.unschedule)
    get_schedule = asyncs(Plans.get_schedule)
    schedules = asyncs(Plans.schedules)
    pause_schedule = asyncs(Plans.pause_schedule)
    resume_schedule = asyncs(Plans.resume_schedule)
    fire_due_schedules = asyncs(Plans.fire_due_schedules)

    configure = asyncs(Plans.configure)
    requeue_pod = asyncs(Plans.requeue_pod)
    repair = asyncs(Plans.repair)
    sweep = asyncs(Plans.sweep)
    purge = asyncs(Plans.purge)

    list = asyncs(Plans.list)  # last: it shadows the builtin in this class body
