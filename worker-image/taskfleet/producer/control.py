"""Controlling tasks after their enqueue: cancel, promote delayed ones, retry (replay)
dead ones, list, purge finished ones, follow one's progress (``Queue.cancel / promote /
retry / list / purge_tasks / follow``).

Each call is a plan (``runner``): changes are scripts (``protocol/control_ops.py``), each
call atomic; a change by filter goes in calls of at most ``SCAN_BOUND`` tasks, so Redis
never blocks long. Reads are ``protocol.reads`` calls, pipelined.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta

from taskfleet.producer.runner import Emit, Plan, QueueBase
from taskfleet.protocol import bounds
from taskfleet.protocol import groups as group_layout
from taskfleet.protocol.control_ops import CancelOutcome, Scan
from taskfleet.protocol.errors import InvalidArgument, TaskNotFound, WaitTimeout
from taskfleet.protocol.follow import FOLLOW_TTL_MS, follow_block, follow_join, follow_refresh
from taskfleet.protocol.groups import check_group
from taskfleet.protocol.output import output_block, output_range, task_state
from taskfleet.protocol.states import FINISHED, TaskState
from taskfleet.protocol.tasks import Task

__all__ = [
    "TaskPage",
    "cancel",
    "cancel_group",
    "cancel_many",
    "follow",
    "list_tasks",
    "promote",
    "promote_many",
    "purge_tasks",
    "retry",
]

Age = float | timedelta | None

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


def cancel(q: QueueBase, task_id: str) -> Plan[CancelOutcome]:
    """Cancel a task: pending or delayed, it ends ``cancelled`` and never runs
    (``CANCELLED``); running, its worker learns it at its next heartbeat, cancels the
    run (``current_task().cancelled``; an async handler's coroutine is cancelled) and
    the task ends ``cancelled`` whatever the run returns (``REQUESTED``). A finished
    task is left as it is (``DONE``, ``DEAD``, ``FINISHED``); ``NOT_FOUND``: no such id."""
    out = yield from cancel_many(q, [task_id])
    return out[task_id]


def cancel_many(q: QueueBase, task_ids: Sequence[str]) -> Plan[dict[str, CancelOutcome]]:
    """``cancel`` for each id, in calls of 1000."""
    ids = _ids(task_ids)
    out: dict[str, CancelOutcome] = {}
    for start in range(0, len(ids), ID_BATCH):
        batch = ids[start : start + ID_BATCH]
        outcomes: list[CancelOutcome] = yield q.control_ops.cancel(batch)
        out.update(zip(batch, outcomes, strict=True))
    return out


def promote(q: QueueBase, task_id: str) -> Plan[bool]:
    """Run a delayed task now (scheduled for later, or waiting out a retry's backoff): it
    goes to pending at its priority, its ``run_at`` now. False when it is not delayed
    (pending, running, finished, or no such task): nothing changed."""
    out = yield from promote_many(q, [task_id])
    return out[task_id]


def promote_many(q: QueueBase, task_ids: Sequence[str]) -> Plan[dict[str, bool]]:
    """``promote`` for each id, in calls of 1000: whether each was promoted."""
    ids = _ids(task_ids)
    out: dict[str, bool] = {}
    for start in range(0, len(ids), ID_BATCH):
        batch = ids[start : start + ID_BATCH]
        flags: list[bool] = yield q.control_ops.promote(batch)
        out.update(zip(batch, flags, strict=True))
    return out


def cancel_group(q: QueueBase, group: str) -> Plan[dict[CancelOutcome, int]]:
    """``cancel`` every unfinished task of ``group`` (pending, delayed, running);
    returns how many ended each way: its pending ones (from its own zset), then its
    delayed and running ones (found by listing those states)."""
    check_group(group)
    counts: dict[CancelOutcome, int] = {}

    def tally(outcomes: dict[str, CancelOutcome]) -> None:
        for outcome in outcomes.values():
            counts[outcome] = counts.get(outcome, 0) + 1

    while ids := (yield q.reads.group_ids(group, 0, ID_BATCH)):
        tally((yield from cancel_many(q, ids)))
    for state in (TaskState.DELAYED, TaskState.RUNNING):
        cursor: str | None = "0"
        while cursor is not None:
            page = yield from list_tasks(q, state, limit=ID_BATCH, cursor=cursor, group=group)
            # cancelled delayed tasks leave the set: the next page starts where this began
            if state is TaskState.DELAYED and page.tasks and page.cursor is not None:
                page = TaskPage(page.tasks, str(int(page.cursor) - len(page.tasks)))
            tally((yield from cancel_many(q, [t.id for t in page.tasks])))
            cursor = page.cursor
    return counts


def _scan(q: QueueBase, reason: str | None, older_than: Age, newer_than: Age) -> Plan[Scan]:
    """The range a change by filter covers: tasks finished before now (server time), so
    a task that finishes again meanwhile (a retried one that fails) is not taken twice."""
    older = _seconds("older_than", older_than) or 0.0
    newer = _seconds("newer_than", newer_than)
    now = yield q.reads.clock()
    oldest = None if newer is None else now - int(newer * 1000)
    return Scan(reason or "", oldest, now - int(older * 1000))


def retry(
    q: QueueBase,
    task_ids: Sequence[str] | None = None,
    *,
    reason: str | None = None,
    older_than: Age = None,
    newer_than: Age = None,
    max_attempts: int | None = None,
    group: str | None = None,
) -> Plan[int]:
    """Send dead tasks back to pending with a new attempt budget (attempts, losses and
    deferrals at 0; ``max_attempts`` replaces the task's own): these ids, or every dead
    task matching the filters (``reason``; finished more than ``older_than`` / less than
    ``newer_than`` ago; of ``group``), or with no argument all of them. Returns how
    many went back; tasks not dead are skipped. Each call of up to 1000 tasks is
    atomic."""
    if max_attempts is not None and (
        isinstance(max_attempts, bool)
        or not isinstance(max_attempts, int)
        or not bounds.MIN_ATTEMPTS <= max_attempts <= bounds.MAX_ATTEMPTS
    ):
        raise InvalidArgument(
            f"max_attempts must be {bounds.MIN_ATTEMPTS}..{bounds.MAX_ATTEMPTS}, "
            f"not {max_attempts!r}"
        )
    ops = q.control_ops
    if task_ids is not None:
        ids = _ids(task_ids)
        total = 0
        for i in range(0, len(ids), ID_BATCH):
            total += (
                yield ops.retry(task_ids=ids[i : i + ID_BATCH], max_attempts=max_attempts)
            ).count
        return total
    if group is not None:
        # the dead tasks of that group, by listing (the script's scan filters by reason only)
        found: list[str] = []
        cursor: str | None = "0"
        while cursor is not None:
            page = yield from list_tasks(
                q,
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
        count: int = yield from retry(q, found, max_attempts=max_attempts)
        return count
    scan: Scan | None = yield from _scan(q, reason, older_than, newer_than)
    total = 0
    while scan is not None:
        swept = yield ops.retry(scan=scan, max_attempts=max_attempts)
        total += swept.count
        offset = swept.next_offset
        scan = None if offset is None else Scan(scan.reason, scan.oldest_ms, scan.newest_ms, offset)
    return total


def purge_tasks(
    q: QueueBase,
    state: str | TaskState,
    task_ids: Sequence[str] | None = None,
    *,
    reason: str | None = None,
    older_than: Age = None,
    newer_than: Age = None,
) -> Plan[int]:
    """Delete finished tasks in ``state`` (done, dead or cancelled) now rather than at
    the end of their retention: these ids, or those matching the filters (all of them
    without any). Returns how many were deleted; other states are never touched."""
    name = _state(state, FINISHED).value
    ops = q.control_ops
    total = 0
    if task_ids is not None:
        ids = _ids(task_ids)
        for i in range(0, len(ids), ID_BATCH):
            total += (yield ops.drop(name, task_ids=ids[i : i + ID_BATCH])).count
        return total
    scan: Scan | None = yield from _scan(q, reason, older_than, newer_than)
    while scan is not None:
        swept = yield ops.drop(name, scan=scan)
        total += swept.count
        offset = swept.next_offset
        scan = None if offset is None else Scan(scan.reason, scan.oldest_ms, scan.newest_ms, offset)
    return total


def list_tasks(
    q: QueueBase,
    state: str | TaskState,
    *,
    limit: int = 100,
    cursor: str | None = None,
    reason: str | None = None,
    older_than: Age = None,
    newer_than: Age = None,
    group: str | None = None,
) -> Plan[TaskPage]:
    """A page of the tasks in ``state``, of ``group`` only if given; pass the page's
    ``cursor`` back for the next one (None: no more). Pending tasks come in the order
    they will run, delayed by when they are due, running by lease expiry, finished ones
    newest first. Age is from finished_at for finished tasks, created_at for the others;
    ``cursor`` is the offset of the next page in that order (a page looks at most
    ``10 * limit + 1000`` entries). Pending tasks of groups wait in their group's own
    order: ``group`` lists one group's (``groups()`` names the groups); without it, pending
    lists every pending task, its groups' included, in the order the claim serves them
    (the first ``groups.MERGED_MAX`` of that order)."""
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
    reads = q.reads
    now = yield reads.clock()
    finished = parsed in FINISHED
    lo = "-inf" if newer is None else now - int(newer * 1000)
    hi = "+inf" if older is None else now - int(older * 1000)
    by_score = finished and (older is not None or newer is not None)
    budget = 10 * limit + 1000
    found: list[Task] = []
    while len(found) < limit and budget > 0:
        chunk = min(LIST_CHUNK, budget)
        if own and group is not None:  # a group's pending tasks have their own zset
            ids = yield reads.group_ids(group, offset, chunk)
        elif parsed is TaskState.PENDING:  # across the groups' own zsets when in use
            ids = yield from pending_ids(q, offset, chunk)
            if ids is None:
                if found:
                    return TaskPage(found, str(offset))
                raise InvalidArgument(
                    f"pending across groups is listed up to its first {group_layout.MERGED_MAX}"
                    " tasks: list one group's with group (groups() names them)"
                )
        elif by_score:  # the score is finished_at: the age filter is the range itself
            ids = yield reads.finished_between(parsed, hi, lo, offset, chunk)
        else:
            ids = yield reads.ids(parsed, offset, chunk)
        if not ids:
            return TaskPage(found, None)
        for task in (yield reads.tasks(ids)):
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


def pending_ids(q: QueueBase, offset: int, count: int) -> Plan[list[str] | None]:
    """Ids ``offset .. offset+count-1`` of pending in the order the claim serves them:
    across the groups' own zsets when groups are in use ('' where a task left meanwhile),
    else pending's own order. None: ``offset`` is past ``groups.MERGED_MAX`` of a grouped
    queue. Three round trips with groups, two without."""
    heads = yield group_layout.lane_heads(q.keys)
    if not heads.grouped:
        plain: list[str] = yield q.reads.ids(TaskState.PENDING, offset, count)
        return plain
    if offset >= group_layout.MERGED_MAX:
        return None
    lanes = yield group_layout.lanes(q.keys, heads)
    slots = group_layout.fair_order(lanes, offset, count)
    if not slots:
        return []
    found: list[str] = yield group_layout.lane_ids(q.keys, slots)
    return found


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
    q: QueueBase, task_id: str, *, interval: float = 0.5, timeout: float | None = None
) -> Plan[None]:
    """Yield the task now and each time its state or progress changes, until it has
    finished (that last snapshot included). Woken by the script that changes the task (a
    blocking read of its follow stream, ``protocol/follow.py``): no polling. ``interval``:
    the longest one read waits before the task is read anyway (a change made by an older
    worker wakes no one). ``TaskNotFound`` for an unknown id, ``WaitTimeout`` after
    ``timeout`` s."""
    if isinstance(interval, bool) or not isinstance(interval, int | float):
        raise InvalidArgument(f"interval must be seconds, not {interval!r}")
    if not 0.01 <= interval <= 3600:
        raise InvalidArgument(f"interval must be 0.01..3600 s, not {interval!r}")
    limit = math.inf if timeout is None else _seconds("timeout", timeout) or 0.0
    deadline = time.monotonic() + limit
    # the follow stream outlives a follower's refresh by FOLLOW_TTL_MS: refresh well before
    wait = min(float(interval), FOLLOW_TTL_MS / 4000)
    if q.socket_timeout:  # the read must answer before the client gives up on the socket
        wait = min(wait, q.socket_timeout / 2)
    seen: tuple[str, ...] | None = None
    reads = q.reads
    keys = q.keys
    last = yield follow_join(keys, task_id)
    while True:
        marks = yield reads.progress_marks(task_id)
        if marks is None:
            raise TaskNotFound(reads.queue, task_id)
        if marks != seen:
            task = yield reads.task(task_id)
            if task is None:
                raise TaskNotFound(reads.queue, task_id)
            seen = marks
            yield Emit(task)
            if task.finished:
                return
        left = deadline - time.monotonic()
        if left <= 0:
            raise WaitTimeout([task_id], limit)
        if not (yield follow_refresh(keys, task_id)):
            last = yield follow_join(keys, task_id)
        woke = yield follow_block(keys, task_id, last, max(1, int(min(wait, left) * 1000)))
        if woke is not None:
            last = woke


def stream(q: QueueBase, task_id: str, *, since: str = "0-0", block: float = 1.0) -> Plan[None]:
    """Yield the task's output chunks (``OutputChunk``) in order, every attempt's: what
    exists after ``since`` (a chunk's ``id``; '0-0': from the first), then each new one as
    it is written (a blocking read, XREAD BLOCK: no polling), until the task finishes.
    ``block``: the longest one read waits before it checks whether the task finished
    without an end entry (never emitted, say); nothing is missed either way. Ends at once
    for a task that does not exist and has no output."""
    if not isinstance(since, str) or not since:
        raise InvalidArgument(f"since must be a chunk's id (or '0-0'), not {since!r}")
    if isinstance(block, bool) or not isinstance(block, int | float) or not 0.01 <= block <= 60:
        raise InvalidArgument(f"block must be 0.01..60 s, not {block!r}")
    block_s = float(block)
    if q.socket_timeout:  # the read must answer before the client gives up on the socket
        block_s = min(block_s, q.socket_timeout / 2)
    block_ms = max(1, int(block_s * 1000))
    last = since
    keys = q.keys
    while True:
        entries = yield output_block(keys, task_id, last, block_ms)
        if not entries:
            state = yield task_state(keys, task_id)
            if state is not None and state not in FINISHED:
                continue
            entries = yield output_range(keys, task_id, last)
            if not entries:
                return
        for entry_id, item in entries:
            last = entry_id
            if isinstance(item, str):  # the end entry: over, unless the task runs again
                state = yield task_state(keys, task_id)
                if state is None or state in FINISHED:
                    return
                continue
            yield Emit(item)
