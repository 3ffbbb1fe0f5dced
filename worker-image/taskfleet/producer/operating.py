"""Operating a queue: store its config, take back a gone pod's tasks, repair, sweep,
purge. An administrator's calls (the operator, the CLI); each is a plan (``runner``)."""

from __future__ import annotations

from taskfleet.producer.runner import Keys, Plan, QueueBase
from taskfleet.protocol import store
from taskfleet.protocol.config import QueueConfig
from taskfleet.protocol.queue_ops import REPAIR_SETTLE_MS
from taskfleet.protocol.records import POD_TOMBSTONE_S
from taskfleet.protocol.replies import RepairResult, SweepResult

__all__ = ["PURGE_BATCH", "configure", "purge", "repair", "requeue_pod", "sweep"]

#: Keys per UNLINK while purging (found by SCAN, a step of about as many at a time).
PURGE_BATCH = 1000


def configure(q: QueueBase, config: QueueConfig) -> Plan[None]:
    """Store the queue's shared settings; every script reads them at its next call."""
    yield store.configure(q.keys, config)


def requeue_pod(
    q: QueueBase, pod: str, *, except_incarnation: str | None = None, gone: bool = False
) -> Plan[int]:
    """Take back every task ``pod`` holds; returns how many (requeued + gone dead).

    ``gone``: the pod is gone from the Kubernetes API for good (the operator asked the
    API). Its workers, a force-deleted pod's container still running, may not register
    again for ``POD_TOMBSTONE_S``: one loss of the pod counts once. Never for a pod
    that may come back under its name (a restarted container keeps it)."""
    tombstone_s = POD_TOMBSTONE_S if gone else None
    requeued, dead = yield q.ops.requeue(pod, except_incarnation, tombstone_s=tombstone_s)
    return int(requeued + dead)


def repair(
    q: QueueBase, cursor: int = 0, *, settle_ms: int = REPAIR_SETTLE_MS
) -> Plan[RepairResult]:
    """Resolve waiting tasks whose dependencies all ended without waking them (an
    older worker, a lost write): one bounded call from rank ``cursor`` of the waiting
    set; call again with the reply's cursor while it says there is more. A dependency
    that ended less than ``settle_ms`` ago is left to the normal resolve."""
    result: RepairResult = yield q.ops.repair(cursor, settle_ms=settle_ms)
    return result


def sweep(q: QueueBase) -> Plan[SweepResult]:
    """Promote due tasks, expire deadlines, take back expired leases, prune, drop
    silent workers. Bounded per call; call again while counts are at the bound."""
    result: SweepResult = yield q.ops.sweep()
    return result


def purge(q: QueueBase) -> Plan[None]:
    """Delete every key of the queue (tasks, workers, config, counters)."""
    step = Keys(store.queue_keys(q.keys), PURGE_BATCH)
    while found := (yield step):
        yield store.delete(found)
