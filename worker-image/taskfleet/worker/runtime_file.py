"""The worker's side of ``worker.json``: rewritten when it matters, throttled otherwise.

What ``taskfleet drain --wait`` acts on (``state``, ``draining``, and nothing left in
flight while draining) is written within the loop turn; other changes of the in-flight
count wait for the throttle window (every second before a drain, every 100 ms during
one), and a write is always scheduled for its end, so the file never stays stale.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from pathlib import Path

from taskfleet.worker.events import log_event
from taskfleet.worker.handlers import format_error
from taskfleet.worker.runtime import RuntimeState, write_state

#: Least time between two rewrites that ``taskfleet drain`` does not wait on: the count
#: matters to ``drain --wait`` only once draining (and the start of a drain is written at
#: once); before, it is for a person's look at the file.
INTERVAL_S = 1.0
INTERVAL_DRAINING_S = 0.1


#: What the file says that changes: (state, draining, inflight).
Status = tuple[str, bool, int]


class RuntimeFile:
    """``status()`` says what changes in the file; ``changed()`` after any change.

    ``status`` is read on every change (each task's start and end), so it must be cheap;
    the file's fixed fields (pid, its start time, pod, queue) are given once.
    """

    def __init__(
        self,
        path: Path,
        status: Callable[[], Status],
        *,
        pid: int,
        start: str | None,
        pod: str,
        queue: str,
    ) -> None:
        self.path = path
        self._status = status
        self._pid, self._start, self._pod, self._queue = pid, start, pod, queue
        self._written: RuntimeState | None = None
        self._written_at = -INTERVAL_S
        self._scheduled: asyncio.Handle | None = None
        self._scheduled_at_once = False  # the scheduled write is this loop turn's

    def _urgent(self, now: Status) -> bool:
        """What ``taskfleet drain --wait`` waits for: the drain seen, then nothing held."""
        written = self._written
        state, draining, inflight = now
        return (
            written is None
            or written.state != state
            or written.draining != draining
            or (draining and written.inflight > 0 and inflight == 0)
        )

    def changed(self) -> None:
        """Schedule a write: throttled, but never late for a drain."""
        if self._scheduled_at_once:
            return  # this loop turn's write will carry the change
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self.write()  # no loop: the final writes at exit
            return
        now = self._status()
        urgent = self._urgent(now)
        if self._scheduled is not None and not urgent:
            return  # the throttled write is on its way and will carry this change
        interval = INTERVAL_DRAINING_S if now[1] else INTERVAL_S
        due = self._written_at + interval
        if urgent or loop.time() >= due:
            if self._scheduled is not None:
                self._scheduled.cancel()
            self._scheduled_at_once = True
            # Coalesced: one write per loop turn however many tasks started or finished.
            self._scheduled = loop.call_soon(self.write)
        elif self._scheduled is None:
            self._scheduled = loop.call_at(due, self.write)

    def write(self) -> None:
        """Write now (also called directly: drained, stopped)."""
        # A scheduled write would only repeat this one, or recreate the file after its
        # removal at exit.
        if self._scheduled is not None:
            self._scheduled.cancel()
            self._scheduled = None
        self._scheduled_at_once = False
        status, draining, inflight = self._status()
        state = RuntimeState(
            pid=self._pid,
            pod=self._pod,
            queue=self._queue,
            inflight=inflight,
            draining=draining,
            state=status,
            start=self._start,
        )
        with contextlib.suppress(RuntimeError):  # no loop: the final write at exit
            self._written_at = asyncio.get_running_loop().time()
        self._written = state
        try:
            write_state(state, self.path)
        except OSError as exc:
            self._written = None  # the next change is written at once
            log_event(logging.WARNING, "runtime_file_failed", error=format_error(exc))
