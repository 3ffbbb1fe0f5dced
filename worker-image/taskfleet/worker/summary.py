"""The worker's ``tasks_summary`` line: what ended here, counted, every interval.

A task done writes no line of its own at the default level (``task_done`` is debug):
formatting and writing one line per task cost about a third of a short task's worker
CPU. Instead, once per ``WorkerSettings.summary_interval`` (10 s) in which anything
ended or was given back, one info line counts it: done, failed (retried + dead),
cancelled, deferred, released, lost, stale, with the tasks in flight then (``inflight``,
claim to written), the slots held then by calls given up on that still run (``held``)
and the done tasks' time from claim to written (mean and longest). The counts are deltas
since the previous line, so a worker's lines add up to its ``worker_stopped`` totals;
the last window's is written just before ``worker_stopped``. Anything that needs a look
is still logged at once, one line each: ``task_failed`` (retried or dead),
``task_cancelled``, ``task_deferred``, ``lease_lost``, ``task_write_refused`` (stale),
``task_released``, ``task_result_dropped``.
"""

from __future__ import annotations

import dataclasses
import logging
import time

from taskfleet.worker.events import log, log_event
from taskfleet.worker.execution import Execution
from taskfleet.worker.gate import wait_any
from taskfleet.worker.lifecycle import Lifecycle

__all__ = ["Summary", "summary_loop"]

_COUNTED: tuple[str, ...] = (
    *("completed", "failed", "retried", "dead", "cancelled"),
    *("deferred", "released", "lost", "stale"),
)


class Summary:
    """Counts of one worker's ``Execution`` since the previous line."""

    def __init__(self, execution: Execution) -> None:
        self._execution = execution
        self._last = dataclasses.replace(execution.counters)
        self._done_s = 0.0
        self._since = time.monotonic()

    def emit(self) -> bool:
        """Log what ended since the previous call, if anything did; whether it logged."""
        execution = self._execution
        counters = execution.counters
        now = time.monotonic()
        window_s, self._since = now - self._since, now
        deltas = {
            ("done" if name == "completed" else name): getattr(counters, name)
            - getattr(self._last, name)
            for name in _COUNTED
        }
        self._last = dataclasses.replace(counters)
        done_s, longest_s = execution.done_s, execution.done_s_max
        execution.done_s_max = 0.0
        spent_s, self._done_s = done_s - self._done_s, done_s
        if not any(deltas.values()) or not log.isEnabledFor(logging.INFO):
            return False
        done = deltas["done"]
        log_event(
            logging.INFO,
            "tasks_summary",
            **deltas,
            inflight=len(execution.held),
            held=len(execution.held_slots),
            window_s=round(window_s, 1),
            done_ms_mean=round(spent_s * 1000 / done, 1) if done else 0.0,
            done_ms_max=round(longest_s * 1000, 1),
        )
        return True


async def summary_loop(summary: Summary, lifecycle: Lifecycle, interval: float) -> None:
    """A summary line per ``interval`` until the worker closes (its shutdown writes the
    last window itself, before ``worker_stopped``)."""
    closing = lifecycle.closing
    while not closing.is_set():
        await wait_any(closing, limit=interval)
        if not closing.is_set():
            summary.emit()
