"""The control scripts' calls (cancel, promote, retry, drop, report) as ``Op`` values.

Producers and the CLI cancel tasks, send dead ones back (``retry``) and delete finished
ones (``drop``); workers write what handlers report (``report``: progress and real cost).
Each is one script in ``lua/``, fenced like the rest: a cancel or a retry applies only to
a task in the state it names, a report only under the reporting run's claim token.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from taskfleet.protocol.errors import ProtocolError
from taskfleet.protocol.keys import QueueKeys
from taskfleet.protocol.records import text
from taskfleet.protocol.scripts import Op
from taskfleet.protocol.signatures import (
    Arg,
    Cancel,
    Drop,
    Promote,
    Reported,
    Retry,
    TaskId,
    with_records,
)
from taskfleet.protocol.signatures import Report as ReportArgs

__all__ = ["CancelOutcome", "ControlOps", "Report", "Scan", "Swept"]

#: Finished tasks a retry or a drop looks at per call when it works by filter.
SCAN_BOUND = 1000


class CancelOutcome(enum.StrEnum):
    """What ``Queue.cancel`` did to a task."""

    CANCELLED = "cancelled"  # it was pending or delayed: it will never run
    REQUESTED = "requested"  # it runs: its worker cancels the run, it then ends cancelled
    DONE = "done"  # it had finished: nothing changed
    DEAD = "dead"
    FINISHED = "finished"  # cancelled before
    NOT_FOUND = "not_found"


_CANCEL_CODES = {
    "cancelled": CancelOutcome.CANCELLED,
    "requested": CancelOutcome.REQUESTED,
    "done": CancelOutcome.DONE,
    "dead": CancelOutcome.DEAD,
    "finished": CancelOutcome.FINISHED,
    "missing": CancelOutcome.NOT_FOUND,
}


@dataclass(frozen=True, slots=True)
class Scan:
    """Finished tasks by filter: ``reason`` ('' any), finished_at within [``oldest_ms``,
    ``newest_ms``] (None: unbounded below), from ``offset`` (see ``finished_matching``)."""

    reason: str = ""
    oldest_ms: int | None = None
    newest_ms: int = 0
    offset: int = 0
    bound: int = SCAN_BOUND

    @property
    def oldest(self) -> float:
        return float("-inf") if self.oldest_ms is None else self.oldest_ms


@dataclass(frozen=True, slots=True)
class Swept:
    """A retry's or a drop's reply: how many tasks it changed, and the offset a scan goes
    on from (None: it looked at every task of the range)."""

    count: int
    next_offset: int | None


@dataclass(frozen=True, slots=True)
class Report:
    """What one run's handler reported since the last write: progress as JSON, real cost."""

    task_id: str
    token: str
    progress: str | None = None
    cost: int | None = None


def _swept(script: str) -> Callable[[Any], Swept]:
    def decode(raw: Any) -> Swept:
        if not isinstance(raw, list) or len(raw) != 2:
            raise ProtocolError(f"{script}: unexpected reply {raw!r}")
        count, offset = int(raw[0]), int(raw[1])
        return Swept(count, None if offset < 0 else offset)

    return decode


class ControlOps:
    """Builds the :class:`Op` of each control script for one queue."""

    def __init__(self, keys: QueueKeys) -> None:
        self.keys = keys
        self._k = keys

    def cancel(self, task_ids: Sequence[str]) -> Op[list[CancelOutcome]]:
        def decode(raw: Any) -> list[CancelOutcome]:
            if not isinstance(raw, list) or len(raw) != len(task_ids):
                raise ProtocolError(f"cancel: unexpected reply {raw!r}")
            try:
                return [_CANCEL_CODES[text(code)] for code in raw]
            except KeyError:
                raise ProtocolError(f"cancel: unexpected reply {raw!r}") from None

        args = with_records(Cancel(n=len(task_ids)), [TaskId(i) for i in task_ids])
        return Op("cancel", self._k.script("cancel"), args, decode)

    def promote(self, task_ids: Sequence[str]) -> Op[list[bool]]:
        """Delayed tasks to pending now; per id whether it was delayed (and so promoted)."""

        def decode(raw: Any) -> list[bool]:
            flags = text(raw) if isinstance(raw, bytes | str) else ""
            if len(flags) != len(task_ids) or set(flags) - {"0", "1"}:
                raise ProtocolError(f"promote: unexpected reply {raw!r}")
            return [c == "1" for c in flags]

        args = with_records(Promote(n=len(task_ids)), [TaskId(i) for i in task_ids])
        return Op("promote", self._k.script("promote"), args, decode)

    def retry(
        self,
        *,
        task_ids: Sequence[str] = (),
        scan: Scan | None = None,
        max_attempts: int | None = None,
        flow: bool = False,
    ) -> Op[Swept]:
        """Dead tasks back to pending with a new budget: these ids, or those ``scan`` finds;
        ``flow``: these ids, cancelled ones too (a flow's retry, dependencies first)."""
        budget: int | Literal[""] = "" if max_attempts is None else max_attempts
        if scan is not None:
            head = Retry(
                max_attempts=budget,
                mode="scan",
                reason=scan.reason,
                oldest_ms=scan.oldest,
                newest_ms=scan.newest_ms,
                offset=scan.offset,
                bound=scan.bound,
                n=0,
            )
            return Op("retry", self._k.script("retry"), head, _swept("retry"))
        head = Retry(budget, "flow" if flow else "ids", "", "", "", "", "", len(task_ids))
        args = with_records(head, [TaskId(i) for i in task_ids])
        return Op("retry", self._k.script("retry"), args, _swept("retry"))

    def drop(
        self, state: str, *, task_ids: Sequence[str] = (), scan: Scan | None = None
    ) -> Op[Swept]:
        """Delete finished tasks in ``state`` (done, dead, cancelled): these, or ``scan``'s."""
        if scan is not None:
            head = Drop(
                state=state,
                mode="scan",
                reason=scan.reason,
                oldest_ms=scan.oldest,
                newest_ms=scan.newest_ms,
                offset=scan.offset,
                bound=scan.bound,
                n=0,
            )
            return Op("drop", self._k.script("drop"), head, _swept("drop"))
        head = Drop(state, "ids", "", "", "", "", "", len(task_ids))
        args = with_records(head, [TaskId(i) for i in task_ids])
        return Op("drop", self._k.script("drop"), args, _swept("drop"))

    def report(self, reports: Sequence[Report]) -> Op[list[bool]]:
        """Reply: per report, True if applied, False if refused (another run, or gone)."""
        records = [
            Reported(r.task_id, r.token, r.progress or "", "" if r.cost is None else r.cost)
            for r in reports
        ]
        args: list[Arg] = with_records(ReportArgs(n=len(records)), records)

        def decode(raw: Any) -> list[bool]:
            flags = text(raw)
            if len(flags) != len(reports):
                raise ProtocolError(f"report: unexpected reply {raw!r}")
            return [c == "1" for c in flags]

        return Op("report", self._k.script("report"), args, decode)
