"""A task the worker holds (``Run``), from its claim until its outcome is written.

Times, one word each: ``claimed_at`` when the worker got the task, ``began_at`` when a
handler thread began the call (a prefetched run waits in between).
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from taskfleet.worker.claimed import ClaimedTask
from taskfleet.worker.context import TaskControl, Verdict

if TYPE_CHECKING:
    from taskfleet.worker.isolation import ChildSlot


@dataclass(eq=False)
class Run:
    """One task this worker holds: from claim until its outcome is written."""

    task: ClaimedTask
    claimed_at: float  # monotonic
    func: Callable[[dict[str, Any]], Any] | None = None  # the handler that runs it
    context: contextvars.Context | None = None  # where current_task() names this task
    job: asyncio.Task[None] | None = None  # an async handler's run on the loop
    in_thread: bool = False  # a sync handler's call is queued or running on a thread
    began_at: float | None = None  # when a thread began the call (None: still queued)
    ran_s: float = 0.0  # how long the thread's call took
    timer: asyncio.TimerHandle | None = None  # the task's timeout
    stuck: bool = False  # given up on while its call runs on: it keeps its slot
    timed_out: bool = False  # its timeout passed: the failure is written, its result dropped
    finished: bool = False  # its outcome is queued or being written: never release it
    abandoned: bool = False  # lease lost or released: whatever it produces is dropped
    lease_lost: bool = False  # abandoned because another worker may run it now
    control: TaskControl | None = None  # its handler's reports and cancelled flag
    verdict: Verdict | None = None  # what the handler's exception asked for (set by a thread)
    # --isolation process: the slot whose child runs it, and why the worker stops it
    slot: ChildSlot | None = None
    stop_reason: str | None = None  # "cancelled", "timeout", "lease lost", "drain"
    stop_error: str | None = None  # the attempt's error once its child is gone (None: dropped)

    @property
    def stop_requested(self) -> bool:
        return self.stop_reason is not None

    def stop(self, reason: str, error: str | None) -> bool:
        """Ask the run's child process to stop (SIGTERM, then SIGKILL after the grace);
        False if a stop was asked already. ``error``: the attempt's outcome once the
        child is gone (None for a run whose result is dropped anyway)."""
        if self.stop_reason is not None:
            return False
        self.stop_error = error
        self.stop_reason = reason  # after the error: the slot thread reads it once it sees this
        slot = self.slot
        if slot is not None:
            slot.wake()
        return True


@dataclass
class Outcome:
    run: Run
    result: str | None = None  # JSON text on success
    error: str | None = None  # "Type: message" on failure
    verdict: Verdict | None = None  # PermanentFailure / RetryAfter: how the failure is written


@dataclass
class Counters:
    """What this worker did, for its last log line and its metrics (read when scraped)."""

    completed: int = 0
    failed: int = 0  # retried + dead
    retried: int = 0  # failed, back in the queue after a backoff
    dead: int = 0  # failed for good (attempts used up, permanent, result too large)
    released: int = 0  # given back without an attempt (drain, prefetch withdrawn)
    lost: int = 0  # lease lost, or given back as lost when the worker failed
    stale: int = 0  # an outcome refused: the task had been taken back
    cancelled: int = 0  # ended cancelled (a producer cancelled it while it ran)
    deferred: int = 0  # retried later as the handler asked (RetryAfter)

    @property
    def done(self) -> int:
        return self.completed


def timeout_error(limit: float | None) -> str:
    return f"TimeoutError: task exceeded its timeout of {limit:g}s"


#: The error of a run the worker cancelled (the task ends cancelled, the text is not kept).
CANCELLED_ERROR = "CancelledError: the task was cancelled"
