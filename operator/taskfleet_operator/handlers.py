"""kopf registrations: thin wrappers that delegate to `reconcile` and `sweeper`.

Run with ``python -m taskfleet_operator`` (or ``kopf run -m taskfleet_operator.handlers
--standalone -A``). Handlers are sync: kopf runs them in its thread pool, where the
blocking Redis and Kubernetes clients belong.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

import kopf
import redis
from kubernetes.client.exceptions import ApiException

from taskfleet_operator import builders, kube, reconcile, sweeper
from taskfleet_operator import status as tqstatus
from taskfleet_operator.connections import Connections, describe_error
from taskfleet_operator.models import GROUP, PLURAL, QUEUE_LABEL, VERSION
from taskfleet_operator.settings import OperatorSettings, configure_kopf

SETTINGS = OperatorSettings.from_env()
CONNECTIONS = Connections(SETTINGS.redis_timeout_s)
# Pods seen registered in Redis but missing from the API at the previous sweep, per queue.
SUSPECTS: dict[tuple[str, str], set[str]] = {}
# Generations the create/update handler could not apply, with the Ready reason/message:
# the sweep keeps that condition (and leaves the Deployment alone) until one applies.
FAILED: dict[tuple[str, str], tuple[int | None, str, str]] = {}

Logger = logging.Logger | logging.LoggerAdapter[Any]
TASKQUEUES = (GROUP, VERSION, PLURAL)


def _ns(namespace: str | None) -> str:
    """TaskQueues and worker pods are namespaced; kopf types the namespace as optional."""
    if not namespace:
        raise kopf.PermanentError("a namespaced object without a namespace")
    return namespace


@kopf.on.startup()
def startup(*, settings: kopf.OperatorSettings, **_: Any) -> None:
    configure_kopf(settings)


@kopf.on.cleanup()
def cleanup(**_: Any) -> None:
    CONNECTIONS.close()


# ----------------------------------------------------------------------------- indexes
# kopf fills every index from a full listing before any handler runs, so a sweep right
# after an operator restart already knows which worker pods exist.


@kopf.index("pods", labels={QUEUE_LABEL: kopf.PRESENT})
def worker_pods(*, name: str, namespace: str | None, labels: Mapping[str, str], **_: Any) -> Any:
    """Live worker pods (Terminating ones included) by (namespace, queue)."""
    return {(namespace, labels[QUEUE_LABEL]): name}


@kopf.index("deployments", labels={QUEUE_LABEL: kopf.PRESENT})
def worker_deployments(*, name: str, namespace: str | None, body: kopf.Body, **_: Any) -> Any:
    """Worker Deployments' status by (namespace, name), for readyReplicas without polling
    and to notice a Deployment deleted behind the operator's back."""
    return {(namespace, name): {"status": dict(body.get("status") or {})}}


@kopf.index(*TASKQUEUES)
def taskqueue_specs(*, name: str, namespace: str | None, body: kopf.Body, **_: Any) -> Any:
    """TaskQueue specs by (namespace, name), for handlers triggered by pods."""
    return {(namespace, name): {"ref": reconcile.owner_ref(body), "spec": dict(body["spec"])}}


# ----------------------------------------------------------------------------- TaskQueue


def _report_invalid(body: kopf.Body, patch: kopf.Patch, error: Exception) -> None:
    message = str(error)
    meta = body["metadata"]
    key = (meta["namespace"], meta["name"])
    FAILED[key] = (meta.get("generation"), type(error).__name__, message)
    conditions = body.get("status", {}).get("conditions")
    patch.status["conditions"] = tqstatus.set_condition(
        conditions, tqstatus.READY, False, type(error).__name__, message
    )
    kopf.warn(body, reason=type(error).__name__, message=message)


# An unexpected error (API hiccup, Redis library error) is retried after 10 s, not kopf's
# default 60 s: a fleet waiting for its Deployment should not wait a minute.
@kopf.on.resume(*TASKQUEUES, backoff=10)
@kopf.on.create(*TASKQUEUES, backoff=10)
@kopf.on.update(*TASKQUEUES, backoff=10)
def reconcile_taskqueue(
    *,
    body: kopf.Body,
    spec: kopf.Spec,
    name: str,
    namespace: str | None,
    meta: kopf.Meta,
    patch: kopf.Patch,
    logger: Logger,
    **_: Any,
) -> None:
    """Validate, apply the Deployment, write the queue's settings to Redis."""
    namespace = _ns(namespace)
    try:
        model = reconcile.parse_spec(spec)
    except reconcile.InvalidSpec as error:
        _report_invalid(body, patch, error)
        raise kopf.PermanentError(str(error)) from None
    try:
        reconcile.apply_fleet(body, model, CONNECTIONS, logger)
    except reconcile.DeploymentRejected as error:
        _report_invalid(body, patch, error)
        raise kopf.PermanentError(str(error)) from None
    except reconcile.NotOwned as error:
        _report_invalid(body, patch, error)
        raise kopf.TemporaryError(str(error), delay=30) from None
    FAILED.pop((namespace, name), None)
    try:
        reconcile.configure_queue(namespace, name, model, CONNECTIONS)
    except (redis.RedisError, kube.SecretUnavailable) as error:
        # The sweep retries every few seconds and reports the outage in status.
        logger.info("queue settings not written yet: %s", describe_error(error))
    patch.status["selector"] = builders.selector_string(name)
    patch.status["observedGeneration"] = meta.get("generation")


def _purge_requested(spec: kopf.Spec, **_: Any) -> bool:
    return bool(spec.get("onDelete") == "Purge")


@kopf.on.delete(*TASKQUEUES, when=_purge_requested, retries=30, backoff=10)
def purge_queue(
    *, spec: kopf.Spec, name: str, namespace: str | None, logger: Logger, **_: Any
) -> None:
    """onDelete: Purge: delete the queue's Redis keys (the finalizer holds until done)."""
    namespace = _ns(namespace)
    try:
        model = reconcile.parse_spec(spec)
    except reconcile.InvalidSpec:
        logger.warning("spec is invalid: nothing to purge")
        return
    try:
        CONNECTIONS.get(namespace, name, model).purge()
    except (redis.RedisError, kube.SecretUnavailable) as error:
        raise kopf.TemporaryError(
            f"cannot purge the queue yet: {describe_error(error)}", delay=10
        ) from None
    logger.info("purged queue %s", builders.queue_name(namespace, name))


@kopf.on.event(*TASKQUEUES)
def forget_deleted_taskqueue(*, type: str, name: str, namespace: str | None, **_: Any) -> None:
    if type == "DELETED":
        CONNECTIONS.forget(_ns(namespace), name)
        SUSPECTS.pop((_ns(namespace), name), None)
        FAILED.pop((_ns(namespace), name), None)


# kopf puts its finalizer (ours, see settings) on every TaskQueue because of this timer:
# the timer must be stopped before the object goes. Deleting a Retain queue is still
# immediate while the operator runs; only Purge waits for the Redis cleanup.
@kopf.timer(*TASKQUEUES, interval=SETTINGS.sweep_interval_s, backoff=5)
def sweep_taskqueue(
    *,
    body: kopf.Body,
    spec: kopf.Spec,
    name: str,
    namespace: str | None,
    status: kopf.Status,
    patch: kopf.Patch,
    logger: Logger,
    **kwargs: Any,
) -> None:
    """Requeue orphans, run Redis housekeeping and cron, and write status."""
    namespace = _ns(namespace)
    worker_pods: kopf.Index[tuple[str, str], str] = kwargs["worker_pods"]
    worker_deployments: kopf.Index[tuple[str, str], Any] = kwargs["worker_deployments"]
    taskqueue_specs: kopf.Index[tuple[str, str], Any] = kwargs["taskqueue_specs"]
    known = reconcile.first(taskqueue_specs.get((namespace, name)))
    if known is None or known["ref"]["metadata"]["uid"] != body["metadata"]["uid"]:
        # The TaskQueue is gone (its finalizer was removed by hand, so kopf could not stop
        # this timer): never sweep a queue nobody declares any more.
        return
    try:
        model = reconcile.parse_spec(spec)
    except reconcile.InvalidSpec:
        return  # reported by the create/update handler
    key = (namespace, name)
    live = list(worker_pods.get(key, []))
    deployment = reconcile.first(worker_deployments.get(key))
    failure = FAILED.get(key)
    held = failure is not None and failure[0] == body["metadata"].get("generation")
    if deployment is None and not held and status.get("observedGeneration") is not None:
        # Only a Deployment that went missing after the handler applied one is restored
        # here: re-applying on any difference could race a spec update with this tick's
        # older body and roll the pods back and forth.
        _restore_fleet(body, model, logger)
    conditions = list(status.get("conditions") or [])
    desired: dict[str, Any] = {}
    schedule_errors: dict[str, str] = {}
    try:
        queue = CONNECTIONS.get(namespace, name, model)
        report = sweeper.sweep_queue(
            queue,
            model,
            live_pods=live,
            suspects=SUSPECTS.get(key, set()),
            pod_gone=_pod_gone_checker(namespace, logger),
            created_at=reconcile.creation_time(body),
            catchup_s=SETTINGS.schedule_catchup_s,
        )
    except kube.SecretUnavailable as error:
        conditions = _redis_down(body, conditions, "SecretUnavailable", str(error))
    except redis.RedisError as error:
        CONNECTIONS.invalidate(namespace, name)  # a rotated Secret is read again next tick
        message = f"cannot reach Redis: {describe_error(error)}"
        conditions = _redis_down(body, conditions, "RedisUnreachable", message)
    else:
        SUSPECTS[key] = report.suspects
        schedule_errors = report.schedule_errors
        for pod, count in report.requeued.items():
            kopf.event(
                body,
                type="Normal",
                reason="Requeued",
                message=f"requeued {count} tasks of pod {pod}: pod {pod} is gone from the API",
            )
        for task_id in report.fired:
            logger.info("schedule fired: task %s", task_id)
        if tqstatus.is_false(conditions, tqstatus.REDIS_REACHABLE):
            kopf.event(
                body, type="Normal", reason="RedisReachable", message="Redis is reachable again"
            )
        conditions = tqstatus.set_condition(
            conditions, tqstatus.REDIS_REACHABLE, True, "Connected", "Redis answers"
        )
        desired.update(tqstatus.queue_counts(report.stats, len(live)))
    replicas, ready = reconcile.deployment_status(model, deployment)
    desired["replicas"] = replicas
    desired["readyReplicas"] = ready
    desired["selector"] = builders.selector_string(name)
    if failure is not None and held:
        _, reason, message = failure
        conditions = tqstatus.set_condition(conditions, tqstatus.READY, False, reason, message)
    elif schedule_errors:
        conditions, news = reconcile.schedules_refused(conditions, schedule_errors)
        if news:
            kopf.warn(body, reason="InvalidSpec", message=news)
    else:
        conditions = reconcile.ready_condition(conditions, model, ready)
    desired["conditions"] = conditions
    for field, value in tqstatus.changes(status, desired).items():
        patch.status[field] = value


def _pod_gone_checker(namespace: str, logger: Logger) -> Callable[[str], bool]:
    """`kube.pod_gone` for the sweep, where an API error means "not known to be gone"."""

    def gone(pod: str) -> bool:
        try:
            return kube.pod_gone(pod, namespace)
        except ApiException as error:
            # The pod stays suspect and is asked about again at the next sweep.
            logger.warning("cannot tell whether pod %s is gone: %s", pod, error.reason)
            return False

    return gone


def _restore_fleet(body: kopf.Body, model: Any, logger: Logger) -> None:
    """Re-apply a worker Deployment that was deleted by someone else."""
    logger.info("worker Deployment missing: applying it again")
    try:
        reconcile.apply_fleet(body, model, CONNECTIONS, logger)
    except (reconcile.NotOwned, reconcile.DeploymentRejected):
        pass  # reported by the create/update handler
    except ApiException as error:
        logger.warning("worker Deployment not restored yet: %s", error.reason)


def _redis_down(
    body: kopf.Body, conditions: list[dict[str, Any]], reason: str, message: str
) -> list[dict[str, Any]]:
    """RedisReachable=False; an event only when the outage starts or changes kind."""
    previous = tqstatus.find(conditions, tqstatus.REDIS_REACHABLE)
    if previous is None or previous.get("status") != "False" or previous.get("reason") != reason:
        kopf.warn(body, reason=reason, message=message)
    return tqstatus.set_condition(conditions, tqstatus.REDIS_REACHABLE, False, reason, message)


# ----------------------------------------------------------------------------- pods


@kopf.on.event("pods", labels={QUEUE_LABEL: kopf.PRESENT})
def worker_pod_event(
    *,
    type: str,
    name: str,
    namespace: str | None,
    labels: Mapping[str, str],
    logger: Logger,
    **kwargs: Any,
) -> None:
    """Fast path: a worker pod deleted from the API gets its tasks requeued at once."""
    if type != "DELETED":
        return
    namespace = _ns(namespace)
    taskqueue_specs: kopf.Index[tuple[str, str], Any] = kwargs["taskqueue_specs"]
    queue_name = labels[QUEUE_LABEL]
    entry = reconcile.first(taskqueue_specs.get((namespace, queue_name)))
    if entry is None:
        return  # not a TaskQueue's pod (any more)
    try:
        model = reconcile.parse_spec(entry["spec"])
        count = CONNECTIONS.get(namespace, queue_name, model).requeue_pod(name)
    except (reconcile.InvalidSpec, kube.SecretUnavailable, redis.RedisError) as error:
        # The sweep takes them back once Redis answers: the worker record stays until then.
        logger.warning("requeue of pod %s deferred: %s", name, describe_error(error))
        return
    if count:
        # A message of its own, so the fast path is told apart from the sweep's requeue.
        message = f"requeued {count} tasks of pod {name}: pod {name} was deleted"
        logger.info(message)
        kopf.event(entry["ref"], type="Normal", reason="Requeued", message=message)
