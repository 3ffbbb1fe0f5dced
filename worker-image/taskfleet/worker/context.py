"""What a running handler can know and say about its task: ``current_task()``.

The context names the task (queue, id, attempt, worker) and is how the handler speaks to
the queue while it runs:

- ``progress(...)``: stored on the task (``Queue.get``, ``Queue.follow``, ``taskfleet
  task``); the worker writes the latest of each run, every run's at once, at most every
  ``REPORT_INTERVAL_S`` (``reporting.py``), so a chatty handler costs Redis nothing more;
- ``report_cost(n)``: the task's real cost (an LLM call's tokens), settled against the
  queue's cost rate limit by the same write;
- ``report_quota(remaining=..., reset_after=...)``: the provider's quota as its reply
  headers tell it; at ``QUOTA_LOW`` or below the fleet pauses the queue (or the task's
  group) until the reset, the task itself going on;
- ``cancelled()``: True once a producer cancelled the task (``Queue.cancel``) and the
  worker learnt it from its heartbeat; an async handler's coroutine is cancelled too. A
  sync handler polls it in its loop: it reads a flag the worker keeps current (no Redis
  call), so a check costs about what an attribute read does. ``taskfleet.cancelled()``
  is the same check for the calling handler's task. (``if task.cancelled:`` without the
  call reads the same flag.)

Each write is fenced by the run's claim token: a run whose task was taken back writes
nothing. Handlers end a task early by raising ``PermanentFailure`` (dead at once) or
``RetryAfter(delay)`` (run again later, the attempt given back); ``verdict_of`` reads
what such an exception asks for.
"""

from __future__ import annotations

import contextvars
import json
import math
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Literal

from taskfleet.protocol import bounds
from taskfleet.protocol.errors import PermanentFailure, RateLimited, RetryAfter
from taskfleet.protocol.numbers import value_problem

__all__ = [
    "MAX_MESSAGE_CHARS",
    "QUOTA_LOW",
    "CancelCheck",
    "TaskContext",
    "TaskControl",
    "Verdict",
    "cancelled",
    "context_for",
    "current_task",
    "progress_json",
    "retry_asked",
    "task_context",
    "verdict_of",
]

#: A progress message longer than this is cut: progress is for a line in a UI.
MAX_MESSAGE_CHARS = 500
#: ``report_quota``: a remaining quota at or below this pauses claims until the reset (0:
#: the request that spent the last unit may run; the next one would meet a 429).
QUOTA_LOW = 0
#: A provider quota's pause when ``RateLimited(quota=...)`` or ``report_quota(name, ...)``
#: gives no reset time (ms).
PROVIDER_PAUSE_MS = 1000

#: Where a run's quota reports go: (task id, token, pause ms or None for the adaptive
#: pause, whether only the task's group pauses, the reason shown with the pause).
QuotaSink = Callable[[str, str, int | None, bool, str], None]


class TaskControl:
    """One run's line to the worker: where its reports go, and whether it was cancelled.

    ``send(task_id, token, progress JSON | None, cost | None)`` queues a report (thread
    safe); ``cancelled`` is set on the loop, read from any thread.
    """

    __slots__ = ("cancelled", "quota", "send", "token")

    def __init__(
        self,
        token: str,
        send: Callable[[str, str, str | None, int | None], None],
        quota: QuotaSink | None = None,
    ):
        self.token = token
        self.send = send
        self.quota = quota  # None: no worker takes quota reports (outside a worker)
        self.cancelled = False


class CancelCheck:
    """``current_task().cancelled``: call it (``cancelled()``) or read it as a bool.

    Both read the run's flag, which the worker sets when its heartbeat learns of the
    cancel (in ``--isolation process``, the child's own copy, set when the worker stops
    it): no Redis round trip, so a sync handler may poll it in a tight loop.
    """

    __slots__ = ("_control",)

    def __init__(self, control: TaskControl | None) -> None:
        self._control = control

    def __call__(self) -> bool:
        control = self._control
        return control is not None and control.cancelled

    def __bool__(self) -> bool:
        return self()

    def __eq__(self, other: object) -> bool:
        if isinstance(other, bool):
            return self() is other
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self())

    def __repr__(self) -> str:
        return f"<cancelled() = {self()}>"


@dataclass(frozen=True)
class TaskContext:
    """What a handler may want to know besides its payload (for logs, idempotency keys),
    and how it reports progress and real cost."""

    queue: str
    task_id: str
    attempt: int
    pod: str
    incarnation: str
    redis_url: str = field(repr=False)  # may hold a password: kept out of repr and logs
    control: TaskControl | None = field(default=None, repr=False, compare=False)
    #: the producer's trace context as stored (``protocol.tracing``); None when not traced
    trace: bytes | None = field(default=None, repr=False)
    name: str | None = None  # the task's name (enqueue(..., task=...)); None: it has none
    group: str | None = None  # the task's group (enqueue(..., group=...)); None: it has none
    #: the JSON list of the tasks it waited for, as its claim record carried it ("": none;
    #: None: not known, read from the task when asked)
    after: str | None = field(default=None, repr=False)
    #: the state an earlier attempt checkpointed, as stored (JSON text); None: none
    restored_json: str | None = field(default=None, repr=False)

    @property
    def restored(self) -> Any:
        """The state the last ``checkpoint`` of an earlier attempt stored (decoded JSON);
        None on a task's first attempt, or when no attempt checkpointed."""
        raw = self.restored_json
        return None if raw is None else json.loads(raw)

    def checkpoint(self, state: Any, *, keep: bool = False) -> None:
        """Store ``state`` (JSON, at most ``MAX_CHECKPOINT_BYTES`` as text) for the task's
        next attempt, which reads it as ``restored``: one fenced round trip, stored when
        this returns. Raises ``StaleToken`` when this run no longer holds the task (its
        lease was taken back). Dropped when the task finishes, unless ``keep``: then it
        stays with the task (``Task.checkpoint``). In an async handler the call blocks
        the loop for that round trip."""
        from taskfleet.protocol.runwrites import checkpoint_op, checkpoint_text

        text = checkpoint_text(state)
        control = self.control
        if control is None:
            raise RuntimeError("checkpoint is available only in a worker's task")
        scripts, keys = _run_scripts(self.redis_url, self.queue)
        scripts.run(checkpoint_op(keys, self.task_id, control.token, text, keep))

    @property
    def cancelled(self) -> CancelCheck:
        """``cancelled()`` is True once the task was cancelled (``Queue.cancel``): stop
        soon. Whatever the run returns then, the task ends ``cancelled``. Cheap: it reads
        a flag the worker keeps current, never Redis."""
        return CancelCheck(self.control)

    def progress(
        self,
        fraction: float | None = None,
        message: str | None = None,
        *,
        done: int | None = None,
        total: int | None = None,
    ) -> None:
        """Report how far the task is: a ``fraction`` in [0, 1], or ``done`` of ``total``
        counts (the fraction is then computed), and/or a ``message``. Stored on the task
        within about ``REPORT_INTERVAL_S`` (only the latest of a burst is written)."""
        text = progress_json(fraction, message, done=done, total=total)
        if self.control is not None:
            self.control.send(self.task_id, self.control.token, text, None)

    def emit(self, chunk: Any) -> str:
        """Append ``chunk`` (a str, or any JSON value) to the task's output stream, marked
        with this attempt: readers of ``Queue.stream(task_id)`` get it at once, in order.
        One round trip, written when it returns; its entry id. Raises ``StaleToken`` when
        this run no longer holds the task, ``OutputFull`` past ``MAX_OUTPUT_ENTRIES``
        chunks or ``MAX_OUTPUT_BYTES`` bytes (every attempt's together). The output is kept
        as long as the task. In an async handler the call blocks the loop for its round
        trip."""
        from taskfleet.protocol.output import chunk_text, emit_op

        kind, data = chunk_text(chunk)
        control = self.control
        if control is None:
            raise RuntimeError("emit is available only in a worker's task")
        scripts, keys = _run_scripts(self.redis_url, self.queue)
        entry: str = scripts.run(emit_op(keys, self.task_id, control.token, kind, data))
        return entry

    def dependency_results(self) -> dict[str, Any]:
        """The results of the tasks this one waited for (``enqueue(..., after=[...])``),
        by their id: handed to it when each completed, read here in one round trip (the
        claim record named them; no polling: they are all done before this task runs).
        Bounded: its inputs together are at most the queue's ``max_payload_bytes``; a
        result past that bound was not handed and its id is absent (read it with
        ``Queue.get`` while it is retained). Empty for a task that waited for nothing.
        See docs/flows.md."""
        from taskfleet.protocol.connect import connect
        from taskfleet.protocol.flows import dependency_results
        from taskfleet.protocol.keys import QueueKeys

        client = connect(self.redis_url)
        try:
            return dependency_results(client, QueueKeys(self.queue), self.task_id, self.after)
        finally:
            client.close()

    def report_cost(self, cost: int) -> None:
        """The task's real cost in the queue's cost units (what ``cost`` at enqueue
        estimated): the difference goes back into the cost rate limit's bucket, or is
        taken from it. The last report of a run counts."""
        if isinstance(cost, bool) or not isinstance(cost, int):
            raise TypeError(f"report_cost needs an int, not {cost!r}")
        if not bounds.MIN_COST <= cost <= bounds.MAX_COST:
            raise ValueError(f"cost must be {bounds.MIN_COST}..{bounds.MAX_COST}, not {cost}")
        if self.control is not None:
            self.control.send(self.task_id, self.control.token, None, cost)

    def settle(self, quota: str, **used: int) -> None:
        """What the provider call really used of provider quota ``quota`` (units as
        keywords: ``settle("openai", input_tokens=3412, output_tokens=655)``): the
        difference from the estimate its enqueue reserved (or from the last settlement of
        this run) is given back or charged. Use above the limit is debt the next claims
        wait out. One Redis call; ``StaleToken`` when this run no longer holds the task."""
        control = self._provider_control("settle")
        from taskfleet.protocol.errors import InvalidArgument, StaleToken
        from taskfleet.protocol.keys import QueueKeys
        from taskfleet.protocol.provider_quota import QuotaSlotOps, run_member, settle_op

        keys = QueueKeys(self.queue)
        scripts = _scripts_for(self.redis_url)
        if scripts.run(settle_op(keys, self.task_id, control.token, quota, used)):
            return
        # a Redis Cluster: the run's reservation is kept on the quota's own slot
        member = run_member(keys, self.task_id, control.token)
        code = scripts.run(QuotaSlotOps(quota).settle(member, used))
        if code == 0:
            raise StaleToken(self.task_id)
        if code == -2:
            raise InvalidArgument(f"no provider quota {quota!r}: configure it first")

    def _provider_control(self, what: str) -> TaskControl:
        if self.control is None:
            raise RuntimeError(f"{what} is only available inside a worker's task")
        return self.control

    def report_quota(
        self,
        quota: str | float | None = None,
        remaining: float | None = None,
        *,
        reset: float | timedelta | datetime | None = None,
        reset_after: float | timedelta | None = None,
        reset_at: float | datetime | None = None,
        scope: Literal["queue", "group"] = "queue",
    ) -> None:
        """With a provider quota's name first (``report_quota("openai", remaining=0,
        reset=12.5)``): at ``QUOTA_LOW`` or below, that quota pauses until the reset
        (``reset``: seconds from now or an aware datetime; ``PROVIDER_PAUSE_MS`` without
        one), for every queue and language. Else the queue's own pause, as follows."""
        if isinstance(quota, str):
            self._report_provider(quota, remaining, reset)
            return
        if quota is not None:
            if remaining is not None:
                raise TypeError("report_quota: give remaining once")
            remaining = quota
        if remaining is None:
            raise TypeError("report_quota needs remaining")
        self._report_queue(remaining, reset_after=reset_after, reset_at=reset_at, scope=scope)

    def _report_provider(
        self, quota: str, remaining: float | None, reset: float | timedelta | datetime | None
    ) -> None:
        if isinstance(remaining, bool) or not isinstance(remaining, int | float):
            raise TypeError(f"report_quota needs remaining as a number, not {remaining!r}")
        if not math.isfinite(remaining):
            raise ValueError(f"remaining must be finite, not {remaining!r}")
        if isinstance(reset, datetime):
            pause_ms = quota_pause_ms(None, reset, time.time())
        else:
            pause_ms = quota_pause_ms(reset, None, time.time())
        if remaining > QUOTA_LOW:
            return
        self._provider_control("report_quota")
        from taskfleet.protocol.provider_quota import ProviderQuotaOps

        reason = f"provider quota spent (remaining {remaining:g})"
        op = ProviderQuotaOps(quota).pause(
            PROVIDER_PAUSE_MS if pause_ms is None else pause_ms, reason
        )
        _scripts_for(self.redis_url).run(op)

    def _report_queue(
        self,
        remaining: float,
        *,
        reset_after: float | timedelta | None = None,
        reset_at: float | datetime | None = None,
        scope: Literal["queue", "group"] = "queue",
    ) -> None:
        """The provider's remaining quota (requests or tokens, as its reply headers say)
        and when it resets: ``reset_after`` seconds from now, or ``reset_at`` (an aware
        datetime, or epoch seconds). At ``QUOTA_LOW`` (0) or below, every worker of the
        queue stops claiming until the reset (``scope="group"``: only this task's group),
        as ``RateLimited`` would, but the task itself goes on: its call succeeded. Without
        a reset time the pause is the adaptive one. Above the threshold nothing is sent."""
        if isinstance(remaining, bool) or not isinstance(remaining, int | float):
            raise TypeError(f"report_quota needs remaining as a number, not {remaining!r}")
        if not math.isfinite(remaining):
            raise ValueError(f"remaining must be finite, not {remaining!r}")
        if scope not in ("queue", "group"):
            raise ValueError(f"scope must be 'queue' or 'group', not {scope!r}")
        pause_ms = quota_pause_ms(reset_after, reset_at, time.time())
        if remaining > QUOTA_LOW:
            return
        control = self.control
        if control is None or control.quota is None:
            raise RuntimeError(
                "report_quota is not available outside a worker's task: raise RateLimited instead"
            )
        reason = f"provider quota spent (remaining {remaining:g})"
        control.quota(self.task_id, control.token, pause_ms, scope == "group", reason)


_CLIENTS: dict[str, Any] = {}


def _scripts_for(redis_url: str) -> Any:
    """The scripts on one sync client per Redis URL, kept for the process's life: a
    handler's settle or quota report is one round trip, not a connection."""
    from taskfleet.protocol.connect import connect
    from taskfleet.protocol.scripts import SyncScripts

    client = _CLIENTS.get(redis_url)
    if client is None:
        client = _CLIENTS[redis_url] = connect(redis_url)
    return SyncScripts.for_client(client)


def quota_pause_ms(
    reset_after: float | timedelta | None, reset_at: float | datetime | None, now_s: float
) -> int | None:
    """How long a reported quota's pause lasts: until its reset (None: not given)."""
    if reset_after is not None and reset_at is not None:
        raise ValueError("give reset_after or reset_at, not both")
    seconds: Any
    if reset_at is not None:
        if isinstance(reset_at, datetime):
            if reset_at.tzinfo is None:
                raise ValueError("reset_at must be an aware datetime (with a timezone)")
            at = reset_at.timestamp()
        elif isinstance(reset_at, bool) or not isinstance(reset_at, int | float):
            raise TypeError(f"reset_at must be a datetime or epoch seconds, not {reset_at!r}")
        else:
            at = float(reset_at)
        if not math.isfinite(at):
            raise ValueError(f"reset_at must be finite, not {reset_at!r}")
        seconds = max(0.0, at - now_s)
    elif reset_after is not None:
        seconds = reset_after
        if isinstance(seconds, timedelta):
            seconds = seconds.total_seconds()
        if isinstance(seconds, bool) or not isinstance(seconds, int | float):
            raise TypeError(f"reset_after must be seconds, not {reset_after!r}")
    else:
        return None
    if not 0 <= seconds <= bounds.MAX_DELAY_S:  # also refuses nan
        raise ValueError(f"the reset must be within 0..{bounds.MAX_DELAY_S} s, not {seconds}")
    return int(seconds * 1000)


def progress_json(
    fraction: float | None, message: str | None, *, done: int | None, total: int | None
) -> str:
    """The stored form of a progress report: ``{"fraction", "done", "total", "message"}``
    (absent keys left out). Raises ValueError/TypeError for values that are not that."""
    data: dict[str, Any] = {}
    if done is not None or total is not None:
        for name, value in (("done", done), ("total", total)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"progress {name} must be an int >= 0, not {value!r}")
            problem = value_problem(value, f"progress.{name}")
            if problem is not None:
                raise ValueError(problem)
        assert done is not None and total is not None
        data["done"], data["total"] = done, total
        if fraction is None and total > 0:
            fraction = min(1.0, done / total)
    if fraction is not None:
        if isinstance(fraction, bool) or not isinstance(fraction, int | float):
            raise TypeError(f"progress fraction must be a number, not {fraction!r}")
        if not (math.isfinite(fraction) and 0 <= fraction <= 1):
            raise ValueError(f"progress fraction must be within [0, 1], not {fraction!r}")
        data["fraction"] = round(float(fraction), 6)
    if message is not None:
        data["message"] = str(message)[:MAX_MESSAGE_CHARS]
    if not data:
        raise ValueError("progress needs a fraction, done and total, or a message")
    return json.dumps(data, separators=(",", ":"))


def task_context(
    *,
    queue: str,
    task_id: str,
    attempt: int,
    pod: str,
    incarnation: str,
    redis_url: str,
    control: TaskControl | None,
    trace: bytes | None,
    name: str | None,
    group: str | None = None,
    after: str | None = None,
    restored_json: str | None = None,
) -> TaskContext:
    """``TaskContext(...)`` as the worker builds one per task: the same object, its fields
    set in one go rather than by the frozen dataclass's ``object.__setattr__`` per field
    (which cost more than the rest of a task's start together)."""
    context = object.__new__(TaskContext)
    context.__dict__.update(
        queue=queue,
        task_id=task_id,
        attempt=attempt,
        pod=pod,
        incarnation=incarnation,
        redis_url=redis_url,
        control=control,
        trace=trace,
        name=name,
        group=group,
        after=after,
        restored_json=restored_json,
    )
    return context


_clients: dict[tuple[int, str, str], tuple[Any, Any]] = {}
_clients_lock = threading.Lock()


def _run_scripts(redis_url: str, queue: str) -> tuple[Any, Any]:
    """The scripts of one client per process and Redis URL (shared by every run and
    thread: redis-py's pool is thread safe), and the queue's keys."""
    at = (os.getpid(), redis_url, queue)
    found = _clients.get(at)
    if found is None:
        from taskfleet.protocol.connect import connect
        from taskfleet.protocol.keys import QueueKeys
        from taskfleet.protocol.scripts import SyncScripts

        with _clients_lock:
            found = _clients.get(at)
            if found is None:
                client = connect(redis_url)
                found = _clients[at] = (SyncScripts.for_client(client), QueueKeys(queue))
    return found


_current: contextvars.ContextVar[TaskContext] = contextvars.ContextVar("taskfleet_task")


def current_task() -> TaskContext:
    """The task the calling handler is running (sync or async); LookupError outside one."""
    return _current.get()


def cancelled() -> bool:
    """Whether the calling handler's task was cancelled (``current_task().cancelled()``);
    False outside a task, so code shared with non-task callers may poll it too."""
    task = _current.get(None)
    return task is not None and task.cancelled()


def context_for(task: TaskContext) -> contextvars.Context:
    """A fresh context in which ``current_task()`` is ``task``: run the handler inside it."""
    context = contextvars.copy_context()
    context.run(_current.set, task)
    return context


@dataclass(frozen=True, slots=True)
class Verdict:
    """What a handler's exception asks for: dead at once, or a retry after a delay."""

    permanent: bool = False
    retry_after_ms: int | None = None
    throttle: bool = False  # RateLimited: the whole queue pauses claiming
    group_scope: bool = False  # RateLimited(scope="group"): only the task's group pauses
    provider_quota: str | None = None  # RateLimited(quota=...): that quota pauses instead


def verdict_of(exc: BaseException) -> Verdict | None:
    """The verdict a ``PermanentFailure`` or ``RetryAfter`` carries; None for others, and
    for a ``RetryAfter`` without a valid delay. Never raises: the class is read with
    ``type()`` (``isinstance`` would call a hostile ``__class__``) and the delay checked
    here, since a subclass may skip ``__init__`` or set it to nan afterwards."""
    try:
        kind = type(exc)
        if issubclass(kind, PermanentFailure):
            return Verdict(permanent=True)
        if issubclass(kind, RateLimited):
            group = getattr(exc, "scope", "queue") == "group"
            after = getattr(exc, "retry_after", None)
            quota = getattr(exc, "quota", None)
            if isinstance(quota, str) and quota:
                # the provider quota pauses (the worker writes it); the task is deferred
                ms = PROVIDER_PAUSE_MS
                if (
                    not isinstance(after, bool)
                    and isinstance(after, int | float)
                    and math.isfinite(after)
                    and 0 <= after <= bounds.MAX_DELAY_S
                ):
                    ms = int(float(after) * 1000)
                return Verdict(retry_after_ms=ms, provider_quota=quota)
            if isinstance(after, bool) or not isinstance(after, int | float):
                return Verdict(throttle=True, group_scope=group)
            seconds = float(after)
            if not (math.isfinite(seconds) and 0 <= seconds <= bounds.MAX_DELAY_S):
                return Verdict(throttle=True, group_scope=group)
            return Verdict(retry_after_ms=int(seconds * 1000), throttle=True, group_scope=group)
        if not issubclass(kind, RetryAfter):
            return None
        delay = getattr(exc, "delay", None)
        if isinstance(delay, bool) or not isinstance(delay, int | float):
            return None
        seconds = float(delay)
        if not (math.isfinite(seconds) and 0 <= seconds <= bounds.MAX_DELAY_S):
            return None
        return Verdict(retry_after_ms=int(seconds * 1000))
    except BaseException:  # a hostile object: an ordinary failure
        return None


def retry_asked(exc: BaseException) -> bool:
    """Whether ``exc`` is a ``RetryAfter`` (by its real class); never raises."""
    try:
        return issubclass(type(exc), RetryAfter)
    except BaseException:
        return False
