"""Handlers that use provider quotas (taskfleet.Quota): they record each start in
``test:pq:starts`` as ``<queue>:<task id>``, settle what a payload says, raise
``RateLimited(quota=...)`` or hold their run until the test pushes to ``test:pq:gate``."""

from __future__ import annotations

from typing import Any

from taskfleet import RateLimited, current_task
from taskfleet.protocol.connect import SyncClient, connect

STARTS = "test:pq:starts"
GATE = "test:pq:gate"
_clients: dict[str, SyncClient] = {}


def _client() -> SyncClient:
    url = current_task().redis_url
    client = _clients.get(url)
    if client is None:  # a cluster URL gives a cluster client
        client = _clients[url] = connect(url, socket_timeout=40)
    return client


def call(payload: dict[str, Any]) -> str:
    """A provider call: recorded, then settled as ``settle`` says, or rate limited on its
    first run when ``limited`` (retry-after in seconds), or held while ``hold``."""
    task = current_task()
    _client().rpush(STARTS, f"{task.queue}:{task.task_id}")
    if payload.get("limited") is not None and task.attempt == 1:
        raise RateLimited(float(payload["limited"]), quota=payload.get("quota", "openai"))
    if payload.get("hold"):
        _client().blpop([GATE], timeout=30)
    if payload.get("settle"):
        task.settle(payload.get("quota", "openai"), **payload["settle"])
    if payload.get("report") is not None:
        task.report_quota(payload.get("quota", "openai"), remaining=0, reset=payload["report"])
    return "ok"
