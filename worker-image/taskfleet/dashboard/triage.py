"""Dead (and other finished) tasks triaged: the newest counted by error (its class and
message: the last line of what the worker stored) with their reason, and a state's tasks
filtered by reason, group, error and task name, bounded: a triage reads at most
``TRIAGE_READ`` rows, a filter looks at most ``LOOK_AT`` entries (``LOOK_AT_NAMED`` with
a name) and keeps at most ``MATCHED`` matches (what one action may name). A row is a few
fields (``QueueReads.rows``); a name opens its task's payload, so a name filter reads the
payloads of the rows the other filters kept, those of ``NAME_READ_BYTES`` or less only.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from taskfleet.dashboard.display import one_line
from taskfleet.protocol.calls import run, run_all
from taskfleet.protocol.connect import SyncClient
from taskfleet.protocol.reads import QueueReads, TaskRow
from taskfleet.protocol.states import TaskState

__all__ = [
    "LOOK_AT",
    "LOOK_AT_NAMED",
    "MATCHED",
    "TRIAGE_READ",
    "ErrorCount",
    "Filter",
    "by_error",
    "matching",
]

#: The newest tasks a triage counts by error.
TRIAGE_READ = 500
#: Entries of a state a filter looks at, newest (or next to run) first.
LOOK_AT = 10_000
#: Matches a filter keeps: what one action may name (``actions.MAX_IDS``).
MATCHED = 1000
#: Entries a filter by task name looks at (it reads payloads).
LOOK_AT_NAMED = 2000
#: The largest payload a name filter reads (larger ones never match a name).
NAME_READ_BYTES = 4096
#: Rows read per round trip.
CHUNK = 500


def error_line(error: str) -> str:
    """What groups errors: the last line of the stored error (a traceback ends with the
    exception's class and message), capped."""
    return one_line(error)


def error_class(line: str) -> str:
    """``KeyError`` of ``KeyError: 'summary'``; the line itself when it names none."""
    head, sep, _ = line.partition(":")
    return head if sep and head and " " not in head.strip() else line


@dataclass(frozen=True)
class ErrorCount:
    reason: str
    error: str
    count: int
    example: str

    @property
    def error_class(self) -> str:
        return error_class(self.error)


def count_errors(rows: list[TaskRow]) -> list[ErrorCount]:
    """``rows`` counted by (reason, error line), most first, then by reason and error. Pure."""
    counted: Counter[tuple[str, str]] = Counter()
    example: dict[tuple[str, str], str] = {}
    for r in rows:
        if not r.present:
            continue
        key = (r.reason, error_line(r.error))
        counted[key] += 1
        example.setdefault(key, r.id)
    ranked = sorted(counted.items(), key=lambda kv: (-kv[1], kv[0]))
    return [ErrorCount(reason, error, n, example[(reason, error)]) for (reason, error), n in ranked]


def by_error(client: SyncClient, reads: QueueReads, state: str) -> tuple[list[ErrorCount], int]:
    """The newest ``TRIAGE_READ`` tasks of ``state`` counted by error, and how many were read."""
    ids = run(client, reads.ids(TaskState(state), 0, TRIAGE_READ))
    rows = run(client, reads.rows(ids)) if ids else []
    return count_errors(rows), len(rows)


@dataclass(frozen=True)
class Filter:
    """What a row must have ('' : anything): its reason, its group, its error line (exact,
    or the class when ``error`` names only one), its task name (checked apart: ``named``)."""

    reason: str = ""
    group: str = ""
    error: str = ""
    name: str = ""

    @property
    def active(self) -> bool:
        return bool(self.reason or self.group or self.error or self.name)

    def matches(self, row: TaskRow) -> bool:
        if not row.present:
            return False
        if self.reason and row.reason != self.reason:
            return False
        if self.group and row.group != self.group:
            return False
        if self.error:
            line = error_line(row.error)
            if line != self.error and error_class(line) != self.error:
                return False
        return True


@dataclass(frozen=True)
class Matches:
    rows: list[TaskRow]
    #: entries looked at, and whether that was the whole state
    looked: int
    complete: bool


def named(client: SyncClient, reads: QueueReads, rows: list[TaskRow], name: str) -> list[TaskRow]:
    """The rows whose task is named ``name``: their payload sizes, then the names of those
    of ``NAME_READ_BYTES`` or less (two round trips)."""
    if not rows:
        return []
    sizes = run(client, reads.payload_sizes([r.id for r in rows]))
    small = [r for r, size in zip(rows, sizes, strict=True) if 0 < size <= NAME_READ_BYTES]
    if not small:
        return []
    names = run(client, reads.payload_names([r.id for r in small]))
    return [r for r, n in zip(small, names, strict=True) if n == name]


def matching(client: SyncClient, reads: QueueReads, state: str, wanted: Filter) -> Matches:
    """Up to ``MATCHED`` rows of ``state`` that ``wanted`` matches, in the state's order,
    looking at up to ``LOOK_AT`` entries (``LOOK_AT_NAMED`` with a name)."""
    parsed = TaskState(state)
    found: list[TaskRow] = []
    offset = 0
    look_at = LOOK_AT_NAMED if wanted.name else LOOK_AT
    while offset < look_at and len(found) < MATCHED:
        ids = run(client, reads.ids(parsed, offset, CHUNK))
        if not ids:
            return Matches(found, offset, True)
        (rows,) = run_all(client, [reads.rows(ids)])
        offset += len(ids)
        kept = [r for r in rows if wanted.matches(r)]
        found += named(client, reads, kept, wanted.name) if wanted.name else kept
        if len(ids) < CHUNK:
            return Matches(found[:MATCHED], offset, True)
    return Matches(found[:MATCHED], offset, False)
