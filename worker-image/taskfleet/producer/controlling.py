"""``Queue``'s calls that control tasks after their enqueue: cancel, retry, list,
purge_tasks, follow (the work is in ``control``)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from datetime import timedelta

from taskfleet.producer import control, flowcontrol
from taskfleet.producer.control import TaskPage
from taskfleet.protocol.connect import SyncClient
from taskfleet.protocol.control_ops import CancelOutcome, ControlOps
from taskfleet.protocol.reads import QueueReads
from taskfleet.protocol.scripts import SyncScripts
from taskfleet.protocol.states import TaskState
from taskfleet.protocol.tasks import Task

__all__ = ["Controlling"]

Age = float | timedelta | None


class Controlling:
    """The task-control half of ``Queue`` (which sets these attributes)."""

    client: SyncClient
    reads: QueueReads
    control_ops: ControlOps
    _scripts: SyncScripts

    def cancel(self, task_id: str) -> CancelOutcome:
        """Cancel a task: pending or delayed, it ends ``cancelled`` and never runs
        (``CANCELLED``); running, its worker learns it at its next heartbeat, cancels the
        run (``current_task().cancelled``; an async handler's coroutine is cancelled) and
        the task ends ``cancelled`` whatever the run returns (``REQUESTED``). A finished
        task is left as it is (``DONE``, ``DEAD``, ``FINISHED``); ``NOT_FOUND``: no such id."""
        return self.cancel_many([task_id])[task_id]

    def cancel_many(self, task_ids: Sequence[str]) -> dict[str, CancelOutcome]:
        """``cancel`` for each id, in calls of 1000."""
        return control.cancel(self._scripts, self.control_ops, task_ids)

    def cancel_group(self, group: str) -> dict[CancelOutcome, int]:
        """``cancel`` every unfinished task of ``group`` (pending, delayed, running);
        returns how many ended each way."""
        return control.cancel_group(self.client, self._scripts, self.control_ops, self.reads, group)

    def cancel_flow(self, task_id: str, *, branch: bool = False) -> dict[str, CancelOutcome]:
        """``cancel`` every unfinished task of ``task_id``'s flow (every task linked to it
        by ``after``, either way), or with ``branch`` of its branch (it and every task that
        waits for it, transitively); finished ones are left as they are. Returns each
        member's outcome as ``cancel_many``. In calls of 200 tasks, each atomic, not the
        whole (docs/flows.md). ``TaskNotFound`` for an unknown id."""
        steps = flowcontrol.cancel_steps(self.control_ops, task_id, branch)
        out: dict[str, CancelOutcome] = flowcontrol.drive(self.client, self._scripts, steps)
        return out

    def retry_flow(self, task_id: str, *, branch: bool = False) -> int:
        """Send every dead or cancelled task of ``task_id``'s flow (or ``branch``) back,
        dependencies first, so that dependants wait for them again; done and unfinished
        ones are left as they are. Returns how many went back. ``TaskNotFound`` for an
        unknown id."""
        steps = flowcontrol.retry_steps(self.control_ops, task_id, branch)
        count: int = flowcontrol.drive(self.client, self._scripts, steps)
        return count

    def retry(
        self,
        task_ids: Sequence[str] | None = None,
        *,
        reason: str | None = None,
        older_than: Age = None,
        newer_than: Age = None,
        max_attempts: int | None = None,
        group: str | None = None,
    ) -> int:
        """Send dead tasks back to pending with a new attempt budget (attempts, losses and
        deferrals at 0; ``max_attempts`` replaces the task's own): these ids, or every dead
        task matching the filters (``reason``; finished more than ``older_than`` / less than
        ``newer_than`` ago; of ``group``), or with no argument all of them. Returns how
        many went back; tasks not dead are skipped. Each call of up to 1000 tasks is
        atomic."""
        return control.retry(
            self.client,
            self._scripts,
            self.control_ops,
            self.reads,
            task_ids=task_ids,
            reason=reason,
            older_than=older_than,
            newer_than=newer_than,
            max_attempts=max_attempts,
            group=group,
        )

    def list(
        self,
        state: str | TaskState,
        *,
        limit: int = 100,
        cursor: str | None = None,
        reason: str | None = None,
        older_than: Age = None,
        newer_than: Age = None,
        group: str | None = None,
    ) -> TaskPage:
        """A page of the tasks in ``state`` (see ``control.list_tasks`` for the order),
        of ``group`` only if given; pass the page's ``cursor`` back for the next one
        (None: no more). Pending tasks of groups wait in their group's own order: list
        them with ``group`` (``groups()`` names the groups); without it, pending lists
        the ungrouped tasks."""
        return control.list_tasks(
            self.client,
            self.reads,
            state,
            limit=limit,
            cursor=cursor,
            reason=reason,
            older_than=older_than,
            newer_than=newer_than,
            group=group,
        )

    def purge_tasks(
        self,
        state: str | TaskState,
        task_ids: Sequence[str] | None = None,
        *,
        reason: str | None = None,
        older_than: Age = None,
        newer_than: Age = None,
    ) -> int:
        """Delete finished tasks in ``state`` (done, dead or cancelled) now rather than at
        the end of their retention: these ids, or those matching the filters (all of them
        without any). Returns how many were deleted; other states are never touched."""
        return control.drop(
            self.client,
            self._scripts,
            self.control_ops,
            self.reads,
            state,
            task_ids=task_ids,
            reason=reason,
            older_than=older_than,
            newer_than=newer_than,
        )

    def follow(
        self, task_id: str, *, interval: float = 0.5, timeout: float | None = None
    ) -> Iterator[Task]:
        """Yield the task now and each time its state or progress changes, until it has
        finished (polls every ``interval`` s). ``TaskNotFound`` for an unknown id,
        ``WaitTimeout`` after ``timeout`` s."""
        return control.follow(self.client, self.reads, task_id, interval=interval, timeout=timeout)
