"""taskfleet: a Redis task queue whose workers drain gracefully and never lose a task."""

from taskfleet.errors import (
    InvalidPayload,
    StaleToken,
    TaskfleetError,
)
from taskfleet.queue import Queue, Task

__all__ = ["InvalidPayload", "Queue", "StaleToken", "Task", "TaskfleetError"]
__version__ = "0.1.0"
