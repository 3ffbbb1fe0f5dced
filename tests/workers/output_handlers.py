"""Handlers for the streamed output tests.

``parent_of_one`` emits, adds one child and returns: it is done once its child is.

``two_attempts`` emits three chunks (text and JSON) on each attempt; its first attempt
then fails, so the task runs twice; its second waits for the test to push ``test:gate``
before its last chunk, so a reader sees chunks arrive while the task runs.
"""

from __future__ import annotations

from typing import Any

import redis
from taskfleet import add_children
from taskfleet.worker.handlers import current_task

GATE = "test:gate"
_clients: dict[str, redis.Redis] = {}


def two_attempts(payload: dict[str, Any]) -> dict[str, Any]:
    task = current_task()
    task.emit(f"attempt {task.attempt} begins")
    task.emit({"attempt": task.attempt, "step": 1})
    if task.attempt == 1:
        raise RuntimeError("the first attempt fails")
    client = _clients.get(task.redis_url)
    if client is None:
        client = _clients[task.redis_url] = redis.Redis.from_url(task.redis_url, socket_timeout=60)
    client.blpop([GATE], timeout=50)
    task.emit("done é")
    return {"ok": True}


def parent_of_one(payload: dict[str, Any]) -> str:
    if payload.get("child"):
        return "child"
    current_task().emit("before the child")
    add_children([{"payload": {"child": True}, "task_id": "child-of-parent"}])
    return "parent"
