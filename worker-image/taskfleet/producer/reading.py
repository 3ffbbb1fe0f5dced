"""Reading a queue: a task, the stats, the workers (as ``WorkerInfo``), what pods hold,
the config; the check of a task id before a read. Each call is a plan (``runner``) of
``protocol.reads`` calls."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Protocol

from pydantic import BaseModel, ConfigDict, Field

from taskfleet.producer.runner import Plan, QueueBase, Together
from taskfleet.protocol.config import QueueConfig
from taskfleet.protocol.errors import InvalidArgument
from taskfleet.protocol.reads import Workers
from taskfleet.protocol.records import CURRENT_LEVEL, RELEASE_OF_LEVEL
from taskfleet.protocol.tasks import Task

#: Older workers a note names; the rest are counted.
OLDER_NAMED = 3


class WorkerInfo(BaseModel):
    """A worker of the queue as its record in Redis says (``Queue.workers``)."""

    model_config = ConfigDict(frozen=True)

    pod: str
    incarnation: str
    heartbeat_ms: int
    inflight: int = 0
    concurrency: int = 0
    draining: bool = False
    held: int = Field(
        default=0,
        description="slots held by calls it gave up on (their task ended: timed out, lease "
        "lost) that still run: it can run concurrency - held tasks at once",
    )
    alive: bool = Field(description="heartbeat within one lease TTL")
    level: int = Field(
        default=1,
        description="what it serves (records.WORKER_LEVEL for this release; 1: a 0.1.x "
        "worker, which does not serve flows, groups, claim pauses or spend budgets)",
    )


def encodable(value: str) -> bool:
    try:
        value.encode()
    except UnicodeEncodeError:
        return False
    return True


def check_task_id(task_id: object) -> str:
    if not isinstance(task_id, str) or not encodable(task_id):
        raise InvalidArgument("task_id must be a string UTF-8 can encode")
    return task_id


def workers_of(workers: Workers, config: QueueConfig, now_ms: int) -> list[WorkerInfo]:
    """The workers whose records this version reads (``sweep`` drops the others when
    stale), by pod; alive: a heartbeat within one lease TTL."""
    return [
        WorkerInfo(
            pod=pod,
            incarnation=rec.incarnation,
            heartbeat_ms=rec.heartbeat_ms or 0,
            inflight=rec.inflight,
            concurrency=rec.concurrency,
            draining=rec.draining,
            held=rec.held,
            alive=rec.alive(now_ms, config.lease_ttl_s),
            level=rec.level,
        )
        for pod, rec in workers.readable()
    ]


def get(q: QueueBase, task_id: str) -> Plan[Task | None]:
    """The task, or None when there is none (never stored, or pruned by retention)."""
    found: Task | None = yield q.reads.task(check_task_id(task_id))
    return found


def stats(q: QueueBase) -> Plan[dict[str, int]]:
    """Sizes of every state, live workers and the monotonic counters."""
    found: dict[str, int] = yield q.reads.stats()
    return found


def workers(q: QueueBase) -> Plan[list[WorkerInfo]]:
    # The server's clock first, on its own: a cluster pipeline refuses TIME.
    now_ms = yield q.reads.clock()
    found, config = yield Together((q.reads.workers(), q.reads.config()))
    return workers_of(found, config, now_ms)


def held_by(q: QueueBase, pods: Iterable[str]) -> Plan[dict[str, int]]:
    """Tasks each pod holds right now, from the queue's own records (exact; a
    worker's heartbeat reports its count only every interval), in one round trip."""
    found: dict[str, int] = yield q.reads.held_counts(pods)
    return found


def holdings(q: QueueBase, pods: Sequence[str]) -> Plan[dict[str, list[str]]]:
    """The ids of the tasks each pod holds now (exact, from the queue's records)."""
    found: dict[str, list[str]] = yield q.reads.holdings(list(pods))
    return found


def exists(q: QueueBase) -> Plan[bool]:
    """Whether anything of this queue is stored (config, counters or workers)."""
    found: bool = yield q.reads.exists()
    return found


def config(q: QueueBase) -> Plan[QueueConfig]:
    found: QueueConfig = yield q.reads.config()
    return found


class Leveled(Protocol):
    """A worker as any reader shows it: ``WorkerInfo``, the dashboard's and ``top``'s rows."""

    @property
    def pod(self) -> str: ...
    @property
    def alive(self) -> bool: ...
    @property
    def level(self) -> int: ...


def older_workers(found: Iterable[Leveled]) -> list[str]:
    """The live workers (by name) of a level below ``CURRENT_LEVEL``: what they do not
    serve (flows, groups, claim pauses, spend budgets) goes wrong silently."""
    return sorted(w.pod for w in found if w.alive and w.level < CURRENT_LEVEL)


def older_note(found: Iterable[Leveled]) -> str:
    """``older_workers_note`` for the older live workers among ``found`` (their lowest
    level), or "" when there are none."""
    older = [w for w in found if w.alive and w.level < CURRENT_LEVEL]
    if not older:
        return ""
    return older_workers_note(sorted(w.pod for w in older), min(w.level for w in older))


def older_workers_note(names: Sequence[str], level: int = 1) -> str:
    """One line saying that ``names`` (a few named, the rest counted) serve only ``level``
    and what that means: the same words in ``taskfleet workers`` and the operator."""
    shown = ", ".join(names[:OLDER_NAMED])
    if len(names) > OLDER_NAMED:
        shown += f" and {len(names) - OLDER_NAMED} more"
    release = RELEASE_OF_LEVEL.get(level, f"level {level}")
    who, verb, them = ("workers", "run", "them") if len(names) > 1 else ("worker", "runs", "it")
    return (
        f"{who} {shown} {verb} taskfleet {release} (level {level}): flows, groups, claim "
        f"pauses and spend budgets are not served by {them}; upgrade {them} (docs/upgrade.md)"
    )
