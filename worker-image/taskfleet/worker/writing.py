"""Writing outcomes: completions (with a claim for the slots they free) and failures.

The ``Outbox`` hands a batch to ``OutcomeWriter.write``; each outcome leaves the batch
once written, so a retry after an outage never repeats one. A completion batch also
claims tasks for the slots it frees in the same script call (``complete_and_claim``),
unless the worker is draining or its claim loop waits for a producer's wake-up.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from taskfleet.protocol import bounds
from taskfleet.protocol.queue_ops import CANCELLED, DEPENDENCY_FAILED, RESULT_TOO_LARGE
from taskfleet.protocol.states import TaskState
from taskfleet.worker.broker import Broker
from taskfleet.worker.claimed import ClaimedTask, ClaimResult
from taskfleet.worker.execution import Execution
from taskfleet.worker.lifecycle import Lifecycle
from taskfleet.worker.reporting import Paused, Reports, write_reports
from taskfleet.worker.runs import Outcome
from taskfleet.worker.slots import Slots

__all__ = ["OutcomeWriter"]


class OutcomeWriter:
    """Writes batches of outcomes for one worker; ``broker`` is set once registered."""

    def __init__(
        self,
        execution: Execution,
        slots: Slots,
        lifecycle: Lifecycle,
        *,
        take: Callable[[list[ClaimedTask]], Awaitable[None]],
        may_claim: Callable[[], bool],
        reports: Reports | None = None,
        paused: Paused | None = None,
    ) -> None:
        self.broker: Broker | None = None
        # handlers' reports not yet written go first: a run's last progress lands before
        # its outcome, so whoever sees the task finished sees its final progress too
        self._reports = reports
        self._execution = execution
        self._slots = slots
        self._take = take  # start (or hand back) tasks claimed along with completions
        self._may_claim = may_claim  # False while draining or waiting for a wake-up
        self._slot_freed = lifecycle.slot_freed
        # a handler met a provider's rate limit: the queue (or a group) pauses, the waiting
        # tasks it covers go back, the hold ends (``HandBack.paused``)
        self._paused = paused

    async def write(self, batch: list[Outcome]) -> None:
        """Write ``batch``, removing each outcome once written (so a retry never repeats it)."""
        assert self.broker is not None
        execution = self._execution
        if self._reports is not None and len(self._reports):
            await write_reports(self.broker, self._reports, self._paused)
        try:
            # Threads finishing meanwhile needn't wake the loop: collected right after.
            with execution.collected_after():
                done = [o for o in batch if o.error is None]
                if done:
                    await self._complete(batch, done)
                while batch:
                    outcome = batch[0]
                    verdict = outcome.verdict
                    if verdict is not None and verdict.provider_quota is not None:
                        await self.broker.pause_provider_quota(
                            verdict.provider_quota, verdict.retry_after_ms or 0, outcome.error or ""
                        )
                    state = await self.broker.fail(
                        outcome.run.task.id,
                        outcome.run.task.token,
                        outcome.error or "",
                        retryable=verdict is None or not verdict.permanent,
                        reason="permanent" if verdict is not None and verdict.permanent else "",
                        retry_after_ms=None if verdict is None else verdict.retry_after_ms,
                        throttle=verdict is not None and verdict.throttle,
                        throttle_group=verdict is not None and verdict.group_scope,
                        traceback=outcome.traceback or "",
                        timed_out=outcome.timed_out,
                    )
                    batch.pop(0)
                    ok = state is not None  # None: stale token, the task was taken back
                    execution.finish(
                        outcome,
                        ok,
                        "task_failed",
                        dead=state is TaskState.DEAD,
                        cancelled=state is TaskState.CANCELLED,
                        deferred=_deferred(outcome, state),
                        rate_limited=verdict is not None and verdict.throttle,
                    )
                    if verdict is not None and verdict.throttle:
                        if self._paused is not None:
                            await self._paused([(outcome.run.task.id, verdict.group_scope)])
                        else:
                            execution.resume_threads()
        finally:
            # Wake the claim loop only for slots this write left free: completions that
            # claimed their own replacements need no second look.
            if self._slots.room(len(execution.held), len(execution.held_slots)) > 0:
                self._slot_freed.set()

    async def _complete(self, batch: list[Outcome], done: list[Outcome]) -> None:
        """Completions, and a claim for the slots they free, in one script call."""
        assert self.broker is not None
        execution = self._execution
        items = [(o.run.task.id, o.run.task.token, o.result) for o in done]
        claimed: ClaimResult | None = None
        n, prefetch = self._slots.refill(len(done), len(execution.held), len(execution.held_slots))
        n, prefetch = min(n, bounds.MAX_BATCH), min(prefetch, n)
        if n <= 0 or not self._may_claim():
            applied = await self.broker.complete_many(items)
        else:
            applied, claimed = await self.broker.complete_and_claim(items, n, prefetch=prefetch)
        # All written: out of the batch at once (a remove each is quadratic in the batch).
        if len(done) == len(batch):
            batch.clear()  # nearly always: no failures among them
        else:
            written = {id(o) for o in done}
            batch[:] = [o for o in batch if id(o) not in written]
        finish = execution.finish
        try:
            for outcome, code in zip(done, applied, strict=True):
                if code == CANCELLED:
                    finish(outcome, True, "task_cancelled", cancelled=True, settle=False)
                elif code == RESULT_TOO_LARGE:
                    outcome.result = None
                    outcome.error = "result too large for the queue's max_payload_bytes"
                    finish(
                        outcome,
                        True,
                        "task_failed",
                        dead=True,
                        reason="result too large",
                        settle=False,
                    )
                elif code == DEPENDENCY_FAILED:
                    # a child it added failed: the task is dead, whatever its run returned
                    outcome.result = None
                    outcome.error = "a child it added failed"
                    finish(
                        outcome,
                        True,
                        "task_failed",
                        dead=True,
                        reason="dependency failed",
                        settle=False,
                    )
                else:
                    # JOINING (waiting for the children it added): its run succeeded
                    finish(outcome, bool(code), "task_done", settle=False)
        finally:
            execution.settle()  # once per batch, not per task
        if claimed is not None and claimed.tasks:
            await self._take(claimed.tasks)


def _deferred(outcome: Outcome, state: TaskState | None) -> bool:
    """Retried later as its handler asked (RetryAfter) with the attempt given back: the
    task is delayed with its attempts as they were before this run."""
    verdict = outcome.verdict
    return (
        state is TaskState.DELAYED
        and verdict is not None
        and (verdict.retry_after_ms is not None or verdict.throttle)
    )
