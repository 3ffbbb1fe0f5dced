"""The pages' reads that ``Queue`` and ``producer.overview`` do not already make: one page
of a state's sorted set, a task, the workers with the tasks each holds. ``protocol.reads``
calls, pipelined, three round trips at most; the cost of each is bounded by the page,
never by the queue (ZRANGE by rank is O(log N + page) on a skiplist).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from taskfleet.producer.overview import QueueView, WorkerView
from taskfleet.producer.reading import check_task_id
from taskfleet.protocol.calls import run, run_all
from taskfleet.protocol.connect import SyncClient
from taskfleet.protocol.reads import STATES, QueueReads, TaskRow
from taskfleet.protocol.tasks import Task, TaskState

__all__ = ["HELD_SHOWN", "STATES", "TaskPage", "TaskRow", "WorkerDetail", "state_page", "task"]

#: In-flight task ids shown per worker (a pod holds its slots plus its prefetch).
HELD_SHOWN = 100


@dataclass(frozen=True)
class TaskPage:
    state: str
    total: int
    offset: int
    rows: list[TaskRow] = field(default_factory=list)


def state_page(
    client: SyncClient, reads: QueueReads, state: str, offset: int, limit: int
) -> TaskPage:
    """Rows ``offset .. offset+limit-1`` of ``state`` in ``Queue.list``'s order (the same
    ``QueueReads.ids``), and the state's size; the rows' few fields only."""
    if state not in STATES:
        raise ValueError(f"no task state {state!r}: one of {', '.join(STATES)}")
    parsed = TaskState(state)
    total, ids = run_all(client, [reads.size(parsed), reads.ids(parsed, offset, limit)])
    if not ids:
        return TaskPage(state, total, offset)
    return TaskPage(state, total, offset, run(client, reads.rows(ids)))


def task(client: SyncClient, reads: QueueReads, task_id: str) -> Task | None:
    """The task (``Queue.get``'s read), or None: never stored, or pruned by retention."""
    return run(client, reads.task(check_task_id(task_id)))


@dataclass(frozen=True)
class WorkerDetail:
    """A worker as ``overview.read`` saw it, with the ids of what it holds."""

    worker: WorkerView
    held: list[str]


def held_tasks(client: SyncClient, reads: QueueReads, view: QueueView) -> list[WorkerDetail]:
    """The ids each worker of ``view`` holds (up to ``HELD_SHOWN`` each), one round trip."""
    if not view.workers:
        return []
    held = run(client, reads.held_sample([w.pod for w in view.workers], HELD_SHOWN))
    return [WorkerDetail(w, held[w.pod][:HELD_SHOWN]) for w in view.workers]
