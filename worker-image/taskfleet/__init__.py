"""taskfleet: a Redis task queue whose workers drain gracefully and never lose a task.

The package is layered; each layer imports only those below it:

- ``taskfleet.protocol``: what every part shares: Redis key names, the queue's config,
  the Lua scripts and their typed calls, the task model, bounds, errors, Redis URLs;
- ``taskfleet.producer``: the producer API (``Queue``, ``AsyncQueue``), on the protocol;
- ``taskfleet.worker``: the worker (``taskfleet worker``) and its side of the protocol
  (``Broker``), on the protocol;
- ``taskfleet.cli`` on top of both; the operator (``taskfleet_operator``) uses the
  protocol and the producer API, never the worker or the CLI.

This module re-exports the public API, each name imported on first use: a producer never
loads the worker's modules, and the worker never the producer's.
"""

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from taskfleet._version import __version__

if TYPE_CHECKING:
    from taskfleet.producer.asyncqueue import AsyncQueue
    from taskfleet.producer.control import TaskPage
    from taskfleet.producer.flows import chain, chord, group
    from taskfleet.producer.providerquota import Quota
    from taskfleet.producer.queue import EnqueueResult, EnqueueSpec, Queue, WorkerInfo
    from taskfleet.protocol.config import QueueConfig
    from taskfleet.protocol.control_ops import CancelOutcome
    from taskfleet.protocol.errors import (
        DependencyCycle,
        FlowTooLarge,
        InvalidArgument,
        InvalidPayload,
        OlderWorker,
        PermanentFailure,
        ProtocolError,
        RateLimited,
        RetryAfter,
        ScheduleNotFound,
        ScheduleOwned,
        StaleToken,
        TaskExists,
        TaskfleetError,
        TaskNotFound,
        WaitTimeout,
    )
    from taskfleet.protocol.groups import GroupCount, GroupSettings
    from taskfleet.protocol.output import OutputChunk, OutputFull
    from taskfleet.protocol.replies import SweepResult
    from taskfleet.protocol.schedules import Schedule
    from taskfleet.protocol.tasks import Task, TaskState
    from taskfleet.worker.broker import Broker
    from taskfleet.worker.claimed import ClaimedTask, ClaimResult
    from taskfleet.worker.context import TaskContext, cancelled, current_task

# Every name loads on first use: ``taskfleet worker`` (whose start is on the critical path
# of every scale-up) imports this package but never the producer API or its models.
_LAZY = {
    **dict.fromkeys(("EnqueueResult", "EnqueueSpec", "Queue", "WorkerInfo"), "producer.queue"),
    "AsyncQueue": "producer.asyncqueue",
    "Quota": "producer.providerquota",
    "QueueConfig": "protocol.config",
    **dict.fromkeys(("GroupCount", "GroupSettings"), "protocol.groups"),
    **dict.fromkeys(
        (
            "DependencyCycle",
            "FlowTooLarge",
            "InvalidArgument",
            "InvalidPayload",
            "OlderWorker",
            "PermanentFailure",
            "ProtocolError",
            "RateLimited",
            "RetryAfter",
            "ScheduleNotFound",
            "ScheduleOwned",
            "StaleToken",
            "TaskExists",
            "TaskfleetError",
            "TaskNotFound",
            "WaitTimeout",
        ),
        "protocol.errors",
    ),
    "Schedule": "protocol.schedules",
    **dict.fromkeys(("OutputChunk", "OutputFull"), "protocol.output"),
    "CancelOutcome": "protocol.control_ops",
    "TaskPage": "producer.control",
    "SweepResult": "protocol.replies",
    "Task": "protocol.tasks",
    "TaskState": "protocol.tasks",
    "Broker": "worker.broker",
    "ClaimedTask": "worker.claimed",
    "ClaimResult": "worker.claimed",
    "current_task": "worker.context",
    "cancelled": "worker.context",
    "TaskContext": "worker.context",
    **dict.fromkeys(("chain", "chord", "group"), "producer.flows"),
}


def add_children(items: "Iterable[EnqueueSpec | Mapping[str, Any]]") -> list[str]:
    """From a handler: add tasks its own task waits for (one child per page found), in one
    atomic call; returns their ids. When the handler returns, the task is ``waiting``
    until every child is done, then done with the result it returned; a child that ends
    dead or cancelled applies the task's ``on_dep_fail`` (default: it ends dead). Give the
    children ids of your own (``task_id``) so that a run started again after a lost
    worker adds the same ones. ``StaleToken``: this run no longer holds the task."""
    from taskfleet.producer.queue import Queue
    from taskfleet.worker.context import current_task

    task = current_task()
    if task.control is None:
        raise RuntimeError("add_children needs a task run by a worker")
    with Queue(task.queue, task.redis_url) as queue:
        return queue.add_children(task.task_id, task.control.token, items)


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'taskfleet' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f"taskfleet.{module}"), name)
    globals()[name] = value  # later look-ups are plain attribute reads
    return value


__all__ = [
    "AsyncQueue",
    "Broker",
    "CancelOutcome",
    "ClaimResult",
    "ClaimedTask",
    "DependencyCycle",
    "EnqueueResult",
    "EnqueueSpec",
    "FlowTooLarge",
    "GroupCount",
    "GroupSettings",
    "InvalidArgument",
    "InvalidPayload",
    "OlderWorker",
    "OutputChunk",
    "OutputFull",
    "PermanentFailure",
    "ProtocolError",
    "Queue",
    "QueueConfig",
    "Quota",
    "RateLimited",
    "RetryAfter",
    "Schedule",
    "ScheduleNotFound",
    "ScheduleOwned",
    "StaleToken",
    "SweepResult",
    "Task",
    "TaskContext",
    "TaskExists",
    "TaskNotFound",
    "TaskPage",
    "TaskState",
    "TaskfleetError",
    "WaitTimeout",
    "WorkerInfo",
    "__version__",
    "add_children",
    "cancelled",
    "chain",
    "chord",
    "current_task",
    "group",
]
