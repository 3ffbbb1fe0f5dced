"""Handlers' reports (progress, real cost) gathered and written in batches.

A handler may report progress thousands of times a second; Redis sees one ``report``
call per worker process at most every ``REPORT_INTERVAL_S``, carrying the latest
progress of each run and its last reported cost. Reports come from handler threads and
the loop alike (``Reports.add`` is thread safe); the loop that writes them is off the
claim and completion path. A report is fenced by its run's claim token: one from a run
whose task was taken back is refused by the script, never applied.

Quota reports (``report_quota`` at or below its threshold) go the same way, each one a
``quota`` pause call of its own in the same write (they are rare: one per provider
reset, not one per task), written at once rather than after the interval: the
reporting run holds the worker's waiting runs (``Execution._quota``) until its pause is
written and ``paused`` (``HandBack.paused``) has given back those the pause covers.

What a crash loses: reports not yet written (at most one interval's worth). A cost
reported just before the run's outcome is still settled when it lands after it (the
script accepts a cost under the run's token in any state).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Awaitable, Callable, Sequence

from taskfleet.protocol.control_ops import Report
from taskfleet.worker.broker import Broker
from taskfleet.worker.events import log_event
from taskfleet.worker.gate import REDIS_DOWN, RedisGate, wait_any
from taskfleet.worker.lifecycle import Lifecycle

__all__ = ["REPORT_INTERVAL_S", "Paused", "Reports", "report_loop", "write_reports"]

#: At most one report write per worker process this often (quota reports: at once).
REPORT_INTERVAL_S = 0.5

#: Called once pauses are written, each ``(task id, group scope)``: gives back the waiting
#: runs they cover and ends the hold (``HandBack.paused``).
Paused = Callable[[Sequence[tuple[str, bool]]], Awaitable[None]]


class Reports:
    """The reports not yet written, the latest per run (keyed by task id and token)."""

    def __init__(self) -> None:
        self.ready = asyncio.Event()
        self.urgent = asyncio.Event()  # a quota report: written without the interval's wait
        self._lock = threading.Lock()
        self._pending: dict[tuple[str, str], Report] = {}
        # quota pauses reported: (task id, pause ms or None, group only, reason)
        self._quota: list[tuple[str, int | None, bool, str]] = []
        self._loop: asyncio.AbstractEventLoop | None = None  # bound by report_loop
        self._loop_thread = 0
        self._armed = False

    def bind(self) -> None:
        """Called on the loop that writes the reports, before any run starts."""
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()

    def __len__(self) -> int:
        return len(self._pending) + len(self._quota)

    def add(self, task_id: str, token: str, progress: str | None, cost: int | None) -> None:
        """Queue a report (from any thread): a newer progress or cost replaces the older."""
        with self._lock:
            key = (task_id, token)
            old = self._pending.get(key)
            if old is not None:
                progress = progress if progress is not None else old.progress
                cost = cost if cost is not None else old.cost
            self._pending[key] = Report(task_id, token, progress, cost)
            if self._armed:
                return
            self._armed = True
        self._arm()

    def add_quota(
        self, task_id: str, token: str, pause_ms: int | None, group: bool, reason: str
    ) -> None:
        """Queue a claim pause a handler's ``report_quota`` asked for (from any thread)."""
        with self._lock:
            self._quota.append((task_id, pause_ms, group, reason))
        self._arm(urgent=True)

    def take_quota(self) -> list[tuple[str, int | None, bool, str]]:
        with self._lock:
            pauses, self._quota = self._quota, []
        return pauses

    def put_back_quota(self, pauses: list[tuple[str, int | None, bool, str]]) -> None:
        with self._lock:
            self._quota[:0] = pauses
            if self._armed:
                return
            self._armed = True
        self._arm()

    def _arm(self, *, urgent: bool = False) -> None:
        wake = self._wake_urgent if urgent else self.ready.set
        if self._loop is None or threading.get_ident() == self._loop_thread:
            wake()
        else:
            with contextlib.suppress(RuntimeError):  # the loop is gone: exiting
                self._loop.call_soon_threadsafe(wake)

    def _wake_urgent(self) -> None:
        self.ready.set()
        self.urgent.set()

    def take(self) -> list[Report]:
        with self._lock:
            reports = list(self._pending.values())
            self._pending.clear()
            self._armed = False
            self.ready.clear()
        return reports

    def put_back(self, reports: list[Report]) -> None:
        """Reports whose write failed: kept unless a newer one of the run came meanwhile."""
        for report in reports:
            with self._lock:
                if (report.task_id, report.token) in self._pending:
                    continue
            self.add(report.task_id, report.token, report.progress, report.cost)


async def write_reports(broker: Broker, reports: Reports, paused: Paused | None = None) -> None:
    """Write what is pending now, in one call; on an outage the reports are kept (unless
    newer ones came) and the error goes on to the caller. Quota pauses written are
    handed to ``paused`` (the waiting runs they cover go back, the hold ends)."""
    batch = reports.take()
    pauses = reports.take_quota()  # after take(): one added meanwhile re-arms the loop
    for i, (task_id, pause_ms, group, reason) in enumerate(pauses):
        try:
            await broker.pause_quota(pause_ms, reason, task_id if group else "")
        except REDIS_DOWN:
            reports.put_back_quota(pauses[i:])
            reports.put_back(batch)
            raise
        log_event(logging.WARNING, "quota_reported_spent", task=task_id, pause_ms=pause_ms)
    if pauses and paused is not None:
        await paused([(task_id, group) for task_id, _, group, _ in pauses])
    if not batch:
        return
    try:
        refused = await broker.report(batch)
    except REDIS_DOWN:
        reports.put_back(batch)
        raise
    stale = sum(1 for ok in refused if not ok)
    if stale:
        log_event(logging.DEBUG, "reports_refused", reports=stale)


async def report_loop(
    broker: Broker,
    reports: Reports,
    gate: RedisGate,
    lifecycle: Lifecycle,
    paused: Paused | None = None,
) -> None:
    """Write reports as they come, one call per interval at most (a quota report at
    once), until the worker closes (then once more: what the last runs reported)."""
    closing, stop_requested = lifecycle.closing, lifecycle.stop_requested
    while True:
        await wait_any(reports.ready, closing)
        reports.urgent.clear()
        try:
            await write_reports(broker, reports, paused)
        except REDIS_DOWN as exc:
            if closing.is_set() or stop_requested.is_set():
                return
            await gate.wait_out(exc, stop_requested, closing)
            continue
        if closing.is_set():
            return
        await wait_any(closing, reports.urgent, limit=REPORT_INTERVAL_S)
