"""Accounting for every task a scenario enqueued: done, dead with a reason, or missing.

The sample handler ``taskfleet.samples:sleep_and_record`` appends one record per finished
execution to a Redis list of the test's choosing, outside the worker's own bookkeeping;
the ledger compares those records with the queue's state so a task that vanished, or ran
more often than the queue admits, fails the scenario.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import redis
from taskfleet.protocol.keys import QueueKeys

from e2e.lib.kube import CLUSTER_ERRORS
from e2e.lib.portforward import PortForward
from tests.polling import wait_for

__all__ = ["Accounting", "QueueView"]

SAMPLE_HANDLER = "taskfleet.samples:sleep_and_record"


@dataclass
class Accounting:
    """Where each enqueued task ended up."""

    done: set[str] = field(default_factory=set)
    dead: dict[str, str] = field(default_factory=dict)  # id -> reason
    unfinished: dict[str, str] = field(default_factory=dict)  # id -> state (pending, running...)
    missing: set[str] = field(default_factory=set)  # no hash and in no set: lost
    executions: Counter[str] = field(default_factory=Counter)  # id -> finished executions
    lost: Counter[str] = field(default_factory=Counter)  # id -> times taken back from a gone pod
    stats: dict[str, int] = field(default_factory=dict)

    @property
    def settled(self) -> bool:
        return not self.unfinished and not self.missing

    def summary(self) -> str:
        extra = sum(self.executions.values()) - len(self.done)
        return (
            f"done={len(self.done)} dead={len(self.dead)} unfinished={len(self.unfinished)} "
            f"missing={len(self.missing)} extra_executions={extra} stats={self.stats}"
        )

    def assert_nothing_lost(self, *, allow_dead: bool = False) -> None:
        """Every task is done (or dead with a reason) and ran as often as the queue counted.

        A task may run more than once in two ways, both counted by the queue: its worker
        went away and the task was taken back (the task's ``lost`` field; the handler may
        have finished while its completion never reached Redis, at-least-once), or a
        finished execution's completion was refused as stale after such a take-back (the
        queue's ``stale`` counter). Executions beyond one per done task, less the
        take-backs of that task, must not exceed the stale count.
        """
        assert not self.missing, f"tasks lost: {sorted(self.missing)[:10]} ({self.summary()})"
        assert not self.unfinished, f"tasks not finished: {self.unfinished} ({self.summary()})"
        if not allow_dead:
            assert not self.dead, f"tasks dead: {self.dead} ({self.summary()})"
        for task_id, reason in self.dead.items():
            assert reason, f"task {task_id} is dead without a reason"
        never_ran = [t for t in self.done if self.executions[t] == 0]
        assert not never_ran, f"done tasks without a recorded execution: {never_ran[:10]}"
        unexplained = sum(max(0, self.executions[t] - 1 - self.lost[t]) for t in self.done)
        assert unexplained <= self.stats.get("stale", 0), (
            f"{unexplained} extra executions counted neither as a take-back nor as stale "
            f"({self.summary()})"
        )


class QueueView:
    """One queue of the per-test Redis, seen from the test process."""

    def __init__(self, forward: PortForward, queue: str, record_key: str):
        self.forward = forward
        self.keys = QueueKeys(queue)
        self.queue = queue
        self.record_key = record_key

    def enqueue_sleepers(self, count: int, seconds: float, **options: Any) -> list[str]:
        """``count`` tasks that sleep ``seconds`` and record each finished execution."""
        from taskfleet.producer.queue import Queue

        payload = {"seconds": seconds, "record_key": self.record_key}

        def enqueue(_: redis.Redis) -> list[str]:
            # The library's own client (bytes replies), through the same forward.
            with Queue(self.queue, self.forward.url) as queue:
                return queue.enqueue_many([{"payload": payload, **options} for _ in range(count)])

        return self.forward.call(enqueue)

    def stats(self) -> dict[str, int]:
        """Set sizes and the monotonically increasing counters of the queue."""

        def read(client: redis.Redis) -> dict[str, int]:
            pipe = client.pipeline(transaction=False)
            for name in ("pending", "delayed", "running", "done", "dead"):
                pipe.zcard(getattr(self.keys, name))
            pipe.hgetall(self.keys.stats)
            pipe.hlen(self.keys.workers)
            *sizes, counters, workers = pipe.execute()
            result = {k: int(v) for k, v in counters.items()}
            result.update(
                zip(("pending", "delayed", "running", "done", "dead"), sizes, strict=True)
            )
            result["workers"] = int(workers)
            return result

        return self.forward.call(read)

    def held_by(self, pod: str) -> set[str]:
        """Ids of the tasks a pod holds right now."""
        members = self.forward.call(lambda c: c.smembers(self.keys.pod(pod)))
        return {str(m) for m in members}

    def holders(self) -> Counter[str]:
        """pod -> number of running tasks it holds."""

        def read(client: redis.Redis) -> Counter[str]:
            ids = client.zrange(self.keys.running, 0, -1)
            pipe = client.pipeline(transaction=False)
            for task_id in ids:
                pipe.hget(self.keys.task(str(task_id)), "pod")
            return Counter(p for p in pipe.execute() if p)

        return self.forward.call(read)

    def workers(self) -> dict[str, dict[str, Any]]:
        raw = self.forward.call(lambda c: c.hgetall(self.keys.workers))
        return {str(pod): json.loads(info) for pod, info in raw.items()}

    def task(self, task_id: str) -> dict[str, str]:
        fields = self.forward.call(lambda c: c.hgetall(self.keys.task(task_id)))
        return {str(k): str(v) for k, v in fields.items()}

    def executions(self) -> list[dict[str, Any]]:
        raw = self.forward.call(lambda c: c.lrange(self.record_key, 0, -1))
        return [json.loads(r) for r in raw]

    def account(self, task_ids: list[str]) -> Accounting:
        def read(client: redis.Redis) -> Accounting:
            pipe = client.pipeline(transaction=False)
            for task_id in task_ids:
                pipe.zscore(self.keys.done, task_id)
                pipe.zscore(self.keys.dead, task_id)
                pipe.hmget(self.keys.task(task_id), "state", "reason", "error", "lost")
            replies = pipe.execute()
            result = Accounting()
            for i, task_id in enumerate(task_ids):
                in_done, in_dead, (state, reason, error, lost) = replies[3 * i : 3 * i + 3]
                if lost:
                    result.lost[task_id] = int(lost)
                if in_done is not None:
                    result.done.add(task_id)
                elif in_dead is not None:
                    result.dead[task_id] = reason or error or ""
                elif state is not None:
                    result.unfinished[task_id] = state
                else:
                    result.missing.add(task_id)
            return result

        result = self.forward.call(read)
        result.executions = Counter(r["id"] for r in self.executions())
        result.stats = self.stats()
        return result

    def wait_settled(self, task_ids: list[str], *, timeout: float) -> Accounting:
        """Wait until every task is done or dead (or missing, which fails the caller)."""
        last: list[Accounting] = []

        def probe() -> Accounting | None:
            result = self.account(task_ids)
            last[:] = [result]
            return result if not result.unfinished else None

        return wait_for(
            probe,
            timeout=timeout,
            interval=1,
            what=lambda: (
                f"{len(task_ids)} tasks to finish: {last[0].summary() if last else 'no reading'}"
            ),
            ignoring=CLUSTER_ERRORS,
        )
