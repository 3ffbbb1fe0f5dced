"""What the dashboard's tests share: a queue with tasks in every state a page shows, made
through the queue's own operations (a real broker claims, fails, completes)."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from taskfleet.producer.queue import Queue
from taskfleet.protocol.calls import run
from taskfleet.protocol.keys import QueueKeys

#: The error the dead task died of: a traceback whose last line names the cause.
TRACEBACK = (
    "Traceback (most recent call last):\n"
    '  File "handler.py", line 3, in handle\n'
    "    open(path)\n"
    "FileNotFoundError: no such file: /data/<missing>.csv"
)


@dataclass(frozen=True)
class Scene:
    dead_id: str
    held_id: str
    done_id: str
    pending_ids: list[str]


def busy_queue(queue: Queue, make_broker: Callable[..., Any], pending: int = 3) -> Scene:
    """``pending`` tasks waiting, one running on pod-a, one dead with a traceback, one done."""
    pending_ids = [queue.enqueue({"i": i}, priority=i % 3) for i in range(pending)]
    broker = make_broker(queue.name, pod="pod-a", incarnation="inc-7")
    broker.register(4)
    dead_id = queue.enqueue({"doomed": "<b>bold</b>"}, priority=100, max_attempts=1)
    held_id = queue.enqueue({"held": True}, priority=99)
    done_id = queue.enqueue({"quick": True}, priority=98)
    doomed, held, quick = broker.claim(3).tasks
    assert (doomed.id, held.id, quick.id) == (dead_id, held_id, done_id)
    assert broker.fail(doomed.id, doomed.token, TRACEBACK) == "dead"
    broker.complete(quick.id, quick.token, json.dumps({"rows": 42}))
    return Scene(dead_id, held_id, done_id, pending_ids)


def older_worker(queue: Queue, pod: str, beat_ago_ms: int = 0) -> None:
    """``pod``'s record as a 0.1.x worker writes it (no "level"), beating ``beat_ago_ms`` ago
    by the server's clock."""
    beat = run(queue.client, queue.reads.clock()) - beat_ago_ms
    written_by_0_1 = {"incarnation": "inc-0", "heartbeat_ms": beat, "inflight": 0,
                      "concurrency": 1, "draining": False}  # fmt: skip
    queue.client.hset(QueueKeys(queue.name).workers, pod, json.dumps(written_by_0_1))
