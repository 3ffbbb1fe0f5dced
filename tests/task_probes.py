"""Reads of a task's progress that worker tests share."""

from __future__ import annotations

import redis
from taskfleet.producer.queue import Queue


def started(client: redis.Redis, task_id: str) -> bool:
    return any(
        e.decode().startswith(f"start:{task_id}:") for e in client.lrange("test:events", 0, -1)
    )


def state(queue: Queue, task_id: str) -> str:
    task = queue.get(task_id)
    assert task is not None
    return task.state
