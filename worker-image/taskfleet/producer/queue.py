"""The producer API: ``Queue.enqueue / get / stats / wait`` and the operator's calls.

Sync, on redis-py: producers, the CLI and the operator (which runs it in threads) use
it. Every state change is one Lua script (see ``scripts.py``); reads are plain
commands, pipelined (``protocol.reads``, run by ``protocol.calls``). What an enqueue
takes is checked and encoded in ``encoding``, before anything is sent.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from taskfleet.producer import reading, scheduling, waiting
from taskfleet.producer.control import TaskPage
from taskfleet.producer.controlling import Controlling
from taskfleet.producer.encoding import (
    EnqueueResult,
    EnqueueSpec,
    batch_args,
    encode_task,
    token_base,
)
from taskfleet.producer.flows import Flow, FlowIds, build
from taskfleet.producer.quotas import Quotas
from taskfleet.producer.reading import WorkerInfo
from taskfleet.protocol import groups, store, tracing
from taskfleet.protocol.calls import run, scan
from taskfleet.protocol.config import QueueConfig
from taskfleet.protocol.connect import Durability, SyncClient, connect
from taskfleet.protocol.connect import durability as url_durability
from taskfleet.protocol.control_ops import CancelOutcome, ControlOps
from taskfleet.protocol.durable import run_and_wait
from taskfleet.protocol.errors import NotReplicated, ScheduleNotFound
from taskfleet.protocol.flows import FlowRecord, flow_record
from taskfleet.protocol.groups import GroupCount, GroupSettings
from taskfleet.protocol.keys import QueueKeys
from taskfleet.protocol.reads import QueueReads
from taskfleet.protocol.records import POD_TOMBSTONE_S
from taskfleet.protocol.replies import RepairResult, SweepResult
from taskfleet.protocol.schedule_ops import ScheduleOps
from taskfleet.protocol.schedules import (
    OWNER_API,
    Schedule,
    ScheduleDef,
    due_ms,
    first_slot,
    validate_schedule_name,
)
from taskfleet.protocol.scripts import (
    REPAIR_SETTLE_MS,
    EnqueueArgs,
    Op,
    Ops,
    SyncScripts,
    release,
)
from taskfleet.protocol.tasks import Task

__all__ = ["CancelOutcome", "EnqueueResult", "EnqueueSpec", "Queue", "TaskPage", "WorkerInfo"]

#: Keys per UNLINK while purging (found by SCAN, a step of about as many at a time).
PURGE_BATCH = 1000


class Queue(Controlling, Quotas):
    """One named queue in Redis (sync API for producers, the CLI and the operator).

    Cancel, retry, list, purge_tasks and follow come from ``Controlling``; the claim
    pause and the spend budget from ``Quotas``."""

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
        self.keys = QueueKeys(name)
        self.name = name
        # InvalidRedisURL, one line, never the URL itself
        self.client: SyncClient = client if client is not None else connect(redis_url)
        if durability is None:
            durability = Durability() if client is not None else url_durability(redis_url)
        self.durability = durability
        self._owns_client = client is None
        self.ops = Ops(self.keys)
        self.schedule_ops = ScheduleOps(self.keys)
        self.control_ops = ControlOps(self.keys)
        self.reads = QueueReads(self.keys)
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

    # -- producing ---------------------------------------------------------------------

    def enqueue(
        self,
        payload: dict[str, Any],
        *,
        priority: int = 0,
        delay: float | timedelta | None = None,
        deadline: float | timedelta | datetime | None = None,
        max_attempts: int | None = None,
        task_id: str | None = None,
        cost: int = 1,
        timeout: float | timedelta | None = None,
        task: str | None = None,
        after: list[str] | None = None,
        on_dep_fail: str | None = None,
        group: str | None = None,
    ) -> str:
        """Add a task; returns its id.

        ``delay``: seconds (or timedelta) before it may run. ``deadline``: seconds from
        now (or an aware datetime) by which it must have started, else it goes dead
        with reason ``expired``. ``cost``: units it takes from the cost rate limit.
        Bounds (``taskfleet.protocol.bounds``): delay and deadline at most 100 years, timeout at
        most one year, cost 0..1e9, max_attempts 1..10,000, priority -1000..1000.

        ``task``: the name of the handler that runs it, among those its workers serve
        (``--handler NAME=module:function``); None: the workers' default handler. A name
        no worker serves makes the task go dead, reason ``unknown task``.

        ``group``: the group it belongs to (a tenant, a customer): the queue's workers
        claim fairly between groups, in turn (weighted by ``set_group``), so one group's
        backlog never starves another; priorities order tasks within a group, and the
        group's own limits apply (``set_group``, the config's ``group_*`` defaults).

        With ``task_id``, enqueueing the same task again (same payload, task, priority,
        cost, timeout and, if given, max_attempts) returns the id and changes nothing; another
        payload or option under an existing id raises ``TaskExists``. ``enqueue_result``
        also says whether the task was created.

        ``after``: ids of tasks (of this queue) it waits for: it stays ``waiting``, never
        claimed, until every one is done, then becomes pending in the same script. When one
        ends dead or cancelled (or is gone), ``on_dep_fail`` decides: ``fail`` (default,
        it ends dead, reason ``dependency failed``), ``ignore`` (counts as done) or
        ``cancel`` (it and its other unfinished dependencies are cancelled). An id that is
        no task raises ``InvalidArgument``; see docs/flows.md.
        """
        args = encode_task(
            payload,
            priority=priority,
            delay=delay,
            deadline=deadline,
            max_attempts=max_attempts,
            task_id=task_id,
            cost=cost,
            timeout=timeout,
            task=task,
            after=after,
            on_dep_fail=on_dep_fail,
            group=group,
        )
        self._enqueue_one(args)
        return args.task_id

    def enqueue_result(
        self,
        payload: dict[str, Any],
        *,
        priority: int = 0,
        delay: float | timedelta | None = None,
        deadline: float | timedelta | datetime | None = None,
        max_attempts: int | None = None,
        task_id: str | None = None,
        cost: int = 1,
        timeout: float | timedelta | None = None,
        task: str | None = None,
        after: list[str] | None = None,
        on_dep_fail: str | None = None,
        group: str | None = None,
    ) -> EnqueueResult:
        """``enqueue``, returning the id and whether this call created the task."""
        args = encode_task(
            payload,
            priority=priority,
            delay=delay,
            deadline=deadline,
            max_attempts=max_attempts,
            task_id=task_id,
            cost=cost,
            timeout=timeout,
            task=task,
            after=after,
            on_dep_fail=on_dep_fail,
            group=group,
        )
        return EnqueueResult(args.task_id, self._enqueue_one(args))

    def _enqueue_one(self, args: EnqueueArgs) -> bool:
        """One task's enqueue script call; whether it created the task."""
        if tracing.configured():
            with tracing.enqueue_span(self.name, 1) as span:
                span.set_attribute("messaging.message.id", args.task_id)
                op = self.ops.enqueue([args], token_base(), tracing.carrier_text())
                [created] = self._enqueue(op, [args.task_id])
        else:
            [created] = self._enqueue(self.ops.enqueue([args], token_base()), [args.task_id])
        return created

    def _enqueue(self, op: Op[list[bool]], task_ids: list[str]) -> list[bool]:
        if not self.durability.waits:
            return self._scripts.run(op)
        created, acked = run_and_wait(self._scripts, op, self.durability)
        if acked < self.durability.replicas:
            d = self.durability
            raise NotReplicated(acked, d.replicas, d.timeout_ms, task_ids)
        return created

    def enqueue_many(self, items: Iterable[EnqueueSpec | Mapping[str, Any]]) -> list[str]:
        """Add many tasks atomically in one round trip; returns their ids in order.

        Each item is an ``EnqueueSpec`` or a dict of ``enqueue``'s arguments. If any
        item is invalid (or too large), names an id twice, or names an existing task
        with another payload or options (``TaskExists``), nothing is stored.
        """
        return self._enqueue_batch(batch_args(items), flow=False)

    def _enqueue_batch(self, batch: list[EnqueueArgs], *, flow: bool) -> list[str]:
        """``flow``: every new task joins the flow named by the first task's id."""
        if not batch:
            return []
        ids = [a.task_id for a in batch]
        named = ids[0] if flow else ""
        if tracing.configured():
            with tracing.enqueue_span(self.name, len(batch)):
                op = self.ops.enqueue(batch, token_base(), tracing.carrier_text(), flow=named)
                self._enqueue(op, ids)
        else:
            self._enqueue(self.ops.enqueue(batch, token_base(), flow=named), ids)
        return ids

    def enqueue_flow(self, flow: Flow | EnqueueSpec | Mapping[str, Any]) -> FlowIds:
        """Store a flow (``chain``, ``group``, ``chord``, nested; ``taskfleet.producer.
        flows``) in one atomic call: every task or none. Returns its ids. Its tasks are
        one flow, named by its first task's id (``Task.flow``; docs/flows.md)."""
        items, last = build(flow)
        return FlowIds(self._enqueue_batch(batch_args(items), flow=True), last)

    def add_children(
        self, parent: str, token: str, items: Iterable[EnqueueSpec | Mapping[str, Any]]
    ) -> list[str]:
        """Tasks the running task ``parent`` (claimed under ``token``) waits for, in one
        atomic call: it is done only once they all are (``taskfleet.add_children`` from
        a handler). ``StaleToken`` when that run no longer holds it."""
        batch = batch_args(items)
        if batch:
            self._scripts.run(self.ops.enqueue(batch, parent=(parent, token)))
        return [a.task_id for a in batch]

    # -- reading -----------------------------------------------------------------------

    def get(self, task_id: str) -> Task | None:
        """The task, or None when there is none (never stored, or pruned by retention)."""
        return run(self.client, self.reads.task(reading.check_task_id(task_id)))

    def flow(self, flow_id: str) -> FlowRecord | None:
        """A flow's record (``Task.flow`` names it): members open and ended, its outcome
        once ended; None when there is none (docs/flows.md)."""
        return run(self.client, flow_record(self.keys, reading.check_task_id(flow_id)))

    def stats(self) -> dict[str, int]:
        """Sizes of every state, live workers and the monotonic counters."""
        return run(self.client, self.reads.stats())

    def workers(self) -> list[WorkerInfo]:
        return reading.workers(self.client, self.reads)

    def held_by(self, pods: Iterable[str]) -> dict[str, int]:
        """Tasks each pod holds right now, from the queue's own records (exact; a
        worker's heartbeat reports its count only every interval), in one round trip."""
        return run(self.client, self.reads.held_counts(pods))

    def wait(self, task_ids: Iterable[str], timeout: float) -> dict[str, Task]:
        """Block until every task is done or dead; returns them by id.

        Woken by the script that finishes each task, not by polling (see ``waiting``).
        Raises ``WaitTimeout`` (a ``TimeoutError``) listing the unfinished ids. A task id
        that does not exist counts as unfinished (it may not be enqueued yet: it is
        looked for again every second).
        """
        return waiting.wait(self.client, self.keys, task_ids, timeout)

    # -- groups (see taskfleet.protocol.groups) -----------------------------------------

    def set_group(self, group: str, settings: GroupSettings) -> None:
        """Replace ``group``'s own settings (weight, max_concurrency, rate_limit_tasks,
        rate_limit_cost; None: the queue's default for every group holds). The next
        claim applies them."""
        run(self.client, groups.set_group(self.keys, groups.check_group(group), settings))

    def group_settings(self, group: str) -> GroupSettings:
        return run(self.client, groups.group_settings(self.keys, groups.check_group(group)))

    def groups(self) -> list[GroupCount]:
        """Every group with pending or running tasks, and how many of each (pending:
        ready to run; its delayed ones are not counted), most pending first."""
        names = run(self.client, groups.group_names(self.keys))
        now = run(self.client, self.reads.clock())
        return groups.by_load(run(self.client, groups.group_counts(self.keys, names, now)))

    # -- operating ---------------------------------------------------------------------

    def exists(self) -> bool:
        """Whether anything of this queue is stored (config, counters or workers)."""
        return run(self.client, self.reads.exists())

    def holdings(self, pods: Sequence[str]) -> dict[str, list[str]]:
        """The ids of the tasks each pod holds now (exact, from the queue's records)."""
        return run(self.client, self.reads.holdings(list(pods)))

    def configure(self, config: QueueConfig) -> None:
        """Store the queue's shared settings; every script reads them at its next call."""
        run(self.client, store.configure(self.keys, config))

    def config(self) -> QueueConfig:
        return run(self.client, self.reads.config())

    def requeue_pod(
        self, pod: str, *, except_incarnation: str | None = None, gone: bool = False
    ) -> int:
        """Take back every task ``pod`` holds; returns how many (requeued + gone dead).

        ``gone``: the pod is gone from the Kubernetes API for good (the operator asked the
        API). Its workers, a force-deleted pod's container still running, may not register
        again for ``POD_TOMBSTONE_S``: one loss of the pod counts once. Never for a pod
        that may come back under its name (a restarted container keeps it)."""
        tombstone_s = POD_TOMBSTONE_S if gone else None
        op = self.ops.requeue(pod, except_incarnation, tombstone_s=tombstone_s)
        requeued, dead = self._scripts.run(op)
        return requeued + dead

    def repair(self, cursor: int = 0, *, settle_ms: int = REPAIR_SETTLE_MS) -> RepairResult:
        """Resolve waiting tasks whose dependencies all ended without waking them (an
        older worker, a lost write): one bounded call from rank ``cursor`` of the waiting
        set; call again with the reply's cursor while it says there is more. A dependency that ended
        less than ``settle_ms`` ago is left to the normal resolve."""
        return self._scripts.run(self.ops.repair(cursor, settle_ms=settle_ms))

    def sweep(self) -> SweepResult:
        """Promote due tasks, expire deadlines, take back expired leases, prune, drop
        silent workers. Bounded per call; call again while counts are at the bound."""
        return self._scripts.run(self.ops.sweep())

    # -- schedules (see taskfleet.protocol.schedules) ----------------------------------

    def schedule(
        self,
        name: str,
        cron: str,
        payload: dict[str, Any],
        *,
        tz: str = "UTC",
        catchup: str = "latest",
        catchup_limit: int = 100,
        jitter: float | timedelta = 0,
        priority: int = 0,
        max_attempts: int | None = None,
        cost: int = 1,
        timeout: float | timedelta | None = None,
        deadline: float | timedelta | None = None,
        paused: bool = False,
        group: str | None = None,
    ) -> Schedule:
        """Create or change the schedule ``name``: a task with ``payload`` once per slot of
        ``cron`` (five fields, or six with seconds first) in zone ``tz``; returns it as stored.

        ``catchup`` after downtime: ``latest`` fires the latest missed slot only, ``all``
        every missed slot, at most ``catchup_limit`` (the latest ones). ``jitter``: each
        slot fires up to that many seconds late (a fixed draw per slot), to spread
        schedules that share a time. ``priority``, ``max_attempts``, ``cost``, ``timeout``
        apply to each task; ``deadline``: seconds after its firing by which it must start;
        ``group``: each task's group (fair claiming between groups, the group's limits).
        Changing the cron, zone or jitter starts again from the next slot after now;
        changing anything else keeps the slot to fire next. Raises ``InvalidArgument``
        (bad cron, unknown zone, a bound), ``InvalidPayload``, ``ScheduleOwned`` (a
        TaskQueue's spec holds that name).
        """
        definition = scheduling.schedule_def(
            name,
            cron,
            payload,
            tz=tz,
            catchup=catchup,
            catchup_limit=catchup_limit,
            jitter=jitter,
            priority=priority,
            max_attempts=max_attempts,
            cost=cost,
            timeout=timeout,
            deadline=deadline,
            group=group,
        )
        self.put_schedule(definition, paused=paused)
        found = self.get_schedule(name)
        assert found is not None
        return found

    def put_schedule(
        self,
        definition: ScheduleDef,
        *,
        paused: bool = False,
        owner: str = OWNER_API,
        take_over: bool = False,
    ) -> int:
        """Store a validated definition (the operator's sync uses ``owner`` 'taskqueue'
        and ``take_over``); returns CREATED, UPDATED or UNCHANGED (``schedule_ops``)."""
        slot, due = scheduling.first_due(definition, run(self.client, self.reads.clock()))
        op = self.schedule_ops.put(
            definition,
            owner=owner,
            take_over=take_over,
            paused=paused,
            first_slot=slot,
            first_due_ms=due,
        )
        return self._scripts.run(op)

    def unschedule(self, name: str, *, owner: str = OWNER_API, take_over: bool = False) -> bool:
        """Delete the schedule ``name``; False if there was none. Tasks it fired stay."""
        validate_schedule_name(name)
        return self._scripts.run(self.schedule_ops.delete(name, owner=owner, take_over=take_over))

    def get_schedule(self, name: str) -> Schedule | None:
        validate_schedule_name(name)
        return run(self.client, self.reads.schedule(name))

    def schedules(self) -> list[Schedule]:
        """Every schedule of the queue, sorted by name."""
        return scheduling.read_all(self.client, self.reads)

    def pause_schedule(self, name: str) -> bool:
        """Stop firing ``name`` (False if it was paused); slots that pass are not fired."""
        validate_schedule_name(name)
        op = self.schedule_ops.pause(name, True, owner=OWNER_API, next_slot=None, next_due_ms=0)
        return self._scripts.run(op)

    def resume_schedule(self, name: str) -> bool:
        """Fire ``name`` again from its first slot after now (False if it was active)."""
        found = self.get_schedule(name)
        if found is None:
            raise ScheduleNotFound(name)
        definition_tz, cron = found.tz, found.cron
        now = run(self.client, self.reads.clock())
        slot = first_slot(cron, definition_tz, now)
        due = 0 if slot is None else due_ms(name, slot, int(found.jitter_s * 1000))
        op = self.schedule_ops.pause(name, False, owner=OWNER_API, next_slot=slot, next_due_ms=due)
        return self._scripts.run(op)

    def fire_due_schedules(self, *, max_calls: int = 10) -> int:
        """Fire the slots due now (what every worker does in the background); returns
        the tasks enqueued. Safe to run anywhere, any number of times at once."""
        return scheduling.fire_due(self._scripts, self.schedule_ops, max_calls=max_calls)

    def purge(self) -> None:
        """Delete every key of the queue (tasks, workers, config, counters)."""
        batch: list[bytes | str] = []
        for key in scan(self.client, store.queue_keys(self.keys)):
            batch.append(key)
            if len(batch) >= PURGE_BATCH:
                run(self.client, store.delete(batch))
                batch = []
        if batch:
            run(self.client, store.delete(batch))
