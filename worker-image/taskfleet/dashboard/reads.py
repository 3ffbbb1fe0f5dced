"""The pages' reads that ``Queue`` and ``producer.overview`` do not already make: one page
of a state's sorted set, a task, the workers with the tasks each holds. ``protocol.reads``
calls, pipelined, three round trips at most; the cost of each is bounded by the page,
never by the queue (ZRANGE by rank is O(log N + page) on a skiplist).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from taskfleet.producer.overview import QueueView, WorkerView
from taskfleet.producer.reading import check_task_id
from taskfleet.protocol import groups as group_layout
from taskfleet.protocol.calls import run, run_all
from taskfleet.protocol.connect import SyncClient
from taskfleet.protocol.keys import QueueKeys
from taskfleet.protocol.reads import STATES, LiveRow, QueueReads, TaskRow
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
    #: the group the page lists the pending tasks of (None: every group)
    group: str | None = None
    #: whether the state's tasks wait in several groups' zsets (a group column is shown)
    grouped: bool = False
    #: past ``groups.MERGED_MAX`` of a grouped queue's order: only a group's own page lists
    beyond: bool = False
    #: running and waiting: each task's run, progress and what it waits for
    live: list[LiveRow] = field(default_factory=list)
    #: task names by id (of the tasks whose payload is small enough to read for it)
    names: dict[str, str] = field(default_factory=dict)


#: A payload is read for its task's name only up to this size (the name opens it).
NAME_READ_BYTES = 4096
#: The states whose page shows each task's run and progress (``live_page``).
LIVE_STATES = ("running", "waiting")


def live_page(
    client: SyncClient, reads: QueueReads, state: str, offset: int, limit: int
) -> TaskPage:
    """A page of running or waiting tasks with their ``LiveRow`` (progress, lease, group,
    what each waits for) and the names of those whose payload is small; three round trips,
    bounded by the page (``NAME_READ_BYTES`` per payload read)."""
    parsed = TaskState(state)
    total, ids = run_all(client, [reads.size(parsed), reads.ids(parsed, offset, limit)])
    if not ids:
        return TaskPage(state, total, offset)
    live = run(client, reads.live_rows(ids))
    small = [r.id for r in live if 0 < r.payload_bytes <= NAME_READ_BYTES]
    names = run(client, reads.payload_names(small)) if small else []
    named = {i: n for i, n in zip(small, names, strict=True) if n}
    rows = [r for r in live if r.present]
    return TaskPage(state, total, offset, live=rows, names=named)


def pending_ids(
    client: SyncClient, keys: QueueKeys, reads: QueueReads, offset: int, limit: int
) -> tuple[list[str] | None, bool]:
    """``control.pending_ids`` on the dashboard's client: pending's ids in the order the
    claim serves them (None past ``MERGED_MAX``), and whether groups are in use."""
    heads = run(client, group_layout.lane_heads(keys))
    if not heads.grouped:
        return run(client, reads.ids(TaskState.PENDING, offset, limit)), False
    if offset >= group_layout.MERGED_MAX:
        return None, True
    slots = group_layout.fair_order(run(client, group_layout.lanes(keys, heads)), offset, limit)
    if not slots:
        return [], True
    return [i for i in run(client, group_layout.lane_ids(keys, slots)) if i], True


def state_page(
    client: SyncClient,
    reads: QueueReads,
    state: str,
    offset: int,
    limit: int,
    *,
    group: str | None = None,
) -> TaskPage:
    """Rows ``offset .. offset+limit-1`` of ``state`` in ``Queue.list``'s order (pending:
    across its groups, as the claim serves them; ``group``: one group's pending), and the
    state's size; the rows' few fields only."""
    if state not in STATES:
        raise ValueError(f"no task state {state!r}: one of {', '.join(STATES)}")
    parsed = TaskState(state)
    keys = QueueKeys(reads.queue)
    grouped = beyond = False
    if group is not None and parsed is TaskState.PENDING:
        total, ids = run_all(
            client,
            [group_layout.group_size(keys, group), reads.group_ids(group, offset, limit)],
        )
    elif parsed is TaskState.PENDING:
        total = run(client, reads.size(parsed))
        found, grouped = pending_ids(client, keys, reads, offset, limit)
        beyond = found is None
        ids = found or []
    else:
        total, ids = run_all(client, [reads.size(parsed), reads.ids(parsed, offset, limit)])
    page = TaskPage(state, total, offset, group=group, grouped=grouped, beyond=beyond)
    if not ids:
        return page
    rows = run(client, reads.rows(ids))
    return TaskPage(state, total, offset, rows, group, grouped or group is not None, beyond)


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
