"""The fields of every record a queue stores, named once, and the pure reading of stored
values that every reader shares.

A queue's records: a task's hash (``task:<id>``), a worker's JSON record (a value of the
``workers`` hash), a schedule's hash, a rate limit's token bucket, the ``config`` hash
(``QueueConfig``'s fields, ``defaults.CONFIG_DEFAULTS``) and the ``stats`` counters
(``tasks.COUNTERS``). Only ``protocol/`` spells these names; a test holds every other
module to that (tests/codebase/test_layers.py builds its list from here).

No pydantic: a worker reads its lease TTL and other workers' records on its way to its
first claim.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from taskfleet.protocol.defaults import CONFIG_DEFAULTS

__all__ = [
    "ATTEMPT_FIELDS",
    "BUCKET_FIELDS",
    "CONFIG_FIELDS",
    "CURRENT_LEVEL",
    "DEFAULT_LEASE_TTL_S",
    "RELEASE_OF_LEVEL",
    "SCHEDULE_FIELDS",
    "TASK_FIELDS",
    "WORKER_FIELDS",
    "WORKER_LEVEL",
    "WorkerRecord",
    "hash_of",
    "number",
    "text",
    "whole",
]

#: A task's hash: what enqueue writes, then each state change (``trace``: the producer's
#: trace context, when it traces; ``waiters``: the waits watching it, ``watch.lua``;
#: ``history``: its attempts that ended other than done, ``lua/includes/attempt_log.lua``).
TASK_FIELDS: tuple[str, ...] = (
    "id",
    "payload",
    "priority",
    "attempts",
    "max_attempts",
    "lost",
    "created_at",
    "run_at",
    "deadline",
    "cost",
    "timeout",
    "state",
    "pod",
    "incarnation",
    "token",
    "lease_until",
    "started_at",
    "finished_at",
    "error",
    "reason",
    "result",
    "progress",
    "progress_at",
    "cost_used",
    "deferred",
    "cancel_requested",
    "trace",
    "waiters",
    "checkpoint",
    "checkpoint_keep",
    "output",
    "output_bytes",
    "history",
)
#: An attempt's record: an element of the JSON array in a task's ``history`` field.
ATTEMPT_FIELDS: tuple[str, ...] = (
    "attempt",
    "pod",
    "started_at",
    "ended_at",
    "outcome",
    "error",
    "traceback",
)
#: A worker's record: the JSON value under its pod in the ``workers`` hash.
WORKER_FIELDS: tuple[str, ...] = (
    "incarnation",
    "heartbeat_ms",
    "inflight",
    "concurrency",
    "draining",
    "host",
    "level",
    "claim_record",
    "held",
)
#: What a worker of this release serves beyond the layout, written as its record's
#: ``level`` (``worker_record.lua`` writes the same number). A record without it is a
#: worker of 0.1.x: level 1, plain and named tasks only. Level 2 (0.2) also serves flows,
#: groups, claim pauses and spend budgets, which a level-1 worker would mishandle without
#: an error. Level 3 (0.3) takes the claim record agreed at register: a level-2 worker
#: registers level 2 and is still sent the form it reads, so level 3 adds nothing a
#: producer must refuse to it (docs/compatibility.md).
WORKER_LEVEL = 3
#: The lowest level a reader takes as current: a worker at it serves every feature this
#: release's producers can start using. A live worker below it is older: those features
#: are refused while it serves the queue (``older_worker.lua``), and readers flag it.
CURRENT_LEVEL = 2
#: The release each level below ``WORKER_LEVEL`` is: what a reader names it.
RELEASE_OF_LEVEL: dict[int, str] = {1: "0.1.x", 2: "0.2.x"}
#: A schedule's hash (``schedules.Schedule`` reads it).
SCHEDULE_FIELDS: tuple[str, ...] = (
    "name",
    "cron",
    "tz",
    "payload",
    "priority",
    "max_attempts",
    "cost",
    "timeout",
    "deadline_ms",
    "catchup",
    "catchup_limit",
    "jitter_ms",
    "paused",
    "owner",
    "rev",
    "next_slot",
    "last_slot",
    "fired",
    "skipped",
    "error",
    "created_ms",
    "updated_ms",
)
#: A rate limit's token bucket (``bucket:tasks``, ``bucket:cost``).
BUCKET_FIELDS: tuple[str, ...] = ("tokens", "ts")
#: The ``config`` hash: ``QueueConfig``'s fields.
CONFIG_FIELDS: tuple[str, ...] = tuple(CONFIG_DEFAULTS)
#: The lease TTL the scripts use when the config hash sets none they can read.
DEFAULT_LEASE_TTL_S: float = CONFIG_DEFAULTS["lease_ttl_s"]
#: How long the workers of a pod gone from the Kubernetes API may not register again
#: (``tombstones``). A force-deleted pod's container runs until its kubelet kills it:
#: seconds, or as long as a node stays cut off from the API; a day outlasts any such
#: zombie we can expect, and pod names of a Deployment are never reused within one.
POD_TOMBSTONE_S = 24 * 3600


def text(value: Any) -> str:
    """A stored value as text (bytes that are not UTF-8 with replacement characters)."""
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def hash_of(raw: Any) -> dict[str, str]:
    """A hash reply as field -> text: redis-py's dict, or RESP's flat list of pairs."""
    if raw is None:
        return {}
    if isinstance(raw, Mapping):
        return {text(k): text(v) for k, v in raw.items()}
    flat = list(raw)
    return {text(flat[i]): text(flat[i + 1]) for i in range(0, len(flat) - 1, 2)}


def number(raw: Any) -> float | None:
    """A stored number as the scripts read it: None when absent, not a number, or not
    finite (``tonumber`` in Lua, which then takes the default)."""
    if raw is None:
        return None
    try:
        value = float(text(raw))
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def whole(raw: Any) -> int | None:
    """A stored integer (exact when written as digits), None when it is not a number."""
    if raw is None:
        return None
    try:
        return int(text(raw))
    except ValueError:
        value = number(raw)
        return None if value is None else int(value)


def _count(value: Any) -> int | None:
    if isinstance(value, bool):
        return int(value)
    try:
        return int(value)
    except (TypeError, ValueError, OverflowError):
        return None


@dataclass(frozen=True, slots=True)
class WorkerRecord:
    """A worker's record as the scripts write it (lua/includes/worker_record.lua).

    ``heartbeat_ms`` is None when the record has none a reader can use; ``readable`` says
    whether every count is what a script writes (readers that count workers skip the
    others: ``sweep`` drops them once stale)."""

    incarnation: str
    heartbeat_ms: int | None
    inflight: int = 0
    concurrency: int = 0
    draining: bool = False
    host: str = ""
    level: int = 1
    readable: bool = True
    #: slots kept by calls the worker gave up on (their task ended) that still run
    held: int = 0

    @classmethod
    def parse(cls, raw: Any) -> WorkerRecord | None:
        """The record in ``raw`` (JSON text), or None when it is no JSON object."""
        try:
            data = json.loads(raw)
        except (TypeError, ValueError):
            return None
        if not isinstance(data, dict):
            return None
        beat = data.get("heartbeat_ms")
        heartbeat = None if beat is None else _count(beat)
        inflight = _count(data.get("inflight", 0))
        concurrency = _count(data.get("concurrency", 0))
        return cls(
            incarnation=str(data.get("incarnation", "")),
            heartbeat_ms=heartbeat,
            inflight=inflight or 0,
            concurrency=concurrency or 0,
            draining=bool(data.get("draining", False)),
            host=str(data.get("host") or ""),
            level=_count(data.get("level", 1)) or 1,
            held=max(0, _count(data.get("held", 0)) or 0),
            readable=None not in (heartbeat, inflight, concurrency),
        )

    def alive(self, now_ms: int, lease_ttl_s: float) -> bool:
        """Whether its last heartbeat is within one lease TTL of ``now_ms``."""
        return self.heartbeat_ms is not None and now_ms - self.heartbeat_ms <= lease_ttl_s * 1000

    def age_ms(self, now_ms: int) -> int:
        """How long ago it beat last (0 when not known)."""
        return 0 if self.heartbeat_ms is None else max(0, now_ms - self.heartbeat_ms)
