"""Exceptions of taskfleet, in one module so callers can catch exactly what they mean."""

from __future__ import annotations

from typing import Any, Literal

from taskfleet.protocol import bounds


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
    nothing of the call is stored. ``field`` says what differs (``name``, ``payload``,
    ``priority``, ``cost``, ``timeout``, ``max_attempts``, ``after``, ``on_dep_fail`` or
    ``group``).
    """

    def __init__(self, task_id: str, field: str) -> None:
        super().__init__(
            f"task {task_id!r} exists with a different {field}; an id names one task, "
            "enqueue it again only with the same payload and options"
        )
        self.task_id = task_id
        self.field = field


class OlderWorker(TaskfleetError):  # noqa: N818 - public name of the contract
    """A call that uses flows, groups, claim pauses or spend budgets was refused, nothing
    stored: ``pod``, a live worker of an older release (level 1, taskfleet 0.1.x), serves
    the queue and would mishandle them without an error (docs/compatibility.md). It is the
    worker's name in the queue: its pod's, or ``<pod>#<n>`` for one process of a worker
    started with ``--processes``.
    ``feature`` names what was refused (``flows``, ``groups``, ``flows and groups``,
    ``claim pauses``, ``spend budgets``)."""

    def __init__(self, queue: str, pod: str, feature: str) -> None:
        super().__init__(
            f"worker {pod!r} serves queue {queue!r} at level 1 (taskfleet 0.1.x): "
            f"{feature} need every worker of the queue at 0.2; upgrade the queue's workers "
            "first (docs/upgrade.md)"
        )
        self.queue = queue
        self.pod = pod
        self.feature = feature

    @classmethod
    def refused(cls, queue: str, reply: list[Any]) -> OlderWorker | None:
        """The error a script's ``[-6, pod, feature]`` reply stands for, else None."""
        if len(reply) != 3 or _text(reply[0]) != "-6":
            return None
        return cls(queue, _text(reply[1]), _text(reply[2]))


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class NameInUse(TaskfleetError, ValueError):  # noqa: N818
    """A worker may not start under a name a live worker holds (two would take each
    other's tasks). ``holder`` describes that worker."""

    def __init__(self, pod: str, holder: str) -> None:
        super().__init__(
            f'worker name "{pod}" is in use by a live worker ({holder}); '
            "give each worker its own --pod"
        )
        self.pod = pod
        self.holder = holder


class IdentityTaken(TaskfleetError):  # noqa: N818
    """Another incarnation registered under this worker's name while it ran: the tasks
    it held were taken back, and it must stop. ``holder`` describes the newcomer."""

    def __init__(self, pod: str, incarnation: str, holder: str) -> None:
        super().__init__(f'worker name "{pod}" was taken over by another worker ({holder})')
        self.pod = pod
        self.incarnation = incarnation
        self.holder = holder


class PodGone(IdentityTaken):
    """This worker's pod is gone from the Kubernetes API (the operator took back its tasks
    and left a tombstone): a force-deleted pod's container still running. It may not
    register again, and must stop claiming and exit."""

    def __init__(self, pod: str, incarnation: str, until_ms: int) -> None:
        TaskfleetError.__init__(
            self,
            f'worker "{pod}": its pod is gone from the Kubernetes API and its tasks were '
            "taken back; it may not register again",
        )
        self.pod = pod
        self.incarnation = incarnation
        self.holder = "nobody: the pod is gone"
        self.until_ms = until_ms


def auth_failure(exc: BaseException) -> str | None:
    """Why Redis refused these credentials or this user's rights, else None.

    ``"authentication"``: a wrong or missing password or user (``WRONGPASS``, ``NOAUTH``,
    an AUTH that can't work); ``"permission"``: the user may not run a command or touch
    a key (``NOPERM``, also an ACL denial inside a script, which Redis 7.0 reports as a
    plain error). Neither goes away by retrying, unlike an outage.
    """
    import redis.exceptions as rx

    if isinstance(exc, rx.AuthenticationError | rx.AuthenticationWrongNumberOfArgsError):
        return "authentication"
    if isinstance(exc, rx.AuthorizationError | rx.NoPermissionError):
        return "permission"
    if isinstance(exc, rx.ResponseError):
        message = str(exc)
        if message.startswith(("WRONGPASS", "NOAUTH")):
            return "authentication"
        if message.startswith("NOPERM") or "can't run this command" in message:
            return "permission"
    return None


class ScheduleNotFound(TaskfleetError, LookupError):  # noqa: N818
    """No schedule of that name in the queue's store."""

    def __init__(self, name: str) -> None:
        super().__init__(f"no schedule named {name!r} in this queue")
        self.name = name


class ScheduleOwned(TaskfleetError, ValueError):  # noqa: N818
    """The schedule belongs to a TaskQueue's spec (or, for the operator, to the API):
    only its owner changes it."""

    def __init__(self, name: str, owner: str) -> None:
        where = "its TaskQueue's spec.schedules" if owner == "taskqueue" else "the API / CLI"
        super().__init__(f"schedule {name!r} is managed through {where}; change it there")
        self.name = name
        self.owner = owner


class DependencyCycle(InvalidArgument):
    """A dependency would close a cycle: the tasks in it would wait for each other for ever
    (an ``InvalidArgument``, so a caller catching that catches this too).

    Refused whole, nothing stored: a child (``add_children``) that is the parent itself,
    or a task that waits for the parent, directly or through others, or that waits for one;
    an item of one enqueue (a flow) that waits for a later item of the same call.
    """

    def __init__(self, task_id: str, parent: str) -> None:
        super().__init__(
            f"task {task_id!r} would close a dependency cycle through {parent!r} "
            "(it waits for it, directly or through others): give it no such after"
        )
        self.task_id = task_id
        self.parent = parent

    @classmethod
    def later(cls, task_id: str, dep: str) -> DependencyCycle:
        """An item of one enqueue (a flow) waiting for a later item of the same call."""
        err = cls(task_id, dep)
        err.args = (
            f"task {task_id!r} waits for {dep!r}, a later task of the same call: a task "
            "waits only for earlier ones (no cycle can be stored); put it first",
        )
        return err


class FlowTooLarge(TaskfleetError):  # noqa: N818 - public name of the contract
    """A walk over a flow met more tasks than its bound (``flowcontrol.MAX_FLOW_TASKS``)."""

    def __init__(self, task_id: str, bound: int) -> None:
        super().__init__(
            f"the flow of task {task_id!r} has more than {bound} tasks: nothing was changed; "
            "cancel or retry it by branch (--branch) or by task"
        )
        self.task_id = task_id
        self.bound = bound


class TaskNotFound(TaskfleetError, LookupError):  # noqa: N818
    """No task has that id in the queue (never enqueued, or pruned after retention)."""

    def __init__(self, queue: str, task_id: str) -> None:
        super().__init__(f"task {task_id!r} not found in queue {queue!r}")
        self.queue = queue
        self.task_id = task_id


class PermanentFailure(Exception):  # noqa: N818 - says what the handler decided
    """Raised by a handler: this task can never succeed. It goes dead at once, reason
    ``permanent``, with this message as its error; no attempt is left to retry."""


class RetryAfter(Exception):  # noqa: N818
    """Raised by a handler: run this task again after ``delay`` seconds (an upstream rate
    limit's Retry-After, a dependency that is down). The cause is outside the task, so the
    attempt is given back, up to ``bounds.MAX_DEFERRALS`` times per task; past that each
    one counts as a failed attempt and ``max_attempts`` ends the task. The retry waits
    ``delay`` either way, not the queue's backoff."""

    def __init__(self, delay: float, message: str = "") -> None:
        seconds = delay.total_seconds() if hasattr(delay, "total_seconds") else delay
        if isinstance(seconds, bool) or not isinstance(seconds, int | float):
            raise TypeError(f"RetryAfter needs a delay in seconds, not {delay!r}")
        if not 0 <= seconds <= bounds.MAX_DELAY_S:  # also refuses nan
            raise ValueError(f"RetryAfter delay must be 0..{bounds.MAX_DELAY_S} s, not {delay}")
        super().__init__(message or f"retry after {seconds:g} s")
        self.delay = float(seconds)


class RateLimited(Exception):  # noqa: N818
    """Raised by a handler that met a provider's rate limit (an HTTP 429): the whole
    queue stops claiming until the limit resets, not only this task. ``retry_after``:
    the provider's Retry-After in seconds; None when it gave none: the fleet then pauses
    ``throttle_base_s``, doubled for each rate limit met in a row (up to
    ``throttle_max_s``) and shortened again by successes. The task waits the pause out,
    its attempt given back (as with ``RetryAfter``).

    ``scope="group"``: only the task's group pauses (its other groups' tasks are claimed
    as before); for a quota that is the group's own, such as a tenant's API key. A task
    without a group pauses the queue. The default stays ``"queue"``: most providers'
    quotas belong to the API key the whole queue calls with, and a 429 met by one
    tenant's task is then every tenant's.

    ``quota="openai"``: the provider quota of that name pauses instead (for
    ``retry_after``, or a second without it): claims of every task naming it stop, in
    every queue and language; this queue's other tasks run on."""

    def __init__(
        self,
        retry_after: float | None = None,
        message: str = "",
        *,
        scope: Literal["queue", "group"] = "queue",
        quota: str | None = None,
    ) -> None:
        if scope not in ("queue", "group"):
            raise ValueError(f"RateLimited scope must be 'queue' or 'group', not {scope!r}")
        if quota is not None and (not isinstance(quota, str) or not quota):
            raise ValueError(f"RateLimited quota must be a provider quota's name, not {quota!r}")
        seconds: Any = retry_after
        if seconds is not None:
            if hasattr(seconds, "total_seconds"):
                seconds = seconds.total_seconds()
            if isinstance(seconds, bool) or not isinstance(seconds, int | float):
                raise TypeError(f"RateLimited needs retry_after in seconds, not {retry_after!r}")
            if not 0 <= seconds <= bounds.MAX_DELAY_S:  # also refuses nan
                raise ValueError(
                    f"RateLimited retry_after must be 0..{bounds.MAX_DELAY_S} s, not {seconds}"
                )
            seconds = float(seconds)
        where = "" if seconds is None else f", retry after {seconds:g} s"
        super().__init__(message or f"rate limited{where}")
        self.retry_after: float | None = seconds
        self.scope: Literal["queue", "group"] = scope
        #: a provider quota's name (``taskfleet.Quota``): that quota pauses, for every
        #: queue and language, instead of this queue
        self.quota: str | None = quota


class NotReplicated(TaskfleetError):  # noqa: N818 - public name of the contract
    """A write the master applied that fewer replicas confirmed than asked (``WAIT``
    timed out): it is stored, but a failover right now could still lose it.

    ``task_ids``: what the write was about (an enqueue: the tasks, all stored on the
    master). Enqueueing the same ids again is safe (nothing changes for a task that
    exists) and waits for the replicas again.
    """

    def __init__(self, acked: int, wanted: int, timeout_ms: int, task_ids: list[str]) -> None:
        super().__init__(
            f"the write is on the master but {acked} of {wanted} replicas confirmed it "
            f"within {timeout_ms} ms"
        )
        self.acked = acked
        self.wanted = wanted
        self.timeout_ms = timeout_ms
        self.task_ids = task_ids


class RedisEvicts(TaskfleetError):  # noqa: N818 - public name of the contract
    """The Redis server may delete keys when full (``maxmemory-policy`` is not
    ``noeviction``): acknowledged tasks could vanish without running. A worker refuses to
    start unless told to accept the risk (``--allow-eviction``)."""

    def __init__(self, policy: str) -> None:
        super().__init__(
            f"Redis maxmemory-policy is {policy!r}: a full Redis would delete tasks; set "
            "maxmemory-policy noeviction (or start with --allow-eviction / "
            "TASKFLEET_ALLOW_EVICTION=true to accept losing tasks)"
        )
        self.policy = policy
