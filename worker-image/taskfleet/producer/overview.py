"""A queue at a glance, in two pipelined round trips: sizes by state, counters, workers
and what each holds, the head of pending, the newest dead tasks (``read``); every queue
of a Redis by its counters (``discover``); a counter's rate between two reads (``rate``).

``taskfleet top`` draws these in a terminal and the dashboard on its queues page.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass, field
from typing import Any

from taskfleet.protocol.config import QueueConfig
from taskfleet.protocol.connect import SyncClient, server_ms
from taskfleet.protocol.keys import PREFIX, QueueKeys
from taskfleet.protocol.scripts import text

#: Dead tasks shown per queue, newest first.
DEAD_SHOWN = 3
#: The states whose sizes a view shows.
STATES = ("pending", "delayed", "running", "done", "dead", "cancelled")


@dataclass
class WorkerView:
    pod: str
    holds: int
    slots: int
    heartbeat_age_s: float
    draining: bool
    incarnation: str = ""
    #: heartbeat within one lease TTL (the queue's ``lease_ttl_s``)
    alive: bool = True


@dataclass
class DeadView:
    id: str
    reason: str
    error: str


@dataclass
class QueueView:
    """One queue as read at ``at_ms`` (Redis's clock)."""

    name: str
    at_ms: int
    counts: dict[str, int]
    counters: dict[str, int]
    oldest_pending_s: float | None
    workers: list[WorkerView] = field(default_factory=list)
    #: the queue's shared settings (``QueueConfig``) as plain data
    limits: dict[str, Any] = field(default_factory=dict)
    dead: list[DeadView] = field(default_factory=list)


def discover(client: SyncClient) -> list[str]:
    """Every queue with counters in this Redis (its ``stats`` hash), by name."""
    names = set()
    for key in client.scan_iter(match=f"{PREFIX}:{{*}}:stats", count=1000):
        raw = text(key)
        names.add(raw[len(PREFIX) + 2 : -len("}:stats")])
    return sorted(names)


def read(client: SyncClient, name: str) -> QueueView:
    """One queue in two round trips: everything, then the hashes of the tasks it named
    and what each worker holds."""
    keys = QueueKeys(name)
    # The clock of the queue's server, on its own: a cluster pipeline refuses TIME.
    now_ms = server_ms(client, keys.stats)
    pipe = client.pipeline(transaction=False)
    for state in STATES:
        pipe.zcard(getattr(keys, state))
    pipe.hgetall(keys.stats)
    pipe.hgetall(keys.workers)
    pipe.zrange(keys.pending, 0, 0)
    pipe.zrevrange(keys.dead, 0, DEAD_SHOWN - 1)
    pipe.hgetall(keys.config)
    *sizes, stats, workers, head, dead_ids, config = pipe.execute()
    counts = dict(zip(STATES, map(int, sizes), strict=True))
    counters = {text(k): _int(v) for k, v in stats.items()}
    ids = [text(i) for i in (*head, *dead_ids)]
    pods = sorted(text(pod) for pod in workers)
    pipe = client.pipeline(transaction=False)
    for task_id in ids:
        pipe.hmget(keys.task(task_id), "run_at", "reason", "error")
    for pod in pods:  # what each holds by the queue's own records (exact, unlike heartbeats)
        pipe.scard(keys.pod(pod))
    replies = pipe.execute() if ids or pods else []
    hashes = dict(zip(ids, replies[: len(ids)], strict=True))
    held = dict(zip(pods, map(int, replies[len(ids) :]), strict=True))
    oldest = None
    if head:
        run_at = _int(hashes[text(head[0])][0])
        oldest = max(0.0, (now_ms - run_at) / 1000) if run_at else None
    try:
        limits = QueueConfig.from_redis(config).model_dump()
    except ValueError:  # a config hash a foreign writer garbled: the defaults apply
        limits = QueueConfig().model_dump()
    view = QueueView(name, now_ms, counts, counters, oldest, limits=limits)
    ttl_ms = limits["lease_ttl_s"] * 1000
    for pod, record in sorted(workers.items()):
        with contextlib.suppress(ValueError, KeyError, TypeError):
            rec = json.loads(record)
            heartbeat_ms = int(rec["heartbeat_ms"])
            view.workers.append(
                WorkerView(
                    text(pod),
                    held.get(text(pod), 0),
                    int(rec.get("concurrency", 0)),
                    max(0.0, (now_ms - heartbeat_ms) / 1000),
                    bool(rec.get("draining", False)),
                    incarnation=str(rec.get("incarnation", "")),
                    alive=now_ms - heartbeat_ms <= ttl_ms,
                )
            )
    for task_id in (text(i) for i in dead_ids):
        _, reason, error = hashes.get(task_id) or (None, None, None)
        view.dead.append(DeadView(task_id, text(reason or b""), text(error or b"")))
    return view


def _int(raw: Any) -> int:
    try:
        return int(float(text(raw)))
    except (TypeError, ValueError):
        return 0


def rate(now: QueueView, before: QueueView | None, counter: str) -> float | None:
    """``counter`` per second between two reads of one queue (None before the second)."""
    if before is None or now.at_ms <= before.at_ms:
        return None
    delta = now.counters.get(counter, 0) - before.counters.get(counter, 0)
    return max(0, delta) / ((now.at_ms - before.at_ms) / 1000)
