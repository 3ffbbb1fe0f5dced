"""A task's states: plain names the worker needs without the task model (no pydantic)."""

from __future__ import annotations

import enum

__all__ = ["FINISHED", "TaskState"]


class TaskState(enum.StrEnum):
    PENDING = "pending"
    DELAYED = "delayed"
    RUNNING = "running"
    DONE = "done"
    DEAD = "dead"
    CANCELLED = "cancelled"
    WAITING = "waiting"  # for the tasks it names in after (flows)


FINISHED = frozenset({TaskState.DONE, TaskState.DEAD, TaskState.CANCELLED})
