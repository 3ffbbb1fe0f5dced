"""The rows listings and trees show: a task's few fields (``TaskRow``), a running or
waiting one's (``LiveRow``), a flow member's (``FlowRow``), each read from one HMGET of the
task's hash (the ``*_FIELDS`` here, in that order) by `reads.QueueReads`. Pure: no I/O.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from taskfleet.protocol.records import text

#: The fields of a task a row of a listing shows (its hash has more).
ROW_FIELDS = (
    "priority",
    "attempts",
    "max_attempts",
    "created_at",
    "run_at",
    "finished_at",
    "reason",
    "error",
    "pod",
    "group",
)


@dataclass(frozen=True)
class TaskRow:
    """A task's few fields a listing shows."""

    id: str
    priority: int | None
    attempts: int | None
    max_attempts: int | None
    created_at: datetime | None
    run_at: datetime | None
    finished_at: datetime | None
    reason: str
    error: str
    pod: str
    #: False when the id is in the state's set but its hash is gone (pruned meanwhile)
    present: bool = True
    #: its group ('' for none)
    group: str = ""


@dataclass(frozen=True)
class FlowRow:
    """A task's few fields a flow's tree shows: its state ('' when its hash is gone, pruned
    by retention), what it waits for, how many of those are left, its progress."""

    id: str
    state: str
    after: tuple[str, ...]
    deps_left: int | None
    progress: Any

    @property
    def present(self) -> bool:
        return bool(self.state)


#: The fields of a task a flow's tree shows.
FLOW_FIELDS = ("state", "after", "deps_left", "progress")

#: The fields of a running or waiting task a listing shows (``LiveRow``).
LIVE_FIELDS = (
    "started_at",
    "lease_until",
    "progress",
    "progress_at",
    "group",
    "after",
    "deps_left",
    "attempts",
    "max_attempts",
    "pod",
    "created_at",
)


@dataclass(frozen=True)
class LiveRow:
    """A running or waiting task's fields a listing shows: its run's times and progress,
    its group, what it waits for; ``payload_bytes``: its payload's size (its name opens
    the payload: read only when small, ``payload_names``)."""

    id: str
    present: bool
    started_at: datetime | None
    lease_until: datetime | None
    progress: Any
    progress_at: datetime | None
    group: str
    after: tuple[str, ...]
    deps_left: int | None
    attempts: int | None
    max_attempts: int | None
    pod: str
    created_at: datetime | None
    payload_bytes: int


def live_row(task_id: str, values: Sequence[Any], size: Any) -> LiveRow:
    from taskfleet.protocol.tasks import stored_int, stored_time

    h = {
        name: (None if v is None else text(v)) for name, v in zip(LIVE_FIELDS, values, strict=True)
    }
    shape = flow_row(task_id, [None, h["after"], h["deps_left"], h["progress"]])
    return LiveRow(
        id=task_id,
        present=any(v is not None for v in values),
        started_at=stored_time(h["started_at"]),
        lease_until=stored_time(h["lease_until"]),
        progress=shape.progress,
        progress_at=stored_time(h["progress_at"]),
        group=h["group"] or "",
        after=shape.after,
        deps_left=shape.deps_left,
        attempts=stored_int(h["attempts"]),
        max_attempts=stored_int(h["max_attempts"]),
        pod=h["pod"] or "",
        created_at=stored_time(h["created_at"]),
        payload_bytes=int(size or 0),
    )


def flow_row(task_id: str, values: Sequence[Any]) -> FlowRow:
    from taskfleet.protocol.tasks import stored_int

    state, after, left, progress = (None if v is None else text(v) for v in values)
    deps: list[str] = []
    if after:
        try:
            parsed = json.loads(after)
        except ValueError:
            parsed = None
        if isinstance(parsed, list):
            deps = [str(dep) for dep in parsed]
    shown: Any = None
    if progress is not None:
        try:
            shown = json.loads(progress)
        except (ValueError, RecursionError):
            shown = progress  # a foreign producer's text, kept as text
    return FlowRow(task_id, state or "", tuple(deps), stored_int(left), shown)


def task_row(task_id: str, values: Sequence[Any]) -> TaskRow:
    from taskfleet.protocol.tasks import stored_int, stored_time

    h = {name: (None if v is None else text(v)) for name, v in zip(ROW_FIELDS, values, strict=True)}
    return TaskRow(
        id=task_id,
        priority=stored_int(h["priority"]),
        attempts=stored_int(h["attempts"]),
        max_attempts=stored_int(h["max_attempts"]),
        created_at=stored_time(h["created_at"]),
        run_at=stored_time(h["run_at"]),
        finished_at=stored_time(h["finished_at"]),
        reason=h["reason"] or "",
        error=h["error"] or "",
        pod=h["pod"] or "",
        present=any(v is not None for v in values),
        group=h["group"] or "",
    )
