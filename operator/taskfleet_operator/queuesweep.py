"""One TaskQueue's sweep as the sweep loop (`sweeploop`) runs it, in the operator's
threads: requeue orphans, Redis housekeeping and cron (`sweeper`), the disruption guard,
the Deployment restored if someone deleted it, and the status patch; and the loop itself,
made at startup (`make_loop`)."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping
from typing import Any, cast

import kopf
import redis
from kubernetes.client.exceptions import ApiException

from taskfleet_operator import (
    builders,
    disruption,
    kube,
    memos,
    reconcile,
    sweeper,
    sweeploop,
    wakeups,
)
from taskfleet_operator import status as tqstatus
from taskfleet_operator.connections import Connections, describe_error
from taskfleet_operator.metrics import OperatorMetrics
from taskfleet_operator.models import TaskQueueSpec
from taskfleet_operator.settings import OperatorSettings

#: How often a sweep writes a TaskQueue's schedules into the store though they did not
#: change (a store emptied by hand, a Redis that lost its data).
SCHEDULE_RESYNC_S = 60.0

Logger = logging.Logger | logging.LoggerAdapter[Any]


def make_loop(  # noqa: PLR0917 - what the loop is made of
    operator_settings: OperatorSettings,
    settings: kopf.OperatorSettings,
    connections: Connections,
    wakers: wakeups.Wakers,
    metrics: OperatorMetrics,
    run: wakeups.Blocking,
) -> sweeploop.SweepLoop:
    """The one sweep loop (`sweeploop`); standalone, it sweeps from the start, with
    peering once kopf lets this replica work (`sweep_while_leading`)."""

    def sweep(key: tuple[str, str], entry: sweeploop.Tracked) -> wakeups.Quiet | None:
        body = kopf.Body(cast("kopf.RawBody", entry.body))
        logger = kopf.ObjectLogger(body=body, settings=settings)
        try:
            return sweep_once(key, entry, body, loop, logger)
        except (sweeploop.Gone, wakeups.Stopping):
            raise
        except Exception:  # the loop counts it and goes on; the TaskQueue's log says it
            logger.exception("sweep failed")
            raise

    def gone(key: tuple[str, str]) -> None:
        metrics.forget(builders.queue_name(*key))
        connections.forget(*key)

    def forget_all(keys: list[tuple[str, str]]) -> None:
        for key in keys:
            connections.forget(*key)

    def failed(key: tuple[str, str]) -> None:
        metrics.count(metrics.sweep_errors, builders.queue_name(*key), "error")

    loop = sweeploop.SweepLoop(
        sweeploop.Hooks(sweep=sweep, gone=gone, failed=failed, forget_all=forget_all),
        run,
        wakers,
        wakeups.FirstSweeps(),
        operator_settings.sweep_interval_s,
        operator_settings.idle_sweep_interval_s,
        active=not operator_settings.peering,
    )
    return loop


def sweep_once(
    key: tuple[str, str],
    entry: sweeploop.Tracked,
    body: kopf.Body,
    sweeps: sweeploop.SweepLoop,
    logger: Logger,
) -> wakeups.Quiet | None:
    """One sweep and its status update (in a thread); None when there was none to do.
    The queue may be deleted meanwhile: no Deployment is applied for a queue the loop
    no longer tracks, and a status patch that finds it gone is dropped."""
    namespace, name = key
    memo, indexes = entry.memo, sweeps.indexes
    if not sweeps.tracked(key, entry) or not reconcile.still_declared(
        indexes["taskqueue_specs"].get(key), body
    ):
        return None  # deleted (or not indexed yet): never sweep a queue nobody declares
    try:
        model = reconcile.parse_spec(body["spec"])
    except reconcile.InvalidSpec:
        return None  # reported by the create/update handler
    status = dict(body.get("status") or {})
    memory, connections = memos.taskqueue(memo), memos.connections(memo)
    failure = tqstatus.failure_of(memory.failure, body["metadata"].get("generation"))
    deployment = reconcile.first(indexes["worker_deployments"].get(key))
    if reconcile.deployment_lost(deployment, failure, status) and sweeps.tracked(key, entry):
        reconcile.restore_fleet(body, model, connections, logger)
    live = list(indexes["worker_pods"].get(key, []))
    schedules = json.dumps([s.model_dump() for s in model.schedules], sort_keys=True)
    sync = (
        schedules != memory.schedules_synced
        or time.monotonic() - memory.schedules_synced_at > SCHEDULE_RESYNC_S
    )
    metrics = memos.metrics(memo)
    with metrics.sweep_seconds.time():
        outcome = sweeper.sweep_taskqueue(
            connections,
            body,
            model,
            live_pods=live,
            suspects=memory.suspects,
            sync=sync,
            logger=logger,
            repair_cursor=memory.repair_cursor,
        )
    queue = builders.queue_name(namespace, name)
    if isinstance(outcome, sweeper.SweepReport):
        memory.suspects = outcome.suspects
        memory.repair_cursor = outcome.repair_cursor
        if sync and not outcome.schedule_errors:
            memory.schedules_synced, memory.schedules_synced_at = schedules, time.monotonic()
        count_sweep(metrics, queue, outcome)
        for task_id, state in outcome.repaired:
            logger.warning(
                "flow_repaired: task %s of queue %s, its dependencies ended without waking "
                "it, now %s",
                task_id,
                queue,
                state,
            )
        guard(key, model, report=outcome, memo=memo, logger=logger, indexes=indexes)
    else:
        metrics.count(metrics.sweep_errors, queue, outcome.reason)
    policy = connections.policy(namespace, name)
    if policy is None and isinstance(outcome, sweeper.SweepReport):
        policy = connections.check_policy(namespace, name)  # a server not checked yet
    swept = tqstatus.Swept(
        name,
        model,
        status,
        deployment,
        len(live),
        outcome,
        failure,
        eviction_policy=policy,
        announced=memory.announced,
    )
    update = tqstatus.after_sweep(swept, now=tqstatus.now_iso())
    if update.patch:
        try:
            kube.patch_taskqueue_status(name, namespace, dict(update.patch))
        except ApiException as error:
            if error.status == 404:  # deleted while it was swept
                raise sweeploop.Gone(f"{namespace}/{name}") from None
            raise
    for event in update.events:
        kopf.event(body, type=event.type, reason=event.reason, message=event.message)
    memory.announced = tqstatus.announced_after(swept)
    return wakeups.after_sweep(model, outcome, deployment, len(live))


def guard(
    key: tuple[str, str],
    model: TaskQueueSpec,
    *,
    report: sweeper.SweepReport,
    memo: kopf.Memo,
    logger: Logger,
    indexes: Mapping[str, Any],
) -> None:
    """The disruption guard after a sweep (`disruption`); a failure waits for the next."""
    namespace, name = key
    try:
        disruption.update_guards(
            memos.connections(memo).get(namespace, name, model),
            namespace,
            name,
            indexes["worker_pod_guards"].get(key, []),
            enabled=model.disruption_guard,
            running=int(report.stats.get("running", 0)),
            logger=logger,
        )
    except (redis.RedisError, kube.SecretUnavailable, ApiException) as error:
        logger.warning("disruption guard not updated: %s", describe_error(error))


def count_sweep(metrics: OperatorMetrics, queue: str, report: sweeper.SweepReport) -> None:
    if report.requeued:
        metrics.count(metrics.requeued, queue, "pod_gone", amount=sum(report.requeued.values()))
    if report.lease_expired:
        metrics.count(metrics.requeued, queue, "lease_expired", amount=report.lease_expired)
    if report.fired:
        metrics.count(metrics.schedules_fired, queue, amount=report.fired)
