"""Exceptions of taskfleet, in one module so callers can catch exactly what they mean."""

from __future__ import annotations


class TaskfleetError(Exception):
    """Base of every error taskfleet raises on purpose."""


class InvalidPayload(TaskfleetError, ValueError):  # noqa: N818 - public name of the contract
    """A payload (or result) is not a JSON object, not serialisable, or too large."""


class InvalidArgument(TaskfleetError, ValueError):  # noqa: N818
    """An argument of the producer API is out of range (priority, delay, cost, ...)."""


class StaleToken(TaskfleetError):  # noqa: N818
    """The claim token no longer matches: the task was taken back and maybe claimed again.

    The write was refused and counted in the queue's ``stale`` statistic; the caller
    must abandon the task (another worker owns it now).
    """

    def __init__(self, task_id: str) -> None:
        super().__init__(f"task {task_id}: claim token is stale; the task was taken back")
        self.task_id = task_id


class WaitTimeout(TaskfleetError, TimeoutError):  # noqa: N818
    """``Queue.wait`` ran out of time before every task finished."""

    def __init__(self, unfinished: list[str], timeout: float) -> None:
        super().__init__(f"{len(unfinished)} task(s) not finished after {timeout:g} s")
        self.unfinished = unfinished


class ProtocolError(TaskfleetError):
    """A script answered something this version does not understand (version skew?)."""


class TaskExists(TaskfleetError):  # noqa: N818
    """An enqueue named an existing task id with a different payload or options.

    An id names one task: enqueueing it again with the same payload and options is
    idempotent (the id comes back, nothing changes); anything else is this conflict, and
    nothing of the call is stored. ``field`` says what differs (``payload``, ``priority``,
    ``cost``, ``timeout`` or ``max_attempts``).
    """

    def __init__(self, task_id: str, field: str) -> None:
        super().__init__(
            f"task {task_id!r} exists with a different {field}; an id names one task, "
            "enqueue it again only with the same payload and options"
        )
        self.task_id = task_id
        self.field = field
