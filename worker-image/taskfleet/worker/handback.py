"""Giving tasks back without an attempt: unfinished runs at a drain, prefetched ones no
thread has begun (late, or covered by a claim pause: ``paused``), and tasks claimed
while a drain began.

A release puts a task back at the front of the queue for a worker that stays. If Redis
is down the release fails and the leases expire instead: sweeps take the tasks back.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence

from taskfleet.worker.broker import Broker
from taskfleet.worker.claimed import ClaimedTask
from taskfleet.worker.events import log_event
from taskfleet.worker.execution import Execution
from taskfleet.worker.gate import wait_any
from taskfleet.worker.handlers import format_error
from taskfleet.worker.lifecycle import Lifecycle
from taskfleet.worker.runs import Run, RunState
from taskfleet.worker.slots import PREFETCH_MAX_WAIT_S, Slots

__all__ = ["HandBack"]

#: How long a release may take before the worker goes on exiting (leases expire instead).
RELEASE_TIMEOUT_S = 3.0


class HandBack:
    """Releases one worker's tasks; ``broker`` is set once registered."""

    def __init__(
        self,
        execution: Execution,
        slots: Slots,
        lifecycle: Lifecycle,
    ) -> None:
        self.broker: Broker | None = None
        self._execution = execution
        self._slots = slots
        self._drain_requested = lifecycle.drain_requested

    async def release(self, runs: list[Run]) -> None:
        """Give unfinished tasks back (not an attempt); if Redis is down, leases expire instead."""
        broker = self.broker
        assert broker is not None
        items = [(run.task.id, run.task.token) for run in runs]
        # a run no thread began leaves no 'released' record in its task's history
        fresh = [(r.task.id, r.task.token) for r in runs if r.began_at is None]
        begun = [(r.task.id, r.task.token) for r in runs if r.began_at is not None]

        async def both() -> int:
            given = await broker.release(fresh, unstarted=True) if fresh else 0
            return given + (await broker.release(begun) if begun else 0)

        try:
            released = await asyncio.wait_for(both(), RELEASE_TIMEOUT_S)
        except Exception as exc:  # whatever went wrong, exiting must go on
            log_event(
                logging.WARNING,
                "release_failed",
                tasks=len(items),
                error=format_error(exc),
                note="leases expire and the tasks are taken back",
            )
            return
        self._execution.counters.released += int(released)
        for run in runs:
            log_event(logging.INFO, "task_released", task=run.task.id)
        self._execution.forget(runs)

    async def take(self, tasks: list[ClaimedTask]) -> None:
        """Start claimed tasks, or hand them straight back if a drain began meanwhile."""
        if self._drain_requested.is_set():
            # The drain began while the claim was in flight: give its tasks back (not an
            # attempt) for a worker that stays, rather than start them now.
            now = time.monotonic()
            # never started here: gone from the start
            await self.release([Run(task, now, state=RunState.GONE) for task in tasks])
            return
        self._execution.start_all(tasks)

    async def withdraw(self, runs: list[Run], *, waited: bool = False) -> None:
        """Release the prefetched ``runs`` no thread has begun (never started here).

        ``waited``: they waited too long for a thread; prefetch stops until runs are short.
        """
        withdrawn = self._execution.withdraw(runs)
        if not withdrawn:
            return
        if waited:
            self._slots.prefetch_waited_too_long()
            log_event(
                logging.INFO,
                "prefetch_withdrawn",
                tasks=len(withdrawn),
                waited_s=PREFETCH_MAX_WAIT_S,
                note="every handler thread is busy with long runs",
            )
        await self.release(withdrawn)
        # Released, or (Redis down) left to their leases: either way not this worker's now.
        self._execution.forget(withdrawn)

    async def paused(self, pauses: Sequence[tuple[str, bool]]) -> None:
        """Claims paused (``RateLimited``, ``report_quota``), each pause ``(task id, group
        scope)`` written: give back the waiting runs (prefetched ones no thread has begun,
        async ones held before their call) the pauses cover, so that none of them calls
        the provider meanwhile, then let the rest begin (the hold ends). A queue-wide
        pause, or a group-scoped one of a task in no group, covers them all; a group's
        covers that group's. The groups are the claim records' (a pausing task that ended
        before its pause was written is looked up in Redis: the only read here)."""
        try:
            runs = self._execution.waiting()
            if runs and all(group for _, group in pauses):
                runs = await self._of_paused_groups(runs, [task_id for task_id, _ in pauses])
            if runs:
                await self.withdraw(runs)
        finally:
            self._execution.resume_threads()

    async def _of_paused_groups(self, runs: list[Run], paused_by: list[str]) -> list[Run]:
        held = self._execution.held
        known = {i: held[i].task.group or "" for i in paused_by if i in held}
        unknown = [i for i in paused_by if i not in known]
        if unknown:
            assert self.broker is not None
            try:
                known.update(zip(unknown, await self.broker.groups_of(unknown), strict=True))
            except Exception as exc:  # not known: give them all back, as a queue pause would
                error = format_error(exc)
                log_event(logging.WARNING, "groups_unread", tasks=len(runs), error=error)
                return runs
        paused = {known[i] for i in paused_by}
        if "" in paused:  # a task in no group paused the queue
            return runs
        return [run for run in runs if (run.task.group or "") in paused]

    async def prefetch_guard(self) -> None:
        """Loop: give back prefetched tasks that waited ``PREFETCH_MAX_WAIT_S`` for a thread."""
        draining = self._drain_requested  # the worker closes only after a drain began
        while True:
            await wait_any(draining, limit=PREFETCH_MAX_WAIT_S / 2)
            if draining.is_set():
                return  # the drain withdraws what is still waiting itself
            cutoff = time.monotonic() - PREFETCH_MAX_WAIT_S
            # Claimed that long ago; withdraw() keeps those no thread has begun.
            late = [run for run in self._execution.held.values() if run.claimed_at <= cutoff]
            if late:
                await self.withdraw(late, waited=True)
