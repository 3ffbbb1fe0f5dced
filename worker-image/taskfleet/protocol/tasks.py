"""The task model: a task's states and its stored hash read into typed fields.

Protocol layer: the producer API and the worker both read tasks through it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from taskfleet.protocol import bounds
from taskfleet.protocol.errors import ProtocolError
from taskfleet.protocol.jsondepth import nested_too_deep
from taskfleet.protocol.states import FINISHED, TaskState
from taskfleet.protocol.tasknames import split_named

__all__ = [
    "COUNTERS",
    "FINISHED",
    "FLOW_COUNTERS",
    "Attempt",
    "Task",
    "TaskState",
    "stored_float",
    "stored_int",
    "stored_text",
    "stored_time",
]

#: Counters of the ``stats`` hash; stats() reports each, 0 when never bumped.
COUNTERS = (
    "enqueued",
    "completed",
    "failed",
    "retried",
    "dead_total",  # tasks that ever went dead ("dead" is how many are dead now)
    "requeued",
    "lost",
    "released",
    "stale",
    "expired",
    "cancelled_total",  # tasks that ever ended cancelled ("cancelled": how many are now)
    "deferred",  # retries a handler asked for (RetryAfter) that gave the attempt back
    "replayed",  # dead (or, by a flow's retry, cancelled) tasks sent back (Queue.retry)
    "throttled",  # claim pauses begun: a provider's rate limit met (RateLimited), or asked for
    *("flows_done", "flows_failed", "flows_cancelled"),  # flows that ended, by outcome
    "flow_repairs",  # waiting tasks resolved by a repair: their wake-up never came
)
#: The flow counters of :data:`COUNTERS`, by outcome (docs/flows.md).
FLOW_COUNTERS = {"done": "flows_done", "failed": "flows_failed", "cancelled": "flows_cancelled"}
_TIME_FIELDS = (
    "created_at",
    "run_at",
    "deadline",
    "started_at",
    "finished_at",
    "lease_until",
    "progress_at",
    "cancel_requested",
)
_INT_FIELDS = (
    "priority",
    "attempts",
    "max_attempts",
    "lost",
    "cost",
    "cost_used",
    "deferred",
    "deps_left",
)


#: What an attempt still shown by the task's own fields ended as, by the task's state (a
#: done attempt is never stored; the others are, unless an older script ended them).
_LAST_OUTCOME = {
    "running": "running",
    "done": "done",
    "dead": "dead",
    "cancelled": "cancelled",
    "delayed": "failed",
}


class Attempt(BaseModel):
    """One attempt of a task: who ran it, when, and how it ended.

    ``outcome``: done, failed (it runs again), retried (given back as its handler asked),
    timed out, lost (its worker died), released (given back by a draining worker),
    cancelled, dead; running for the attempt under way; None when unknown.
    """

    model_config = ConfigDict(frozen=True)

    attempt: int = Field(description="the attempt's number (a given-back start keeps it)")
    pod: str | None = None
    started_at: datetime | None = None
    ended_at: datetime | None = None
    outcome: str | None = None
    error: str | None = None
    traceback: str | None = Field(default=None, description="the failure's last frames")


class Task(BaseModel):
    """A task as stored in its hash, with proper types (times are UTC datetimes)."""

    model_config = ConfigDict(frozen=True)

    id: str
    state: TaskState
    name: str | None = Field(default=None, description="its handler's name; None: the default")
    payload: Any = None
    priority: int = 0
    attempts: int = 0
    max_attempts: int | None = None
    lost: int = 0
    cost: int = 1
    cost_used: int | None = Field(default=None, description="the real cost its handler reported")
    deferred: int = Field(default=0, description="retries its handler asked for (RetryAfter)")
    timeout: float | None = Field(default=None, description="seconds; None = the queue's default")
    created_at: datetime | None = None
    run_at: datetime | None = None
    deadline: datetime | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    lease_until: datetime | None = None
    progress_at: datetime | None = Field(default=None, description="when progress was stored")
    cancel_requested: datetime | None = Field(
        default=None, description="when its cancellation was asked for while it ran"
    )
    group: str | None = Field(default=None, description="its group; None: ungrouped")
    pod: str | None = None
    incarnation: str | None = None
    token: str | None = None
    error: str | None = None
    reason: str | None = Field(
        default=None,
        description="why it is dead: expired | worker lost | bad payload | bad task | failed | "
        "permanent | result too large | dependency failed; or cancelled",
    )
    result: Any = None
    progress: Any = Field(
        default=None,
        description="what its handler last reported: {fraction, done, total, message}",
    )
    checkpoint: Any = Field(
        default=None,
        description="the state its handler last checkpointed; once finished, only if kept",
    )
    after: list[str] = Field(default_factory=list, description="the tasks it waits for")
    on_dep_fail: str | None = Field(
        default=None, description="with after: fail | ignore | cancel (None: fail)"
    )
    deps_left: int | None = Field(default=None, description="while waiting: dependencies left")
    flow: str | None = Field(
        default=None, description="the flow it belongs to (its first task's id); None: none"
    )
    history: list[Attempt] = Field(
        default_factory=list, description="its attempts, oldest first (the newest 16 stored)"
    )

    @classmethod
    def from_hash(cls, raw: Mapping[Any, Any], task_id: str | None = None) -> Task:
        """The task of a stored hash; ``task_id`` (its key's id) when the hash has none.

        Never fails on a field it cannot read, whoever wrote it (a hash edited by hand, a
        foreign producer): a time no ``datetime`` can hold, or that is not a number, reads
        as None; a count that is not a finite number reads as the field's default (None
        for ``max_attempts``); a timeout that is not a positive finite number as None;
        text that is not UTF-8 with replacement characters. Only a hash without a state
        this version knows raises ``ProtocolError``.
        """
        h = {stored_text(k): stored_text(v) for k, v in raw.items()}
        data: dict[str, Any] = {}
        for name in (
            "id",
            "group",
            "pod",
            "incarnation",
            "token",
            "error",
            "reason",
            "on_dep_fail",
            "flow",
        ):
            if name in h:
                data[name] = h[name]
        if task_id is not None:
            data.setdefault("id", task_id)
        state = h.get("state")
        if state not in TaskState.__members__.values():
            shown = data.get("id", "?")
            raise ProtocolError(f"task {shown!r} has no state this version knows: {state!r}")
        data["state"] = state
        for name in _INT_FIELDS:
            number = stored_int(h.get(name))
            if number is not None:
                data[name] = number
        timeout = stored_float(h.get("timeout"))
        if timeout is not None and timeout > 0:
            data["timeout"] = timeout
        for name in _TIME_FIELDS:
            data[name] = stored_time(h.get(name))
        if "payload" in h:
            data["name"], h["payload"] = split_named(h["payload"])
        for name in ("payload", "result", "progress", "checkpoint"):
            if name in h:
                try:
                    if nested_too_deep(h[name]):  # no reader could print it parsed
                        raise ValueError("nested too deep")
                    data[name] = json.loads(h[name])
                except (ValueError, RecursionError):
                    data[name] = h[name]  # written by a foreign producer: keep it as text
        if h.get("after"):
            try:
                after = json.loads(h["after"])
            except ValueError:
                after = None
            if isinstance(after, list):
                data["after"] = [str(dep) for dep in after]
        data["history"] = history_of(h, data)
        return cls.model_validate(data)

    @property
    def finished(self) -> bool:
        return self.state in FINISHED

    @property
    def traceback(self) -> str | None:
        """The traceback of its latest attempt that left one (None: none did)."""
        for attempt in reversed(self.history):
            if attempt.traceback:
                return attempt.traceback
        return None


def history_of(h: Mapping[str, str], data: Mapping[str, Any]) -> list[Attempt]:
    """The stored attempts (field ``history``), then the latest one when only the task's
    own fields tell it (a done or running attempt is never stored; none for a pending
    task). Unreadable records are left out."""
    out: list[Attempt] = []
    raw = h.get("history")
    if raw:
        try:
            stored = json.loads(raw)
        except ValueError:
            stored = None
        for record in stored if isinstance(stored, list) else ():
            if not isinstance(record, dict):
                continue
            out.append(
                Attempt(
                    attempt=stored_int(str(record.get("attempt", ""))) or 0,
                    pod=_text_or_none(record.get("pod")),
                    started_at=stored_time(str(record.get("started_at", ""))),
                    ended_at=stored_time(str(record.get("ended_at", ""))),
                    outcome=_text_or_none(record.get("outcome")),
                    error=_text_or_none(record.get("error")),
                    traceback=_text_or_none(record.get("traceback")),
                )
            )
    started = data.get("started_at")
    state = data.get("state", "")
    outcome = _LAST_OUTCOME.get(state)
    # a pending task's last start was recorded when it ended, or was a hand-off no
    # handler began (released without a record): nothing more to tell
    if outcome is not None and started is not None and (not out or out[-1].started_at != started):
        out.append(
            Attempt(
                attempt=data.get("attempts", 0),
                pod=data.get("pod"),
                started_at=started,
                ended_at=data.get("finished_at") if state in FINISHED else None,
                outcome=outcome,
                error=data.get("error") if outcome in ("failed", "dead") else None,
            )
        )
    return out


def _text_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def stored_text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def stored_float(value: str | None) -> float | None:
    """A stored number, or None when absent, not a number, or not finite."""
    if not value:
        return None
    try:
        number = float(value)
    except ValueError:
        return None
    return number if math.isfinite(number) else None


def stored_int(value: str | None) -> int | None:
    """A stored integer (exact when written as digits), or None when it is not a number."""
    if not value:
        return None
    try:
        return int(value)
    except ValueError:
        number = stored_float(value)
        return None if number is None else int(number)


def stored_time(value: str | None) -> datetime | None:
    """Epoch ms as a UTC datetime, or None when absent, unreadable or out of its range."""
    ms = stored_float(value)
    if ms is None or not bounds.MIN_EPOCH_MS <= ms <= bounds.MAX_EPOCH_MS:
        return None
    return datetime(1970, 1, 1, tzinfo=UTC) + timedelta(milliseconds=int(ms))
