"""The few Kubernetes API calls the handlers make, through the official client.

kopf watches and patches the TaskQueues itself; this module covers what kopf does not:
applying the Deployment, reading a Secret, annotating pods. A 404 on something that
vanished meanwhile is not an error: it is logged at debug and reported as "absent".
"""

from __future__ import annotations

import base64
import functools
import json
import logging
import os
import threading
from collections.abc import Callable, Mapping
from typing import Any

import kopf
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from taskfleet_operator.models import GROUP, PLURAL, QUEUE_LABEL, VERSION

FIELD_MANAGER = "taskfleet-operator"
#: (connect, read) seconds for every call: the client has no default, and a half-open
#: connection must not hang a sweep or an autoscaler turn for good.
REQUEST_TIMEOUT = (10.0, 30.0)
AUTOSCALER_FIELD_MANAGER = "taskfleet-autoscaler"

_log = logging.getLogger(__name__)
_lock = threading.Lock()


class SecretUnavailable(Exception):  # noqa: N818 - a condition reason, not a crash
    """The Redis Secret (or its key) is missing; the message says which and what to do."""


#: Connections kept to the apiserver: one per thread that calls it at once (kopf's handler
#: threads and the operator's sweep threads, 16 each). The client's default, five per CPU,
#: made a burst open and drop a TLS connection per call beyond it.
POOL_CONNECTIONS = 40


@functools.cache
def _api_client() -> client.ApiClient:
    """One API client for the process: in-cluster credentials, else the kubeconfig."""
    with _lock:
        configuration = client.Configuration()
        if os.environ.get("KUBERNETES_SERVICE_HOST"):
            config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
        else:
            config.load_kube_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
        configuration.connection_pool_maxsize = POOL_CONNECTIONS
        return client.ApiClient(configuration)


def core() -> client.CoreV1Api:
    return client.CoreV1Api(_api_client())


def custom() -> client.CustomObjectsApi:
    return client.CustomObjectsApi(_api_client())


def apps() -> client.AppsV1Api:
    return client.AppsV1Api(_api_client())


def read_deployment(name: str, namespace: str) -> dict[str, Any] | None:
    try:
        body: dict[str, Any] = json.loads(_raw(apps().read_namespaced_deployment, name, namespace))
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise
    return body


def apply_deployment(body: dict[str, Any]) -> dict[str, Any]:
    """Server-side apply: fields the operator stopped setting are removed, others' kept."""
    reply = _raw(
        apps().patch_namespaced_deployment,
        body["metadata"]["name"],
        body["metadata"]["namespace"],
        body,
        field_manager=FIELD_MANAGER,
        force=True,
        _content_type="application/apply-patch+yaml",
    )
    applied: dict[str, Any] = json.loads(reply)
    return applied


def scale_deployment(name: str, namespace: str, replicas: int) -> None:
    """Set a worker Deployment's replicas (the autoscaler's one write to it)."""
    _raw(
        apps().patch_namespaced_deployment,
        name,
        namespace,
        {"spec": {"replicas": replicas}},
        field_manager=AUTOSCALER_FIELD_MANAGER,
    )


def patch_taskqueue_status(name: str, namespace: str, status: dict[str, Any]) -> None:
    """Merge ``status`` into a TaskQueue's status (a sweep's counts and conditions, the
    autoscaler's decision)."""
    _raw(
        custom().patch_namespaced_custom_object_status,
        GROUP,
        VERSION,
        namespace,
        PLURAL,
        name,
        {"status": status},
    )


PEERING_GROUP, PEERING_VERSION, PEERING_PLURAL = "kopf.dev", "v1", "clusterkopfpeerings"


class PeeringMissingError(RuntimeError):
    """The ClusterKopfPeering CRD is not installed, so replicas cannot meet."""


def ensure_peering(name: str) -> bool:
    """Create the ClusterKopfPeering the operator's replicas meet in, unless it exists
    (kopf only patches it): True if this call created it."""
    body = {
        "apiVersion": f"{PEERING_GROUP}/{PEERING_VERSION}",
        "kind": "ClusterKopfPeering",
        "metadata": {"name": name, "labels": {"app.kubernetes.io/part-of": "taskfleet"}},
    }
    try:
        _raw(
            custom().create_cluster_custom_object,
            PEERING_GROUP,
            PEERING_VERSION,
            PEERING_PLURAL,
            body,
        )
    except ApiException as error:
        if error.status == 409:
            return False
        if error.status == 404:
            raise PeeringMissingError(
                "TASKFLEET_PEERING is set but the ClusterKopfPeering CRD (kopf.dev) is not "
                "installed: `kubectl apply -k manifests/` installs it; or unset "
                "TASKFLEET_PEERING to run a single replica standalone"
            ) from None
        raise
    return True


def list_pods(namespace: str, selector: str) -> list[dict[str, Any]]:
    reply = _raw(core().list_namespaced_pod, namespace, label_selector=selector)
    items: list[dict[str, Any]] = json.loads(reply).get("items", [])
    return items


#: Phases after which none of a pod's containers runs again (restartPolicy aside).
FINISHED_PHASES = frozenset({"Failed", "Succeeded"})


def pod_finished(status: Mapping[str, Any]) -> bool:
    """Whether a pod's status says it has stopped for good (e.g. evicted: Failed)."""
    return status.get("phase") in FINISHED_PHASES


def pod_gone(name: str, namespace: str) -> bool:
    """True only if the API answers 404 for the pod, or shows it finished: the index may
    lag, the API does not."""
    try:
        read: dict[str, Any] = json.loads(_raw(core().read_namespaced_pod, name, namespace))
    except ApiException as exc:
        if exc.status == 404:
            return True
        raise
    return pod_finished(read.get("status") or {})


def set_pod_deletion_cost(
    name: str, namespace: str, *, uid: str, queue: str, annotation: str, cost: str
) -> bool:
    """Set one annotation of one worker pod, and nothing else; False if the pod is gone or
    is no longer that worker pod (`set_pod_annotations`). Worker pods always have
    annotations (the spec hash), so ``add`` sets just this key."""
    return set_pod_annotations(
        name, namespace, uid=uid, queue=queue, annotations={annotation: cost}
    )


def set_pod_annotations(
    name: str, namespace: str, *, uid: str, queue: str, annotations: Mapping[str, str | None]
) -> bool:
    """Set (a value) or remove (None) annotations of one worker pod, and nothing else;
    False if the pod is gone, is no longer that worker pod, or lacks a key to remove (the
    caller reads again and decides again).

    A JSON patch whose ``test`` operations make the apiserver apply it only to the pod
    listed (same uid) while it still carries the queue's label: the ``pods: patch`` the
    operator holds is only ever used for its own annotations of its own workers (the
    admission policy in manifests/rbac/ enforces the same for the whole account).
    """
    body: list[dict[str, Any]] = [
        {"op": "test", "path": "/metadata/uid", "value": uid},
        {"op": "test", "path": f"/metadata/labels/{_pointer(QUEUE_LABEL)}", "value": queue},
    ]
    for key, value in annotations.items():
        path = f"/metadata/annotations/{_pointer(key)}"
        body.append(
            {"op": "remove", "path": path}
            if value is None
            else {"op": "add", "path": path, "value": value}
        )
    try:
        core().patch_namespaced_pod(
            name,
            namespace,
            body,
            _content_type="application/json-patch+json",
            _request_timeout=REQUEST_TIMEOUT,
        )
    except ApiException as exc:
        if exc.status in (404, 422):
            _log.debug("pod %s/%s not annotated: %s", namespace, name, exc.reason)
            return False
        raise
    return True


def _pointer(key: str) -> str:
    """A map key as one JSON-pointer segment (RFC 6901)."""
    return key.replace("~", "~0").replace("/", "~1")


def read_secret_value(namespace: str, name: str, key: str) -> str:
    """One key of a Secret, decoded. The value is never logged."""
    try:
        secret = core().read_namespaced_secret(name, namespace, _request_timeout=REQUEST_TIMEOUT)
    except ApiException as exc:
        if exc.status in (403, 404):
            raise SecretUnavailable(
                f"Secret {namespace}/{name} for redis.secretRef is missing or unreadable: "
                f"create it with key {key!r} holding the Redis URL"
            ) from None
        raise
    data = secret.data or {}
    if key not in data:
        raise SecretUnavailable(
            f"Secret {namespace}/{name} has no key {key!r}: add it (the Redis URL) "
            "or set redis.secretRef.key"
        )
    return base64.b64decode(data[key]).decode()


def _raw(call: Callable[..., Any], *args: Any, **kwargs: Any) -> bytes:
    """Make one API call and return its reply's body, read whole, as the server sent it.

    The client's models are skipped (``_preload_content`` off: the JSON is parsed, or not
    looked at, instead of becoming objects). Every such call goes through here because the
    reply must be read even when it is not wanted: one left unread never gives its
    connection back, and the next call opens a TLS connection of its own (a handshake per
    status patch of a sweep). A refused call raises ``ApiException`` as usual."""
    response = call(*args, _preload_content=False, _request_timeout=REQUEST_TIMEOUT, **kwargs)
    body: bytes = response.data
    return body


def namespaced(namespace: str | None) -> str:
    """A namespaced object's namespace (TaskQueues, ProviderQuotas, worker pods and
    Deployments all are), which kopf types as optional."""
    if not namespace:
        raise kopf.PermanentError("a namespaced object without a namespace")
    return namespace
