"""Every read of a queue's state, as ``Call`` values (``calls``): what to send, and the
replies read into typed values. No I/O here; callers run them (``calls.run``, or several
in one pipeline with ``calls.run_all``), so they choose the round trips and nothing else.

Reads are plain commands, never a script: they change nothing. A read that needs the
server's clock takes it from ``clock`` first, in its own round trip (a cluster pipeline
refuses TIME, a command of no key).

The reads that return models (``Task``, ``QueueConfig``: pydantic) load them when they
are built, not when this module is imported: a worker reads its lease TTL and trace
contexts from here on its way to its first claim, and loads no model.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from taskfleet.protocol.calls import Call, Command, call, one
from taskfleet.protocol.keys import QueueKeys
from taskfleet.protocol.records import WorkerRecord, hash_of, number, text, whole
from taskfleet.protocol.rows import (
    FLOW_FIELDS,
    LIVE_FIELDS,
    ROW_FIELDS,
    FlowRow,
    LiveRow,
    TaskRow,
    flow_row,
    live_row,
    task_row,
)
from taskfleet.protocol.schedules import Schedule
from taskfleet.protocol.states import FINISHED, TaskState
from taskfleet.protocol.tracing import TRACE_FIELD

if TYPE_CHECKING:
    from taskfleet.protocol.config import QueueConfig
    from taskfleet.protocol.tasks import Task

__all__ = ["STATES", "Activity", "FlowRow", "LiveRow", "QueueReads", "TaskRow", "Workers"]

#: Every state, in the order pages and views show them.
STATES: tuple[str, ...] = tuple(s.value for s in TaskState)


@dataclass(frozen=True, slots=True)
class Workers:
    """The ``workers`` hash: each pod's record (None: not a record this version reads)."""

    records: dict[str, WorkerRecord | None]

    def readable(self) -> list[tuple[str, WorkerRecord]]:
        """The records a reader can count, by pod name."""
        found = [(p, r) for p, r in self.records.items() if r is not None and r.readable]
        return sorted(found, key=lambda item: item[0])


@dataclass(frozen=True, slots=True)
class Activity:
    """What tells whether a queue has work: tasks pending, delayed or running, active
    schedules, and whether its settings are stored (gone: a Redis restarted empty)."""

    pending: int
    delayed: int
    running: int
    scheduled: int
    configured: bool

    @property
    def busy(self) -> bool:
        return bool(self.pending or self.delayed or self.running or self.scheduled)


#: Minutes of per-minute counts a chart reads (lua/includes/rate_note.lua keeps each
#: minute's hash 65 minutes).
RATE_MINUTES = 60


def _ms(reply: Any) -> int:
    seconds, micros = reply
    return int(seconds) * 1000 + int(micros) // 1000


def _ids(reply: Any) -> list[str]:
    return [text(member) for member in reply or ()]


def _members(reply: Any) -> list[str]:
    return sorted(text(member) for member in reply or ())


def _scanned(reply: Any) -> list[str]:
    _, members = reply  # one SSCAN step: (cursor, members)
    return sorted(text(member) for member in members or ())


class QueueReads:
    """The reads of one queue (its keys); each method returns a ``Call``."""

    def __init__(self, keys: QueueKeys) -> None:
        self._k = keys

    @property
    def queue(self) -> str:
        return self._k.queue

    # -- the server ----------------------------------------------------------------------

    def clock(self) -> Call[int]:
        """The clock of the queue's server, in ms (every score and deadline uses it); on
        a cluster, of the node that holds the queue's slot."""
        return one(("TIME",), _ms, route=self._k.stats)

    def exists(self) -> Call[bool]:
        """Whether anything of the queue is stored: its config, counters, sequence or
        workers (a queue that ever had a task has counters)."""
        k = self._k
        return one(("EXISTS", k.config, k.stats, k.seq, k.workers), lambda n: int(n) > 0)

    # -- tasks ---------------------------------------------------------------------------

    def task(self, task_id: str) -> Call[Task | None]:
        """The task, or None: never stored, or pruned by retention."""
        return one(("HGETALL", self._k.task(task_id)), lambda raw: _tasks([task_id], [raw])[0])

    def tasks(self, task_ids: Sequence[str]) -> Call[list[Task | None]]:
        """Each task (None where there is none), in the order asked."""
        ids = list(task_ids)
        commands = [("HGETALL", self._k.task(i)) for i in ids]
        return call(commands, lambda replies: _tasks(ids, replies))

    def rows(self, task_ids: Sequence[str]) -> Call[list[TaskRow]]:
        """Each task's row (``TaskRow``: a few fields, not the payload or result)."""
        ids = list(task_ids)
        commands = [("HMGET", self._k.task(i), *ROW_FIELDS) for i in ids]
        return call(
            commands, lambda replies: [task_row(i, v) for i, v in zip(ids, replies, strict=True)]
        )

    def live_rows(self, task_ids: Sequence[str]) -> Call[list[LiveRow]]:
        """Each task's ``LiveRow``: one HMGET and one HSTRLEN each (never the payload)."""
        ids = list(task_ids)
        commands: list[Command] = []
        for i in ids:
            commands += [
                ("HMGET", self._k.task(i), *LIVE_FIELDS),
                ("HSTRLEN", self._k.task(i), "payload"),
            ]

        def decode(replies: Sequence[Any]) -> list[LiveRow]:
            return [live_row(i, replies[2 * n], replies[2 * n + 1]) for n, i in enumerate(ids)]

        return call(commands, decode)

    def rate_history(
        self, last_minute: int, minutes: int = RATE_MINUTES
    ) -> Call[list[tuple[int, int, int]]]:
        """(minute, completed, failed) of the ``minutes`` minutes up to ``last_minute``
        (epoch ms // 60000): the queue's per-minute counts, one HMGET a minute (0 for a
        minute with none, or written by a worker older than them)."""
        first = last_minute - minutes + 1
        commands: list[Command] = [
            ("HMGET", self._k.rate(m), "completed", "failed") for m in range(first, last_minute + 1)
        ]

        def decode(replies: Sequence[Any]) -> list[tuple[int, int, int]]:
            return [(first + i, int(c or 0), int(f or 0)) for i, (c, f) in enumerate(replies)]

        return call(commands, decode)

    def quota_waits(self, task_ids: Sequence[str]) -> Call[list[str]]:
        """The provider quota each delayed task last waited for ('' for none), one HGET
        each (``quota_wait``, set by the claim that left it delayed)."""
        commands = [("HGET", self._k.task(i), "quota_wait") for i in task_ids]
        return call(commands, lambda r: ["" if v is None else text(v) for v in r])

    def payload_sizes(self, task_ids: Sequence[str]) -> Call[list[int]]:
        """Each task's payload size in bytes (0: no such task), one HSTRLEN each."""
        commands = [("HSTRLEN", self._k.task(i), "payload") for i in task_ids]
        return call(commands, lambda r: [int(v or 0) for v in r])

    def payload_names(self, task_ids: Sequence[str]) -> Call[list[str | None]]:
        """Each task's name (None: the default handler, or no such task), read from its
        payload whole: ask only for small payloads."""
        from taskfleet.protocol.tasknames import split_named

        commands = [("HGET", self._k.task(i), "payload") for i in task_ids]
        return call(commands, lambda r: [None if v is None else split_named(text(v))[0] for v in r])

    def flow_rows(self, task_ids: Sequence[str]) -> Call[list[FlowRow]]:
        """The few fields of ``task_ids`` a flow's tree shows, one HMGET each."""
        ids = list(task_ids)
        commands: list[Command] = [("HMGET", self._k.task(t), *FLOW_FIELDS) for t in ids]
        return call(
            commands, lambda replies: [flow_row(t, r) for t, r in zip(ids, replies, strict=True)]
        )

    def dependants(self, task_id: str, most: int) -> Call[list[str]]:
        """Up to ``most`` of the tasks still waiting on ``task_id`` (its ``dependants``
        set, emptied as it is resolved), sorted: SRANDMEMBER, O(most) whatever its size."""
        return one(("SRANDMEMBER", self._k.dependants(task_id), most), _members)

    def ready_at(self, task_ids: Sequence[str]) -> Call[list[int | None]]:
        """When each task became ready to run (its ``run_at``, ms; None: unknown)."""
        return call([("HGET", self._k.task(i), "run_at") for i in task_ids], _wholes)

    def run_seconds(self, task_ids: Sequence[str]) -> Call[list[float | None]]:
        """How long each finished task ran (s); None when it has not finished or a
        foreign client garbled its times (or the clock stepped back)."""
        commands = [("HMGET", self._k.task(i), "started_at", "finished_at") for i in task_ids]
        return call(commands, lambda replies: [_span(*r) for r in replies])

    def progress_marks(self, task_id: str) -> Call[tuple[str, ...] | None]:
        """What changes when a task moves on (its state, when and what it last reported):
        compare two reads to know whether to read it whole again. None: no such task."""
        fields = ("state", "progress_at", "progress")
        return one(("HMGET", self._k.task(task_id), *fields), _marks)

    def groups_and_traces(self, task_ids: Sequence[str]) -> Call[list[tuple[str, bytes | None]]]:
        """Each task's group ('' for none) and trace context (None for none): a worker asks
        only for tasks an older producer handed it, whose record carries neither."""
        commands = [("HMGET", self._k.task(i), "group", TRACE_FIELD) for i in task_ids]

        def decode(replies: Sequence[Any]) -> list[tuple[str, bytes | None]]:
            return [
                ("" if g is None else text(g), t.encode() if isinstance(t, str) else t)
                for g, t in replies
            ]

        return call(commands, decode)

    def groups(self, task_ids: Sequence[str]) -> Call[list[str]]:
        """Each task's group ('' for none, or where the task is gone): a worker asks only
        for a task whose group-scoped pause was written after it ended."""
        commands = [("HGET", self._k.task(i), "group") for i in task_ids]
        return call(commands, lambda replies: ["" if r is None else text(r) for r in replies])

    # -- the states' sorted sets -----------------------------------------------------------

    def _set(self, state: TaskState) -> tuple[str, bool]:
        """A state's sorted set and whether its order is newest first (finished states:
        scored by finished_at) rather than the order the queue serves it (pending: next to
        run first; delayed: due first; running: lease ending first)."""
        if state in FINISHED:
            return self._k.finished(state.value), True
        return getattr(self._k, state.value), False

    def _size(self, state: TaskState | str) -> list[Command]:
        """The commands whose replies add up to a state's size: tasks of groups wait in
        their group's own zset, counted in ``groups:pending``, not in ``pending``."""
        parsed = TaskState(state)
        commands: list[Command] = [("ZCARD", self._set(parsed)[0])]
        if parsed is TaskState.PENDING:
            commands.append(("GET", self._k.groups_pending))
        return commands

    def size(self, state: TaskState | str) -> Call[int]:
        return call(self._size(state), _total)

    def sizes(self, states: Sequence[str] = STATES) -> Call[dict[str, int]]:
        """Tasks in each of ``states`` now."""
        names = list(states)
        parts = [self._size(s) for s in names]
        commands = [c for part in parts for c in part]

        def decode(replies: Sequence[Any]) -> dict[str, int]:
            out: dict[str, int] = {}
            at = 0
            for name, part in zip(names, parts, strict=True):
                out[name] = _total(replies[at : at + len(part)])
                at += len(part)
            return out

        return call(commands, decode)

    def ids(self, state: TaskState | str, offset: int, count: int) -> Call[list[str]]:
        """Ids ``offset .. offset+count-1`` of ``state`` in its order (``_set``): by rank,
        O(log N + count) whatever the offset (a skiplist counts its spans)."""
        zkey, newest_first = self._set(TaskState(state))
        command = "ZREVRANGE" if newest_first else "ZRANGE"
        return one((command, zkey, offset, offset + count - 1), _ids)

    def group_ids(self, group: str, offset: int, count: int) -> Call[list[str]]:
        """Ids ``offset .. offset+count-1`` of a group's pending tasks, its next first."""
        return one(("ZRANGE", self._k.group_pending(group), offset, offset + count - 1), _ids)

    def finished_between(
        self, state: TaskState | str, newest: int | str, oldest: int | str, offset: int, count: int
    ) -> Call[list[str]]:
        """Ids of finished ``state`` whose finished_at (ms) is within [``oldest``,
        ``newest``] ('-inf' / '+inf': unbounded), newest first, from ``offset``."""
        zkey, _ = self._set(TaskState(state))
        return one(("ZREVRANGEBYSCORE", zkey, newest, oldest, "LIMIT", offset, count), _ids)

    def due_by(self, at_ms: int) -> Call[int]:
        """Delayed tasks due by ``at_ms``."""
        return one(("ZCOUNT", self._k.delayed, "-inf", at_ms), int)

    # -- counters and settings -------------------------------------------------------------

    def counters(self) -> Call[dict[str, int]]:
        """The ``stats`` counters as stored (one a foreign client garbled reads as 0)."""
        return one(("HGETALL", self._k.stats), _counters)

    def counters_of(self, names: Sequence[str]) -> Call[dict[str, int]]:
        """Only the counters ``names`` (of ``tasks.COUNTERS``), 0 when never bumped."""
        wanted = list(names)
        return one(
            ("HMGET", self._k.stats, *wanted),
            lambda reply: {n: whole(v) or 0 for n, v in zip(wanted, reply, strict=True)},
        )

    def stats(self) -> Call[dict[str, int]]:
        """Sizes of every state, registered workers and every counter (``Queue.stats``)."""
        from taskfleet.protocol.tasks import COUNTERS

        k = self._k
        commands: list[Command] = [("ZCARD", self._set(TaskState(s))[0]) for s in STATES]
        commands += [("HLEN", k.workers), ("HGETALL", k.stats), ("GET", k.groups_pending)]

        def decode(replies: Sequence[Any]) -> dict[str, int]:
            *sizes, workers, stored, grouped = replies
            out = dict(zip(STATES, map(int, sizes), strict=True))
            out[TaskState.PENDING.value] += _total([grouped])
            out["workers"] = int(workers)
            counters = _counters(stored)
            out.update({name: counters.get(name, 0) for name in COUNTERS})
            return out

        return call(commands, decode)

    def config(self) -> Call[QueueConfig]:
        """The queue's shared settings (a hash a foreign writer garbled: the defaults)."""
        from taskfleet.protocol.config import QueueConfig

        def decode(raw: Any) -> QueueConfig:
            try:
                return QueueConfig.from_redis(hash_of(raw))
            except ValueError:
                return QueueConfig()

        return one(("HGETALL", self._k.config), decode)

    def lease_ttl(self) -> Call[float | None]:
        """The queue's lease TTL (s) as the scripts read it; None: unset or unreadable
        (the scripts then use the default, ``defaults.CONFIG_DEFAULTS``)."""
        return one(("HGET", self._k.config, "lease_ttl_s"), number)

    # -- workers -----------------------------------------------------------------------

    def workers(self) -> Call[Workers]:
        """Every worker's record, by pod."""
        return one(("HGETALL", self._k.workers), _workers)

    def holdings(self, pods: Sequence[str]) -> Call[dict[str, list[str]]]:
        """The ids of the tasks each pod holds now, from the queue's records, sorted."""
        names = list(pods)
        commands = [("SMEMBERS", self._k.pod(p)) for p in names]
        return call(commands, lambda r: dict(zip(names, map(_members, r), strict=True)))

    def held_counts(self, pods: Iterable[str]) -> Call[dict[str, int]]:
        """How many tasks each pod holds now (exact; a heartbeat's count can be an
        interval old)."""
        names = list(pods)
        commands = [("SCARD", self._k.pod(p)) for p in names]
        return call(commands, lambda r: dict(zip(names, map(int, r), strict=True)))

    def held_sample(self, pods: Sequence[str], count: int) -> Call[dict[str, list[str]]]:
        """Up to about ``count`` ids each pod holds: one SSCAN step returns a small set
        whole (stored compact); of a large one, part (bounded by ``count``)."""
        names = list(pods)
        commands = [("SSCAN", self._k.pod(p), 0, "COUNT", count) for p in names]
        return call(commands, lambda r: dict(zip(names, map(_scanned, r), strict=True)))

    # -- schedules -----------------------------------------------------------------------

    def schedule(self, name: str) -> Call[Schedule | None]:
        return one(("HGETALL", self._k.schedule(name)), _schedule)

    def schedule_names(self) -> Call[list[str]]:
        """Every schedule's name, sorted."""
        return one(("SMEMBERS", self._k.schedules), _members)

    def schedules(self, names: Sequence[str]) -> Call[list[Schedule]]:
        """The schedules ``names`` (those deleted meanwhile left out)."""
        commands = [("HGETALL", self._k.schedule(n)) for n in names]
        return call(commands, lambda r: [s for s in map(_schedule, r) if s is not None])

    def owned_schedule_names(self) -> Call[set[str]]:
        """The names a TaskQueue's spec owns."""
        return one(("SMEMBERS", self._k.schedules_owned), lambda r: set(_members(r)))

    def active_schedules(self) -> Call[int]:
        """Schedules not paused (each due some time)."""
        return one(("ZCARD", self._k.schedule_due), int)

    # -- all at once -----------------------------------------------------------------------

    def activity(self) -> Call[Activity]:
        """Whether the queue has work (the operator's idle queues' check)."""
        k = self._k
        commands: list[Command] = [("ZCARD", z) for z in (k.pending, k.delayed, k.running)]
        commands += [("ZCARD", k.schedule_due), ("EXISTS", k.config), ("GET", k.groups_pending)]

        def decode(replies: Sequence[Any]) -> Activity:
            pending, delayed, running, scheduled, configured, grouped = replies
            return Activity(
                _total([pending, grouped]),
                int(delayed),
                int(running),
                int(scheduled),
                bool(configured),
            )

        return call(commands, decode)


def _total(replies: Sequence[Any]) -> int:
    """The sum of sizes and counters (an absent counter, or one gone below 0: 0)."""
    total = 0
    for reply in replies:
        try:
            total += max(0, int(reply or 0))
        except ValueError:
            continue
    return total


def _tasks(ids: Sequence[str], replies: Sequence[Any]) -> list[Task | None]:
    from taskfleet.protocol.tasks import Task

    out: list[Task | None] = []
    for task_id, raw in zip(ids, replies, strict=True):
        h = hash_of(raw)
        out.append(Task.from_hash(h, task_id) if h else None)
    return out


def _wholes(replies: Sequence[Any]) -> list[int | None]:
    return [whole(r) for r in replies]


def _span(started: Any, finished: Any) -> float | None:
    begin, end = whole(started), whole(finished)
    if begin is None or end is None or end < begin:
        return None
    return (end - begin) / 1000


def _marks(reply: Any) -> tuple[str, ...] | None:
    values = list(reply)
    if values[0] is None:
        return None
    return tuple("" if v is None else text(v) for v in values)


def _counters(raw: Any) -> dict[str, int]:
    return {name: whole(value) or 0 for name, value in hash_of(raw).items()}


def _workers(raw: Any) -> Workers:
    records = raw.items() if hasattr(raw, "items") else hash_of(raw).items()
    return Workers({text(pod): WorkerRecord.parse(record) for pod, record in records})


def _schedule(raw: Any) -> Schedule | None:
    h = hash_of(raw)
    return Schedule.from_hash(h) if h else None
