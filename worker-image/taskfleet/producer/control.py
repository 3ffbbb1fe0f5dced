"""Controlling tasks after their enqueue: cancel, retry (replay) dead ones, list, purge
finished ones, follow one's progress.

What ``Queue.cancel / retry / list / purge_tasks / follow`` do, on the queue's client and
keys. Changes are scripts (``protocol/control_ops.py``), each call atomic; a change by
filter goes in calls of at most ``SCAN_BOUND`` tasks, so Redis never blocks long. Reads
are ``protocol.reads`` calls, pipelined.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import timedelta

from taskfleet.protocol import bounds
from taskfleet.protocol.calls import run
from taskfleet.protocol.connect import SyncClient
from taskfleet.protocol.control_ops import CancelOutcome, ControlOps, Scan
from taskfleet.protocol.errors import InvalidArgument, TaskNotFound, WaitTimeout
from taskfleet.protocol.groups import check_group
from taskfleet.protocol.reads import QueueReads
from taskfleet.protocol.scripts import SyncScripts
from taskfleet.protocol.states import FINISHED, TaskState
from taskfleet.protocol.tasks import Task

__all__ = [
    "TaskPage",
    "cancel",
    "cancel_group",
    "drop",
    "follow",
    "list_tasks",
    "retry",
]

#: Ids per cancel, retry or drop call when the caller names them.
ID_BATCH = 1000
#: Hashes read per round trip while listing.
LIST_CHUNK = 200
MAX_LIMIT = 10_000


@dataclass(frozen=True, slots=True)
class TaskPage:
    """One page of ``Queue.list``: the tasks, and the cursor of the next page (None: the
    last one). A page may hold fewer than ``limit`` tasks when filters skip many."""

    tasks: list[Task]
    cursor: str | None


def _seconds(name: str, value: float | timedelta | None) -> float | None:
    if value is None:
        return None
    seconds = value.total_seconds() if isinstance(value, timedelta) else value
    if isinstance(seconds, bool) or not isinstance(seconds, int | float):
        raise InvalidArgument(f"{name} must be seconds or a timedelta, not {value!r}")
    if not 0 <= seconds <= bounds.MAX_DURATION_S:
        raise InvalidArgument(f"{name} must be 0..{bounds.MAX_DURATION_S} s, not {value!r}")
    return float(seconds)


def _state(state: str | TaskState, allowed: frozenset[TaskState] | None = None) -> TaskState:
    try:
        parsed = TaskState(state)
    except ValueError:
        known = ", ".join(s.value for s in TaskState)
        raise InvalidArgument(f"unknown task state {state!r}; one of: {known}") from None
    if allowed is not None and parsed not in allowed:
        names = ", ".join(sorted(s.value for s in allowed))
        raise InvalidArgument(f"state must be one of {names}, not {parsed.value!r}")
    return parsed


def _ids(task_ids: Sequence[str]) -> list[str]:
    if isinstance(task_ids, str) or not all(isinstance(i, str) and i for i in task_ids):
        raise InvalidArgument("task ids must be a list of non-empty strings")
    return list(dict.fromkeys(task_ids))


def cancel(
    scripts: SyncScripts, ops: ControlOps, task_ids: Sequence[str]
) -> dict[str, CancelOutcome]:
    ids = _ids(task_ids)
    out: dict[str, CancelOutcome] = {}
    for start in range(0, len(ids), ID_BATCH):
        batch = ids[start : start + ID_BATCH]
        outcomes: list[CancelOutcome] = scripts.run(ops.cancel(batch))
        out.update(zip(batch, outcomes, strict=True))
    return out


def cancel_group(
    client: SyncClient, scripts: SyncScripts, ops: ControlOps, reads: QueueReads, group: str
) -> dict[CancelOutcome, int]:
    """Cancel every unfinished task of ``group``: its pending ones (from its own zset),
    then its delayed and running ones (found by listing those states). How many ended
    each way."""
    check_group(group)
    counts: dict[CancelOutcome, int] = {}

    def tally(ids: list[str]) -> None:
        for outcome in cancel(scripts, ops, ids).values():
            counts[outcome] = counts.get(outcome, 0) + 1

    while ids := run(client, reads.group_ids(group, 0, ID_BATCH)):
        tally(ids)
    for state in (TaskState.DELAYED, TaskState.RUNNING):
        cursor: str | None = "0"
        while cursor is not None:
            page = list_tasks(
                client,
                reads,
                state,
                limit=ID_BATCH,
                cursor=cursor,
                reason=None,
                older_than=None,
                newer_than=None,
                group=group,
            )
            # cancelled delayed tasks leave the set: the next page starts where this began
            if state is TaskState.DELAYED and page.tasks and page.cursor is not None:
                page = TaskPage(page.tasks, str(int(page.cursor) - len(page.tasks)))
            tally([t.id for t in page.tasks])
            cursor = page.cursor
    return counts


def _scan(
    client: SyncClient,
    reads: QueueReads,
    reason: str | None,
    older_than: float | timedelta | None,
    newer_than: float | timedelta | None,
) -> Scan:
    """The range a change by filter covers: tasks finished before now (server time), so
    a task that finishes again meanwhile (a retried one that fails) is not taken twice."""
    older = _seconds("older_than", older_than) or 0.0
    newer = _seconds("newer_than", newer_than)
    now = run(client, reads.clock())
    oldest = None if newer is None else now - int(newer * 1000)
    return Scan(reason or "", oldest, now - int(older * 1000))


def retry(
    client: SyncClient,
    scripts: SyncScripts,
    ops: ControlOps,
    reads: QueueReads,
    *,
    task_ids: Sequence[str] | None,
    reason: str | None,
    older_than: float | timedelta | None,
    newer_than: float | timedelta | None,
    max_attempts: int | None,
    group: str | None = None,
) -> int:
    if max_attempts is not None and (
        isinstance(max_attempts, bool)
        or not isinstance(max_attempts, int)
        or not bounds.MIN_ATTEMPTS <= max_attempts <= bounds.MAX_ATTEMPTS
    ):
        raise InvalidArgument(
            f"max_attempts must be {bounds.MIN_ATTEMPTS}..{bounds.MAX_ATTEMPTS}, "
            f"not {max_attempts!r}"
        )
    if task_ids is not None:
        ids = _ids(task_ids)
        return sum(
            scripts.run(ops.retry(task_ids=ids[i : i + ID_BATCH], max_attempts=max_attempts)).count
            for i in range(0, len(ids), ID_BATCH)
        )
    if group is not None:
        # the dead tasks of that group, by listing (the script's scan filters by reason only)
        found: list[str] = []
        cursor: str | None = "0"
        while cursor is not None:
            page = list_tasks(
                client,
                reads,
                TaskState.DEAD,
                limit=MAX_LIMIT,
                cursor=cursor,
                reason=reason,
                older_than=older_than,
                newer_than=newer_than,
                group=check_group(group),
            )
            found += [t.id for t in page.tasks]
            cursor = page.cursor
        return retry(
            client,
            scripts,
            ops,
            reads,
            task_ids=found,
            reason=None,
            older_than=None,
            newer_than=None,
            max_attempts=max_attempts,
        )
    scan: Scan | None = _scan(client, reads, reason, older_than, newer_than)
    total = 0
    while scan is not None:
        swept = scripts.run(ops.retry(scan=scan, max_attempts=max_attempts))
        total += swept.count
        offset = swept.next_offset
        scan = None if offset is None else Scan(scan.reason, scan.oldest_ms, scan.newest_ms, offset)
    return total


def drop(
    client: SyncClient,
    scripts: SyncScripts,
    ops: ControlOps,
    reads: QueueReads,
    state: str | TaskState,
    *,
    task_ids: Sequence[str] | None,
    reason: str | None,
    older_than: float | timedelta | None,
    newer_than: float | timedelta | None,
) -> int:
    name = _state(state, FINISHED).value
    if task_ids is not None:
        ids = _ids(task_ids)
        return sum(
            scripts.run(ops.drop(name, task_ids=ids[i : i + ID_BATCH])).count
            for i in range(0, len(ids), ID_BATCH)
        )
    scan: Scan | None = _scan(client, reads, reason, older_than, newer_than)
    total = 0
    while scan is not None:
        swept = scripts.run(ops.drop(name, scan=scan))
        total += swept.count
        offset = swept.next_offset
        scan = None if offset is None else Scan(scan.reason, scan.oldest_ms, scan.newest_ms, offset)
    return total


def list_tasks(
    client: SyncClient,
    reads: QueueReads,
    state: str | TaskState,
    *,
    limit: int,
    cursor: str | None,
    reason: str | None,
    older_than: float | timedelta | None,
    newer_than: float | timedelta | None,
    group: str | None = None,
) -> TaskPage:
    """Tasks in ``state``: pending in the order they will run, delayed by when they are
    due, running by lease expiry, finished ones newest first. Age is from finished_at for
    finished tasks, created_at for the others; ``cursor`` is the offset of the next page
    in that order (a page looks at most ``10 * limit + 1000`` entries). ``group``: only
    that group's tasks (pending ones in their group's own order: its next first)."""
    parsed = _state(state)
    if group is not None:
        check_group(group)
    own = group is not None and parsed is TaskState.PENDING
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
        raise InvalidArgument(f"limit must be 1..{MAX_LIMIT}, not {limit!r}")
    try:
        offset = int(cursor or 0)
        if offset < 0:
            raise ValueError
    except ValueError:
        raise InvalidArgument(f"not a cursor of Queue.list: {cursor!r}") from None
    older, newer = _seconds("older_than", older_than), _seconds("newer_than", newer_than)
    now = run(client, reads.clock())
    finished = parsed in FINISHED
    lo = "-inf" if newer is None else now - int(newer * 1000)
    hi = "+inf" if older is None else now - int(older * 1000)
    by_score = finished and (older is not None or newer is not None)
    budget = 10 * limit + 1000
    found: list[Task] = []
    while len(found) < limit and budget > 0:
        chunk = min(LIST_CHUNK, budget)
        if own and group is not None:  # a group's pending tasks have their own zset
            ids = run(client, reads.group_ids(group, offset, chunk))
        elif by_score:  # the score is finished_at: the age filter is the range itself
            ids = run(client, reads.finished_between(parsed, hi, lo, offset, chunk))
        else:
            ids = run(client, reads.ids(parsed, offset, chunk))
        if not ids:
            return TaskPage(found, None)
        for task in run(client, reads.tasks(ids)):
            offset += 1
            budget -= 1
            if task is None:
                continue  # pruned or deleted meanwhile
            if group is not None and task.group != group:
                continue
            if _matches(task, finished, reason, lo, hi) and len(found) < limit:
                found.append(task)
            if len(found) >= limit:
                break
        if len(ids) < chunk and len(found) < limit:
            return TaskPage(found, None)
    return TaskPage(found, str(offset))


def _matches(task: Task, finished: bool, reason: str | None, lo: str | int, hi: str | int) -> bool:
    if reason and task.reason != reason:
        return False
    if finished or (lo == "-inf" and hi == "+inf"):
        return True
    if task.created_at is None:
        return False
    created = task.created_at.timestamp() * 1000
    return (lo == "-inf" or created >= float(lo)) and (hi == "+inf" or created <= float(hi))


def follow(
    client: SyncClient,
    reads: QueueReads,
    task_id: str,
    *,
    interval: float,
    timeout: float | None,
) -> Iterator[Task]:
    """The task now, then again each time its state or progress changes, until it has
    finished (that last snapshot included). Polls every ``interval`` s: one HMGET of a
    few fields, the whole hash only on a change."""
    if isinstance(interval, bool) or not isinstance(interval, int | float):
        raise InvalidArgument(f"interval must be seconds, not {interval!r}")
    if not 0.01 <= interval <= 3600:
        raise InvalidArgument(f"interval must be 0.01..3600 s, not {interval!r}")
    limit = math.inf if timeout is None else _seconds("timeout", timeout) or 0.0
    deadline = time.monotonic() + limit
    seen: tuple[str, ...] | None = None
    while True:
        marks = run(client, reads.progress_marks(task_id))
        if marks is None:
            raise TaskNotFound(reads.queue, task_id)
        if marks != seen:
            task = run(client, reads.task(task_id))
            if task is None:
                raise TaskNotFound(reads.queue, task_id)
            seen = marks
            yield task
            if task.finished:
                return
        left = deadline - time.monotonic()
        if left <= 0:
            raise WaitTimeout([task_id], limit)
        time.sleep(min(interval, left))
