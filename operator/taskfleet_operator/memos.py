"""What the operator keeps in memory between handler calls: kopf's memos, typed.

The startup handler puts the Redis `Connections` in the operator's memo; kopf gives
every object's handlers a shallow copy of it, so each handler reaches the same
connections through its own ``memo``. The TaskQueue handlers add what they remember
about that one TaskQueue (`TaskQueueMemory`). kopf keys an object's memo by uid and
drops it when the object is deleted, so a TaskQueue created again under the same name
starts afresh, and nothing here needs cleaning up.
"""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import kopf

from taskfleet_operator.connections import Connections
from taskfleet_operator.leadership import Leadership
from taskfleet_operator.metrics import OperatorMetrics
from taskfleet_operator.providerquotas import QuotaLinks
from taskfleet_operator.scaler import ScalerState
from taskfleet_operator.status import Failure
from taskfleet_operator.sweeploop import SweepLoop
from taskfleet_operator.wakeups import Blocking, FirstSweeps, Wakers

_SHARED = "shared"
_TASKQUEUE = "taskqueue"


@dataclass
class TaskQueueMemory:
    """One TaskQueue's state between its handler calls (the sweep loop runs beside the
    create/update handler, in another thread: each field is replaced, never edited)."""

    # Pods seen registered in Redis but missing from the API at the previous sweep.
    suspects: set[str] = field(default_factory=set)
    # Where the next sweep's repair goes on in the queue's waiting set (0: a new pass).
    repair_cursor: int = 0
    # The last generation the create/update handler could not apply, with the Ready
    # reason and message: the sweep keeps that condition (and leaves the Deployment
    # alone) until a generation applies.
    failure: Failure | None = None
    # The autoscaler's surplus spell and what it last wrote to status.
    scaler: ScalerState = field(default_factory=ScalerState)
    # The spec's schedules as last written into the queue's store, and when (monotonic):
    # a sweep writes them again when they change, and every minute in case keys were lost.
    schedules_synced: str = ""
    schedules_synced_at: float = 0.0
    # What the sweep already announced by an event (`status.Swept.announced`).
    announced: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Shared:
    """What every handler shares, made once at startup and kept in the operator's memo
    (every object's memo is copied from it): the Redis connections, the sweeps' wake-ups,
    the pool that runs the loops' blocking calls, the tasks of the loops over all idle
    queues (the demand poll, the idle housekeeping), the metrics and the first sweeps' gate."""

    connections: Connections
    wakers: Wakers
    executor: ThreadPoolExecutor
    run: Blocking
    loops: tuple[asyncio.Task[None], ...]
    # Set by the cleanup handler before it shuts the pool down: ``run`` raises
    # `wakeups.Stopping` from then on, and the loops end.
    closing: threading.Event
    metrics: OperatorMetrics
    leadership: Leadership
    # New TaskQueues' first sweeps, held back during a burst of creations.
    first_sweeps: FirstSweeps
    # The ProviderQuotas' Redis clients (`providerquotas`).
    quota_links: QuotaLinks
    # The one loop that sweeps every TaskQueue (`sweeploop`).
    sweeps: SweepLoop


def keep_shared(memo: kopf.Memo, shared: Shared) -> None:
    memo[_SHARED] = shared


def shared(memo: kopf.Memo) -> Shared:
    found = memo.get(_SHARED)
    if not isinstance(found, Shared):
        raise RuntimeError("no shared state in the memo: the startup handler did not run")
    return found


def connections(memo: kopf.Memo) -> Connections:
    return shared(memo).connections


def leadership(memo: kopf.Memo) -> Leadership:
    return shared(memo).leadership


def metrics(memo: kopf.Memo) -> OperatorMetrics:
    return shared(memo).metrics


def wakers(memo: kopf.Memo) -> Wakers:
    return shared(memo).wakers


def first_sweeps(memo: kopf.Memo) -> FirstSweeps:
    return shared(memo).first_sweeps


def sweeps(memo: kopf.Memo) -> SweepLoop:
    return shared(memo).sweeps


def quota_links(memo: kopf.Memo) -> QuotaLinks:
    return shared(memo).quota_links


def blocking(memo: kopf.Memo) -> Blocking:
    return shared(memo).run


def taskqueue(memo: kopf.Memo) -> TaskQueueMemory:
    """The TaskQueue's memory, made on first use (`setdefault`: the sweep's thread and a
    handler's may both ask first, and must get the same one)."""
    found = memo.setdefault(_TASKQUEUE, TaskQueueMemory())
    assert isinstance(found, TaskQueueMemory)
    return found
