"""``taskfleet worker --processes N``: a small supervisor and N worker processes.

A sync handler that needs CPU runs on one core per process (the GIL), so a pod with
several cores runs several worker processes. The process that was started (PID 1 in a
container) stays a supervisor: it never opens a connection, starts a thread or loads the
handler; it forks N workers, re-forks one that ends, forwards signals to all of them,
reaps every process that ends in its PID namespace, and exits once all have drained.

Why fork, not spawn ``python -m taskfleet worker``: the supervisor has imported the
worker's modules (asyncio, redis, the worker's loops) but loaded nothing with threads or
sockets, so a forked child starts in milliseconds with those imports shared
copy-on-write, where a fresh interpreter pays the whole start-up again on every (re)start
and N times over at once on the pod's cores. The handler is loaded in each child after
the fork: a handler's module may start threads or open connections, which a fork would
not carry over sanely.

Each process is a worker of its own: name ``<pod>#<i>`` (``taskfleet.protocol.
workernames``), its own incarnation, leases and heartbeats, its runtime file in
``<runtime dir>/process-<i>``. When process i dies, its re-fork registers under the same
name and takes back at once what the dead one held (it is gone from ``/proc``); the other
processes keep theirs. The supervisor's own ``worker.json`` is what ``taskfleet drain``
(the preStop hook) reads: it signals the supervisor, which passes SIGTERM to every
process, and waits until the file says ``drained``, written only once every process has
exited.

What ends the pod:

- a drain (SIGTERM/SIGINT to the supervisor): exit 0 once every process exited 0 (else the
  first other code);
- a process exiting with 2 (refused configuration: the handler does not load, Redis
  refuses the credentials, the name is taken): the others drain, exit 2;
- a crash loop: one process slot ending more than ``CrashPolicy.limit`` times in a row,
  each within ``stable_s`` of its start: the others drain, exit with the last code, so
  Kubernetes sees a failed container and applies its own restart backoff.

Otherwise a process that ends is re-forked: at once after a run of ``stable_s`` or
more, else after a backoff that doubles per quick exit (``CrashPolicy.delay``).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

from taskfleet.worker.earlystop import STOP_SIGNALS, EarlyStop
from taskfleet.worker.events import log_event
from taskfleet.worker.reaper import FORWARDED_SIGNALS
from taskfleet.worker.runtime import (
    POLL_INTERVAL_S,
    WAITER_GRACE_S,
    RuntimeState,
    live_waiters,
    process_start,
    remove_state,
    write_state,
)

__all__ = ["CrashPolicy", "EarlyStop", "ProcessSlot", "Supervisor", "child_runtime_dir"]


#: Exit code of a worker whose configuration was refused: re-forking would not help.
REFUSED = 2
_STOP_SIGNALS = STOP_SIGNALS
#: Longest the supervisor sleeps without looking at its children (a missed SIGCHLD).
_TICK_S = 1.0


@dataclass(frozen=True)
class CrashPolicy:
    """When a process that ended is re-forked, and when the pod gives up instead."""

    backoff_base: float = 0.25
    backoff_max: float = 8.0
    stable_s: float = 10.0  # a process that ran this long did not crash-loop
    limit: int = 5  # quick exits in a row of one slot that are still re-forked

    def delay(self, quick_exits: int) -> float | None:
        """Seconds before the re-fork after ``quick_exits`` quick exits in a row (1 = the
        first after a stable run: at once); None = a crash loop, end the pod."""
        if quick_exits > self.limit:
            return None
        if quick_exits <= 1:
            return 0.0
        return min(self.backoff_base * 2.0 ** (quick_exits - 2), self.backoff_max)


def child_runtime_dir(runtime_dir: str, index: int) -> str:
    """Where process ``index`` keeps its own ``worker.json``."""
    return str(Path(runtime_dir) / f"process-{index}")


@dataclass
class ProcessSlot:
    """Process ``index`` of the pod: the pid running it now, and its recent exits."""

    index: int
    pid: int | None = None
    started: float = 0.0
    quick_exits: int = 0
    fork_at: float | None = 0.0  # when to (re)fork; None: not to be forked


class Supervisor:
    """Forks ``processes`` workers (``start_child(index)`` runs in each and never returns)
    and watches them until they all have drained; ``run`` returns the pod's exit code."""

    def __init__(
        self,
        processes: int,
        start_child: Callable[[int], NoReturn],
        *,
        runtime_dir: str,
        pod: str,
        queue: str,
        policy: CrashPolicy | None = None,
        early: EarlyStop | None = None,
    ) -> None:
        self.slots = {i: ProcessSlot(i) for i in range(1, processes + 1)}
        self._start_child = start_child
        self._policy = policy or CrashPolicy()
        self._early = early  # a stop signal noted before run() takes the signals
        self._draining = False
        self._code: int | None = None  # the pod's exit code once decided
        self._file = Path(runtime_dir) / "worker.json"
        pid = os.getpid()
        self._state = RuntimeState(pid=pid, pod=pod, queue=queue, start=process_start(pid))

    # ------------------------------------------------------------------ the loop

    def run(self) -> int:
        watched = {signal.SIGCHLD, *FORWARDED_SIGNALS}
        # Blocked for good: signals are taken with sigtimedwait, one at a time, between
        # reaping and forking, so none lands halfway through either.
        old_mask = signal.pthread_sigmask(signal.SIG_BLOCK, watched)
        log_event(logging.INFO, "supervisor_started", processes=len(self.slots))
        self._write("running")
        if self._early is not None and self._early.requested:
            self._on_signal(signal.SIGTERM)  # signalled while the command started
        while True:
            self._reap()
            live = [slot for slot in self.slots.values() if slot.pid is not None]
            if self._draining and not live:
                break
            if not self._draining:
                self._fork_due(old_mask)
            info = signal.sigtimedwait(watched, self._wait_s())
            if info is not None and info.si_signo != signal.SIGCHLD:
                self._on_signal(info.si_signo)
        self._write("drained")
        self._outlive_drain_waiters()
        remove_state(self._file, os.getpid())
        code = self._code or 0
        log_event(logging.INFO, "supervisor_exited", code=code)
        return code

    def _wait_s(self) -> float:
        now = time.monotonic()
        due = [s.fork_at for s in self.slots.values() if s.pid is None and s.fork_at is not None]
        if self._draining or not due:
            return _TICK_S
        return max(0.0, min(min(due) - now, _TICK_S))

    def _on_signal(self, signum: int) -> None:
        if signum in _STOP_SIGNALS and not self._draining:
            log_event(logging.INFO, "supervisor_drain", signal=signal.Signals(signum).name)
            self._begin_drain(None)
            return
        # A second SIGTERM (a forced stop), SIGHUP, SIGUSR1...: every process gets it.
        self._signal_all(signum)

    def _begin_drain(self, code: int | None) -> None:
        """Stop re-forking, tell every process to drain; ``code`` decides the exit code."""
        self._draining = True
        if code is not None and self._code is None:
            self._code = code
        for slot in self.slots.values():
            slot.fork_at = None
        self._signal_all(signal.SIGTERM)
        self._write("draining")

    def _signal_all(self, signum: int) -> None:
        for slot in self.slots.values():
            if slot.pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(slot.pid, signum)

    # ------------------------------------------------------------------ children

    def _fork_due(self, old_mask: set[int | signal.Signals]) -> None:
        now = time.monotonic()
        for slot in self.slots.values():
            if slot.pid is None and slot.fork_at is not None and slot.fork_at <= now:
                self._fork(slot, old_mask)

    def _fork(self, slot: ProcessSlot, old_mask: set[int | signal.Signals]) -> None:
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                EarlyStop().install()  # the worker's loop takes over, and looks at it
                signal.pthread_sigmask(signal.SIG_SETMASK, old_mask)
                self._start_child(slot.index)
            except SystemExit as exc:
                code = 0 if exc.code is None else exc.code if isinstance(exc.code, int) else 1
            except BaseException:  # a child must never return into the supervisor loop
                logging.getLogger("taskfleet.worker").exception("worker_process_failed")
            finally:
                os._exit(code)
        slot.pid, slot.started, slot.fork_at = pid, time.monotonic(), None
        log_event(logging.INFO, "process_started", process=slot.index, pid=pid)
        self._write(self._state.state)

    def _reap(self) -> None:
        """Collect every ended process (orphans too, when we are PID 1)."""
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            slot = next((s for s in self.slots.values() if s.pid == pid), None)
            if slot is not None:
                code = os.waitstatus_to_exitcode(status)
                self._ended(slot, code if code >= 0 else 128 - code)

    def _ended(self, slot: ProcessSlot, code: int) -> None:
        ran = time.monotonic() - slot.started
        slot.pid = None
        log_event(
            logging.INFO if self._draining and code == 0 else logging.WARNING,
            "process_exited",
            process=slot.index,
            code=code,
            ran_s=round(ran, 3),
        )
        self._write(self._state.state)
        if self._draining:
            if code != 0 and self._code is None:
                self._code = code
            return
        if code == REFUSED:
            log_event(logging.ERROR, "process_refused", process=slot.index)
            self._begin_drain(REFUSED)
            return
        slot.quick_exits = slot.quick_exits + 1 if ran < self._policy.stable_s else 1
        delay = self._policy.delay(slot.quick_exits)
        if delay is None:
            log_event(logging.ERROR, "crash_loop", process=slot.index, exits=slot.quick_exits)
            self._begin_drain(code or 1)
            return
        slot.fork_at = time.monotonic() + delay
        log_event(logging.INFO, "process_restart", process=slot.index, in_s=delay)

    # ------------------------------------------------------------------ runtime file

    def _write(self, state: str) -> None:
        """``worker.json`` for ``taskfleet drain``: ``inflight`` counts the processes still
        running (each holds its tasks until it exits), ``drained`` once none is."""
        self._state.state = state
        self._state.draining = state in ("draining", "drained")
        self._state.inflight = sum(1 for s in self.slots.values() if s.pid is not None)
        with contextlib.suppress(OSError):
            write_state(self._state, self._file)

    def _outlive_drain_waiters(self) -> None:
        """Like a worker: a ``taskfleet drain`` waiting on us must exit before we do
        (bounded), or our exit as PID 1 kills it and the kubelet reports the hook failed."""
        deadline = time.monotonic() + WAITER_GRACE_S
        while live_waiters(self._file.parent) and time.monotonic() < deadline:
            time.sleep(POLL_INTERVAL_S)
