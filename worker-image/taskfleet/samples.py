"""Sample handlers shipped in the worker image, for demos and end-to-end tests.

``taskfleet worker --handler taskfleet.samples:sleep_and_record`` runs tasks that sleep for
``payload["seconds"]`` and then append one record of that execution to a Redis list, so a
test can count how often each task really ran (at-least-once delivery made visible).
``split_pages`` and ``merge_pages`` model a document flow (docs/flows.md): a split that
adds one child per page and a merge after them at run time, and a merge that records how
many page results it received.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from typing import Any

from taskfleet.protocol.connect import SyncClient, connect
from taskfleet.worker.handlers import current_task

__all__ = [
    "EXECUTIONS_KEY",
    "async_sleep_and_record",
    "echo",
    "fail",
    "merge_pages",
    "resumable_steps",
    "sleep_and_record",
    "split_pages",
]

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


def _record(payload: dict[str, Any], **extra: Any) -> dict[str, Any]:
    task = current_task()
    record = {
        "id": task.task_id,
        "pod": task.pod,
        "incarnation": task.incarnation,
        "attempt": task.attempt,
        "at": time.time(),
        **extra,
    }
    key = str(payload.get("record_key", EXECUTIONS_KEY))
    _client(task.redis_url).rpush(key, json.dumps(record))
    return record


def _sleep(seconds: float) -> bool:
    """Sleep, reporting progress every second; False when the task was cancelled."""
    task = current_task()
    deadline = time.monotonic() + seconds
    reported = 0
    while (left := deadline - time.monotonic()) > 0:
        if task.cancelled:
            return False
        time.sleep(min(0.1, left))
        if seconds >= 2 and int(seconds - left) > reported:
            reported = int(seconds - left)
            task.progress(done=reported, total=int(seconds), message="sleeping")
    return True


def sleep_and_record(payload: dict[str, Any]) -> dict[str, Any]:
    """Sleep ``seconds`` (a thread, like most real handlers), then record this execution.

    Reports its progress every second, and stops early when the task is cancelled
    (``Queue.cancel``): it then records nothing, and the task ends cancelled."""
    if not _sleep(_seconds(payload)):
        return {"cancelled": True}
    return _record(payload)


def split_pages(payload: dict[str, Any]) -> dict[str, Any]:
    """Split document ``doc`` into ``pages`` children of task ``page`` (each sleeping
    ``seconds``, ids ``<doc>-p<i>``) and a ``merge`` child after them all (id
    ``<doc>-merge``), added at run time; then hold ``hold`` seconds and record this run.

    The ids are the document's, so a run started again after its worker was lost adds
    the same children, not a second set; the task is done once they all are."""
    import taskfleet

    doc = str(payload["doc"])
    pages = int(payload["pages"])
    if not 1 <= pages <= 1000:
        raise ValueError(f"pages must be within 1..1000, got {pages}")
    record_key = payload.get("record_key", EXECUTIONS_KEY)
    page_ids = [f"{doc}-p{i}" for i in range(pages)]
    page = {"seconds": _seconds(payload), "record_key": record_key}
    taskfleet.add_children(
        [
            *({"payload": page, "task": "page", "task_id": pid} for pid in page_ids),
            {
                "payload": {"record_key": record_key},
                "task": "merge",
                "task_id": f"{doc}-merge",
                "after": page_ids,
            },
        ]
    )
    if not _sleep(float(payload.get("hold", 0))):
        return {"cancelled": True}
    record = _record(payload, pages=pages)
    return {"pages": pages, "run": record}


def merge_pages(payload: dict[str, Any]) -> dict[str, Any]:
    """Merge what the tasks this one waited for returned (``dependency_results``) and
    record this run with ``saw``: how many results it received."""
    results = current_task().dependency_results()
    return _record(payload, saw=len(results))


async def async_sleep_and_record(payload: dict[str, Any]) -> dict[str, Any]:
    """The same on the event loop: many of these share one worker slot pool cheaply."""
    await asyncio.sleep(_seconds(payload))
    return await asyncio.to_thread(_record, payload)


def resumable_steps(payload: dict[str, Any]) -> dict[str, Any]:
    """Run ``steps`` steps of ``seconds`` each, checkpointing after each one and recording
    it (with ``step``): an attempt after a lost pod starts at the step after the last
    checkpoint. Returns the step it resumed after and the steps this attempt ran."""
    steps = int(payload["steps"])
    if not 1 <= steps <= 1000:
        raise ValueError(f"steps must be within 1..1000, got {steps}")
    task = current_task()
    restored = task.restored
    resumed_after = int(restored["done"]) if isinstance(restored, dict) else 0
    ran: list[int] = []
    for step in range(resumed_after + 1, steps + 1):
        if not _sleep(_seconds(payload)):
            return {"cancelled": True, "resumed_after": resumed_after, "ran": ran}
        _record(payload, step=step)
        ran.append(step)
        task.checkpoint({"done": step})
    return {"resumed_after": resumed_after, "ran": ran}


def echo(payload: dict[str, Any]) -> dict[str, Any]:
    """Return the payload: the smallest useful handler."""
    return payload


def fail(payload: dict[str, Any]) -> None:
    """Always raise: shows retries, backoff and dead tasks."""
    raise RuntimeError(str(payload.get("message", "sample failure")))
