"""The handler threads of a sync handler, which hand outcomes back to the loop in batches."""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator

from taskfleet.worker.handlers import (
    encode_result,
    failure_of,
    format_error,
    format_traceback,
)
from taskfleet.worker.runs import Run, RunState

#: Longest a thread holds back queued runs after a call met a provider's rate limit.
HOLD_MAX_S = 5.0

#: What a thread hands back per call: the run, its result JSON or its error.
Delivered = tuple[Run, str | None, str | None]
#: How a thread calls a run somewhere else (``--isolation process``: in its child):
#: result JSON or error, the run's verdict set.
Caller = Callable[[Run], tuple[str | None, str | None]]


class HandlerThreads:
    """``size`` daemon threads that run sync handlers (each run's own), one task each at a time.

    Each submitted run comes back exactly once through ``deliver``, on the loop, as
    ``(run, result JSON, error)``; outcomes of calls that end together share one
    wake-up of the loop. Daemon threads: a handler that never returns can't hold the
    process at exit (the CLI exits without joining them anyway).
    """

    def __init__(
        self,
        size: int,
        deliver: Callable[[list[Delivered]], None],
        callers: list[Caller] | None = None,
    ) -> None:
        self._size = size
        # Thread i calls runs with callers[i] (a child process of its own) if given,
        # else here, in the run's context.
        self._callers = callers
        self._deliver = deliver
        self._jobs: queue.SimpleQueue[Run | None] = queue.SimpleQueue()
        # Orders a thread's start of a queued run against withdraw(): a run is either
        # begun or withdrawn, never both.
        self._begin = threading.Lock()
        self._done: deque[Delivered] = deque()
        self._wake_armed = False
        # True while the loop will collect anyway (see collected_after).
        self._loop_collects = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._threads: list[threading.Thread] = []
        # Cleared when a call meets a provider's rate limit (RateLimited) or a handler
        # reports its quota spent (report_quota, ``hold``): threads begin no queued run
        # until the loop has written the pause and given back the prefetched runs it
        # pauses (resume), or HOLD_MAX_S passed (a write that could not be made must not
        # stall the worker). A 429 returns at once, so without it a thread would run
        # through every prefetched task, each one more call to the exhausted provider.
        self._go = threading.Event()
        self._go.set()

    def submit(self, run: Run) -> None:
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
        if not self._threads:
            for i in range(self._size):
                caller = None if self._callers is None else self._callers[i]
                thread = threading.Thread(
                    target=self._serve, args=(caller,), name=f"taskfleet-handler-{i}", daemon=True
                )
                thread.start()
                self._threads.append(thread)
        self._jobs.put(run)

    def close(self) -> None:
        """Let idle threads end; busy ones end when their call returns."""
        for _ in self._threads:
            self._jobs.put(None)

    def hold(self) -> None:
        """From any thread: begin no queued run until ``resume`` (at most HOLD_MAX_S)."""
        self._go.clear()

    def resume(self) -> None:
        """The pause is written and the prefetched runs given back: threads begin again."""
        self._go.set()

    def withdraw(self, runs: Iterable[Run], into: RunState) -> list[Run]:
        """Of ``runs``, those queued for a thread that none has begun: moved ``into`` a
        state no thread begins (on the loop), so none ever will."""
        withdrawn = []
        with self._begin:
            for run in runs:
                # no job on the loop: a thread's run; still RUNNING: not given up on
                if run.job is None and run.began_at is None and run.state is RunState.RUNNING:
                    run.to(into)
                    withdrawn.append(run)
        return withdrawn

    @contextlib.contextmanager
    def collected_after(self) -> Iterator[None]:
        """While the loop is busy with something it awaits (an outcome write), calls
        that end don't wake it: their outcomes are collected when the block ends."""
        self._loop_collects = True
        try:
            yield
        finally:
            self._loop_collects = False
            self.collect()

    def _serve(self, caller: Caller | None) -> None:
        jobs, done, begin = self._jobs, self._done, self._begin
        clock = time.monotonic
        running = RunState.RUNNING
        go = self._go
        while (run := jobs.get()) is not None:
            result = error = None
            if not go.is_set():
                go.wait(HOLD_MAX_S)
            with begin:
                if run.state is running:  # given up on while queued: never begun
                    run.began_at = clock()
            if run.began_at is not None:
                if caller is not None:
                    try:
                        result, error = caller(run)
                    except BaseException as exc:  # a bug of ours: the attempt fails, not the slot
                        error = f"ChildProcessError: {format_error(exc)}"
                else:
                    try:
                        assert run.context is not None and run.func is not None
                        result = encode_result(run.context.run(run.func, run.task.payload))
                    except BaseException as exc:  # the attempt failed; the thread serves on
                        # never raises, whatever exc does: the run is delivered below
                        error, run.verdict = failure_of(exc)
                        run.traceback = format_traceback(exc)
                run.ran_s = clock() - run.began_at
                if run.verdict is not None and run.verdict.throttle:
                    go.clear()  # before the outcome is delivered: resume() comes after
            done.append((run, result, error))
            # Append first, then check: the loop clears both flags before it empties the
            # deque, so an outcome is never left behind without a collection on its way.
            if not self._wake_armed and not self._loop_collects:
                self._wake_armed = True
                with contextlib.suppress(RuntimeError):  # the loop is gone: exiting
                    assert self._loop is not None
                    self._loop.call_soon_threadsafe(self.collect)

    def collect(self) -> None:
        """Deliver the outcomes that are in (on the loop)."""
        self._wake_armed = False
        batch = []
        while self._done:
            batch.append(self._done.popleft())
        if batch:
            self._deliver(batch)
