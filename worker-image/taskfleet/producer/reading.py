"""What the producer API makes of the queue's reads (``protocol.reads``): the workers as
``WorkerInfo``, and the check of a task id before a read. ``Queue`` and ``AsyncQueue``
run the same reads, each on its own client."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from taskfleet.protocol.calls import run, run_all
from taskfleet.protocol.config import QueueConfig
from taskfleet.protocol.connect import SyncClient
from taskfleet.protocol.errors import InvalidArgument
from taskfleet.protocol.reads import QueueReads, Workers


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
            alive=rec.alive(now_ms, config.lease_ttl_s),
        )
        for pod, rec in workers.readable()
    ]


def workers(client: SyncClient, reads: QueueReads) -> list[WorkerInfo]:
    # The server's clock first, on its own: a cluster pipeline refuses TIME.
    now_ms = run(client, reads.clock())
    found, config = run_all(client, [reads.workers(), reads.config()])
    return workers_of(found, config, now_ms)
