"""Cancel and retry a whole flow, or a branch of one (docs/flows.md).

The **branch** of a task is the task and every task that waits for it, transitively; its
**flow** is every task connected to it through ``after`` links in either direction (its
dependencies, theirs, its dependants, theirs, ...; the children a task added at run time
are dependencies of it). The members are found by walking the links Redis holds
(``protocol/flowwalk.py``), ``WALK_BATCH`` tasks a round trip, then changed in script
calls of ``CHANGE_BATCH`` tasks: each call is atomic and short, the whole is not one
atomic step (a member may finish between two calls).

The work is written once, as plans (``runner``): generators that yield each ``Call`` (a
read) or ``Op`` (a script) and receive its reply; ``Queue`` and ``AsyncQueue`` run them.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

from taskfleet.producer.reading import check_task_id
from taskfleet.producer.runner import Plan, QueueBase
from taskfleet.protocol.calls import Call
from taskfleet.protocol.control_ops import CancelOutcome, ControlOps, Swept
from taskfleet.protocol.errors import FlowTooLarge, TaskNotFound
from taskfleet.protocol.flows import FlowRecord, flow_record
from taskfleet.protocol.flowwalk import Links, links, more_by
from taskfleet.protocol.scripts import Op

__all__ = [
    "CHANGE_BATCH",
    "MAX_FLOW_TASKS",
    "WALK_BATCH",
    "cancel_flow",
    "cancel_steps",
    "flow",
    "retry_flow",
    "retry_steps",
]

#: Tasks whose links one round trip reads.
WALK_BATCH = 200
#: Tasks one cancel or retry script call changes (each resolves at most 200 dependants).
CHANGE_BATCH = 200
#: Walks a cancel makes at most: one more after each that found members to cancel (children
#: a running member added meanwhile, see ``cancel_steps``).
MAX_PASSES = 10
#: Tasks a walk finds at most (linked ids included): past it, ``FlowTooLarge`` and nothing
#: changed, so a walk's time and memory are bounded whatever Redis holds.
MAX_FLOW_TASKS = 50_000

Step = Generator[Call[Any] | Op[Any], Any, Any]
_FINISHED = {"done": CancelOutcome.DONE, "dead": CancelOutcome.DEAD}
_ACTED = (CancelOutcome.CANCELLED, CancelOutcome.REQUESTED)


def walk(ops: ControlOps, task_id: str, branch: bool) -> Generator[Any, Any, dict[str, Links]]:
    """The members of ``task_id``'s branch (``branch``) or flow, with their links; a
    linked id with no task (deleted by retention) is kept with state None and not
    followed. ``TaskNotFound`` when ``task_id`` itself is no task; ``FlowTooLarge`` past
    ``MAX_FLOW_TASKS``. Each id is read once (``queued``), so a cycle in the stored links
    ends the walk like any other edge back to a task already met."""
    check_task_id(task_id)
    keys = ops.keys
    found: dict[str, Links] = {}
    frontier = [task_id]
    queued = {task_id}
    while frontier:
        batch, frontier = frontier[:WALK_BATCH], frontier[WALK_BATCH:]
        read: list[Links] = yield links(keys, batch)
        for tid, got in zip(batch, read, strict=True):
            by = list(got.by)
            cursor = got.cursor
            while cursor:
                if len(queued) + len(by) > MAX_FLOW_TASKS:
                    raise FlowTooLarge(task_id, MAX_FLOW_TASKS)
                cursor, more = yield more_by(keys, tid, cursor)
                by += more
            found[tid] = Links(got.state, got.after, tuple(by), 0)
            if got.state is None:
                if tid == task_id:
                    raise TaskNotFound(keys.queue, task_id)
                continue
            nexts = by if branch else [*got.after, *by]
            for other in nexts:
                if other not in queued:
                    queued.add(other)
                    frontier.append(other)
            if len(queued) > MAX_FLOW_TASKS:
                raise FlowTooLarge(task_id, MAX_FLOW_TASKS)
    return found


def order(members: dict[str, Links]) -> list[str]:
    """The members, each after every member it waits for (dependencies first). Iterative,
    each member entered once: a cycle in the stored links (written by hand) is cut where
    the walk meets a member already entered, so it ends in time and memory linear in the
    links."""
    entered: set[str] = set()
    out: list[str] = []
    for start, links_of in members.items():
        if start in entered:
            continue
        entered.add(start)
        stack = [(start, iter(links_of.after))]
        while stack:
            tid, deps = stack[-1]
            for dep in deps:
                if dep in members and dep not in entered:
                    entered.add(dep)
                    stack.append((dep, iter(members[dep].after)))
                    break
            else:
                stack.pop()
                out.append(tid)
    return out


def cancel_steps(ops: ControlOps, task_id: str, branch: bool) -> Step:
    """Cancel every unfinished member, dependants first (a dependant cancelled before its
    dependency is not ended by its policy instead). Walks again after each pass that
    cancelled something, for members that appeared meanwhile (children a running member
    added before it was asked to stop; once asked, it can add none). Returns each
    member's outcome, as ``Queue.cancel_many``."""
    out: dict[str, CancelOutcome] = {}
    for _ in range(MAX_PASSES):
        members = yield from walk(ops, task_id, branch)
        for tid, got in members.items():
            if tid not in out and got.state is not None:
                out[tid] = _FINISHED.get(got.state, CancelOutcome.FINISHED)
        targets = [
            tid
            for tid in reversed(order(members))
            if members[tid].state in ("pending", "delayed", "waiting", "running")
            and out.get(tid) not in _ACTED
        ]
        if not targets:
            break
        for start in range(0, len(targets), CHANGE_BATCH):
            batch = targets[start : start + CHANGE_BATCH]
            outcomes: list[CancelOutcome] = yield ops.cancel(batch)
            out.update(zip(batch, outcomes, strict=True))
    return out


def retry_steps(ops: ControlOps, task_id: str, branch: bool) -> Step:
    """Send every dead or cancelled member back, dependencies first (so a dependant waits
    for them again rather than ending again by its policy); done and unfinished members
    are left as they are. Returns how many went back (pending, or waiting again), as
    ``Queue.retry``; a member retried by someone else meanwhile is skipped."""
    members = yield from walk(ops, task_id, branch)
    targets = [tid for tid in order(members) if members[tid].state in ("dead", "cancelled")]
    count = 0
    for start in range(0, len(targets), CHANGE_BATCH):
        swept: Swept = yield ops.retry(task_ids=targets[start : start + CHANGE_BATCH], flow=True)
        count += swept.count
    return count


def cancel_flow(
    q: QueueBase, task_id: str, *, branch: bool = False
) -> Plan[dict[str, CancelOutcome]]:
    """``cancel`` every unfinished task of ``task_id``'s flow (every task linked to it
    by ``after``, either way), or with ``branch`` of its branch (it and every task that
    waits for it, transitively); finished ones are left as they are. Returns each
    member's outcome as ``cancel_many``. In calls of 200 tasks, each atomic, not the
    whole (docs/flows.md). ``TaskNotFound`` for an unknown id."""
    out: dict[str, CancelOutcome] = yield from cancel_steps(q.control_ops, task_id, branch)
    return out


def retry_flow(q: QueueBase, task_id: str, *, branch: bool = False) -> Plan[int]:
    """Send every dead or cancelled task of ``task_id``'s flow (or ``branch``) back,
    dependencies first, so that dependants wait for them again; done and unfinished
    ones are left as they are. Returns how many went back. ``TaskNotFound`` for an
    unknown id."""
    count: int = yield from retry_steps(q.control_ops, task_id, branch)
    return count


def flow(q: QueueBase, flow_id: str) -> Plan[FlowRecord | None]:
    """A flow's record (``Task.flow`` names it): members open and ended, its outcome
    once ended; None when there is none (docs/flows.md)."""
    found: FlowRecord | None = yield flow_record(q.keys, check_task_id(flow_id))
    return found
