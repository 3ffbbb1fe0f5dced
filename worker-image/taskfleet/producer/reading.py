"""Reading a queue: a task, the stats, the workers.

What ``Queue.get / stats / workers`` do, on the queue's client and keys: plain commands,
pipelined, never a script (reads change nothing). Each read is split into the commands
(queued on any pipeline) and the parsing of their replies, so ``AsyncQueue`` runs the
same reads on an asyncio client.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from taskfleet.protocol.config import QueueConfig
from taskfleet.protocol.connect import SyncClient, server_ms
from taskfleet.protocol.errors import InvalidArgument
from taskfleet.protocol.keys import QueueKeys
from taskfleet.protocol.scripts import text
from taskfleet.protocol.tasks import COUNTERS, Task, stored_int, stored_text


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


def task_of(raw: Mapping[Any, Any], task_id: str) -> Task | None:
    return Task.from_hash(raw, task_id) if raw else None


def get(client: SyncClient, keys: QueueKeys, task_id: str) -> Task | None:
    return task_of(client.hgetall(keys.task(check_task_id(task_id))), task_id)


# A read of several keys is two halves any client can run: the commands queued on a
# pipeline (sync or asyncio: queueing is the same), and the replies parsed.


def stats_commands(pipe: Any, keys: QueueKeys) -> None:
    zsets = (keys.pending, keys.delayed, keys.running, keys.done, keys.dead, keys.cancelled)
    for zset in zsets:
        pipe.zcard(zset)
    pipe.hlen(keys.workers)
    pipe.hgetall(keys.stats)


def stats_of(replies: Sequence[Any]) -> dict[str, int]:
    pending, delayed, running, done, dead, cancelled, workers, counters = replies
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


def stats(client: SyncClient, keys: QueueKeys) -> dict[str, int]:
    pipe = client.pipeline(transaction=False)
    stats_commands(pipe, keys)
    return stats_of(pipe.execute())


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


# The workers' read takes the server's clock first, on its own: a cluster pipeline
# refuses TIME (a command of no key).


def workers_commands(pipe: Any, keys: QueueKeys) -> None:
    pipe.hgetall(keys.workers)
    pipe.hgetall(keys.config)


def workers_of(replies: Sequence[Any], now_ms: int) -> list[WorkerInfo]:
    raw, config_raw = replies
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


def workers(client: SyncClient, keys: QueueKeys) -> list[WorkerInfo]:
    now_ms = server_ms(client, keys.workers)
    pipe = client.pipeline(transaction=False)
    workers_commands(pipe, keys)
    return workers_of(pipe.execute(), now_ms)
