"""The pages' reads that ``Queue`` and ``producer.overview`` do not already make: one page
of a state's sorted set, a task with the server's time, the workers with the tasks each
holds. Plain commands, pipelined, three round trips at most; the cost of each is bounded by
the page, never by the queue (ZRANGE by rank is O(log N + page) on a skiplist).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from taskfleet.producer import control, reading
from taskfleet.producer.overview import QueueView, WorkerView
from taskfleet.protocol.connect import SyncClient
from taskfleet.protocol.keys import QueueKeys
from taskfleet.protocol.scripts import text
from taskfleet.protocol.tasks import Task, TaskState, stored_int, stored_text, stored_time

#: The states in the order a page shows them.
STATES: tuple[str, ...] = tuple(s.value for s in TaskState)

#: The fields of a task a row of a page shows (a task's hash has more).
ROW_FIELDS = (
    "priority",
    "attempts",
    "max_attempts",
    "created_at",
    "run_at",
    "finished_at",
    "reason",
    "error",
    "pod",
)

#: In-flight task ids shown per worker (a pod holds its slots plus its prefetch).
HELD_SHOWN = 100


@dataclass(frozen=True)
class TaskRow:
    id: str
    priority: int | None
    attempts: int | None
    max_attempts: int | None
    created_at: datetime | None
    run_at: datetime | None
    finished_at: datetime | None
    reason: str
    error: str
    pod: str
    #: False when the id is in the state's set but its hash is gone (pruned meanwhile)
    present: bool = True


@dataclass(frozen=True)
class TaskPage:
    state: str
    total: int
    offset: int
    rows: list[TaskRow] = field(default_factory=list)


def state_page(
    client: SyncClient, keys: QueueKeys, state: str, offset: int, limit: int
) -> TaskPage:
    """Rows ``offset .. offset+limit-1`` of ``state`` in ``Queue.list``'s order (the same
    ``control.ordered_ids``), and the state's size; the rows' few fields only."""
    if state not in STATES:
        raise ValueError(f"no task state {state!r}: one of {', '.join(STATES)}")
    parsed = TaskState(state)
    total = client.zcard(control.state_set(keys, parsed)[0])
    ids = control.ordered_ids(client, keys, parsed, offset, limit)
    if not ids:
        return TaskPage(state, int(total), offset)
    pipe = client.pipeline(transaction=False)
    for task_id in ids:
        pipe.hmget(keys.task(task_id), *ROW_FIELDS)
    rows = [_row(task_id, values) for task_id, values in zip(ids, pipe.execute(), strict=True)]
    return TaskPage(state, int(total), offset, rows)


def _row(task_id: str, values: list[bytes | None]) -> TaskRow:
    pairs = zip(ROW_FIELDS, values, strict=True)
    h = {name: (None if v is None else stored_text(v)) for name, v in pairs}
    return TaskRow(
        id=task_id,
        priority=stored_int(h["priority"]),
        attempts=stored_int(h["attempts"]),
        max_attempts=stored_int(h["max_attempts"]),
        created_at=stored_time(h["created_at"]),
        run_at=stored_time(h["run_at"]),
        finished_at=stored_time(h["finished_at"]),
        reason=h["reason"] or "",
        error=h["error"] or "",
        pod=h["pod"] or "",
        present=any(v is not None for v in values),
    )


def task(client: SyncClient, keys: QueueKeys, task_id: str) -> Task | None:
    """The task (``Queue.get``'s read), or None: never stored, or pruned by retention."""
    return reading.get(client, keys, task_id)


@dataclass(frozen=True)
class WorkerDetail:
    """A worker as ``overview.read`` saw it, with the ids of what it holds."""

    worker: WorkerView
    held: list[str]


def held_tasks(client: SyncClient, keys: QueueKeys, view: QueueView) -> list[WorkerDetail]:
    """The ids each worker of ``view`` holds (up to ``HELD_SHOWN`` each), one round trip."""
    if not view.workers:
        return []
    pipe = client.pipeline(transaction=False)
    for worker in view.workers:
        # one SSCAN step returns a small set whole (it is stored compact); a large one
        # is shown in part, its size is in ``holds``
        pipe.sscan(keys.pod(worker.pod), 0, count=HELD_SHOWN)
    out = []
    for worker, (_, members) in zip(view.workers, pipe.execute(), strict=True):
        out.append(WorkerDetail(worker, sorted(text(m) for m in members)[:HELD_SHOWN]))
    return out
