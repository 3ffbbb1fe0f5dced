"""The producer API: ``Queue.enqueue / get / stats / wait`` and the operator's calls.

Sync, on redis-py: producers, the CLI and the operator (which runs it in threads) use
it. Every state change is one Lua script (see ``scripts.py``); reads are plain
commands, pipelined (``reading``). What an enqueue takes is checked and encoded in
``encoding``, before anything is sent.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import redis

from taskfleet.producer import reading
from taskfleet.producer.encoding import EnqueueSpec, checked_int, encode_payload, enqueue_args
from taskfleet.producer.reading import WorkerInfo
from taskfleet.protocol.bounds import PRIORITY_MAX, PRIORITY_MIN
from taskfleet.protocol.config import QueueConfig
from taskfleet.protocol.errors import InvalidArgument
from taskfleet.protocol.keys import QueueKeys
from taskfleet.protocol.redisurl import parse_redis_url
from taskfleet.protocol.scripts import Ops, SweepResult, SyncScripts
from taskfleet.protocol.tasks import Task

__all__ = ["EnqueueResult", "EnqueueSpec", "Queue", "WorkerInfo"]


@dataclass(frozen=True, slots=True)
class EnqueueResult:
    """What ``Queue.enqueue_result`` did: ``created`` is False when the same task (same
    id, payload and options) existed already and nothing changed."""

    task_id: str
    created: bool


def _token_base() -> str:
    """Claim tokens for tasks an enqueue hands straight to idle workers (unique per call)."""
    return secrets.token_hex(8)


class Queue:
    """One named queue in Redis (sync API for producers, the CLI and the operator)."""

    def __init__(
        self,
        name: str,
        redis_url: str = "redis://localhost:6379/0",
        *,
        client: redis.Redis | None = None,
    ) -> None:
        self.keys = QueueKeys(name)
        self.name = name
        if client is None:
            parse_redis_url(redis_url)  # InvalidRedisURL, one line, never the URL itself
        self.client: redis.Redis = client if client is not None else redis.Redis.from_url(redis_url)
        self._owns_client = client is None
        self.ops = Ops(self.keys)
        self._scripts = SyncScripts.for_client(self.client)

    def __repr__(self) -> str:
        return f"Queue({self.name!r})"  # never the URL: it may hold a password

    def close(self) -> None:
        if self._owns_client:
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
    ) -> str:
        """Add a task; returns its id.

        ``delay``: seconds (or timedelta) before it may run. ``deadline``: seconds from
        now (or an aware datetime) by which it must have started, else it goes dead
        with reason ``expired``. ``cost``: units it takes from the cost rate limit.
        Bounds (``taskfleet.protocol.bounds``): delay and deadline at most 100 years, timeout at
        most one year, cost 0..1e9, max_attempts 1..10,000, priority -1000..1000.

        With ``task_id``, enqueueing the same task again (same payload, priority, cost,
        timeout and, if given, max_attempts) returns the id and changes nothing; another
        payload or option under an existing id raises ``TaskExists``. ``enqueue_result``
        also says whether the task was created.
        """
        return self.enqueue_result(
            payload,
            priority=priority,
            delay=delay,
            deadline=deadline,
            max_attempts=max_attempts,
            task_id=task_id,
            cost=cost,
            timeout=timeout,
        ).task_id

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
    ) -> EnqueueResult:
        """``enqueue``, returning the id and whether this call created the task."""
        args = enqueue_args(
            {
                "payload": payload,
                "priority": priority,
                "delay": delay,
                "deadline": deadline,
                "max_attempts": max_attempts,
                "task_id": task_id,
                "cost": cost,
                "timeout": timeout,
            }
        )
        [created] = self._scripts.run(self.ops.enqueue([args], _token_base()))
        return EnqueueResult(args.task_id, created)

    def enqueue_many(self, items: Iterable[EnqueueSpec | Mapping[str, Any]]) -> list[str]:
        """Add many tasks atomically in one round trip; returns their ids in order.

        Each item is an ``EnqueueSpec`` or a dict of ``enqueue``'s arguments. If any
        item is invalid (or too large), names an id twice, or names an existing task
        with another payload or options (``TaskExists``), nothing is stored.
        """
        batch = [enqueue_args(item) for item in items]
        if not batch:
            return []
        seen: set[str] = set()
        for args in batch:
            if args.task_id in seen:
                raise InvalidArgument(f"task id {args.task_id!r} appears twice in one enqueue")
            seen.add(args.task_id)
        self._scripts.run(self.ops.enqueue(batch, _token_base()))
        return [a.task_id for a in batch]

    # -- reading -----------------------------------------------------------------------

    def get(self, task_id: str) -> Task | None:
        """The task, or None when there is none (never stored, or pruned by retention)."""
        return reading.get(self.client, self.keys, task_id)

    def stats(self) -> dict[str, int]:
        """Sizes of every state, live workers and the monotonic counters."""
        return reading.stats(self.client, self.keys)

    def workers(self) -> list[WorkerInfo]:
        return reading.workers(self.client, self.keys)

    def held_by(self, pods: Iterable[str]) -> dict[str, int]:
        """Tasks each pod holds right now, from the queue's own records (exact; a
        worker's heartbeat reports its count only every interval), in one round trip."""
        names = list(pods)
        pipe = self.client.pipeline(transaction=False)
        for pod in names:
            pipe.scard(self.keys.pod(pod))
        return {pod: int(count) for pod, count in zip(names, pipe.execute(), strict=True)}

    def wait(self, task_ids: Sequence[str], timeout: float) -> dict[str, Task]:
        """Block until every task is done or dead; returns them by id.

        Raises ``WaitTimeout`` (a ``TimeoutError``) listing the unfinished ids. A task id
        that does not exist counts as unfinished (it may not be enqueued yet).
        """
        return reading.wait(self.client, self.keys, task_ids, timeout)

    # -- operating ---------------------------------------------------------------------

    def configure(self, config: QueueConfig) -> None:
        """Store the queue's shared settings; every script reads them at its next call."""
        pipe = self.client.pipeline(transaction=True)
        pipe.delete(self.keys.config)
        pipe.hset(self.keys.config, mapping=config.to_redis())  # type: ignore[arg-type]
        pipe.execute()

    def config(self) -> QueueConfig:
        return QueueConfig.from_redis(self.client.hgetall(self.keys.config))

    def requeue_pod(self, pod: str, *, except_incarnation: str | None = None) -> int:
        """Take back every task ``pod`` holds; returns how many (requeued + gone dead)."""
        requeued, dead = self._scripts.run(self.ops.requeue(pod, except_incarnation))
        return requeued + dead

    def sweep(self) -> SweepResult:
        """Promote due tasks, expire deadlines, take back expired leases, prune, drop
        silent workers. Bounded per call; call again while counts are at the bound."""
        return self._scripts.run(self.ops.sweep())

    def fire_schedule(
        self, name: str, slot: int, payload: dict[str, Any], *, priority: int = 0
    ) -> str | None:
        """Enqueue the task of schedule ``name`` for ``slot`` unless that slot (or a later
        one) already fired; returns the new task id, or None."""
        if not name or not isinstance(slot, int) or isinstance(slot, bool):
            raise InvalidArgument("fire_schedule needs a schedule name and an integer slot")
        checked_int(priority, "priority", PRIORITY_MIN, PRIORITY_MAX)
        task_id = f"sched:{name}:{slot}"
        op = self.ops.fire_schedule(name, slot, task_id, encode_payload(payload), priority)
        return self._scripts.run(op)

    def purge(self) -> None:
        """Delete every key of the queue (tasks, workers, config, counters)."""
        batch: list[Any] = []
        for key in self.client.scan_iter(match=self.keys.pattern, count=1000):
            batch.append(key)
            if len(batch) >= 1000:
                self.client.unlink(*batch)
                batch = []
        if batch:
            self.client.unlink(*batch)
