"""kopf registrations, and nothing else: each handler reads what kopf hands it, calls
`reconcile`, `sweeper` and the pure functions of `status`, and applies what they return.
The ProviderQuota handlers are in `quotahandlers` (registered by importing it here).

Run with ``python -m taskfleet_operator``. Handlers that call Redis or the Kubernetes API
are sync (kopf's thread pool); indexers and handlers that only record or wake run on the
event loop. The sweeps of all TaskQueues run from one loop (`sweeploop`), the autoscaler
of each autoscaled TaskQueue is an async daemon; both run their round trips in the
operator's own pool, and what they remember is in kopf's memos (`memos`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import kopf
import redis

from taskfleet_operator import (
    apisession,
    builders,
    collector,
    disruption,
    heap,
    kube,
    memos,
    providerquotas,
    queuesweep,
    quotahandlers,  # noqa: F401 - importing registers the ProviderQuota handlers
    reconcile,
    scaler,
    sweeper,
    wakeups,
)
from taskfleet_operator import status as tqstatus
from taskfleet_operator.connections import Connections, describe_error
from taskfleet_operator.leadership import Leadership
from taskfleet_operator.metrics import OperatorMetrics
from taskfleet_operator.models import GROUP, PLURAL, QUEUE_LABEL, VERSION
from taskfleet_operator.outages import ServerParked
from taskfleet_operator.settings import (
    configure_kopf,
    exact_names,
    process_settings,
    watched_namespaces,
)

# Read at import: the sweep intervals and thread count are fixed for the process.
SETTINGS = process_settings()

Logger = logging.Logger | logging.LoggerAdapter[Any]
TASKQUEUES = (GROUP, VERSION, PLURAL)


def _apply(body: kopf.Body, patch: kopf.Patch, update: tqstatus.StatusUpdate) -> None:
    """Write a computed status update: its fields to the status patch, its events."""
    for field, value in update.patch.items():
        patch.status[field] = value
    for event in update.events:
        kopf.event(body, type=event.type, reason=event.reason, message=event.message)


async def _ensure_peering(name: str, patience_s: float = 30.0) -> None:
    """The peering object, created if missing. Its CRD may be applied in the same
    `kubectl apply` as this Deployment and not served yet: wait a little for it, then
    stop with one clear line rather than run as a replica that cannot meet the other."""
    deadline = time.monotonic() + patience_s
    while True:
        try:
            created: bool = await asyncio.to_thread(kube.ensure_peering, name)
        except kube.PeeringMissingError as missing:
            if time.monotonic() > deadline:
                raise kopf.PermanentError(str(missing)) from None
            await asyncio.sleep(1)
            continue
        if created:
            logging.getLogger(__name__).info("created ClusterKopfPeering %s", name)
        return


@kopf.on.login()
async def login(**kwargs: Any) -> kopf.AiohttpSession | None:
    """kopf's own login, into a session with a bounded number of connections (`apisession`)."""
    namespaces = watched_namespaces()
    limit = apisession.connection_limit(
        namespaces, SETTINGS.api_connections, exact=exact_names(namespaces)
    )
    return await apisession.login(limit, **kwargs)


@kopf.on.startup()
async def startup(*, settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    configure_kopf(settings, watched_namespaces(), SETTINGS.peering, SETTINGS.peering_lifetime_s)
    if SETTINGS.peering:  # kopf patches the peering object but never creates it
        await _ensure_peering(SETTINGS.peering)
    connections, wakers = Connections(SETTINGS.redis_timeout_s), wakeups.Wakers()
    executor = ThreadPoolExecutor(SETTINGS.sweep_threads, thread_name_prefix="taskfleet")
    closing = threading.Event()
    run = wakeups.in_threads(executor, closing)
    metrics = OperatorMetrics()
    sweeps = queuesweep.make_loop(SETTINGS, settings, connections, wakers, metrics, run)
    loops: tuple[asyncio.Task[None], ...] = (
        asyncio.create_task(sweeps.serve()),
        asyncio.create_task(
            wakeups.poll_demand(wakers, connections, SETTINGS.demand_poll_interval_s, run)
        ),
        asyncio.create_task(
            wakeups.housekeep_idle(wakers, connections, SETTINGS.idle_sweep_interval_s, run)
        ),
        asyncio.create_task(wakeups.probe_servers(wakers, connections, run)),
        asyncio.create_task(heap.trim_loop(run)),  # a burst's freed heap back to the kernel
    )
    if SETTINGS.gc_refreeze_interval_s:  # the long-lived objects out of the collector's walks
        loops += (asyncio.create_task(collector.refreeze_loop(SETTINGS.gc_refreeze_interval_s)),)
    metrics.watch(connections)
    quota_links = providerquotas.QuotaLinks(SETTINGS.redis_timeout_s)
    leadership = Leadership(standalone=not SETTINGS.peering, lifetime_s=SETTINGS.peering_lifetime_s)
    metrics.lead(leadership)
    metrics.watch_quotas(quota_links, leadership)
    if SETTINGS.metrics_port:
        try:
            metrics.serve(SETTINGS.metrics_port)
        except OSError as error:  # the operator runs on without its metrics: say so, once
            logging.getLogger(__name__).error(
                "no metrics endpoint: port %d: %s", SETTINGS.metrics_port, error
            )
    shared = memos.Shared(
        connections,
        wakers,
        executor,
        run,
        loops,
        closing,
        metrics,
        leadership,
        sweeps.first_sweeps,
        quota_links,
        sweeps,
    )
    memos.keep_shared(memo, shared)


@kopf.on.cleanup()
async def cleanup(*, memo: kopf.Memo, **_: Any) -> None:
    shared = memos.shared(memo)
    shared.closing.set()
    for task in shared.loops:
        task.cancel()
    loop = asyncio.get_running_loop()
    await loop.run_in_executor(shared.executor, shared.connections.close)
    await loop.run_in_executor(shared.executor, shared.quota_links.close)
    shared.executor.shutdown(wait=False, cancel_futures=True)


async def _peering_event(*, name: str, memo: kopf.Memo, **_: Any) -> None:
    """An event of this replica's ClusterKopfPeering (a keep-alive of any replica): kopf
    runs this replica's handlers, so it leads (`leadership`)."""
    if name == SETTINGS.peering:
        memos.leadership(memo).seen()


def _own_peering(name: str, **_: Any) -> bool:
    return name == SETTINGS.peering


async def sweep_while_leading(*, memo: kopf.Memo, stopped: kopf.DaemonStopped, **_: Any) -> None:
    """The sweep loop runs while kopf runs this replica's handlers: kopf starts this
    daemon of its ClusterKopfPeering when the replica leads, and stops it with
    ``OPERATOR_PAUSING`` when it pauses for another. Paused, the loop sweeps nothing and
    drops every queue's connection, so this replica's metrics show none of the queues'
    series (two replicas exporting them would double every sum) until it resumes."""
    sweeps, leadership = memos.sweeps(memo), memos.leadership(memo)
    leadership.seen()
    sweeps.resume()
    await stopped.wait()
    if stopped.reason and stopped.reason & kopf.DaemonStoppingReason.OPERATOR_PAUSING:
        leadership.paused()
        await sweeps.pause()


if SETTINGS.peering:  # standalone, the replica always leads and needs no such watch
    kopf.on.event("kopf.dev", "v1", "clusterkopfpeerings")(_peering_event)
    # kopf puts its finalizer on the peering object for this daemon (docs/operator.md).
    kopf.daemon(
        "kopf.dev",
        "v1",
        "clusterkopfpeerings",
        when=_own_peering,
        cancellation_backoff=15,
        cancellation_timeout=5,
    )(sweep_while_leading)


# ----------------------------------------------------------------------------- indexes
# kopf fills every index from a full listing before any handler runs, so a sweep right
# after an operator restart already knows which worker pods exist.
# Indexers and the event handlers that only wake a sweep are async: they do no I/O, and
# kopf runs a sync one in its thread pool, a hop (and a GIL hand-over) per event and
# handler that cost a burst of creations most of its event loop.


def _not_finished(status: kopf.Status, **_: Any) -> bool:
    return not kube.pod_finished(status)


# A pod that stops matching `when` (it failed, e.g. evicted) leaves the index at once.
@kopf.index("pods", labels={QUEUE_LABEL: kopf.PRESENT}, when=_not_finished)
async def worker_pods(
    *, name: str, namespace: str | None, labels: Mapping[str, str], **_: Any
) -> Any:
    """Live worker pods (Terminating ones included, finished ones not) by (namespace, queue)."""
    return {(namespace, labels[QUEUE_LABEL]): name}


@kopf.index("pods", labels={QUEUE_LABEL: kopf.PRESENT}, when=_not_finished)
async def worker_pod_guards(
    *, namespace: str | None, labels: Mapping[str, str], body: kopf.Body, **_: Any
) -> Any:
    """Each live worker pod's disruption-guard annotations by (namespace, queue): the
    sweep patches only pods whose guard must change, without listing pods."""
    guard = disruption.pod_guard(body, labels[QUEUE_LABEL])
    # {} rather than None: kopf keeps an earlier value for None, and drops it for {}.
    return {} if guard is None else {(namespace, labels[QUEUE_LABEL]): guard}


@kopf.index("deployments", labels={QUEUE_LABEL: kopf.PRESENT})
async def worker_deployments(*, name: str, namespace: str | None, body: kopf.Body, **_: Any) -> Any:
    """Worker Deployments' spec.replicas and status replicas by (namespace, name), for
    readiness without polling and to notice a Deployment deleted behind the operator's
    back. Only those three numbers (`status.deployment_entry`): a copy of the status kept
    its conditions, and through them part of each Deployment's last watch event."""
    return {(namespace, name): tqstatus.deployment_entry(body)}


@kopf.on.event("deployments", labels={QUEUE_LABEL: kopf.PRESENT})
async def worker_deployment_event(
    *, name: str, namespace: str | None, memo: kopf.Memo, **_: Any
) -> None:
    """A worker Deployment changed (scaled, rolled, pods ready): sweep its queue now."""
    memos.wakers(memo).wake((kube.namespaced(namespace), name))


@kopf.index(*TASKQUEUES)
async def taskqueue_specs(*, name: str, namespace: str | None, body: kopf.Body, **_: Any) -> Any:
    """TaskQueue specs by (namespace, name), for handlers triggered by pods."""
    return {(namespace, name): {"ref": reconcile.owner_ref(body), "spec": dict(body["spec"])}}


# ----------------------------------------------------------------------------- TaskQueue


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
    status: kopf.Status,
    patch: kopf.Patch,
    memo: kopf.Memo,
    logger: Logger,
    diff: kopf.Diff,
    **kwargs: Any,
) -> None:
    """Validate, apply the Deployment, write the queue's settings to Redis (without a
    read of the Deployment when the index shows none: `reconcile.apply_fleet`)."""
    metrics = memos.metrics(memo)
    with metrics.reconcile_seconds.time():
        try:
            _reconcile(
                body=body,
                spec=spec,
                name=name,
                namespace=kube.namespaced(namespace),
                meta=meta,
                status=status,
                patch=patch,
                memo=memo,
                logger=logger,
                diff=diff,
                absent=(namespace, name) not in kwargs["worker_deployments"],
            )
        except (kopf.PermanentError, kopf.TemporaryError):
            raise  # counted by reason already
        except Exception:  # kopf retries it; counted so an alert sees it
            metrics.reconcile_errors.labels("error").inc()
            raise
        finally:
            # Sweep now: what changed, or the first sweep of a new TaskQueue, which waits
            # for this (applied or refused, the sweep keeps the status from here).
            memos.wakers(memo).wake((kube.namespaced(namespace), name))


def _reconcile(
    *,
    body: kopf.Body,
    spec: kopf.Spec,
    name: str,
    namespace: str,
    meta: kopf.Meta,
    status: kopf.Status,
    patch: kopf.Patch,
    memo: kopf.Memo,
    logger: Logger,
    diff: kopf.Diff,
    absent: bool,
) -> None:
    memory, connections = memos.taskqueue(memo), memos.connections(memo)
    errors = memos.metrics(memo).reconcile_errors
    try:
        model = reconcile.parse_spec(spec)
        reconcile.apply_fleet(body, model, connections, logger, absent=absent)
    except (reconcile.InvalidSpec, reconcile.DeploymentRejected, reconcile.NotOwned) as error:
        errors.labels(type(error).__name__).inc()
        failure = tqstatus.Failure(meta.get("generation"), type(error).__name__, str(error))
        memory.failure = failure
        _apply(body, patch, tqstatus.after_rejection(status, failure, now=tqstatus.now_iso()))
        if isinstance(error, reconcile.NotOwned):  # may be deleted or renamed: try again
            raise kopf.TemporaryError(str(error), delay=30) from None
        raise kopf.PermanentError(str(error)) from None
    memory.failure = None
    ignored = reconcile.replicas_ignored(diff, model)
    if ignored is not None:
        kopf.event(body, type="Normal", reason="ReplicasIgnored", message=ignored)
    try:
        reconcile.configure_queue(namespace, name, model, connections)
    except (redis.RedisError, kube.SecretUnavailable) as error:
        # The sweep retries every few seconds and reports the outage in status.
        if isinstance(error, redis.RedisError):
            connections.report(namespace, name, error)
        # A parked server's status says why, once; not a line per reconcile.
        level = logging.DEBUG if isinstance(error, ServerParked) else logging.INFO
        logger.log(level, "queue settings not written yet: %s", describe_error(error))
    patch.status["selector"] = builders.selector_string(name)
    patch.status["observedGeneration"] = meta.get("generation")


def _autoscaled(spec: kopf.Spec, **_: Any) -> bool:
    return bool(spec.get("autoscale"))


@kopf.daemon(*TASKQUEUES, when=_autoscaled, cancellation_backoff=15, cancellation_timeout=5)
async def autoscale_taskqueue(
    *,
    body: kopf.Body,
    namespace: str | None,
    memo: kopf.Memo,
    logger: Logger,
    stopped: kopf.DaemonStopped,
    **_: Any,
) -> None:
    """Size the worker fleet to the queue's load (`scaler`): at once when an enqueue finds
    no idle worker, else every second; kopf stops it when autoscale is removed."""
    key = (kube.namespaced(namespace), body["metadata"]["name"])

    def event(type_: str, reason: str, message: str) -> None:
        kopf.event(body, type=type_, reason=reason, message=message)

    # A new spell of autoscaling starts afresh: no window or status from an earlier one.
    memory = memos.taskqueue(memo)
    memory.scaler = state = scaler.ScalerState()
    wakers = memos.wakers(memo)
    resumed = wakers.resumed_event(key)  # the probe that finds its Redis again sets it
    try:
        await scaler.serve(
            body,
            memos.connections(memo),
            state,
            logger,
            stopped,
            event=event,
            on_demand=lambda: wakers.wake(key),
            run=memos.blocking(memo),
            resumed=resumed,
        )
    finally:
        wakers.forget_resumed(key, resumed)


def _purge_requested(spec: kopf.Spec, **_: Any) -> bool:
    return bool(spec.get("onDelete") == "Purge")


@kopf.on.delete(*TASKQUEUES, when=_purge_requested, retries=30, backoff=10)
def purge_queue(
    *,
    spec: kopf.Spec,
    name: str,
    namespace: str | None,
    memo: kopf.Memo,
    logger: Logger,
    **_: Any,
) -> None:
    """onDelete: Purge: delete the queue's Redis keys (the finalizer holds until done),
    after the queue's last sweep (the loop let it go at its deletion timestamp)."""
    namespace = kube.namespaced(namespace)
    ending = memos.sweeps(memo).stopped((namespace, name))
    if ending is not None and not ending.wait(timeout=30):
        raise kopf.TemporaryError("its last sweep still runs", delay=5)
    try:
        model = reconcile.parse_spec(spec)
    except reconcile.InvalidSpec:
        logger.warning("spec is invalid: nothing to purge")
        return
    try:
        memos.connections(memo).get(namespace, name, model).purge()
    except (redis.RedisError, kube.SecretUnavailable) as error:
        raise kopf.TemporaryError(
            f"cannot purge the queue yet: {describe_error(error)}", delay=10
        ) from None
    logger.info("purged queue %s", builders.queue_name(namespace, name))


#: The indexes a sweep reads, handed to the sweep loop by `track_taskqueue`.
SWEEP_INDEXES = ("taskqueue_specs", "worker_deployments", "worker_pods", "worker_pod_guards")


@kopf.on.event(*TASKQUEUES)
async def track_taskqueue(
    *,
    type: str,
    body: kopf.Body,
    name: str,
    namespace: str | None,
    memo: kopf.Memo,
    **kwargs: Any,
) -> None:
    """Each event of a TaskQueue: the sweep loop keeps what its sweeps read (`sweeploop`);
    one being deleted leaves the loop. Gone (DELETED): close its connection and drop its
    metric series (kopf drops its memo itself), in a thread.

    No sweep needs kopf's finalizer: a Retain TaskQueue carries none and is deleted at
    once; a Purge one carries it for `purge_queue`, an autoscaled one for its autoscaler.
    A sweep that runs while its queue goes finishes harmlessly (`queuesweep.sweep_once`)."""
    key, sweeps = (kube.namespaced(namespace), name), memos.sweeps(memo)
    for index in SWEEP_INDEXES:
        sweeps.indexes[index] = kwargs[index]
    if type != "DELETED":
        sweeps.track(key, body, memo)
        return
    sweeps.stop(key)
    memos.metrics(memo).forget(builders.queue_name(*key))
    with contextlib.suppress(wakeups.Stopping):  # the cleanup closes every connection
        await memos.blocking(memo)(memos.connections(memo).forget, *key)


# ----------------------------------------------------------------------------- pods


@kopf.on.event("pods", labels={QUEUE_LABEL: kopf.PRESENT})
def worker_pod_event(
    *,
    type: str,
    name: str,
    namespace: str | None,
    labels: Mapping[str, str],
    memo: kopf.Memo,
    logger: Logger,
    **kwargs: Any,
) -> None:
    """Fast path: a worker pod deleted from the API, or finished while still in it (a
    failed pod: evicted, its containers stopped for good), gets its tasks requeued at once.
    Any change of a worker pod wakes its queue's sweep (live pods, readiness)."""
    namespace, queue_name = kube.namespaced(namespace), labels[QUEUE_LABEL]
    memos.wakers(memo).wake((namespace, queue_name))
    finished = kube.pod_finished(kwargs.get("status") or {})
    if type != "DELETED" and not finished:
        return
    entry = reconcile.first(kwargs["taskqueue_specs"].get((namespace, queue_name)))
    if entry is None:
        return  # not a TaskQueue's pod (any more)
    connections = memos.connections(memo)
    try:
        model = reconcile.parse_spec(entry["spec"])
        queue = connections.get(namespace, queue_name, model)
        count = sweeper.requeue_pod_workers(queue, name)
    except (reconcile.InvalidSpec, kube.SecretUnavailable, redis.RedisError) as error:
        # The sweep takes them back once Redis answers: the worker record stays until then.
        if isinstance(error, redis.RedisError):
            connections.report(namespace, queue_name, error)
        logger.warning("requeue of pod %s deferred: %s", name, describe_error(error))
        return
    if count:
        metrics = memos.metrics(memo)
        metrics.count(
            metrics.requeued, builders.queue_name(namespace, queue_name), "pod_gone", amount=count
        )
        # A message of its own, so the fast path is told apart from the sweep's requeue.
        why = "was deleted" if type == "DELETED" else "has stopped (phase Failed)"
        message = f"requeued {count} tasks of pod {name}: pod {name} {why}"
        logger.info(message)
        kopf.event(entry["ref"], type="Normal", reason="Requeued", message=message)
