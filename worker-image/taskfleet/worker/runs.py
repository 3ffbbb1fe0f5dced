"""A task the worker holds (``Run``), from its claim until its outcome is written.

Times, one word each: ``claimed_at`` when the worker got the task, ``began_at`` when a
handler thread began the call (a prefetched run waits in between).

A run's state is one ``RunState``; its moves are declared in ``RUN_STATES`` and checked
(``Run.to``)::

    RUNNING --outcome queued--------------------------------> FINISHED
    RUNNING --timeout, the call runs on--> OVERRUN --returns--> FINISHED
    RUNNING --lease lost------------------> LOST ----returns--> GONE
    RUNNING --drain deadline, withdrawn, stop--> ABANDONED --returns--> GONE
                                             ABANDONED --lease lost--> LOST

- ``RUNNING``: handed to its handler: on the loop, or on a handler thread's queue or
  call (``began_at`` says which; a thread's begin is no move of the state);
- ``FINISHED``: its outcome is queued or being written: never released;
- ``OVERRUN``: its timeout passed while its call runs on: the failure is queued, what
  the call returns is dropped, and it keeps its slot until the call returns;
- ``LOST``: its lease was lost (another worker may run it now): dropped, and it keeps
  its slot until its call returns;
- ``ABANDONED``: given back or given up (the drain's deadline, a prefetched run
  withdrawn, a stop): what its call returns is dropped;
- ``GONE``: given up on, and its call has returned (or never began).

Every move happens on the loop. Handler threads only read the state (a run given up on
before a thread began it is never begun) and write ``began_at``, under their lock.
"""

from __future__ import annotations

import asyncio
import contextvars
import enum
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from taskfleet.worker.claimed import ClaimedTask
from taskfleet.worker.context import TaskControl, Verdict
from taskfleet.worker.machine import Transitions


class RunState(enum.Enum):
    RUNNING = "running"
    FINISHED = "finished"
    OVERRUN = "overrun"
    LOST = "lost"
    ABANDONED = "abandoned"
    GONE = "gone"


RUN_STATES: Transitions[RunState] = Transitions(
    "run state",
    {
        RunState.RUNNING: {
            RunState.FINISHED,
            RunState.OVERRUN,
            RunState.LOST,
            RunState.ABANDONED,
        },
        RunState.OVERRUN: {RunState.FINISHED},
        RunState.LOST: {RunState.GONE},
        RunState.ABANDONED: {RunState.LOST, RunState.GONE},
        RunState.FINISHED: set(),
        RunState.GONE: set(),
    },
)

_RUN_NEXT = RUN_STATES.next_by_value

#: Its outcome is queued or being written: never release it, nor extend its lease (the
#: write ends the lease).
OUTCOME_QUEUED = frozenset({RunState.FINISHED, RunState.OVERRUN})
#: Its call (or a thread's turn to skip it) is still to come back to the loop.
CALL_OUT = frozenset({RunState.RUNNING, RunState.OVERRUN, RunState.LOST, RunState.ABANDONED})
#: Given up on while its call runs: it keeps its slot until the call returns.
KEEPS_SLOT = frozenset({RunState.OVERRUN, RunState.LOST})


class Waker(Protocol):
    """What runs an isolated run (``isolation.ChildSlot``): woken when a stop is asked."""

    def wake(self) -> None: ...


@dataclass(eq=False, slots=True)  # one per task: slots make it cheaper to build
class Run:
    """One task this worker holds: from claim until its outcome is written."""

    task: ClaimedTask
    claimed_at: float  # monotonic
    func: Callable[[dict[str, Any]], Any] | None = None  # the handler that runs it
    context: contextvars.Context | None = None  # where current_task() names this task
    job: asyncio.Task[None] | None = None  # an async handler's run on the loop
    began_at: float | None = None  # when a thread began the call (None: not yet, or never)
    ran_s: float = 0.0  # how long the thread's call took
    timer: asyncio.TimerHandle | None = None  # the task's timeout
    state: RunState = RunState.RUNNING  # moved by ``to`` alone
    control: TaskControl | None = None  # its handler's reports and cancelled flag
    verdict: Verdict | None = None  # what the handler's exception asked for (set by a thread)
    traceback: str | None = None  # its failure's last frames (set by a thread or child)
    # --isolation process: the slot whose child runs it, and why the worker stops it (a
    # request to the slot's thread, read there: not the run's state, which the loop owns)
    slot: Waker | None = None
    stop_reason: str | None = None  # "cancelled", "timeout", "lease lost", "drain"
    stop_error: str | None = None  # the attempt's error once its child is gone (None: dropped)

    def to(self, state: RunState) -> None:
        """Move to ``state``; ``IllegalTransition`` if ``RUN_STATES`` does not allow it."""
        if state not in _RUN_NEXT[self.state._value_]:  # RUN_STATES.check, inline: hot
            RUN_STATES.check(self.state, state)
        self.state = state

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


@dataclass(slots=True)
class Outcome:
    run: Run
    result: str | None = None  # JSON text on success
    error: str | None = None  # "Type: message" on failure
    verdict: Verdict | None = None  # PermanentFailure / RetryAfter: how the failure is written
    traceback: str | None = None  # the failure's last frames (format_traceback)
    timed_out: bool = False  # the run passed its timeout


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
    rate_limited: int = 0  # deferred as the queue paused on a provider's limit (RateLimited)
    flow_repairs: int = 0  # waiting tasks its repair resolved (their wake-up never came)

    @property
    def done(self) -> int:
        return self.completed


def timeout_error(limit: float | None) -> str:
    return f"TimeoutError: task exceeded its timeout of {limit:g}s"


#: The error of a run the worker cancelled (the task ends cancelled, the text is not kept).
CANCELLED_ERROR = "CancelledError: the task was cancelled"
