"""The producer API: ``Queue.enqueue / get / stats / wait`` and the operator's calls.

Sync, on redis-py: producers, the CLI and the operator (which runs it in threads) use
it. Every state change is one Lua script (see ``scripts.py``); reads are plain
commands, pipelined.
"""

from __future__ import annotations

import json
import math
import secrets
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import redis
from pydantic import BaseModel, ConfigDict, Field

from taskfleet.protocol import bounds
from taskfleet.protocol.bounds import PRIORITY_MAX, PRIORITY_MIN
from taskfleet.protocol.config import QueueConfig
from taskfleet.protocol.errors import InvalidArgument, InvalidPayload, WaitTimeout
from taskfleet.protocol.keys import QueueKeys
from taskfleet.protocol.redisurl import parse_redis_url
from taskfleet.protocol.scripts import EnqueueArgs, Ops, SweepResult, SyncScripts, text
from taskfleet.protocol.tasks import COUNTERS, FINISHED, Task, stored_int, stored_text


@dataclass(frozen=True, slots=True)
class EnqueueResult:
    """What ``Queue.enqueue_result`` did: ``created`` is False when the same task (same
    id, payload and options) existed already and nothing changed."""

    task_id: str
    created: bool


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


def _encodable(value: str) -> bool:
    try:
        value.encode()
    except UnicodeEncodeError:
        return False
    return True


def _token_base() -> str:
    """Claim tokens for tasks an enqueue hands straight to idle workers (unique per call)."""
    return secrets.token_hex(8)


def encode_payload(payload: object) -> str:
    """JSON text of a payload (compact, keys sorted); one clear error for anything else.

    Keys are sorted so that the same object is the same text however its dict was built:
    enqueueing an existing id compares payloads by their text (see ``Queue.enqueue``).
    """
    if not isinstance(payload, dict):
        raise InvalidPayload(f"payload must be a JSON object (dict), not {type(payload).__name__}")
    try:
        try:
            # compact, UTF-8 as is (ensure_ascii would inflate non-ASCII text up to 6x)
            text = json.dumps(
                payload, allow_nan=False, ensure_ascii=False, separators=(",", ":"), sort_keys=True
            )
        except TypeError:
            # keys of mixed types (e.g. 1 and "a") cannot be sorted; JSON makes them text
            text = json.dumps(payload, allow_nan=False, ensure_ascii=False, separators=(",", ":"))
        text.encode()  # a lone surrogate cannot be sent as UTF-8: refuse it here, clearly
    except (TypeError, ValueError) as exc:  # UnicodeEncodeError is a ValueError
        raise InvalidPayload(f"payload is not JSON-serialisable: {_short(exc)}") from None
    except RecursionError:
        raise InvalidPayload("payload is nested too deeply to be JSON") from None
    return text


def _short(value: object) -> str:
    """A value or message for an error line: bounded, never failing (a 5000-digit int)."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 64:
        return f"an integer of {value.bit_length()} bits"
    try:
        shown = str(value)
    except ValueError:
        return type(value).__name__
    return shown if len(shown) <= 200 else shown[:200] + "..."


def _seconds(value: object, what: str, high: float) -> float | None:
    """Seconds as a finite float at most ``high`` (callers check their lower bound)."""
    if value is None:
        return None
    if isinstance(value, timedelta):
        seconds: object = value.total_seconds()
    else:
        seconds = value
    if isinstance(seconds, bool) or not isinstance(seconds, int | float):
        raise InvalidArgument(f"{what} must be seconds (a finite number) or a timedelta")
    bound = f"{high:.0f} s ({_span(high)})"
    try:
        number = float(seconds)
    except OverflowError:  # an int too large for a float
        if seconds > 0:
            shown = _short(seconds)
            raise InvalidArgument(f"{what} must be at most {bound}, not {shown}") from None
        number = -math.inf
    if not math.isfinite(number):
        raise InvalidArgument(f"{what} must be seconds (a finite number) or a timedelta")
    if number > high:
        raise InvalidArgument(f"{what} must be at most {bound}, not {number:g}")
    return number


def _span(seconds: float) -> str:
    years = seconds / (365 * 24 * 3600)
    return f"{years:g} years" if years >= 1 else f"{seconds / 86400:g} days"


def _int(value: object, what: str, low: int, high: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgument(f"{what} must be an integer, not {type(value).__name__}")
    if value < low or (high is not None and value > high):
        bound = f"between {low} and {high}" if high is not None else f">= {low}"
        raise InvalidArgument(f"{what} must be {bound}, not {_short(value)}")
    return value


def _deadline_ms(value: datetime) -> int:
    """An aware datetime as epoch ms, within 1970 .. now + MAX_DEADLINE_S."""
    if value.tzinfo is None or value.utcoffset() is None:
        raise InvalidArgument("deadline datetime must be timezone-aware")
    epoch = datetime(1970, 1, 1, tzinfo=UTC)
    try:
        ahead = (value - datetime.now(UTC)).total_seconds()
        ms = (value - epoch) // timedelta(milliseconds=1)
    except OverflowError:
        ahead, ms = math.inf, -1
    if ahead > bounds.MAX_DEADLINE_S:
        raise InvalidArgument(
            f"deadline must be at most {bounds.MAX_DEADLINE_S} s "
            f"({_span(bounds.MAX_DEADLINE_S)}) from now, not {value.isoformat()}"
        )
    if ms < 0:
        raise InvalidArgument(f"deadline must be after 1970-01-01, not {value.isoformat()}")
    return ms


def enqueue_args(spec: EnqueueSpec | Mapping[str, Any]) -> EnqueueArgs:
    """Validate one task and encode it for the enqueue script.

    Every number is bounded by ``taskfleet.protocol.bounds`` so that each reader (Lua, the
    worker, ``Task``) can represent what is stored; out of range is ``InvalidArgument``
    naming the bound.
    """
    if isinstance(spec, EnqueueSpec):
        fields: Mapping[str, Any] = spec.__dict__
    else:
        if not isinstance(spec, Mapping):
            raise InvalidArgument(f"enqueue item must be a dict or EnqueueSpec, not {spec!r:.100}")
        fields = spec
        unknown = set(fields) - set(EnqueueSpec.model_fields)
        if unknown:
            names = ", ".join(sorted(_short(k) for k in unknown))
            raise InvalidArgument(f"unknown enqueue field(s): {names}")
        if "payload" not in fields:
            raise InvalidArgument("enqueue item needs a 'payload'")
    payload = encode_payload(fields["payload"])
    priority = _int(fields.get("priority", 0), "priority", PRIORITY_MIN, PRIORITY_MAX)
    cost = _int(fields.get("cost", 1), "cost", bounds.MIN_COST, bounds.MAX_COST)
    max_attempts = fields.get("max_attempts")
    if max_attempts is not None:
        _int(max_attempts, "max_attempts", bounds.MIN_ATTEMPTS, bounds.MAX_ATTEMPTS)
    delay = _seconds(fields.get("delay"), "delay", bounds.MAX_DELAY_S) or 0.0
    if delay < 0:
        raise InvalidArgument(f"delay must be >= 0, not {delay:g}")
    timeout = _seconds(fields.get("timeout"), "timeout", bounds.MAX_TIMEOUT_S)
    if timeout is not None and timeout <= 0:
        raise InvalidArgument(f"timeout must be > 0, not {timeout:g}")
    deadline_raw = fields.get("deadline")
    deadline = ""
    if isinstance(deadline_raw, datetime):
        deadline = f"@{_deadline_ms(deadline_raw)}"
    elif deadline_raw is not None:
        seconds = _seconds(deadline_raw, "deadline", bounds.MAX_DEADLINE_S)
        if seconds is None or seconds <= 0:
            raise InvalidArgument("deadline must be > 0 seconds from now")
        deadline = str(math.ceil(seconds * 1000))
    task_id = fields.get("task_id")
    if task_id is None:
        task_id = uuid.uuid4().hex
    else:
        _check_task_id(task_id)
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


def _check_task_id(task_id: object) -> str:
    # printable: ids travel NUL-separated in claim replies and show up in logs (a lone
    # surrogate is not printable, so every accepted id is valid UTF-8)
    if (
        not isinstance(task_id, str)
        or not task_id
        or len(task_id) > bounds.MAX_TASK_ID_LEN
        or not task_id.isprintable()
    ):
        raise InvalidArgument(
            f"task_id must be a non-empty printable string of <= {bounds.MAX_TASK_ID_LEN} chars"
        )
    return task_id


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
        if client is None:
            parse_redis_url(redis_url)  # InvalidRedisURL, one line, never the URL itself
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
        """Add a task; returns its id.

        ``delay``: seconds (or timedelta) before it may run. ``deadline``: seconds from
        now (or an aware datetime) by which it must have started, else it goes dead
        with reason ``expired``. ``cost``: units it takes from the cost rate limit.
        Bounds (``taskfleet.protocol.bounds``): delay and deadline at most 100 years, timeout at
        most one year, cost 0..1e9, max_attempts 1..10,000, priority -1000..1000.

        With ``task_id``, enqueueing the same task again (same payload, priority, cost,
        timeout and, if given, max_attempts) returns the id and changes nothing; another
        payload or option under an existing id raises ``TaskExists``. ``enqueue_result``
        also says whether the task was created.
        """
        return self.enqueue_result(
            payload,
            priority=priority,
            delay=delay,
            deadline=deadline,
            max_attempts=max_attempts,
            task_id=task_id,
            cost=cost,
            timeout=timeout,
        ).task_id

    def enqueue_result(
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
    ) -> EnqueueResult:
        """``enqueue``, returning the id and whether this call created the task."""
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
        [created] = self._scripts.run(self.ops.enqueue([args], _token_base()))
        return EnqueueResult(args.task_id, created)

    def enqueue_many(self, items: Iterable[EnqueueSpec | Mapping[str, Any]]) -> list[str]:
        """Add many tasks atomically in one round trip; returns their ids in order.

        Each item is an ``EnqueueSpec`` or a dict of ``enqueue``'s arguments. If any
        item is invalid (or too large), names an id twice, or names an existing task
        with another payload or options (``TaskExists``), nothing is stored.
        """
        batch = [enqueue_args(item) for item in items]
        if not batch:
            return []
        seen: set[str] = set()
        for args in batch:
            if args.task_id in seen:
                raise InvalidArgument(f"task id {args.task_id!r} appears twice in one enqueue")
            seen.add(args.task_id)
        self._scripts.run(self.ops.enqueue(batch, _token_base()))
        return [a.task_id for a in batch]

    # -- reading -----------------------------------------------------------------------

    def get(self, task_id: str) -> Task | None:
        """The task, or None when there is none (never stored, or pruned by retention)."""
        if not isinstance(task_id, str) or not _encodable(task_id):
            raise InvalidArgument("task_id must be a string UTF-8 can encode")
        raw = self.client.hgetall(self.keys.task(task_id))
        return Task.from_hash(raw, task_id) if raw else None

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
        raw = {stored_text(key): stored_int(stored_text(v)) for key, v in counters.items()}
        for name in COUNTERS:
            out[name] = raw.get(name) or 0  # a counter a foreign client garbled reads as 0
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
        ids = [] if isinstance(task_ids, str) else list(task_ids)
        if isinstance(task_ids, str) or not all(isinstance(i, str) and _encodable(i) for i in ids):
            raise InvalidArgument("wait needs a list of task ids (strings), not one string")
        if isinstance(timeout, bool) or not isinstance(timeout, int | float):
            raise InvalidArgument(f"wait timeout must be a number of seconds, not {timeout!r}")
        try:
            limit = float(timeout)
        except OverflowError:  # an int too large for a float: as good as forever
            limit = math.inf if timeout > 0 else -math.inf
        if math.isnan(limit):
            raise InvalidArgument("wait timeout must be a number of seconds, not nan")
        deadline = time.monotonic() + limit
        finished: dict[str, Task] = {}
        remaining = list(dict.fromkeys(ids))
        interval = 0.005
        while True:
            pipe = self.client.pipeline(transaction=False)
            for task_id in remaining:
                pipe.hget(self.keys.task(task_id), "state")
            states = pipe.execute()
            done_ids = [
                i
                for i, s in zip(remaining, states, strict=True)
                if s and stored_text(s) in FINISHED
            ]
            if done_ids:
                pipe = self.client.pipeline(transaction=False)
                for task_id in done_ids:
                    pipe.hgetall(self.keys.task(task_id))
                for task_id, raw in zip(done_ids, pipe.execute(), strict=True):
                    if raw:  # else pruned meanwhile: no Task to return, it counts as unfinished
                        finished[task_id] = Task.from_hash(raw, task_id)
            remaining = [i for i in remaining if i not in finished]
            if not remaining:
                return finished
            left = deadline - time.monotonic()
            if left <= 0:
                raise WaitTimeout(remaining, limit)
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
