"""A child process of ``--isolation process``: runs one task at a time for its worker.

The worker (``isolation.ChildSlot``) sends a job over the pipe; the child runs the handler
in a task context of its own (``current_task()``: progress, cost and quota reports go
back over the pipe, ``cancelled()`` reads the child's own flag) and sends back the result or the
error. It never touches Redis: the worker writes every outcome, fenced by the claim
token, so a child can't record anything twice.

Signals: SIGTERM is the worker stopping the run (cancel, timeout, lost lease, drain
deadline): it sets ``cancelled()`` and raises ``TaskStopped`` in the handler, so its
``finally`` blocks and context managers run; the child then exits (a handler cut short
may have left its module state half-done). SIGINT is ignored (a terminal's Ctrl-C goes
to the worker, which decides). A watchdog thread waits on a pipe whose other end only
the worker holds: when the worker dies, even by SIGKILL, the pipe closes and the child
exits at once, so a worker killed outright leaves no runaway child behind. (Not
``PR_SET_PDEATHSIG``: a child's parent is the forkserver, which outlives the worker while
any child holds the descriptor that keeps it alive.)

Messages, child to worker: ``("report", task_id, token, progress, cost)`` and
``("quota", task_id, token, pause_ms, group, reason)`` (``report_quota``), then one
``("done", result JSON, error, verdict)`` per job. Worker to child: ``Job`` or ``None``
(exit).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import os
import signal
import threading
from dataclasses import dataclass
from multiprocessing.connection import Connection
from types import FrameType
from typing import Any

from taskfleet.worker.context import TaskContext, TaskControl, context_for
from taskfleet.worker.handlers import (
    encode_result,
    failure_of,
    format_error,
    format_traceback,
)

__all__ = ["Job", "TaskStopped", "serve"]


class TaskStopped(BaseException):
    """Raised in a handler the worker stops (SIGTERM to its child process).

    A BaseException, like ``KeyboardInterrupt``: ``except Exception`` in a handler does
    not swallow it. Whatever the handler does after it is dropped; the child exits."""


@dataclass(frozen=True, slots=True)
class Job:
    """One task for the child: the handler (pickled by reference) and its context."""

    task_id: str
    token: str
    func: Any
    payload: dict[str, Any]
    queue: str
    attempt: int
    pod: str
    incarnation: str
    redis_url: str
    trace: bytes | None
    name: str | None
    group: str | None = None
    after: str | None = None
    checkpoint: str | None = None


class _Child:
    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.lock = threading.Lock()  # handlers may report from threads of their own
        self.control: TaskControl | None = None
        self.stopped = False
        self.runner: asyncio.Runner | None = None

    def send(self, message: tuple[Any, ...]) -> None:
        with self.lock:
            self.conn.send(message)

    def report(self, task_id: str, token: str, progress: str | None, cost: int | None) -> None:
        if not self.stopped:
            self.send(("report", task_id, token, progress, cost))

    def quota(self, task_id: str, token: str, pause_ms: int | None, group: bool, why: str) -> None:
        if not self.stopped:
            self.send(("quota", task_id, token, pause_ms, group, why))

    def on_sigterm(self, signum: int, frame: FrameType | None) -> None:
        self.stopped = True
        if self.control is not None:
            self.control.cancelled = True
        raise TaskStopped

    def run(self, job: Job) -> tuple[str | None, str | None, Any]:
        self.control = control = TaskControl(job.token, self.report, self.quota)
        context = context_for(
            TaskContext(
                queue=job.queue,
                task_id=job.task_id,
                attempt=job.attempt,
                pod=job.pod,
                incarnation=job.incarnation,
                redis_url=job.redis_url,
                trace=job.trace,
                control=control,
                name=job.name,
                group=job.group,
                after=job.after,
                restored_json=job.checkpoint,
            )
        )
        try:
            value = context.run(job.func, job.payload)
            if inspect.isawaitable(value):  # an async handler: on this child's own loop
                if self.runner is None:
                    self.runner = asyncio.Runner()
                value = self.runner.run(_awaited(value), context=context)
            return encode_result(value), None, None
        except TaskStopped:
            raise
        except BaseException as exc:  # the attempt failed; the child serves on
            error, verdict = failure_of(exc)  # never raises, whatever exc does
            return None, error, (verdict, format_traceback(exc))
        finally:
            self.control = None


async def _awaited(value: Any) -> Any:
    return await value


def serve(conn: Connection, worker_alive: Connection) -> None:
    """The child's main: run jobs until the pipe closes, ``None`` comes, or a stop.
    ``worker_alive``: a pipe's read end; it reads EOF once the worker is gone."""
    threading.Thread(
        target=_exit_with_worker, args=(worker_alive,), name="taskfleet-watchdog", daemon=True
    ).start()
    with contextlib.suppress(OSError):
        os.setpgid(0, 0)  # a signal to the worker's process group is the worker's to handle
    child = _Child(conn)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, child.on_sigterm)
    try:
        while True:
            try:
                job = conn.recv()
            except EOFError:
                break  # the worker is gone
            except Exception as exc:  # the handler did not unpickle: its module fails here
                why = f"handler could not be loaded in the child process: {format_error(exc)}"
                child.send(("done", None, why, None))
                continue
            if job is None:
                break
            result, error, failure = child.run(job)  # failure: (verdict, traceback) or None
            child.send(("done", result, error, failure))
            if child.stopped:  # a SIGTERM the handler swallowed: the worker wants us gone
                break
    except TaskStopped:
        pass
    # Not a normal exit: atexit hooks and non-daemon threads of the user's handler must
    # not keep a stopped child alive.
    os._exit(0)


def _exit_with_worker(worker_alive: Connection) -> None:
    """Block until the worker's end of the pipe closes (it never writes), then exit."""
    with contextlib.suppress(EOFError, OSError):
        while True:
            worker_alive.recv_bytes()
    os._exit(1)
