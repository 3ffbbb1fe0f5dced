"""The producer API: ``Queue.enqueue / get / stats / wait`` and the operator's calls.

Sync, on redis-py: producers, the CLI and the operator (which runs it in threads) use
it. Every state change is one Lua script (see ``scripts.py``); reads are plain
commands, pipelined.
"""

from __future__ import annotations

import enum
import json
import math
import secrets
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import redis
from pydantic import BaseModel, ConfigDict, Field

from taskfleet.config import QueueConfig
from taskfleet.errors import InvalidArgument, InvalidPayload, WaitTimeout
from taskfleet.keys import QueueKeys
from taskfleet.scripts import EnqueueArgs, Ops, SweepResult, SyncScripts, text

#: Scores of the pending zset stay exact doubles within this priority range.
PRIORITY_MIN, PRIORITY_MAX = -1000, 1000
#: Counters of the ``stats`` hash; stats() reports each, 0 when never bumped.
COUNTERS = (
    "enqueued",
    "completed",
    "failed",
    "retried",
    "dead_total",  # tasks that ever went dead ("dead" is how many are dead now)
    "requeued",
    "lost",
    "released",
    "stale",
    "expired",
)
_MAX_ID_LEN = 200
_TIME_FIELDS = ("created_at", "run_at", "deadline", "started_at", "finished_at", "lease_until")


class TaskState(enum.StrEnum):
    PENDING = "pending"
    DELAYED = "delayed"
    RUNNING = "running"
    DONE = "done"
    DEAD = "dead"


FINISHED = frozenset({TaskState.DONE, TaskState.DEAD})


class Task(BaseModel):
    """A task as stored in its hash, with proper types (times are UTC datetimes)."""

    model_config = ConfigDict(frozen=True)

    id: str
    state: TaskState
    payload: Any = None
    priority: int = 0
    attempts: int = 0
    max_attempts: int | None = None
    lost: int = 0
    cost: int = 1
    timeout: float | None = Field(default=None, description="seconds; None = the queue's default")
    created_at: datetime | None = None
    run_at: datetime | None = None
    deadline: datetime | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    lease_until: datetime | None = None
    pod: str | None = None
    incarnation: str | None = None
    token: str | None = None
    error: str | None = None
    reason: str | None = Field(
        default=None, description="why it is dead: expired | worker lost | bad payload | failed"
    )
    result: Any = None
    progress: Any = None

    @classmethod
    def from_hash(cls, raw: Mapping[Any, Any]) -> Task:
        h = {text(k): text(v) for k, v in raw.items()}
        data: dict[str, Any] = {}
        for name in ("id", "state", "pod", "incarnation", "token", "error", "reason"):
            if name in h:
                data[name] = h[name]
        for name in ("priority", "attempts", "max_attempts", "lost", "cost"):
            if h.get(name):
                data[name] = int(float(h[name]))
        if h.get("timeout"):
            data["timeout"] = float(h["timeout"])
        for name in (
            "created_at",
            "run_at",
            "deadline",
            "started_at",
            "finished_at",
            "lease_until",
        ):
            if h.get(name):
                data[name] = datetime.fromtimestamp(int(float(h[name])) / 1000, tz=UTC)
        for name in ("payload", "result", "progress"):
            if name in h:
                try:
                    data[name] = json.loads(h[name])
                except ValueError:
                    data[name] = h[name]  # written by a foreign producer: keep it as text
        return cls.model_validate(data)

    @property
    def finished(self) -> bool:
        return self.state in FINISHED


class EnqueueSpec(BaseModel):
    """One task for ``enqueue_many`` (the keyword arguments of ``enqueue``)."""

    model_config = ConfigDict(frozen=True)

    payload: dict[str, Any]
    priority: int = 0
    delay: float | timedelta | None = None
    deadline: float | timedelta | datetime | None = None
    max_attempts: int | None = None
    task_id: str | None = None
    cost: int = 1
    timeout: float | timedelta | None = None


class WorkerInfo(BaseModel):
    model_config = ConfigDict(frozen=True)

    pod: str
    incarnation: str
    heartbeat_ms: int
    inflight: int = 0
    concurrency: int = 0
    draining: bool = False
    alive: bool = Field(description="heartbeat within one lease TTL")


def _token_base() -> str:
    """Claim tokens for tasks an enqueue hands straight to idle workers (unique per call)."""
    return secrets.token_hex(8)


def encode_payload(payload: object) -> str:
    """JSON text of a payload; one clear error for anything else."""
    if not isinstance(payload, dict):
        raise InvalidPayload(f"payload must be a JSON object (dict), not {type(payload).__name__}")
    try:
        # compact, UTF-8 as is (ensure_ascii would inflate non-ASCII text up to 6x)
        text = json.dumps(payload, allow_nan=False, ensure_ascii=False, separators=(",", ":"))
        text.encode()  # a lone surrogate cannot be sent as UTF-8: refuse it here, clearly
    except (TypeError, ValueError) as exc:  # UnicodeEncodeError is a ValueError
        raise InvalidPayload(f"payload is not JSON-serialisable: {exc}") from None
    return text


def _seconds(value: float | timedelta | None, what: str) -> float | None:
    if value is None:
        return None
    seconds = value.total_seconds() if isinstance(value, timedelta) else value
    if (
        isinstance(seconds, bool)
        or not isinstance(seconds, int | float)
        or not math.isfinite(seconds)
    ):
        raise InvalidArgument(f"{what} must be seconds (a finite number) or a timedelta")
    return float(seconds)


def _int(value: object, what: str, low: int, high: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgument(f"{what} must be an integer, not {type(value).__name__}")
    if value < low or (high is not None and value > high):
        bound = f"between {low} and {high}" if high is not None else f">= {low}"
        raise InvalidArgument(f"{what} must be {bound}, not {value}")
    return value


def enqueue_args(spec: EnqueueSpec | Mapping[str, Any]) -> EnqueueArgs:
    """Validate one task and encode it for the enqueue script."""
    if isinstance(spec, EnqueueSpec):
        fields: Mapping[str, Any] = spec.__dict__
    else:
        fields = spec
        unknown = set(fields) - set(EnqueueSpec.model_fields)
        if unknown:
            raise InvalidArgument(f"unknown enqueue field(s): {', '.join(sorted(unknown))}")
        if "payload" not in fields:
            raise InvalidArgument("enqueue item needs a 'payload'")
    payload = encode_payload(fields["payload"])
    priority = _int(fields.get("priority", 0), "priority", PRIORITY_MIN, PRIORITY_MAX)
    cost = _int(fields.get("cost", 1), "cost", 0)
    max_attempts = fields.get("max_attempts")
    if max_attempts is not None:
        _int(max_attempts, "max_attempts", 1)
    delay = _seconds(fields.get("delay"), "delay") or 0.0
    if delay < 0:
        raise InvalidArgument(f"delay must be >= 0, not {delay:g}")
    timeout = _seconds(fields.get("timeout"), "timeout")
    if timeout is not None and timeout <= 0:
        raise InvalidArgument(f"timeout must be > 0, not {timeout:g}")
    deadline_raw = fields.get("deadline")
    deadline = ""
    if isinstance(deadline_raw, datetime):
        if deadline_raw.tzinfo is None:
            raise InvalidArgument("deadline datetime must be timezone-aware")
        deadline = f"@{int(deadline_raw.timestamp() * 1000)}"
    elif deadline_raw is not None:
        seconds = _seconds(deadline_raw, "deadline")
        if seconds is None or seconds <= 0:
            raise InvalidArgument("deadline must be > 0 seconds from now")
        deadline = str(math.ceil(seconds * 1000))
    task_id = fields.get("task_id")
    if task_id is None:
        task_id = uuid.uuid4().hex
    elif (
        not isinstance(task_id, str)
        or not task_id
        or len(task_id) > _MAX_ID_LEN
        or not task_id.isprintable()
    ):
        # printable: ids travel NUL-separated in claim replies and show up in logs
        raise InvalidArgument(
            f"task_id must be a non-empty printable string of <= {_MAX_ID_LEN} chars"
        )
    return EnqueueArgs(
        task_id=task_id,
        payload=payload,
        priority=priority,
        delay_ms=math.ceil(delay * 1000),
        deadline=deadline,
        max_attempts="" if max_attempts is None else str(max_attempts),
        cost=cost,
        timeout_s="" if timeout is None else repr(timeout),
    )


class Queue:
    """One named queue in Redis (sync API for producers, the CLI and the operator)."""

    def __init__(
        self,
        name: str,
        redis_url: str = "redis://localhost:6379/0",
        *,
        client: redis.Redis | None = None,
    ) -> None:
        self.keys = QueueKeys(name)
        self.name = name
        self.client: redis.Redis = client if client is not None else redis.Redis.from_url(redis_url)
        self._owns_client = client is None
        self.ops = Ops(self.keys)
        self._scripts = SyncScripts.for_client(self.client)

    def __repr__(self) -> str:
        return f"Queue({self.name!r})"  # never the URL: it may hold a password

    def close(self) -> None:
        if self._owns_client:
            self.client.close()

    def __enter__(self) -> Queue:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- producing ---------------------------------------------------------------------

    def enqueue(
        self,
        payload: dict[str, Any],
        *,
        priority: int = 0,
        delay: float | timedelta | None = None,
        deadline: float | timedelta | datetime | None = None,
        max_attempts: int | None = None,
        task_id: str | None = None,
        cost: int = 1,
        timeout: float | timedelta | None = None,
    ) -> str:
        """Add a task; returns its id. With ``task_id``, enqueueing it again is a no-op.

        ``delay``: seconds (or timedelta) before it may run. ``deadline``: seconds from
        now (or an aware datetime) by which it must have started, else it goes dead
        with reason ``expired``. ``cost``: units it takes from the cost rate limit.
        """
        args = enqueue_args(
            {
                "payload": payload,
                "priority": priority,
                "delay": delay,
                "deadline": deadline,
                "max_attempts": max_attempts,
                "task_id": task_id,
                "cost": cost,
                "timeout": timeout,
            }
        )
        self._scripts.run(self.ops.enqueue([args], _token_base()))
        return args.task_id

    def enqueue_many(self, items: Iterable[EnqueueSpec | Mapping[str, Any]]) -> list[str]:
        """Add many tasks atomically in one round trip; returns their ids in order.

        Each item is an ``EnqueueSpec`` or a dict of ``enqueue``'s arguments. If any
        item is invalid (or too large), nothing is stored.
        """
        batch = [enqueue_args(item) for item in items]
        if not batch:
            return []
        self._scripts.run(self.ops.enqueue(batch, _token_base()))
        return [a.task_id for a in batch]

    # -- reading -----------------------------------------------------------------------

    def get(self, task_id: str) -> Task | None:
        raw = self.client.hgetall(self.keys.task(task_id))
        return Task.from_hash(raw) if raw else None

    def stats(self) -> dict[str, int]:
        """Sizes of every state, live workers and the monotonic counters."""
        k = self.keys
        pipe = self.client.pipeline(transaction=False)
        for zset in (k.pending, k.delayed, k.running, k.done, k.dead):
            pipe.zcard(zset)
        pipe.hlen(k.workers)
        pipe.hgetall(k.stats)
        pending, delayed, running, done, dead, workers, counters = pipe.execute()
        out = {
            "pending": int(pending),
            "delayed": int(delayed),
            "running": int(running),
            "done": int(done),
            "dead": int(dead),
            "workers": int(workers),
        }
        raw = {text(key): int(value) for key, value in counters.items()}
        for name in COUNTERS:
            out[name] = raw.get(name, 0)
        return out

    def workers(self) -> list[WorkerInfo]:
        pipe = self.client.pipeline(transaction=False)
        pipe.time()
        pipe.hgetall(self.keys.workers)
        pipe.hgetall(self.keys.config)
        (sec, usec), raw, config_raw = pipe.execute()
        now_ms = int(sec) * 1000 + int(usec) // 1000
        ttl_ms = QueueConfig.from_redis(config_raw).lease_ttl_s * 1000
        out = []
        for pod, record in raw.items():
            try:
                rec = json.loads(record)
                heartbeat = int(rec["heartbeat_ms"])
                out.append(
                    WorkerInfo(
                        pod=text(pod),
                        incarnation=str(rec.get("incarnation", "")),
                        heartbeat_ms=heartbeat,
                        inflight=int(rec.get("inflight", 0)),
                        concurrency=int(rec.get("concurrency", 0)),
                        draining=bool(rec.get("draining", False)),
                        alive=now_ms - heartbeat <= ttl_ms,
                    )
                )
            except (ValueError, KeyError, TypeError):
                continue  # a record this version cannot read; sweep drops it when stale
        return sorted(out, key=lambda w: w.pod)

    def wait(self, task_ids: Sequence[str], timeout: float) -> dict[str, Task]:
        """Block until every task is done or dead; returns them by id.

        Raises ``WaitTimeout`` (a ``TimeoutError``) listing the unfinished ids. A task id
        that does not exist counts as unfinished (it may not be enqueued yet).
        """
        deadline = time.monotonic() + timeout
        finished: dict[str, Task] = {}
        remaining = list(dict.fromkeys(task_ids))
        interval = 0.005
        while True:
            pipe = self.client.pipeline(transaction=False)
            for task_id in remaining:
                pipe.hget(self.keys.task(task_id), "state")
            states = pipe.execute()
            done_ids = [
                i for i, s in zip(remaining, states, strict=True) if s and text(s) in FINISHED
            ]
            if done_ids:
                pipe = self.client.pipeline(transaction=False)
                for task_id in done_ids:
                    pipe.hgetall(self.keys.task(task_id))
                for task_id, raw in zip(done_ids, pipe.execute(), strict=True):
                    if raw:  # else pruned meanwhile: no Task to return, it counts as unfinished
                        finished[task_id] = Task.from_hash(raw)
            remaining = [i for i in remaining if i not in finished]
            if not remaining:
                return finished
            left = deadline - time.monotonic()
            if left <= 0:
                raise WaitTimeout(remaining, timeout)
            time.sleep(min(interval, left))
            interval = min(interval * 2, 0.2)

    # -- operating ---------------------------------------------------------------------

    def configure(self, config: QueueConfig) -> None:
        """Store the queue's shared settings; every script reads them at its next call."""
        pipe = self.client.pipeline(transaction=True)
        pipe.delete(self.keys.config)
        pipe.hset(self.keys.config, mapping=config.to_redis())  # type: ignore[arg-type]
        pipe.execute()

    def config(self) -> QueueConfig:
        return QueueConfig.from_redis(self.client.hgetall(self.keys.config))

    def requeue_pod(self, pod: str, *, except_incarnation: str | None = None) -> int:
        """Take back every task ``pod`` holds; returns how many (requeued + gone dead)."""
        requeued, dead = self._scripts.run(self.ops.requeue(pod, except_incarnation))
        return requeued + dead

    def sweep(self) -> SweepResult:
        """Promote due tasks, expire deadlines, take back expired leases, prune, drop
        silent workers. Bounded per call; call again while counts are at the bound."""
        return self._scripts.run(self.ops.sweep())

    def fire_schedule(
        self, name: str, slot: int, payload: dict[str, Any], *, priority: int = 0
    ) -> str | None:
        """Enqueue the task of schedule ``name`` for ``slot`` unless that slot (or a later
        one) already fired; returns the new task id, or None."""
        if not name or not isinstance(slot, int) or isinstance(slot, bool):
            raise InvalidArgument("fire_schedule needs a schedule name and an integer slot")
        _int(priority, "priority", PRIORITY_MIN, PRIORITY_MAX)
        task_id = f"sched:{name}:{slot}"
        op = self.ops.fire_schedule(name, slot, task_id, encode_payload(payload), priority)
        return self._scripts.run(op)

    def purge(self) -> None:
        """Delete every key of the queue (tasks, workers, config, counters)."""
        batch: list[Any] = []
        for key in self.client.scan_iter(match=self.keys.pattern, count=1000):
            batch.append(key)
            if len(batch) >= 1000:
                self.client.unlink(*batch)
                batch = []
        if batch:
            self.client.unlink(*batch)
