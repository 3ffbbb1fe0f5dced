"""``AsyncQueue``: the producer API for asyncio applications, on ``redis.asyncio``.

The same calls and semantics as ``Queue``'s producing and reading side (enqueue,
enqueue_result, enqueue_many, enqueue_flow, add_children, get, stats, workers, wait,
config, exists, held_by, holdings), its groups (groups, group_settings, set_group) and
its quota (pause_claims, resume_claims, set_budget, quota), each a coroutine. Nothing is
written twice: a task is checked and encoded by ``encoding``, a flow built by ``flows``,
the script call and its reply are the same ``Op`` values (``scripts``), reads are
``reading``'s and ``groups``' commands and parsers, a pause is checked by ``quotas``, and
``waiting`` decides a wait; only the round trips are awaited here.

Operating a queue stays on the sync ``Queue``: ``SYNC_ONLY`` names each such method and
why (tests/producer/test_producer_async.py fails when ``Queue`` gains a public method that is
neither here nor there).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

import redis.asyncio

from taskfleet.producer import flowcontrol, reading, waiting
from taskfleet.producer.encoding import (
    EnqueueResult,
    EnqueueSpec,
    batch_args,
    encode_task,
    token_base,
)
from taskfleet.producer.flows import Flow, FlowIds, build
from taskfleet.producer.quotas import pause_ms, quota_ops, state_of
from taskfleet.producer.reading import WorkerInfo
from taskfleet.protocol import groups, tracing
from taskfleet.protocol.calls import run_all_async, run_async
from taskfleet.protocol.config import QueueConfig
from taskfleet.protocol.connect import durability, is_cluster, redis_py_url
from taskfleet.protocol.control_ops import CancelOutcome, ControlOps
from taskfleet.protocol.errors import InvalidArgument
from taskfleet.protocol.flows import FlowRecord, flow_record
from taskfleet.protocol.groups import GroupCount, GroupSettings, check_group
from taskfleet.protocol.keys import QueueKeys
from taskfleet.protocol.quota import BudgetLimit, QuotaOps, QuotaState
from taskfleet.protocol.reads import QueueReads
from taskfleet.protocol.redisurl import parse_redis_url
from taskfleet.protocol.scripts import AsyncScripts, Ops, release
from taskfleet.protocol.tasks import Task

__all__ = ["SYNC_ONLY", "AsyncQueue"]

_OPERATING = "operating a queue: an administrator's call, on the sync Queue (or the CLI)"
_SCHEDULES = "schedules are operated on the sync Queue, the CLI or a TaskQueue's spec"
#: ``Queue``'s public methods that ``AsyncQueue`` has not, and why.
SYNC_ONLY: dict[str, str] = {
    "close": "AsyncQueue closes with aclose (or async with)",
    "configure": _OPERATING,
    "sweep": _OPERATING + " (workers sweep on their own)",
    "repair": _OPERATING + " (workers and the operator repair on their own)",
    "requeue_pod": _OPERATING + " (the operator, for a pod that is gone)",
    "purge": _OPERATING,
    "purge_tasks": _OPERATING,
    "retry": _OPERATING + ": paged scans of dead tasks (control.py)",
    "cancel": _OPERATING + ": control.py's batched cancellation",
    "cancel_many": _OPERATING + ": control.py's batched cancellation",
    "cancel_group": _OPERATING + ": control.py's batched cancellation",
    "list": _OPERATING + ": paged listing (control.py)",
    "follow": "a blocking follower of task events, for the CLI",
    "schedule": _SCHEDULES,
    "unschedule": _SCHEDULES,
    "schedules": _SCHEDULES,
    "get_schedule": _SCHEDULES,
    "put_schedule": _SCHEDULES,
    "pause_schedule": _SCHEDULES,
    "resume_schedule": _SCHEDULES,
    "fire_due_schedules": _SCHEDULES + " (workers fire them)",
}


class AsyncQueue:
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
        self.keys = QueueKeys(name)
        self.name = name
        if client is None:
            parsed = parse_redis_url(redis_url)  # InvalidRedisURL: one line, never the URL
            if is_cluster(parsed) or durability(parsed).waits:
                raise InvalidArgument(
                    "AsyncQueue serves one Redis server without WAIT for now; for "
                    "?cluster=true or ?wait_replicas=N use Queue"
                )
            redis_url = redis_py_url(redis_url)
        self.client: redis.asyncio.Redis = (
            client if client is not None else redis.asyncio.Redis.from_url(redis_url)
        )
        self._owns_client = client is None
        self.ops = Ops(self.keys)
        self.reads = QueueReads(self.keys)
        self._scripts = AsyncScripts.for_client(self.client)

    def __repr__(self) -> str:
        return f"AsyncQueue({self.name!r})"  # never the URL: it may hold a password

    async def aclose(self) -> None:
        if self._owns_client:
            release(self.client)
            await self.client.aclose()

    async def __aenter__(self) -> AsyncQueue:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def enqueue(
        self,
        payload: dict[str, Any],
        *,
        priority: int = 0,
        delay: float | timedelta | None = None,
        deadline: float | timedelta | datetime | None = None,
        max_attempts: int | None = None,
        task_id: str | None = None,
        cost: int = 1,
        timeout: float | timedelta | None = None,  # noqa: ASYNC109  (the task's, not this call's)
        task: str | None = None,
        after: list[str] | None = None,
        on_dep_fail: str | None = None,
        group: str | None = None,
    ) -> str:
        """Add a task; returns its id (``Queue.enqueue``: the same arguments and errors)."""
        result = await self.enqueue_result(
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
        return result.task_id

    async def enqueue_result(
        self,
        payload: dict[str, Any],
        *,
        priority: int = 0,
        delay: float | timedelta | None = None,
        deadline: float | timedelta | datetime | None = None,
        max_attempts: int | None = None,
        task_id: str | None = None,
        cost: int = 1,
        timeout: float | timedelta | None = None,  # noqa: ASYNC109  (the task's, not this call's)
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
        if tracing.configured():
            with tracing.enqueue_span(self.name, 1) as span:
                span.set_attribute("messaging.message.id", args.task_id)
                op = self.ops.enqueue([args], token_base(), tracing.carrier_text())
                [created] = await self._scripts.run(op)
        else:
            [created] = await self._scripts.run(self.ops.enqueue([args], token_base()))
        return EnqueueResult(args.task_id, created)

    async def enqueue_many(self, items: Iterable[EnqueueSpec | Mapping[str, Any]]) -> list[str]:
        """Add many tasks atomically in one round trip (``Queue.enqueue_many``)."""
        batch = batch_args(items)
        if not batch:
            return []
        if tracing.configured():
            with tracing.enqueue_span(self.name, len(batch)):
                await self._scripts.run(
                    self.ops.enqueue(batch, token_base(), tracing.carrier_text())
                )
        else:
            await self._scripts.run(self.ops.enqueue(batch, token_base()))
        return [a.task_id for a in batch]

    async def cancel_flow(self, task_id: str, *, branch: bool = False) -> dict[str, CancelOutcome]:
        """``Queue.cancel_flow``: cancel the unfinished tasks of a flow, or a branch."""
        steps = flowcontrol.cancel_steps(ControlOps(self.keys), task_id, branch)
        out: dict[str, CancelOutcome] = await flowcontrol.drive_async(
            self.client, self._scripts, steps
        )
        return out

    async def retry_flow(self, task_id: str, *, branch: bool = False) -> int:
        """``Queue.retry_flow``: send the dead and cancelled tasks of a flow (or a branch)
        back, dependencies first."""
        steps = flowcontrol.retry_steps(ControlOps(self.keys), task_id, branch)
        count: int = await flowcontrol.drive_async(self.client, self._scripts, steps)
        return count

    async def get(self, task_id: str) -> Task | None:
        """The task, or None when there is none (never stored, or pruned by retention)."""
        return await run_async(self.client, self.reads.task(reading.check_task_id(task_id)))

    async def flow(self, flow_id: str) -> FlowRecord | None:
        """A flow's record (``Task.flow`` names it); None when there is none."""
        return await run_async(self.client, flow_record(self.keys, reading.check_task_id(flow_id)))

    async def stats(self) -> dict[str, int]:
        """Sizes of every state, live workers and the monotonic counters."""
        return await run_async(self.client, self.reads.stats())

    async def workers(self) -> list[WorkerInfo]:
        now_ms = await run_async(self.client, self.reads.clock())
        found, config = await run_all_async(
            self.client, [self.reads.workers(), self.reads.config()]
        )
        return reading.workers_of(found, config, now_ms)

    async def wait(
        self,
        task_ids: Iterable[str],
        timeout: float,  # noqa: ASYNC109  (Queue.wait's argument; see waiting.wait_async)
    ) -> dict[str, Task]:
        """Until every task is done or dead; returns them by id (``Queue.wait``). Woken by
        the script that finishes each task, not by polling. Raises ``WaitTimeout``."""
        return await waiting.wait_async(self.client, self.keys, task_ids, timeout)

    async def enqueue_flow(self, flow: Flow | EnqueueSpec | Mapping[str, Any]) -> FlowIds:
        """Store a flow in one atomic call: every task or none (``Queue.enqueue_flow``)."""
        items, last = build(flow)
        return FlowIds(await self.enqueue_many(items), last)

    async def add_children(
        self, parent: str, token: str, items: Iterable[EnqueueSpec | Mapping[str, Any]]
    ) -> list[str]:
        """Tasks the running task ``parent`` (claimed under ``token``) waits for, in one
        atomic call (``Queue.add_children``). ``StaleToken`` when that run no longer holds it."""
        batch = batch_args(items)
        if batch:
            await self._scripts.run(self.ops.enqueue(batch, parent=(parent, token)))
        return [a.task_id for a in batch]

    async def held_by(self, pods: Iterable[str]) -> dict[str, int]:
        """Tasks each pod holds right now (``Queue.held_by``)."""
        return await run_async(self.client, self.reads.held_counts(pods))

    async def holdings(self, pods: Sequence[str]) -> dict[str, list[str]]:
        """The ids of the tasks each pod holds now (``Queue.holdings``)."""
        return await run_async(self.client, self.reads.holdings(list(pods)))

    async def exists(self) -> bool:
        """Whether anything of this queue is stored (config, counters or workers)."""
        return await run_async(self.client, self.reads.exists())

    async def config(self) -> QueueConfig:
        return await run_async(self.client, self.reads.config())

    # -- groups (``Queue.set_group``, ``group_settings``, ``groups``) --------------------

    async def set_group(self, group: str, settings: GroupSettings) -> None:
        """Replace ``group``'s own settings; the next claim applies them."""
        await run_async(self.client, groups.set_group(self.keys, check_group(group), settings))

    async def group_settings(self, group: str) -> GroupSettings:
        return await run_async(self.client, groups.group_settings(self.keys, check_group(group)))

    async def groups(self) -> list[GroupCount]:
        """Every group with pending or running tasks, most pending first."""
        names = await run_async(self.client, groups.group_names(self.keys))
        now = await run_async(self.client, self.reads.clock())
        counts = await run_async(self.client, groups.group_counts(self.keys, names, now))
        return groups.by_load(counts)

    # -- the claim pause and the budget (``Queue.pause_claims`` ...; ``quotas``) ----------

    def _quota_ops(self, group: str | None = None) -> QuotaOps:
        return quota_ops(self.keys, group)

    async def pause_claims(
        self,
        seconds: float | timedelta | None = None,
        *,
        reason: str = "",
        group: str | None = None,
    ) -> int:
        """Stop every worker of the queue (``group``: only that group's tasks) from
        claiming (``Queue.pause_claims``); returns the pause's end (epoch ms)."""
        op = self._quota_ops(group).pause(pause_ms(seconds), reason)
        until, _ = await self._scripts.run(op)
        return until

    async def resume_claims(self, *, group: str | None = None) -> None:
        """End the claim pause (``group``'s own, with a group) now and forget the rate
        limits met in a row."""
        await self._scripts.run(self._quota_ops(group).resume())

    async def set_budget(
        self, *, day: BudgetLimit = None, month: BudgetLimit = None, group: str | None = None
    ) -> None:
        """The spend budget at run time (``Queue.set_budget``; ``group``: that group's)."""
        await self._scripts.run(self._quota_ops(group).budget(day=day, month=month))

    async def quota(self, *, group: str | None = None) -> QuotaState:
        """The claim pause and the budget's spend (``group``'s own, with a group), as the
        scripts see them now."""
        now = await run_async(self.client, self.reads.clock())
        raw = await run_async(self.client, self._quota_ops(group).read())
        config = await run_async(self.client, self.reads.config())
        return state_of(raw, now, config, group)
