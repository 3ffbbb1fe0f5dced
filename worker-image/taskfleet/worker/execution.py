"""The runs a worker holds and how each one runs.

An async handler runs as an asyncio task on the loop; a sync one on one of the handler
threads. With ``--isolation process`` every run goes through a handler thread to that
slot's child process (``isolation.py``), which cancel, timeout, a lost lease and the
drain deadline stop for real. Either way a run ends exactly once in an ``Outcome`` for
the outbox, or is given up on (lease lost, released) and produces nothing: each run's
``RunState`` (``runs``) says which, moved here on the loop. A call the worker gave up on
(its timeout passed, its lease was lost) but that is still running keeps its slot
(``OVERRUN``, ``LOST``: a "held" slot) until it returns, so a hung handler can't make
the worker oversubscribe. A held slot is logged (``slot_held``), reported in the
heartbeat and the metrics (``heldslots.py``), and, held past the grace, logged as stuck
(``held.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterable

from taskfleet.worker.claimed import ClaimedTask
from taskfleet.worker.context import QuotaSink, TaskControl, context_for, task_context
from taskfleet.worker.events import log, log_event
from taskfleet.worker.gate import wait_any
from taskfleet.worker.handlers import encode_result, failure_of, format_error, format_traceback
from taskfleet.worker.heldslots import HeldSlots
from taskfleet.worker.isolation import STOP_GRACE_S, ChildSlot
from taskfleet.worker.lifecycle import Lifecycle
from taskfleet.worker.named import HandlerSet
from taskfleet.worker.outbox import Outbox
from taskfleet.worker.runs import (
    CALL_OUT,
    CANCELLED_ERROR,
    KEEPS_SLOT,
    OUTCOME_QUEUED,
    Counters,
    Outcome,
    Run,
    RunState,
    timeout_error,
)
from taskfleet.worker.settings import WorkerSettings
from taskfleet.worker.slots import Slots
from taskfleet.worker.threads import HOLD_MAX_S, Delivered, HandlerThreads
from taskfleet.worker.timings import Timings

RUNNING, FINISHED, OVERRUN = RunState.RUNNING, RunState.FINISHED, RunState.OVERRUN
LOST, ABANDONED, GONE = RunState.LOST, RunState.ABANDONED, RunState.GONE


class Execution:
    """``held``: every task from its claim until its outcome is written (or given back).

    The lifecycle's ``slot_freed`` is set whenever a slot frees that a claim may fill;
    ``changed`` is called when the number held changes (the runtime file follows it).
    """

    def __init__(
        self,
        settings: WorkerSettings,
        handlers: HandlerSet,
        slots: Slots,
        outbox: Outbox,
        lifecycle: Lifecycle,
        *,
        changed: Callable[[], None],
        report: Callable[[str, str, str | None, int | None], None] | None = None,
        report_quota: QuotaSink | None = None,
    ) -> None:
        self.held: dict[str, Run] = {}
        # calls given up on but still running keep ("hold") their slots
        self.held_slots = HeldSlots()
        self.idle = asyncio.Event()  # set while nothing is held
        self.idle.set()
        self.counters = Counters()
        # the done tasks' time from claim to written: in all, and the longest since the
        # summary last read it (``summary.py``)
        self.done_s = 0.0
        self.done_s_max = 0.0
        self.timings = Timings()
        self._settings = settings
        self._handlers = handlers
        self._slots = slots
        self._outbox = outbox
        self._slot_freed = lifecycle.slot_freed
        self._changed = changed
        self._report = report or _unreported  # where handlers' progress and costs go
        # where report_quota's pauses go, through the hold (``_quota``)
        self._quota_report = report_quota
        self._quota_sink: QuotaSink | None = None if report_quota is None else self._quota
        self._loop: asyncio.AbstractEventLoop | None = None  # set by bind
        self._loop_thread = 0
        self._isolated = settings.isolated
        self._children = (
            [
                ChildSlot(i, settings, self._report, self._quota_sink)
                for i in range(settings.concurrency)
            ]
            if self._isolated
            else []
        )
        self._threads = HandlerThreads(
            settings.concurrency,
            self._delivered,
            [child.call for child in self._children] if self._isolated else None,
        )
        self._delivery = asyncio.Event()  # set when threads hand calls back
        # The async side of the threads' hold (HandlerThreads._go): cleared when an async
        # call meets a provider's rate limit; a run that starts meanwhile waits before its
        # call (in _holding, where withdraw finds it) until resume_threads, at most
        # HOLD_MAX_S, so a task claimed in between never calls the exhausted provider.
        self._go = asyncio.Event()
        self._go.set()
        self._holding: set[Run] = set()

    def bind(self) -> None:
        """Called on the worker's loop before any run starts (``_quota`` holds from threads)."""
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()

    # ------------------------------------------------------------------ starting

    def start(self, task: ClaimedTask) -> None:
        self._start(task)
        self._changed()

    def _start(self, task: ClaimedTask) -> None:
        """``start`` but for the runtime file's notice: ``start_all`` gives one per batch."""
        handler = self._handlers.for_task(task.name)
        if handler is None:  # the broker refuses names this worker does not serve
            raise LookupError(f"no handler for task name {task.name!r}")
        run = Run(task, time.monotonic(), handler.func)  # by position: per task
        settings = self._settings
        run.control = control = TaskControl(task.token, self._report, self._quota_sink)
        run.context = context_for(
            task_context(
                queue=settings.queue,
                task_id=task.id,
                attempt=task.attempts,
                pod=settings.pod,
                incarnation=settings.incarnation,
                redis_url=settings.redis_url,
                control=control,
                trace=task.trace,
                name=task.name,
                group=task.group,
                after=task.after,
                restored_json=task.checkpoint,
            )
        )
        self.held[task.id] = run
        self.idle.clear()
        if task.waited is not None and self.timings.enabled:
            self.timings.wait.observe(task.waited)
        limit = task.timeout if task.timeout else settings.default_timeout
        if handler.is_async and not self._isolated:
            loop = asyncio.get_running_loop()
            run.job = loop.create_task(self._execute(run), name=task.id, context=run.context)
            if limit is not None:
                run.timer = loop.call_later(limit, self._async_timed_out, run, limit)
        else:
            if limit is not None:
                loop = asyncio.get_running_loop()
                run.timer = loop.call_later(limit, self._thread_timed_out, run, limit)
            self._threads.submit(run)
        if log.isEnabledFor(logging.DEBUG):
            log_event(logging.DEBUG, "task_started", task=task.id, attempt=task.attempts)

    def start_all(self, tasks: Iterable[ClaimedTask]) -> None:
        start = self._start
        try:
            for task in tasks:
                try:
                    start(task)
                except Exception as exc:
                    # Not the task's fault as far as we know, but failing its attempt is
                    # what bounds it: a task that can't be started must not stop the worker.
                    self._cannot_start(task, exc)
        finally:
            self._changed()  # once per batch: the runtime file's write is coalesced anyway

    def _cannot_start(self, task: ClaimedTask, exc: Exception) -> None:
        run = self.held.get(task.id)
        if run is None or run.task is not task:
            run = Run(task=task, claimed_at=time.monotonic())
            self.held[task.id] = run
        if run.job is not None:
            run.job.cancel()
        self.idle.clear()
        # Its outcome is this failure: whatever began of it produces nothing.
        self._queue(Outcome(run=run, error=f"task could not start: {format_error(exc)}"))

    # ------------------------------------------------------------------ async handlers

    async def _execute(self, run: Run) -> None:
        """An async handler's run, in the task's context (``current_task()``).

        Only the worker's own cancellations are taken as such, known by who asked: a
        timeout, a lost lease, a drain's deadline or a stop move the run out of
        ``RUNNING``, ``Queue.cancel`` sets the control's ``cancelled``, each before it
        cancels the job. Any other ``CancelledError`` is the handler's own (it cancelled
        its own task, or raised one) and fails the attempt like any exception, as do
        ``SystemExit`` and ``KeyboardInterrupt``; none of them may stop the worker or hold
        the slot, and building the error never raises (``failure_of``).
        """
        task = run.task
        outcome = Outcome(run=run)
        try:
            assert run.func is not None
            if not self._go.is_set():
                await self._hold(run)
            value = await run.func(task.payload)
            outcome.result = encode_result(value)
        except asyncio.CancelledError as exc:
            if run.state is not RUNNING:
                return  # ours: the failure is written, or the task goes back
            if _cancelled(run):
                outcome.error = CANCELLED_ERROR  # the task ends cancelled (Queue.cancel)
            else:
                error, _ = failure_of(exc)
                outcome.error = error + " (raised by the handler itself)"
        except BaseException as exc:  # the handler's failure is the attempt's failure
            outcome.error, outcome.verdict = failure_of(exc)
            outcome.traceback = format_traceback(exc)
            if outcome.verdict is not None and outcome.verdict.throttle:
                self._go.clear()  # before the outcome is queued: resume_threads comes after
        finally:
            if self.timings.enabled:  # an async run starts at its claim
                run.ran_s = time.monotonic() - run.claimed_at
            if run.timer is not None:
                run.timer.cancel()
                run.timer = None
            was = self._returned(run)
        if was is RUNNING:
            self._queue(outcome)
        elif was is LOST or was is ABANDONED:  # what it returned is dropped
            log_event(logging.INFO, "task_result_dropped", task=task.id, reason="lease lost")
        # OVERRUN: failed when its time ran out; what it returned since is dropped

    async def _hold(self, run: Run) -> None:
        """Wait (at most HOLD_MAX_S) while a rate limit's pause is being written; a run
        withdrawn meanwhile is cancelled here, before its call."""
        self._holding.add(run)
        try:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._go.wait(), HOLD_MAX_S)
        finally:
            self._holding.discard(run)

    def _async_timed_out(self, run: Run, limit: float) -> None:
        """An async handler ran past its timeout: fail the attempt now and cancel it.

        A coroutine that swallows the cancellation runs on, but its result is dropped
        and it keeps its slot until it returns, as a sync handler's thread does.
        """
        run.timer = None
        if run.state is not RUNNING:
            return
        outcome = Outcome(run=run, error=timeout_error(limit), timed_out=True)
        job = run.job
        if job is None or job.done():
            self._queue(outcome)
            return
        self._give_up(run, OVERRUN)
        self._outbox.add(outcome)
        job.cancel()

    # ------------------------------------------------------------------ sync handlers

    def _thread_timed_out(self, run: Run, limit: float) -> None:
        """A sync handler ran past its timeout: fail the attempt now; the thread runs on.
        In a child process (``--isolation process``) the child is stopped instead, and the
        failure is written once it is gone.

        The timeout counts from the start of the call: a prefetched run that waited for a
        thread gets the rest of its time.
        """
        run.timer = None
        if run.state is not RUNNING:  # its call returned, or it was given up on
            return
        began_at = run.began_at
        left = limit if began_at is None else began_at + limit - time.monotonic()
        if left > 0:
            loop = asyncio.get_running_loop()
            run.timer = loop.call_later(left, self._thread_timed_out, run, limit)
            return
        if self._isolated:
            _stop(run, "timeout", timeout_error(limit))
            return
        self._give_up(run, OVERRUN)
        self._outbox.add(Outcome(run=run, error=timeout_error(limit), timed_out=True))

    def _delivered(self, batch: list[Delivered]) -> None:
        """Sync handlers' calls that returned (on the loop, one batch per wake-up)."""
        record_run = self._slots.record_run
        outcomes: list[Outcome] = []
        add = outcomes.append
        self._delivery.set()
        for run, result, error in batch:
            if run.began_at is not None:
                record_run(run.ran_s)
            if run.timer is not None:
                run.timer.cancel()
                run.timer = None
            was = run.state
            if was is RUNNING:  # nearly always: nothing was given up
                run.to(FINISHED)
                # by position; an isolated run stopped for its timeout fails as timed out
                timed_out = run.stop_reason == "timeout"
                add(Outcome(run, result, error, run.verdict, run.traceback, timed_out))
            elif self._returned(run) is LOST:
                log_event(
                    logging.INFO, "task_result_dropped", task=run.task.id, reason="lease lost"
                )
            # OVERRUN, FINISHED: its failure (timeout, cancel) is queued or written already
        self._outbox.add_many(outcomes)

    def collected_after(self) -> contextlib.AbstractContextManager[None]:
        """Calls that end during the block are collected at its end, with no wake-up."""
        return self._threads.collected_after()

    def _quota(
        self, task_id: str, token: str, pause_ms: int | None, group: bool, reason: str
    ) -> None:
        """A handler reported its quota spent (``report_quota``; from its thread, a child's
        slot thread, or the loop): hold as a ``RateLimited`` does, so that no waiting run
        calls the provider before the pause is written and they are given back."""
        self._threads.hold()
        if threading.get_ident() == self._loop_thread or self._loop is None:
            self._go.clear()
        else:
            with contextlib.suppress(RuntimeError):  # the loop is gone: exiting
                self._loop.call_soon_threadsafe(self._go.clear)  # before the report's wake-up
        assert self._quota_report is not None
        self._quota_report(task_id, token, pause_ms, group, reason)

    def waiting(self) -> list[Run]:
        """The held runs that ``withdraw`` would take now: prefetched ones no thread has
        begun, and async ones held before their call."""
        return [
            run
            for run in self.held.values()
            if run.state is RUNNING
            and ((run.began_at is None and run.job is None) or run in self._holding)
        ]

    def resume_threads(self) -> None:
        """After a rate limit's pause was written and the prefetched runs given back:
        handler threads begin queued runs again (see ``HandlerThreads.resume``), and async
        runs held before their call go on."""
        self._threads.resume()
        self._go.set()

    def withdraw(self, runs: Iterable[Run]) -> list[Run]:
        """Of ``runs``, the prefetched ones no thread has begun, and the async ones held
        before their call (a rate limit's hold): abandoned now."""
        runs = list(runs)
        withdrawn = self._threads.withdraw(runs, ABANDONED)
        for run in runs:
            if run in self._holding and run.state is RUNNING and run.job is not None:
                run.to(ABANDONED)
                run.job.cancel()  # at the hold: _execute returns without an outcome
                withdrawn.append(run)
        return withdrawn

    def abandon_unfinished(self) -> list[Run]:
        """The drain's deadline passed, or the worker stops at once: each held run with
        no outcome is given up (an async one cancelled); returns them."""
        left = [run for run in self.held.values() if run.state not in OUTCOME_QUEUED]
        for run in left:
            if run.state is RUNNING:
                run.to(ABANDONED)
            if run.job is not None:
                run.job.cancel()
        return left

    def close(self) -> None:
        self._threads.close()
        for child in self._children:
            child.close()

    # ------------------------------------------------------------------ child processes

    def stop_children(self, runs: Iterable[Run], reason: str) -> list[Run]:
        """``--isolation process``: stop the children running ``runs`` (their results are
        dropped); the runs still on a thread, for ``children_gone``."""
        if not self._isolated:
            return []
        running = [run for run in runs if run.state in CALL_OUT]
        for run in running:
            _stop(run, reason, None)
        return running

    async def children_gone(self, runs: list[Run]) -> bool:
        """Wait until the children of stopped ``runs`` are gone (SIGKILL comes after
        ``STOP_GRACE_S``): a task is given back only once nothing runs it here."""
        deadline = time.monotonic() + STOP_GRACE_S + 2.0
        while any(run.state in CALL_OUT for run in runs):
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            self._delivery.clear()
            if any(run.state in CALL_OUT for run in runs):
                await wait_any(self._delivery, limit=left)
        return True

    # ------------------------------------------------------------------ slots and ends

    def _queue(self, outcome: Outcome) -> None:
        outcome.run.to(FINISHED)
        self._outbox.add(outcome)

    def _give_up(self, run: Run, state: RunState) -> None:
        """Give up on a run whose call is out (``OVERRUN``, ``LOST``). A thread can't be
        killed, nor a coroutine that ignores its cancellation: the run's slot stays taken
        until the call returns, and whatever it returns is dropped."""
        assert state in KEEPS_SLOT
        run.to(state)
        reason = "timeout" if state is OVERRUN else "lease lost"
        self.held_slots.hold(run, reason, _ran_so_far(run, time.monotonic()))

    def _returned(self, run: Run) -> RunState:
        """A run's call came back (or a thread skipped it): the state it was in then.
        A run given up on is done with; the slot it kept is free."""
        was = run.state
        if was is RUNNING:
            return was  # nearly always: nothing was given up
        if was is ABANDONED:
            run.to(GONE)
        elif was is OVERRUN or was is LOST:  # KEEPS_SLOT, without hashing on this path
            run.to(FINISHED if was is OVERRUN else GONE)
            self.held_slots.release(run)
            self._slot_freed.set()
        return was

    def leases(self) -> dict[str, str]:
        """Leases to extend: not those of finished runs, whose outcome write ends the lease
        (a completion landing before the extension would make them look lost)."""
        return {run.task.id: run.task.token for run in self.held.values() if run.state is RUNNING}

    def abandon(self, lost: Iterable[str]) -> None:
        """Leases we no longer hold: someone else may run the task; drop our result.

        A run that finished after the heartbeat's snapshot is left to its outcome write,
        which settles it (written, or refused as stale): its lease ended by design.
        """
        for task_id in lost:
            run = self.held.get(task_id)
            if run is None or run.state in OUTCOME_QUEUED:
                continue
            del self.held[task_id]
            self.counters.lost += 1
            log_event(logging.WARNING, "lease_lost", task=task_id)
            if run.state is not GONE:  # its call is out: cancelled, stopped, or left to run
                self._give_up(run, LOST)
                if run.job is not None:
                    run.job.cancel()
                elif self._isolated:
                    _stop(run, "lease lost", None)
            self._slot_freed.set()
        self.forget([])

    def cancel(self, task_ids: Iterable[str]) -> None:
        """Producers cancelled these tasks (the heartbeat says so): tell their handlers
        (``current_task().cancelled()``), cancel async runs, end at once the runs no
        thread has begun, and stop the child processes of isolated runs. The outcome each
        run then writes ends its task cancelled."""
        for task_id in task_ids:
            run = self.held.get(task_id)
            if run is None or run.state is not RUNNING or _cancelled(run):
                continue
            assert run.control is not None
            run.control.cancelled = True
            log_event(logging.INFO, "task_cancel_requested", task=task_id)
            if run.job is not None:
                run.job.cancel()
            elif self._threads.withdraw([run], FINISHED):  # no thread will begin it
                self._outbox.add(Outcome(run=run, error=CANCELLED_ERROR))
            elif self._isolated:
                _stop(run, "cancelled", CANCELLED_ERROR)

    def forget(self, runs: Iterable[Run]) -> None:
        """These runs are not this worker's any more (released, or left to their leases)."""
        for run in runs:
            self.held.pop(run.task.id, None)
        if not self.held and not len(self._outbox):
            self.idle.set()
        self._changed()

    def finish(
        self,
        outcome: Outcome,
        accepted: bool,
        event: str,
        *,
        dead: bool = False,
        cancelled: bool = False,
        deferred: bool = False,
        rate_limited: bool = False,
        settle: bool = True,
        **extra: object,
    ) -> None:
        """An outcome was written (``accepted``) or refused as stale; ``dead``: a failure
        that ended the task (not retried); ``cancelled``: the task ended cancelled;
        ``deferred``: retried later as its handler asked, the attempt given back;
        ``rate_limited``: it met a provider's rate limit, and the queue pauses claiming.
        ``settle=False``: the caller finishes a batch and calls ``settle()`` after it."""
        run = outcome.run
        self.held.pop(run.task.id, None)
        now = time.monotonic()
        counters = self.counters
        if not accepted:
            counters.stale += 1
            log_event(logging.WARNING, "task_write_refused", task=run.task.id, reason="stale")
        elif cancelled or deferred:
            if cancelled:
                counters.cancelled += 1
            else:
                counters.deferred += 1
            if rate_limited:
                counters.rate_limited += 1
                # the whole fleet pauses: say so once per run, with the provider's words
                log_event(
                    logging.WARNING,
                    "queue_rate_limited",
                    task=run.task.id,
                    error=outcome.error or "",
                )
            log_event(
                logging.INFO,
                "task_cancelled" if cancelled else "task_deferred",
                task=run.task.id,
                attempt=run.task.attempts,
                ms=_ms(now - run.claimed_at),
            )
        elif outcome.error is None:
            counters.completed += 1
            if self.timings.enabled:
                self.timings.run.observe(run.ran_s or _ran_so_far(run, now))
            took = now - run.claimed_at
            self.done_s += took
            self.done_s_max = max(self.done_s_max, took)
            # One line per task done only at debug: at info, the summary counts them
            # (``summary.py``); formatting a line per task cost a third of a short task.
            if log.isEnabledFor(logging.DEBUG):
                log_event(logging.DEBUG, event, task=run.task.id, ms=_ms(took))
        else:
            counters.failed += 1
            if dead:
                counters.dead += 1
            else:
                counters.retried += 1
            if self.timings.enabled:
                self.timings.run.observe(run.ran_s or _ran_so_far(run, now))
            log_event(
                logging.WARNING,
                event,
                task=run.task.id,
                attempt=run.task.attempts,
                ms=_ms(now - run.claimed_at),
                error=outcome.error,
                **extra,
            )
        if settle:
            self.settle()

    def settle(self) -> None:
        """After outcomes were written: idle if nothing is held, and the runtime file told."""
        if not self.held and not len(self._outbox):
            self.idle.set()
        self._changed()


def _stop(run: Run, reason: str, error: str | None) -> None:
    """Stop an isolated run's child (see ``Run.stop``), logged once per run that began."""
    if run.stop(reason, error) and run.began_at is not None:
        log_event(logging.INFO, "task_stopping", task=run.task.id, reason=reason)


def _cancelled(run: Run) -> bool:
    return run.control is not None and run.control.cancelled


def _unreported(task_id: str, token: str, progress: str | None, cost: int | None) -> None:
    """Reports of a worker built without a reporter (unit tests): dropped."""


def _ran_so_far(run: Run, now: float) -> float:
    """A run's time when its call has not returned (timed out, or never began)."""
    return now - (run.began_at if run.began_at is not None else run.claimed_at)


def _ms(seconds: float) -> float:
    return round(seconds * 1000, 1)
