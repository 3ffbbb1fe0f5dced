"""Sample handlers shipped in the worker image, for demos and end-to-end tests.

``taskfleet worker --handler taskfleet.samples:sleep_and_record`` runs tasks that sleep for
``payload["seconds"]`` and then append one record of that execution to a Redis list, so a
test can count how often each task really ran (at-least-once delivery made visible).
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from typing import Any

from taskfleet.protocol.connect import SyncClient, connect
from taskfleet.worker.handlers import current_task

__all__ = ["EXECUTIONS_KEY", "async_sleep_and_record", "echo", "fail", "sleep_and_record"]

#: Default list the sample handlers append to; ``payload["record_key"]`` overrides it.
EXECUTIONS_KEY = "taskfleet:samples:executions"

_clients: dict[str, SyncClient] = {}
_clients_lock = threading.Lock()


def _client(url: str) -> SyncClient:
    # One pool per process: handlers run in many threads and a pool is thread-safe.
    with _clients_lock:
        client = _clients.get(url)
        if client is None:
            client = _clients[url] = connect(url)
        return client


def _seconds(payload: dict[str, Any]) -> float:
    seconds = float(payload.get("seconds", 0))
    if not 0 <= seconds <= 86400:
        raise ValueError(f"seconds must be within 0..86400, got {seconds}")
    return seconds


def _record(payload: dict[str, Any]) -> dict[str, Any]:
    task = current_task()
    record = {
        "id": task.task_id,
        "pod": task.pod,
        "incarnation": task.incarnation,
        "attempt": task.attempt,
        "at": time.time(),
    }
    key = str(payload.get("record_key", EXECUTIONS_KEY))
    _client(task.redis_url).rpush(key, json.dumps(record))
    return record


def sleep_and_record(payload: dict[str, Any]) -> dict[str, Any]:
    """Sleep ``seconds`` (a thread, like most real handlers), then record this execution.

    Reports its progress every second, and stops early when the task is cancelled
    (``Queue.cancel``): it then records nothing, and the task ends cancelled."""
    task = current_task()
    seconds = _seconds(payload)
    deadline = time.monotonic() + seconds
    reported = 0
    while (left := deadline - time.monotonic()) > 0:
        if task.cancelled:
            return {"cancelled": True}
        time.sleep(min(0.1, left))
        if seconds >= 2 and int(seconds - left) > reported:
            reported = int(seconds - left)
            task.progress(done=reported, total=int(seconds), message="sleeping")
    return _record(payload)


async def async_sleep_and_record(payload: dict[str, Any]) -> dict[str, Any]:
    """The same on the event loop: many of these share one worker slot pool cheaply."""
    await asyncio.sleep(_seconds(payload))
    return await asyncio.to_thread(_record, payload)


def echo(payload: dict[str, Any]) -> dict[str, Any]:
    """Return the payload: the smallest useful handler."""
    return payload


def fail(payload: dict[str, Any]) -> None:
    """Always raise: shows retries, backoff and dead tasks."""
    raise RuntimeError(str(payload.get("message", "sample failure")))
