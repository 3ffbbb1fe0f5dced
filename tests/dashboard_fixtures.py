"""What the dashboard's tests share: a queue with tasks in every state a page shows, made
through the queue's own operations (a real broker claims, fails, completes)."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from taskfleet.producer.queue import Queue

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
