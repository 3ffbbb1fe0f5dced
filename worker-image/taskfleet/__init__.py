"""taskfleet: a Redis task queue whose workers drain gracefully and never lose a task."""

from taskfleet.broker import Broker, ClaimedTask, ClaimResult
from taskfleet.config import QueueConfig
from taskfleet.errors import (
    InvalidArgument,
    InvalidPayload,
    ProtocolError,
    StaleToken,
    TaskfleetError,
    WaitTimeout,
)
from taskfleet.queue import EnqueueSpec, Queue, Task, TaskState, WorkerInfo
from taskfleet.scripts import SweepResult

__all__ = [
    "Broker",
    "ClaimResult",
    "ClaimedTask",
    "EnqueueSpec",
    "InvalidArgument",
    "InvalidPayload",
    "ProtocolError",
    "Queue",
    "QueueConfig",
    "StaleToken",
    "SweepResult",
    "Task",
    "TaskState",
    "TaskfleetError",
    "WaitTimeout",
    "WorkerInfo",
]
__version__ = "0.1.0"
