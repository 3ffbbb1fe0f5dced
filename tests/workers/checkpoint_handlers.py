"""Handlers for the checkpoint tests: six steps, each one checkpointed.

Each step is recorded in the list ``test:steps`` as ``<attempt>:<step>`` before its
checkpoint. The first attempt stops after the step ``hold_after`` names and waits for the
test to push ``test:gate`` (the test kills its worker, or lets its lease expire, meanwhile);
a later attempt never waits. A refused checkpoint is recorded in ``test:refused``.
"""

from __future__ import annotations

from typing import Any

import redis
from taskfleet import StaleToken
from taskfleet.worker.handlers import current_task

STEPS = "test:steps"
GATE = "test:gate"
REFUSED = "test:refused"
_clients: dict[str, redis.Redis] = {}


def _client(url: str) -> redis.Redis:
    client = _clients.get(url)
    if client is None:
        client = _clients[url] = redis.Redis.from_url(url, socket_timeout=60)
    return client


def six_steps(payload: dict[str, Any]) -> dict[str, Any]:
    task = current_task()
    client = _client(task.redis_url)
    restored = task.restored
    first = 1 if restored is None else int(restored["step"]) + 1
    for step in range(first, 7):
        client.rpush(STEPS, f"{task.attempt}:{step}")
        try:
            task.checkpoint({"step": step}, keep=bool(payload.get("keep")))
        except StaleToken:
            client.rpush(REFUSED, f"{task.attempt}:{step}")
            raise
        if step == payload.get("hold_after") and task.attempt == 1:
            client.blpop([GATE], timeout=50)
    return {"steps": 6, "restored": restored}
