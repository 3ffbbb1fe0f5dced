"""``--isolation process``: each slot's tasks run in a child process the worker can stop.

A slot is one handler thread (``threads.HandlerThreads``) driving one child process
(``ChildSlot``): the thread sends the task over a pipe, relays the child's progress,
cost and quota reports (``report_quota``: to the sink, and with the hold, a thread's
would use), and hands the child's result or error back as a thread's call would. The
child is reused for the slot's next task, and replaced after ``max_tasks_per_child``
tasks (``--max-tasks-per-child``), so the memory a leaking handler holds is returned.

Stopping (``Run.stop``, asked on the loop): cancel, timeout, a lost lease and the drain
deadline send the child SIGTERM (``TaskStopped`` in the handler, ``cancelled()`` True),
then SIGKILL ``STOP_GRACE_S`` later if it has not exited. The slot thread owns the child
and does both, so the escalation happens even while the loop is busy or exiting.
Each child also holds the read end of a pipe nobody writes to, whose write end only the
worker holds: when the worker dies, however, the child reads EOF and exits
(``child.py``), so no runaway child outlives its worker. The
outcome of a stopped run (the timeout's failure, the cancel) is handed back only once the
child is gone: the task's lease is extended until then, so it never runs twice at once.

A child that dies on its own (SIGKILL, the OOM killer, a segfault, ``os._exit``) fails
that attempt with a reason naming the signal or code (retried per the queue's policy);
the worker and the slot go on with a new child.

Why forkserver, not fork: the worker runs threads (handler threads, the metrics server,
the report writer), and a fork copies a lock another thread holds (logging's, the import
lock, allocator arenas) into a child where nothing will ever release it. The forkserver
is a single-threaded process started once, with this package's child module and the
program's main script imported; each child is a fork of it (milliseconds), not a new
interpreter as with spawn. The
handler's module is imported in each child on its first task (not in the forkserver: a
module may start threads or open connections at import, which must not be forked).
Handlers travel to the child by reference (pickle), so they must be importable:
module-level functions, or registries of them (``check_sendable``, at start).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import multiprocessing
import os
import pickle
import signal
import threading
import time
from collections.abc import Callable
from multiprocessing.connection import Connection, wait
from typing import Any

from taskfleet.worker.child import Job, serve
from taskfleet.worker.context import QuotaSink
from taskfleet.worker.events import log_event
from taskfleet.worker.named import HandlerSet
from taskfleet.worker.runs import Run
from taskfleet.worker.settings import WorkerSettings

__all__ = ["STOP_GRACE_S", "ChildSlot", "check_sendable", "child_death"]

#: Seconds between SIGTERM and SIGKILL when the worker stops a child (cancel, timeout,
#: lost lease, drain deadline): time for the handler's ``finally`` blocks.
STOP_GRACE_S = 5.0

#: What a slot thread's call returns: result JSON, error text.
Called = tuple[str | None, str | None]


@functools.cache
def _forkserver() -> Any:
    """The forkserver context. Its server imports the child's module and the program's
    main script (the ``taskfleet`` console script: the CLI), so a child has both from
    its fork; without ``__main__`` each child would run the script again (multiprocessing
    re-imports it as ``__mp_main__``), hundreds of milliseconds per child start."""
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["__main__", "taskfleet.worker.child"])
    return context


def check_sendable(handlers: HandlerSet) -> None:
    """ValueError (one line) for a handler a child process can't receive: a lambda, a
    closure, a function defined inside another. A worker refuses it at start."""
    for handler in handlers.all():
        try:
            pickle.dumps(handler.func)
        except Exception as exc:
            raise ValueError(
                f"--isolation process: handler {handler.ref!r} can't be sent to a child "
                f"process ({type(exc).__name__}); make it a module-level function"
            ) from None


def child_death(exitcode: int | None) -> str:
    """The error of an attempt whose child process died on its own."""
    if exitcode is not None and exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            name = f"signal {-exitcode}"
        why = " (out of memory, or killed from outside)" if name == "SIGKILL" else ""
        return f"ChildProcessDied: the task's child process was killed by {name}{why}"
    return f"ChildProcessDied: the task's child process exited with code {exitcode}"


class ChildSlot:
    """One slot's child process, driven by the slot's handler thread (``call``)."""

    def __init__(
        self,
        index: int,
        settings: WorkerSettings,
        report: Callable[[str, str, str | None, int | None], None],
        quota: QuotaSink | None = None,
    ) -> None:
        self._index = index
        self._settings = settings
        self._report = report
        self._quota = quota
        self._max_tasks = settings.max_tasks_per_child
        self._process: Any = None
        self._conn: Connection | None = None
        self._served = 0
        self._retired: list[Any] = []  # recycled children, joined before the next start
        self._lock = threading.Lock()  # orders close() (the loop) against a call's end
        self._busy = self._closed = False
        self._alive: tuple[Connection, Connection] | None = None  # see _child
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_w, False)

    @property
    def pid(self) -> int | None:
        return None if self._process is None else int(self._process.pid)

    def wake(self) -> None:
        """From the loop: a stop was asked for the run this slot holds."""
        with contextlib.suppress(BlockingIOError, OSError):
            os.write(self._wake_w, b"s")

    # ---------------------------------------------------------------- on the slot thread

    def call(self, run: Run) -> Called:
        with self._lock:
            self._busy = True
        try:
            return self._call(run)
        finally:
            with self._lock:
                self._busy = False
                if self._closed:
                    self._close_idle()

    def _call(self, run: Run) -> Called:
        run.slot = self
        if run.stop_requested:  # asked between the thread's start and here
            return None, run.stop_error
        try:
            process, conn = self._child()
        except Exception as exc:
            return None, f"ChildProcessError: could not start a child process: {exc}"
        task, settings = run.task, self._settings
        job = Job(
            task_id=task.id,
            token=task.token,
            func=run.func,
            payload=task.payload,
            queue=settings.queue,
            attempt=task.attempts,
            pod=settings.pod,
            incarnation=settings.incarnation,
            redis_url=settings.redis_url,
            trace=task.trace,
            name=task.name,
            group=task.group,
            after=task.after,
            checkpoint=task.checkpoint,
        )
        try:
            conn.send(job)
        except (OSError, ValueError):
            return None, self._died(run)
        except Exception as exc:  # not picklable after all (check_sendable missed it)
            return None, f"TypeError: the task can't be sent to its child process: {exc}"
        return self._await(run, process, conn)

    def _await(self, run: Run, process: Any, conn: Connection) -> Called:
        signalled_at: float | None = None
        killed = False
        while True:
            timeout = None
            if run.stop_requested:
                if signalled_at is None:
                    signalled_at = time.monotonic()
                    self._signal(process, signal.SIGTERM)
                timeout = signalled_at + STOP_GRACE_S - time.monotonic()
                if timeout <= 0 and not killed:
                    killed = True
                    log_event(
                        logging.WARNING,
                        "child_killed",
                        task=run.task.id,
                        pid=process.pid,
                        grace_s=STOP_GRACE_S,
                    )
                    self._signal(process, signal.SIGKILL)
                if killed:
                    timeout = None
            ready = wait([conn, process.sentinel, self._wake_r], timeout)
            if self._wake_r in ready:
                with contextlib.suppress(BlockingIOError, OSError):
                    os.read(self._wake_r, 64)
            if conn in ready:
                try:
                    message = conn.recv()
                except (EOFError, OSError):
                    return None, self._died(run)
                if message[0] == "report":
                    if not run.stop_requested:
                        self._report(*message[1:])
                    continue
                if message[0] == "quota":
                    if not run.stop_requested and self._quota is not None:
                        self._quota(*message[1:])
                    continue
                if run.stop_requested:
                    continue  # stopped: whatever it answered is dropped; wait for its exit
                # the failure's (verdict, traceback), or None on success
                _, result, error, failure = message
                run.verdict, run.traceback = failure or (None, None)
                self._served += 1
                if self._max_tasks is not None and self._served >= self._max_tasks:
                    self._recycle()
                return result, error
            elif process.sentinel in ready:
                return None, self._died(run)

    def _child(self) -> tuple[Any, Connection]:
        if self._process is not None and self._conn is not None:
            return self._process, self._conn
        self._join_retired()
        context = _forkserver()
        ours, theirs = context.Pipe(duplex=True)
        if self._alive is None:
            # Never written, its write end held until this process ends: each child
            # reads EOF on its copy of the read end once the worker is gone.
            self._alive = context.Pipe(duplex=False)
        process = context.Process(
            target=serve, args=(theirs, self._alive[0]), name=f"taskfleet-child-{self._index}"
        )
        process.start()
        theirs.close()  # the child's end lives in the child alone: its exit is our EOF
        self._process, self._conn, self._served = process, ours, 0
        log_event(logging.INFO, "child_started", slot=self._index, pid=process.pid)
        return process, ours

    def _died(self, run: Run) -> str | None:
        """The child is gone (or going): reap it; the run's error."""
        process = self._process
        self._drop_child()
        process.join()
        if run.stop_requested:
            log_event(
                logging.INFO,
                "child_stopped",
                task=run.task.id,
                pid=process.pid,
                reason=run.stop_reason,
            )
            return run.stop_error
        error = child_death(process.exitcode)
        log_event(logging.WARNING, "child_died", task=run.task.id, pid=process.pid, error=error)
        return error

    def _recycle(self) -> None:
        """Ask the child to exit (its memory goes back now); reaped at the next start."""
        process, conn = self._process, self._conn
        assert conn is not None
        with contextlib.suppress(OSError, ValueError):
            conn.send(None)
        log_event(
            logging.INFO, "child_recycled", slot=self._index, pid=process.pid, tasks=self._served
        )
        self._drop_child()
        self._retired.append(process)

    def _join_retired(self) -> None:
        for process in self._retired:
            process.join(STOP_GRACE_S)
            if process.exitcode is None:
                self._signal(process, signal.SIGKILL)
                process.join()
        self._retired.clear()

    def _drop_child(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(OSError):
                self._conn.close()
        self._process = self._conn = None

    @staticmethod
    def _signal(process: Any, signum: int) -> None:
        # exitcode polls first: a reaped child's pid may already be someone else's
        if process.exitcode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(process.pid, signum)

    def close(self) -> None:
        """The worker exits (on the loop): an idle child is asked to exit now, a busy one
        when its call returns; one that never does exits when the worker's process does
        (its watchdog reads EOF)."""
        with self._lock:
            self._closed = True
            if not self._busy:
                self._close_idle()

    def _close_idle(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(OSError, ValueError):
                self._conn.send(None)
            self._drop_child()
