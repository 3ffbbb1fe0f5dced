"""``Queue``: the producer API, sync, on redis-py (producers, the CLI, the operator).

Every call is a plan of a feature module, listed in ``facade`` and run here on the
sync client (``runner.sync``): state changes are Lua scripts (``protocol.scripts``),
reads plain commands, pipelined (``protocol.reads``). ``AsyncQueue`` runs the same
plans on an asyncio client.
"""

from __future__ import annotations

from taskfleet.producer.control import TaskPage
from taskfleet.producer.encoding import EnqueueResult, EnqueueSpec
from taskfleet.producer.facade import Plans, runs_every_call
from taskfleet.producer.operating import PURGE_BATCH
from taskfleet.producer.reading import WorkerInfo
from taskfleet.producer.runner import SyncRunner, sync, sync_stream
from taskfleet.protocol.connect import Durability, SyncClient, connect
from taskfleet.protocol.connect import durability as url_durability
from taskfleet.protocol.control_ops import CancelOutcome
from taskfleet.protocol.events import QueueEvent
from taskfleet.protocol.output import OutputChunk
from taskfleet.protocol.scripts import SyncScripts, release
from taskfleet.protocol.tasks import Task

__all__ = [
    "PURGE_BATCH",
    "CancelOutcome",
    "EnqueueResult",
    "EnqueueSpec",
    "Queue",
    "TaskPage",
    "WorkerInfo",
]


@runs_every_call
class Queue(SyncRunner):
    """One named queue in Redis (sync API for producers, the CLI and the operator)."""

    def __init__(
        self,
        name: str,
        redis_url: str = "redis://localhost:6379/0",
        *,
        client: SyncClient | None = None,
        durability: Durability | None = None,
    ) -> None:
        """``redis_url``: a server, or with ``?cluster=true`` a node of a Redis Cluster
        (see ``taskfleet.protocol.connect``); ``?wait_replicas=N`` makes each enqueue
        wait for N replicas (``durability``, when the queue is given a ``client``).
        """
        # InvalidRedisURL, one line, never the URL itself
        self.client = client if client is not None else connect(redis_url)
        if durability is None:
            durability = Durability() if client is not None else url_durability(redis_url)
        self._bind(name, self.client, durability)
        self._owns_client = client is None
        self._scripts = SyncScripts.for_client(self.client)

    def __repr__(self) -> str:
        return f"Queue({self.name!r})"  # never the URL: it may hold a password

    def close(self) -> None:
        if self._owns_client:
            release(self.client)
            self.client.close()

    def __enter__(self) -> Queue:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # Each call below is its feature's plan, run on this client: see ``facade.CALLS``.
    enqueue = sync(Plans.enqueue)
    enqueue_result = sync(Plans.enqueue_result)
    enqueue_many = sync(Plans.enqueue_many)
    enqueue_flow = sync(Plans.enqueue_flow)
    add_children = sync(Plans.add_children)

    get = sync(Plans.get)
    stats = sync(Plans.stats)
    workers = sync(Plans.workers)
    held_by = sync(Plans.held_by)
    holdings = sync(Plans.holdings)
    exists = sync(Plans.exists)
    config = sync(Plans.config)
    wait = sync(Plans.wait)

    cancel = sync(Plans.cancel)
    cancel_many = sync(Plans.cancel_many)
    cancel_group = sync(Plans.cancel_group)
    promote = sync(Plans.promote)
    promote_many = sync(Plans.promote_many)
    retry = sync(Plans.retry)
    purge_tasks = sync(Plans.purge_tasks)
    follow = sync_stream(Plans.follow, Task)
    stream = sync_stream(Plans.stream, OutputChunk)
    configure_events = sync(Plans.configure_events)
    events = sync_stream(Plans.events, QueueEvent)

    flow = sync(Plans.flow)
    cancel_flow = sync(Plans.cancel_flow)
    retry_flow = sync(Plans.retry_flow)

    set_group = sync(Plans.set_group)
    group_settings = sync(Plans.group_settings)
    groups = sync(Plans.groups)
    set_fair_by = sync(Plans.set_fair_by)
    fair_by = sync(Plans.fair_by)

    pause_claims = sync(Plans.pause_claims)
    resume_claims = sync(Plans.resume_claims)
    set_budget = sync(Plans.set_budget)
    quota = sync(Plans.quota)

    schedule = sync(Plans.schedule)
    put_schedule = sync(Plans.put_schedule)
    unschedule = sync(Plans.unschedule)
    get_schedule = sync(Plans.get_schedule)
    schedules = sync(Plans.schedules)
    pause_schedule = sync(Plans.pause_schedule)
    resume_schedule = sync(Plans.resume_schedule)
    fire_due_schedules = sync(Plans.fire_due_schedules)

    configure = sync(Plans.configure)
    requeue_pod = sync(Plans.requeue_pod)
    repair = sync(Plans.repair)
    sweep = sync(Plans.sweep)
    purge = sync(Plans.purge)

    list = sync(Plans.list)  # last: it shadows the builtin in this class body
