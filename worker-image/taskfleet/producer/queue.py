"""``Queue``: the producer API, sync, on redis-py (producers, the CLI, the operator).

Every call is a plan of a feature module, listed in ``facade`` and run here on the
sync client (``runner.sync``): state changes are Lua scripts (``protocol.scripts``),
reads plain commands, pipelined (``protocol.reads``). ``AsyncQueue`` runs the same
plans on an asyncio client.
"""

from __future__ import annotations

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
from taskfleet.producer.control import TaskPage
from taskfleet.producer.encoding import EnqueueResult, EnqueueSpec
from taskfleet.producer.facade import runs_every_call
from taskfleet.producer.operating import PURGE_BATCH
from taskfleet.producer.reading import WorkerInfo
from taskfleet.producer.runner import SyncRunner, sync, sync_stream
from taskfleet.protocol.connect import Durability, SyncClient, connect
from taskfleet.protocol.connect import durability as url_durability
from taskfleet.protocol.control_ops import CancelOutcome
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
    enqueue = sync(enqueueing.enqueue)
    enqueue_result = sync(enqueueing.enqueue_result)
    enqueue_many = sync(enqueueing.enqueue_many)
    enqueue_flow = sync(enqueueing.enqueue_flow)
    add_children = sync(enqueueing.add_children)

    get = sync(reading.get)
    stats = sync(reading.stats)
    workers = sync(reading.workers)
    held_by = sync(reading.held_by)
    holdings = sync(reading.holdings)
    exists = sync(reading.exists)
    config = sync(reading.config)
    wait = sync(waiting.wait)

    cancel = sync(control.cancel)
    cancel_many = sync(control.cancel_many)
    cancel_group = sync(control.cancel_group)
    retry = sync(control.retry)
    purge_tasks = sync(control.purge_tasks)
    follow = sync_stream(control.follow, Task)

    flow = sync(flowcontrol.flow)
    cancel_flow = sync(flowcontrol.cancel_flow)
    retry_flow = sync(flowcontrol.retry_flow)

    set_group = sync(grouping.set_group)
    group_settings = sync(grouping.group_settings)
    groups = sync(grouping.groups)

    pause_claims = sync(quotas.pause_claims)
    resume_claims = sync(quotas.resume_claims)
    set_budget = sync(quotas.set_budget)
    quota = sync(quotas.quota)

    schedule = sync(scheduling.schedule)
    put_schedule = sync(scheduling.put_schedule)
    unschedule = sync(scheduling.unschedule)
    get_schedule = sync(scheduling.get_schedule)
    schedules = sync(scheduling.schedules)
    pause_schedule = sync(scheduling.pause_schedule)
    resume_schedule = sync(scheduling.resume_schedule)
    fire_due_schedules = sync(scheduling.fire_due_schedules)

    configure = sync(operating.configure)
    requeue_pod = sync(operating.requeue_pod)
    repair = sync(operating.repair)
    sweep = sync(operating.sweep)
    purge = sync(operating.purge)

    list = sync(control.list_tasks)  # last: it shadows the builtin in this class body
