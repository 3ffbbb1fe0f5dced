"""taskfleet: a Redis task queue whose workers drain gracefully and never lose a task."""

from taskfleet.broker import Broker, ClaimedTask, ClaimResult
from taskfleet.config import QueueConfig
from taskfleet.errors import (
    InvalidArgument,
    InvalidPayload,
    ProtocolError,
    StaleToken,
    TaskExists,
    TaskfleetError,
    WaitTimeout,
)
from taskfleet.queue import EnqueueResult, EnqueueSpec, Queue, Task, TaskState, WorkerInfo
from taskfleet.scripts import SweepResult

__all__ = [
    "Broker",
    "ClaimResult",
    "ClaimedTask",
    "EnqueueResult",
    "EnqueueSpec",
    "InvalidArgument",
    "InvalidPayload",
    "ProtocolError",
    "Queue",
    "QueueConfig",
    "StaleToken",
    "SweepResult",
    "Task",
    "TaskExists",
    "TaskState",
    "TaskfleetError",
    "WaitTimeout",
    "WorkerInfo",
]
__version__ = "0.1.0"
