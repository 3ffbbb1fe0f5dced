"""The per-TaskQueue sweep: orphaned tasks back to pending, Redis housekeeping, cron.

Every Redis operation it uses is one atomic, idempotent Lua script, so two sweepers
(an operator restart overlapping its predecessor) cannot double anything: a requeue
finds the pod's set already empty, a cron slot fires at most once.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import redis
from croniter import croniter
from kubernetes.client.exceptions import ApiException
from taskfleet.producer.queue import Queue
from taskfleet.protocol.errors import TaskfleetError
from taskfleet.protocol.scripts import SWEEP_BOUND

from taskfleet_operator import builders, kube
from taskfleet_operator.connections import Connections, describe_error
from taskfleet_operator.models import TaskQueueSpec
from taskfleet_operator.status import Outage

Logger = logging.Logger | logging.LoggerAdapter[Any]

__all__ = ["SweepReport", "sweep_queue", "sweep_taskqueue"]


def due_slot(cron: str, now: datetime, not_before: datetime) -> int | None:
    """The latest cron slot at or before ``now`` (epoch seconds), if not before the bound.

    Only the latest slot is considered: after an outage a schedule fires once, not once
    per missed tick.
    """
    slot: datetime = croniter(cron, now + timedelta(microseconds=1)).get_prev(datetime)
    if slot < not_before:
        return None
    return int(slot.timestamp())


@dataclass
class SweepReport:
    """What one sweep did and saw, for status and events."""

    requeued: dict[str, int] = field(default_factory=dict)  # by pod gone
    lease_expired: int = 0  # tasks the queue's sweep took back from expired leases
    fired: list[str] = field(default_factory=list)
    stats: dict[str, int] = field(default_factory=dict)
    suspects: set[str] = field(default_factory=set)
    # Schedules the queue refused this sweep, by name: the error says what to fix.
    schedule_errors: dict[str, str] = field(default_factory=dict)


def orphaned_pods(
    registered: Iterable[str],
    live_pods: Iterable[str],
    suspects: set[str],
    pod_gone: Callable[[str], bool],
) -> tuple[list[str], set[str]]:
    """Which registered workers' pods to requeue now, and which to suspect next sweep.

    A pod missing from the live set (the operator's pod index) is suspected first and
    requeued only if it is still missing a sweep later *and* the API itself answers that
    it is gone: the index can lag behind a pod that was just created, and requeueing a
    live worker's fresh claims would run them twice. A pod the API still has stays
    suspect, so it is checked again next sweep. A Terminating pod is still in the API,
    so it counts as live and keeps its tasks.
    """
    live = set(live_pods)
    requeue: list[str] = []
    suspect: set[str] = set()
    for pod in registered:
        if pod in live:
            continue
        if pod in suspects and pod_gone(pod):
            requeue.append(pod)
        else:
            suspect.add(pod)
    return requeue, suspect


def requeue_orphans(
    queue: Queue,
    live_pods: Iterable[str],
    suspects: set[str],
    report: SweepReport,
    pod_gone: Callable[[str], bool],
) -> None:
    """Take back the tasks of registered workers whose pod is gone (see `orphaned_pods`).

    The pod-deletion event is the fast path; this covers missed events and restarts.
    """
    registered = [worker.pod for worker in queue.workers()]
    requeue, report.suspects = orphaned_pods(registered, live_pods, suspects, pod_gone)
    for pod in requeue:
        count = queue.requeue_pod(pod)
        if count:
            report.requeued[pod] = count


def fire_schedules(
    queue: Queue, spec: TaskQueueSpec, now: datetime, not_before: datetime, report: SweepReport
) -> None:
    """Fire every due schedule; one the queue refuses (e.g. a payload over the queue's
    bound) is reported and skipped, so it cannot stop the others or the sweep."""
    for schedule in spec.schedules:
        slot = due_slot(schedule.cron, now, not_before)
        if slot is None:
            continue
        try:  # the fire script bounds the payload as enqueue does
            task_id = queue.fire_schedule(
                schedule.name, slot, dict(schedule.payload), priority=schedule.priority
            )
        except TaskfleetError as error:
            report.schedule_errors[schedule.name] = str(error)
            continue
        if task_id is not None:
            report.fired.append(task_id)


def sweep_queue(
    queue: Queue,
    spec: TaskQueueSpec,
    *,
    live_pods: Iterable[str],
    suspects: set[str],
    pod_gone: Callable[[str], bool],
    created_at: datetime,
    catchup_s: float,
    now: datetime | None = None,
) -> SweepReport:
    """One sweep of one queue. Raises `redis.RedisError` when Redis is unreachable.

    ``pod_gone(pod)`` asks the API whether a suspect pod is really gone (see
    `orphaned_pods`).
    """
    now = now or datetime.now(UTC)
    report = SweepReport()
    queue.configure(builders.queue_config(spec))  # the TaskQueue is the source of truth
    requeue_orphans(queue, live_pods, suspects, report, pod_gone)
    # The sweep script is bounded per call; a few calls catch up after a backlog.
    for _ in range(10):
        result = queue.sweep()
        report.lease_expired += result.requeued
        counts = (result.promoted, result.expired, result.requeued, result.pruned_done)
        if max(*counts, result.pruned_dead) < SWEEP_BOUND:
            break
    not_before = max(created_at, now - timedelta(seconds=catchup_s))
    fire_schedules(queue, spec, now, not_before, report)
    report.stats = queue.stats()
    return report


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


def creation_time(body: Mapping[str, Any]) -> datetime:
    stamp = str(body["metadata"]["creationTimestamp"]).replace("Z", "+00:00")
    return datetime.fromisoformat(stamp)


def sweep_taskqueue(
    connections: Connections,
    body: Mapping[str, Any],
    spec: TaskQueueSpec,
    *,
    live_pods: Iterable[str],
    suspects: set[str],
    catchup_s: float,
    logger: Logger,
) -> SweepReport | Outage:
    """`sweep_queue` on a TaskQueue's queue, or the outage that kept it from Redis.

    A Redis error also drops the resolved URL, so a rotated Secret is read again at the
    next sweep.
    """
    namespace, name = body["metadata"]["namespace"], body["metadata"]["name"]
    try:
        report = sweep_queue(
            connections.get(namespace, name, spec),
            spec,
            live_pods=live_pods,
            suspects=suspects,
            pod_gone=pod_gone_asking_api(namespace, logger),
            created_at=creation_time(body),
            catchup_s=catchup_s,
        )
    except kube.SecretUnavailable as error:
        return Outage("SecretUnavailable", str(error))
    except redis.RedisError as error:
        connections.invalidate(namespace, name)
        return Outage("RedisUnreachable", f"cannot reach Redis: {describe_error(error)}")
    for task_id in report.fired:
        logger.info("schedule fired: task %s", task_id)
    return report
