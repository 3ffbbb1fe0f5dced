"""The per-TaskQueue sweep: orphaned tasks back to pending, Redis housekeeping, schedules.

Every Redis operation it uses is one atomic, idempotent Lua script, so two sweepers
(an operator restart overlapping its predecessor) cannot double anything: a requeue
finds the pod's set already empty, a schedule's slot fires exactly once (the workers
fire the same store; see taskfleet.protocol.schedules).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import redis
from kubernetes.client.exceptions import ApiException
from taskfleet.producer import reading
from taskfleet.producer.encoding import encode_payload
from taskfleet.producer.queue import Queue
from taskfleet.producer.quotas import quota_ops, state_of
from taskfleet.producer.reading import WorkerInfo, older_workers
from taskfleet.producer.runner import drive
from taskfleet.producer.scheduling import due_now, fire_claimed
from taskfleet.protocol.calls import Call, run, run_all
from taskfleet.protocol.errors import TaskfleetError
from taskfleet.protocol.groups import check_fair_by, fair_by
from taskfleet.protocol.quota import QuotaState
from taskfleet.protocol.records import CURRENT_LEVEL
from taskfleet.protocol.replies import SWEEP_BOUND, RepairResult, SweepResult
from taskfleet.protocol.schedule_ops import DueBatch
from taskfleet.protocol.schedules import OWNER_TASKQUEUE, ScheduleDef
from taskfleet.protocol.scripts import Op
from taskfleet.protocol.store import config_fields
from taskfleet.protocol.workernames import pod_of, workers_of

from taskfleet_operator import builders, kube
from taskfleet_operator.connections import Connections, describe_error
from taskfleet_operator.models import TaskQueueSpec
from taskfleet_operator.status import Outage

Logger = logging.Logger | logging.LoggerAdapter[Any]

__all__ = ["SweepReport", "sweep_queue", "sweep_taskqueue"]


@dataclass
class SweepReport:
    """What one sweep did and saw, for status and events."""

    requeued: dict[str, int] = field(default_factory=dict)  # by pod gone
    lease_expired: int = 0  # tasks the queue's sweep took back from expired leases
    fired: int = 0  # tasks this sweep's firing enqueued
    # waiting tasks its repair resolved (their dependencies had ended without waking them)
    repaired: list[tuple[str, str]] = field(default_factory=list)
    repair_cursor: int = 0  # where the next sweep's repair goes on (0: a new pass)
    active_schedules: int = 0  # schedules of the store waiting for their next slot
    stats: dict[str, int] = field(default_factory=dict)
    suspects: set[str] = field(default_factory=set)
    # Schedules the queue refused this sweep, by name: the error says what to fix.
    schedule_errors: dict[str, str] = field(default_factory=dict)
    # The claim pause and the budget's spend (the Claiming condition).
    quota: QuotaState | None = None
    # Live workers of a level below CURRENT_LEVEL, by name, and the lowest such level
    # (the WorkersCurrent condition), from the worker records the orphan check reads.
    older_workers: list[str] = field(default_factory=list)
    older_level: int = CURRENT_LEVEL


def orphaned_pods(
    registered: Iterable[str],
    live_pods: Iterable[str],
    suspects: set[str],
    pod_gone: Callable[[str], bool],
) -> tuple[list[str], set[str]]:
    """Which registered workers to requeue now (their pod is gone), and which to suspect
    next sweep. A worker is named after its pod, or ``<pod>#<i>`` for a pod's worker
    process i (``workernames``): what is judged is always its pod.

    A pod missing from the live set (the operator's pod index) is suspected first and
    requeued only if it is still missing a sweep later *and* the API itself answers that
    it is gone: the index can lag behind a pod that was just created, and requeueing a
    live worker's fresh claims would run them twice. A pod the API still has stays
    suspect, so it is checked again next sweep. A Terminating pod is still in the API,
    so it counts as live and keeps its tasks. The API is asked once per pod.
    """
    live = set(live_pods)
    requeue: list[str] = []
    suspect: set[str] = set()
    gone: dict[str, bool] = {}
    for worker in registered:
        pod = pod_of(worker)
        if pod in live:
            continue
        if worker in suspects:
            if pod not in gone:
                gone[pod] = pod_gone(pod)
            if gone[pod]:
                requeue.append(worker)
                continue
        suspect.add(worker)
    return requeue, suspect


def requeue_orphans(  # noqa: PLR0917 - the sweep's state, passed along
    queue: Queue,
    live_pods: Iterable[str],
    suspects: set[str],
    report: SweepReport,
    pod_gone: Callable[[str], bool],
    found: Sequence[WorkerInfo] | None = None,
) -> None:
    """Take back the tasks of registered workers whose pod is gone (see `orphaned_pods`).

    The pod-deletion event is the fast path; this covers missed events and restarts.
    The same read of the worker records (``found``, read here when not given) tells the
    live workers of an older level.
    """
    if found is None:
        found = queue.workers()
    older = set(older_workers(found))
    report.older_workers = sorted({pod_of(worker) for worker in older})
    report.older_level = min((w.level for w in found if w.pod in older), default=CURRENT_LEVEL)
    registered = [worker.pod for worker in found]
    requeue, report.suspects = orphaned_pods(registered, live_pods, suspects, pod_gone)
    for worker in requeue:
        count = queue.requeue_pod(worker, gone=True)
        if count:
            report.requeued[worker] = count


def requeue_pod_workers(queue: Queue, pod: str) -> int:
    """Take back what every worker of ``pod`` holds (its processes ``<pod>#<i>`` too): the
    pod is gone from the API (deleted, or failed for good), so its workers may not
    register again (a tombstone: a deleted pod's container can outlive it)."""
    names = workers_of(pod, [worker.pod for worker in queue.workers()])
    return sum(queue.requeue_pod(name, gone=True) for name in dict.fromkeys([pod, *names]))


def schedule_definitions(spec: TaskQueueSpec) -> list[tuple[ScheduleDef, bool]]:
    """The spec's schedules as the store's definitions, each with its ``suspend``."""
    return [
        (
            ScheduleDef(
                name=s.name,
                cron=s.cron,
                payload=encode_payload(dict(s.payload)),
                tz=s.time_zone,
                priority=s.priority,
                catchup=s.catchup,
                catchup_limit=s.catchup_limit,
                jitter_ms=s.jitter_seconds * 1000,
            ),
            s.suspend,
        )
        for s in spec.schedules
    ]


def sync_schedules(queue: Queue, spec: TaskQueueSpec, report: SweepReport) -> None:
    """Write the spec's schedules into the queue's store (owned by the TaskQueue: the API
    cannot change them; a schedule of the same name made through the API is taken over)
    and delete those the spec no longer names. Schedules made through the API are left
    alone. One the queue refuses (a payload over its bound) is reported and skipped."""
    wanted = schedule_definitions(spec)
    for definition, suspend in wanted:
        try:
            queue.put_schedule(definition, paused=suspend, owner=OWNER_TASKQUEUE, take_over=True)
        except TaskfleetError as error:
            report.schedule_errors[definition.name] = str(error)
    names = {d.name for d, _ in wanted}
    for name in sorted(run(queue.client, queue.reads.owned_schedule_names())):
        if name not in names:
            queue.unschedule(name, owner=OWNER_TASKQUEUE)


def sweep_queue(
    queue: Queue,
    spec: TaskQueueSpec,
    *,
    live_pods: Iterable[str],
    suspects: set[str],
    pod_gone: Callable[[str], bool],
    sync: bool = True,
    repair_cursor: int = 0,
) -> SweepReport:
    """One sweep of one queue. Raises `redis.RedisError` when Redis is unreachable.

    ``pod_gone(pod)`` asks the API whether a suspect pod is really gone (see
    `orphaned_pods`). ``sync``: write the spec's schedules into the store (the handler
    does when the spec's schedules changed, and now and then in case keys were lost).
    """
    report = SweepReport()
    # The server's clock once, on its own (a cluster's pipeline refuses TIME), for the
    # workers' liveness and the quota's windows: a sweep lasts milliseconds.
    now_ms = run(queue.client, queue.reads.clock())
    workers = store_settings(queue, spec, now_ms)  # the TaskQueue is the source of truth
    requeue_orphans(queue, live_pods, suspects, report, pod_gone, workers)
    # The first call of each bounded script (the sweep; the repair of waiting tasks whose
    # dependencies all ended without waking them, from where the last sweep stopped; the
    # claim of due schedule slots) and the queue's state, in one round trip: all an idle
    # queue needs. A script that says there is more is called again alone (a few calls
    # catch up after a backlog; a large waiting set is covered over several sweeps), and
    # the state is then read again. Syncing the schedules comes before firing them.
    firsts: list[Op[Any]] = [queue.ops.sweep(), queue.ops.repair(repair_cursor)]
    if not sync:
        firsts.append(due_now(queue))
    *replies, active, stats, raw, config = run_all(queue.client, [*firsts, *state_calls(queue)])
    swept: SweepResult = replies[0]
    repaired: RepairResult = replies[1]
    report.lease_expired += swept.requeued
    report.repaired.extend(repaired.repaired)
    more = False
    for _ in range(9):
        if not swept.saturated(SWEEP_BOUND):
            break
        swept, more = queue.sweep(), True
        report.lease_expired += swept.requeued
    for _ in range(9):
        if not repaired.more:
            break
        repaired, more = queue.repair(repaired.cursor), True
        report.repaired.extend(repaired.repaired)
    report.repair_cursor = repaired.cursor
    # A firer like every worker: schedules fire on time while the fleet is at zero.
    if sync:
        sync_schedules(queue, spec, report)
        report.fired, more = queue.fire_due_schedules(), True
    else:
        claimed: DueBatch = replies[2]
        report.fired = drive(queue, fire_claimed(queue, claimed))  # no round trip if none
        more = more or bool(claimed.due)
    if more:
        report.active_schedules, report.stats, report.quota = queue_state(queue, now_ms)
    else:
        report.active_schedules, report.stats = active, stats
        report.quota = state_of(raw, now_ms, config)
    return report


def store_settings(queue: Queue, spec: TaskQueueSpec, now_ms: int) -> list[WorkerInfo]:
    """Make the store's settings of the queue (its config, the unit its groups are fair
    by) the spec's: one round trip reads both, and only what differs is written (the
    spec changed, or the store lost or was given other settings). The same round trip
    reads the worker records, returned (alive as of ``now_ms``, the server's clock, by
    the spec's lease)."""
    config = builders.queue_config(spec)
    unit = check_fair_by(builders.queue_fair_by(spec))
    stored, fair, records = run_all(
        queue.client, [config_fields(queue.keys), fair_by(queue.keys), queue.reads.workers()]
    )
    if stored != config.to_redis():
        queue.configure(config)
    if fair != unit:
        queue.set_fair_by(unit)
    return reading.workers_of(records, config, now_ms)


def state_calls(queue: Queue) -> list[Call[Any]]:
    """The reads of `queue_state`: active schedules, counts, the quota's record, config."""
    return [
        queue.reads.active_schedules(),
        queue.reads.stats(),
        quota_ops(queue.keys, None).read(),
        queue.reads.config(),
    ]


def queue_state(queue: Queue, now_ms: int) -> tuple[int, dict[str, int], QuotaState]:
    """The queue's active schedules, counts and quota state (`Queue.stats`,
    `Queue.quota`, the quota's windows as of ``now_ms``, the server's clock) in one
    round trip."""
    active, stats, raw, config = run_all(queue.client, state_calls(queue))
    return active, stats, state_of(raw, now_ms, config)


def pod_gone_asking_api(namespace: str, logger: Logger) -> Callable[[str], bool]:
    """`kube.pod_gone` for the sweep, where an API error means "not known to be gone"."""

    def gone(pod: str) -> bool:
        try:
            return kube.pod_gone(pod, namespace)
        except ApiException as error:
            # The pod stays suspect and is asked about again at the next sweep.
            logger.warning("cannot tell whether pod %s is gone: %s", pod, error.reason)
            return False

    return gone


def sweep_taskqueue(
    connections: Connections,
    body: Mapping[str, Any],
    spec: TaskQueueSpec,
    *,
    live_pods: Iterable[str],
    suspects: set[str],
    sync: bool,
    logger: Logger,
    repair_cursor: int = 0,
) -> SweepReport | Outage:
    """`sweep_queue` on a TaskQueue's queue, or the outage that kept it from Redis.

    A server fault (`outages.classify`: credentials refused, unreachable, BUSY, LOADING,
    OOM, READONLY...) parks the queue's server: the sweeps of every queue on it return
    at once without a call until its probe succeeds or a Secret it names changes. Any
    other Redis error fails this sweep only.
    """
    namespace, name = body["metadata"]["namespace"], body["metadata"]["name"]
    try:
        report = sweep_queue(
            connections.get(namespace, name, spec),
            spec,
            live_pods=live_pods,
            suspects=suspects,
            pod_gone=pod_gone_asking_api(namespace, logger),
            sync=sync,
            repair_cursor=repair_cursor,
        )
    except kube.SecretUnavailable as error:
        return Outage("SecretUnavailable", str(error))
    except redis.RedisError as error:
        fault = connections.report(namespace, name, error)
        if fault is None:
            return Outage("RedisError", f"Redis refused the sweep: {describe_error(error)}")
        return Outage(fault.reason, fault.message, parked=True)
    if report.fired:
        logger.info("schedules fired: %d tasks", report.fired)
    return report
