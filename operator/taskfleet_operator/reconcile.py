"""Turning a TaskQueue into its fleet: the spec read into the model, the worker
Deployment applied, the queue's settings written to Redis.

Plain typed functions that take the TaskQueue body and the validated spec and talk to
the API or Redis; kopf specifics (events, errors with retry delays, the patch object)
stay in handlers.py, what to write to status in `status`.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import kopf
import redis
from kubernetes.client.exceptions import ApiException
from pydantic import ValidationError
from taskfleet.protocol.workernames import per_pod

from taskfleet_operator import builders, kube
from taskfleet_operator.connections import Connections, describe_error
from taskfleet_operator.models import TaskQueueSpec
from taskfleet_operator.status import Failure

Logger = logging.Logger | logging.LoggerAdapter[Any]


class InvalidSpec(Exception):  # noqa: N818 - reported as the condition reason
    """The spec cannot be turned into a fleet; the message says what to fix."""


class DeploymentRejected(Exception):  # noqa: N818 - reported as the condition reason
    """The apiserver refused the Deployment built from the spec (e.g. bad resources)."""


class NotOwned(Exception):  # noqa: N818 - reported as the condition reason
    """A Deployment of the same name exists and belongs to something else."""


def parse_spec(raw: Mapping[str, Any]) -> TaskQueueSpec:
    try:
        return TaskQueueSpec.model_validate(dict(raw))
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in error['loc']) or 'spec'}: {error['msg']}"
            for error in exc.errors()
        )
        raise InvalidSpec(f"invalid spec: {problems}") from None


def owner_ref(body: Mapping[str, Any]) -> dict[str, Any]:
    """The few fields of a TaskQueue kopf needs to post an event about it."""
    meta = body["metadata"]
    return {
        "apiVersion": body["apiVersion"],
        "kind": body["kind"],
        "metadata": {"name": meta["name"], "namespace": meta["namespace"], "uid": meta["uid"]},
    }


def _owned_by(deployment: Mapping[str, Any], uid: str) -> bool:
    refs = deployment.get("metadata", {}).get("ownerReferences") or []
    return any(ref.get("uid") == uid for ref in refs)


def set_deletion_costs(namespace: str, name: str, queue: Any, logger: Logger) -> int:
    """Annotate every worker pod with its in-flight count as pod-deletion-cost.

    The ReplicaSet controller removes the cheapest pods first on scale-down, so idle
    workers go and busy ones keep running (drain would save their tasks anyway, but
    finishing beats re-running).
    """
    # Labelled like a worker but owned by no ReplicaSet of ours: not ours to rank.
    pods = [
        pod
        for pod in kube.list_pods(namespace, builders.selector_string(name))
        if builders.owns_worker_pod(pod, name)
    ]
    # From the queue's records, not the heartbeats: a task claimed since a pod's last
    # beat must already make it costly.
    # By worker, summed by pod: a pod's worker processes are workers of their own.
    inflight = per_pod(queue.held_by(worker.pod for worker in queue.workers()))
    annotated = 0
    for pod in pods:
        pod_name = pod["metadata"]["name"]
        cost = builders.deletion_cost(inflight.get(pod_name))
        current = (pod["metadata"].get("annotations") or {}).get(builders.DELETION_COST_ANNOTATION)
        if current == cost:
            continue
        if kube.set_pod_deletion_cost(
            pod_name,
            namespace,
            uid=pod["metadata"]["uid"],
            queue=name,
            annotation=builders.DELETION_COST_ANNOTATION,
            cost=cost,
        ):
            annotated += 1
    logger.debug("pod-deletion-cost set on %d pods", annotated)
    return annotated


#: Attempts at applying the Deployment when another writer (the autoscaler) changed it
#: between our read and our apply.
APPLY_ATTEMPTS = 5

#: A resourceVersion no object ever has (the largest the apiserver parses): as the apply's
#: precondition it creates the Deployment if none exists and is refused (409) otherwise.
NO_OBJECT_VERSION = str(2**64 - 1)


def apply_fleet(
    body: Mapping[str, Any],
    spec: TaskQueueSpec,
    connections: Connections,
    logger: Logger,
    *,
    absent: bool = False,
) -> dict[str, Any]:
    """Create or update the worker Deployment; on scale-down set deletion costs first.

    The replicas applied depend on the Deployment read (an autoscaled queue keeps what
    the autoscaler set), so the apply carries that read's resourceVersion: if the
    autoscaler scaled in between, the apiserver answers 409 and we read and apply again,
    instead of setting back the replicas it just changed.

    ``absent``: the caller's index shows no Deployment (a new TaskQueue). Then the first
    apply creates it without a read, with a precondition no existing object meets: any
    Deployment of that name (a foreign one, or ours not indexed yet) makes it 409, and the
    read-and-apply below decides as always (`NotOwned`). A burst of creations saves a
    round trip each.
    """
    if absent:
        created = _create_fleet(body, spec)
        if created is not None:
            return created
        logger.debug("a Deployment of that name exists; reading it")
    for attempt in range(1, APPLY_ATTEMPTS + 1):
        try:
            return _apply_fleet_once(body, spec, connections, logger)
        except ApiException as exc:
            if exc.status != 409 or attempt == APPLY_ATTEMPTS:
                raise
            logger.debug("worker Deployment changed while applying; reading it again")
    raise AssertionError("unreachable")  # pragma: no cover - the loop returns or raises


def _apply_fleet_once(
    body: Mapping[str, Any],
    spec: TaskQueueSpec,
    connections: Connections,
    logger: Logger,
) -> dict[str, Any]:
    meta = body["metadata"]
    name, namespace, uid = meta["name"], meta["namespace"], meta["uid"]
    existing = kube.read_deployment(name, namespace)
    if existing is not None and not _owned_by(existing, uid):
        raise NotOwned(
            f"Deployment {namespace}/{name} exists and is not owned by this TaskQueue: "
            "delete or rename that Deployment"
        )
    deployed = None if existing is None else int(existing.get("spec", {}).get("replicas") or 0)
    replicas = builders.fleet_replicas(spec, deployed)
    if deployed is not None and deployed > replicas:
        try:
            set_deletion_costs(namespace, name, connections.get(namespace, name, spec), logger)
        except (redis.RedisError, kube.SecretUnavailable) as exc:
            # Scaling down still proceeds: draining keeps every task safe either way.
            logger.warning("scale-down without deletion costs: %s", describe_error(exc))
    deployment = builders.build_deployment(name, namespace, spec, replicas=replicas)
    if existing is not None:  # a precondition: 409 if anyone wrote it since our read
        deployment["metadata"]["resourceVersion"] = existing["metadata"]["resourceVersion"]
    return _apply_owned(body, deployment)


def _create_fleet(body: Mapping[str, Any], spec: TaskQueueSpec) -> dict[str, Any] | None:
    """The Deployment created by an apply that no existing one accepts; None if one exists."""
    meta = body["metadata"]
    replicas = builders.fleet_replicas(spec, None)
    deployment = builders.build_deployment(meta["name"], meta["namespace"], spec, replicas=replicas)
    deployment["metadata"]["resourceVersion"] = NO_OBJECT_VERSION
    try:
        return _apply_owned(body, deployment)
    except ApiException as exc:
        if exc.status == 409:
            return None
        raise


def _apply_owned(body: Mapping[str, Any], deployment: dict[str, Any]) -> dict[str, Any]:
    """Apply the Deployment as the TaskQueue's; a refusal of its content: `DeploymentRejected`."""
    kopf.adopt(deployment, owner=dict(body))  # type: ignore[arg-type]
    try:
        return kube.apply_deployment(deployment)
    except ApiException as exc:
        # 400/422: invalid. 500 "failed to convert" / "failed to create typed patch
        # object": a value the typed Deployment cannot even hold (the apiserver answers
        # server-side apply of such a value that way, e.g. a string where spec.template's
        # opaque parts need a number).
        if exc.status in (400, 422) or any(text in _api_message(exc) for text in _UNTYPEABLE):
            # Pass-through fields (resources, env, scheduling) are only checked here.
            raise DeploymentRejected(
                f"the worker Deployment was rejected: {_api_message(exc)}"
            ) from None
        raise


_UNTYPEABLE = ("failed to convert", "failed to create typed patch object")


def _api_message(exc: ApiException) -> str:
    try:
        return str(json.loads(exc.body or "")["message"])
    except (TypeError, ValueError, KeyError):
        return str(exc.reason)


def restore_fleet(
    body: Mapping[str, Any], spec: TaskQueueSpec, connections: Connections, logger: Logger
) -> None:
    """Re-apply a worker Deployment that was deleted by someone else."""
    logger.info("worker Deployment missing: applying it again")
    try:
        apply_fleet(body, spec, connections, logger)
    except (NotOwned, DeploymentRejected):
        pass  # reported by the create/update handler
    except ApiException as error:
        logger.warning("worker Deployment not restored yet: %s", error.reason)


def deployment_lost(
    deployment: Mapping[str, Any] | None,
    failure: Failure | None,
    status: Mapping[str, Any],
) -> bool:
    """Whether the sweep should apply the Deployment again.

    Only a Deployment that went missing after the handler applied one (and not one the
    handler failed to apply for this generation) is restored by the sweep: re-applying on
    any difference could race a spec update with the sweep's older body and roll the
    pods back and forth.
    """
    return deployment is None and failure is None and status.get("observedGeneration") is not None


def configure_queue(
    namespace: str, name: str, spec: TaskQueueSpec, connections: Connections
) -> None:
    """Write the spec's shared settings to the queue's config hash, and what its groups are
    fair by (the operator is their one writer)."""
    queue = connections.get(namespace, name, spec)
    queue.configure(builders.queue_config(spec))
    queue.set_fair_by(builders.queue_fair_by(spec))


def still_declared(entries: Iterable[Any] | None, body: Mapping[str, Any]) -> bool:
    """Whether the TaskQueue index still holds this very object (same uid).

    A TaskQueue whose finalizer was removed by hand is gone before kopf can stop its
    loop: a queue nobody declares any more is never swept.
    """
    known = first(entries)
    return known is not None and bool(known["ref"]["metadata"]["uid"] == body["metadata"]["uid"])


def first(values: Iterable[Any] | None) -> Any:
    for value in values or ():
        return value
    return None


def replicas_ignored(diff: Iterable[Sequence[Any]], spec: TaskQueueSpec) -> str | None:
    """What to tell a user who changed ``spec.replicas`` (``kubectl scale``) of an
    autoscaled queue, whose pod count is the autoscaler's; None otherwise."""
    if spec.autoscale is None:
        return None
    for change in diff:
        if len(change) > 1 and tuple(change[1]) == ("spec", "replicas"):
            return (
                f"spec.replicas ({spec.replicas}) is ignored while spec.autoscale is set: "
                f"the autoscaler keeps {spec.autoscale.min_replicas}.."
                f"{spec.autoscale.max_replicas} pods; change autoscale.minReplicas or "
                "maxReplicas instead"
            )
    return None
