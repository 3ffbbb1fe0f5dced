"""Reading a queue: a task, the stats, the workers, and waiting for tasks to finish.

What ``Queue.get / stats / workers / wait`` do, on the queue's client and keys: plain
commands, pipelined, never a script (reads change nothing).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict, Field

from taskfleet.protocol.config import QueueConfig
from taskfleet.protocol.connect import SyncClient, server_ms
from taskfleet.protocol.errors import InvalidArgument, WaitTimeout
from taskfleet.protocol.keys import QueueKeys
from taskfleet.protocol.scripts import text
from taskfleet.protocol.tasks import COUNTERS, FINISHED, Task, stored_int, stored_text


class WorkerInfo(BaseModel):
    """A worker of the queue as its record in Redis says (``Queue.workers``)."""

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


def get(client: SyncClient, keys: QueueKeys, task_id: str) -> Task | None:
    if not isinstance(task_id, str) or not _encodable(task_id):
        raise InvalidArgument("task_id must be a string UTF-8 can encode")
    raw = client.hgetall(keys.task(task_id))
    return Task.from_hash(raw, task_id) if raw else None


def stats(client: SyncClient, keys: QueueKeys) -> dict[str, int]:
    pipe = client.pipeline(transaction=False)
    zsets = (keys.pending, keys.delayed, keys.running, keys.done, keys.dead, keys.cancelled)
    for zset in zsets:
        pipe.zcard(zset)
    pipe.hlen(keys.workers)
    pipe.hgetall(keys.stats)
    pending, delayed, running, done, dead, cancelled, workers, counters = pipe.execute()
    out = {
        "pending": int(pending),
        "delayed": int(delayed),
        "running": int(running),
        "done": int(done),
        "dead": int(dead),
        "cancelled": int(cancelled),
        "workers": int(workers),
    }
    raw = {stored_text(key): stored_int(stored_text(v)) for key, v in counters.items()}
    for name in COUNTERS:
        out[name] = raw.get(name) or 0  # a counter a foreign client garbled reads as 0
    return out


def exists(client: SyncClient, keys: QueueKeys) -> bool:
    """Whether anything of the queue is stored: its config, counters, sequence or workers
    (a queue that ever had a task has counters)."""
    return bool(client.exists(keys.config, keys.stats, keys.seq, keys.workers))


def holdings(client: SyncClient, keys: QueueKeys, pods: Sequence[str]) -> dict[str, list[str]]:
    """The ids of the tasks each pod holds now, from the queue's records, sorted."""
    pipe = client.pipeline(transaction=False)
    for pod in pods:
        pipe.smembers(keys.pod(pod))
    return {
        pod: sorted(stored_text(i) for i in ids)
        for pod, ids in zip(pods, pipe.execute(), strict=True)
    }


def workers(client: SyncClient, keys: QueueKeys) -> list[WorkerInfo]:
    # The server's clock first, on its own: a cluster pipeline refuses TIME (no key).
    now_ms = server_ms(client, keys.workers)
    pipe = client.pipeline(transaction=False)
    pipe.hgetall(keys.workers)
    pipe.hgetall(keys.config)
    raw, config_raw = pipe.execute()
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


def wait(
    client: SyncClient, keys: QueueKeys, task_ids: Sequence[str], timeout: float
) -> dict[str, Task]:
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
        pipe = client.pipeline(transaction=False)
        for task_id in remaining:
            pipe.hget(keys.task(task_id), "state")
        states = pipe.execute()
        done_ids = [
            i for i, s in zip(remaining, states, strict=True) if s and stored_text(s) in FINISHED
        ]
        if done_ids:
            pipe = client.pipeline(transaction=False)
            for task_id in done_ids:
                pipe.hgetall(keys.task(task_id))
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
