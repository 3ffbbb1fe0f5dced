"""The reconcile's apply of the worker Deployment against a real apiserver, racing the
autoscaler's write to the same Deployment."""

from __future__ import annotations

import logging
import uuid
from typing import Any

import pytest
from kubernetes import client
from taskfleet_operator import kube, reconcile
from taskfleet_operator.connections import Connections
from taskfleet_operator.models import TaskQueueSpec

SPEC = TaskQueueSpec.model_validate(
    {
        "handler": "taskfleet.samples:echo",
        "image": "localhost/taskfleet-worker:dev",
        "redis": {"url": "redis://127.0.0.1:1/0"},
        "autoscale": {"minReplicas": 1, "maxReplicas": 10},
    }
)


def taskqueue(namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "taskfleet.dev/v1alpha1",
        "kind": "TaskQueue",
        "metadata": {"name": "racing", "namespace": namespace, "uid": str(uuid.uuid4())},
        "spec": {},
    }


def test_an_apply_racing_the_autoscaler_keeps_the_replicas_the_autoscaler_just_set(
    kube_api: Any, kube_namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The reconcile reads the Deployment, the autoscaler scales it, the reconcile applies:
    the apply must not set back the autoscaler's replicas from its stale read.

    The interleaving is forced (a real scale lands between the real read and the real
    apply, once); the conflict and everything after it are the apiserver's own."""
    body = taskqueue(kube_namespace)
    log = logging.getLogger("test")
    connections = Connections(timeout_s=1.0)
    reconcile.apply_fleet(body, SPEC, connections, log)  # created at minReplicas
    apps = client.AppsV1Api(kube_api)
    assert apps.read_namespaced_deployment("racing", kube_namespace).spec.replicas == 1

    real_read, reads = kube.read_deployment, []

    def read_then_autoscaler_scales(name: str, namespace: str) -> dict[str, Any] | None:
        seen = real_read(name, namespace)
        reads.append(seen)
        if len(reads) == 1:
            kube.scale_deployment(name, namespace, 7)  # lands after our read
        return seen

    monkeypatch.setattr(kube, "read_deployment", read_then_autoscaler_scales)
    reconcile.apply_fleet(body, SPEC, connections, log)

    assert apps.read_namespaced_deployment("racing", kube_namespace).spec.replicas == 7
    assert len(reads) == 2  # the conflict made it read again, and apply once more
    connections.close()


def test_an_apply_that_keeps_conflicting_gives_up_with_the_conflict(
    kube_api: Any, kube_namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Deployment rewritten between every read and apply: the apply stops after a bound
    and raises the 409 (kopf retries the handler later), it does not loop for ever."""
    body = taskqueue(kube_namespace)
    log = logging.getLogger("test")
    connections = Connections(timeout_s=1.0)
    reconcile.apply_fleet(body, SPEC, connections, log)
    real_read, reads = kube.read_deployment, []

    def read_then_scale_every_time(name: str, namespace: str) -> dict[str, Any] | None:
        seen = real_read(name, namespace)
        reads.append(seen)
        kube.scale_deployment(name, namespace, 2 + len(reads) % 2)
        return seen

    monkeypatch.setattr(kube, "read_deployment", read_then_scale_every_time)
    with pytest.raises(client.exceptions.ApiException) as raised:
        reconcile.apply_fleet(body, SPEC, connections, log)
    assert raised.value.status == 409
    assert len(reads) == reconcile.APPLY_ATTEMPTS
    connections.close()


def test_a_deployment_the_index_does_not_show_is_created_without_a_read(
    kube_api: Any, kube_namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    body = taskqueue(kube_namespace)
    reads: list[str] = []
    real_read = kube.read_deployment
    monkeypatch.setattr(kube, "read_deployment", lambda n, ns: reads.append(n) or real_read(n, ns))
    connections = Connections(timeout_s=1.0)
    reconcile.apply_fleet(body, SPEC, connections, logging.getLogger("test"), absent=True)

    created = client.AppsV1Api(kube_api).read_namespaced_deployment("racing", kube_namespace)
    assert reads == []
    assert [ref.uid for ref in created.metadata.owner_references] == [body["metadata"]["uid"]]
    assert {(m.manager, m.operation) for m in created.metadata.managed_fields} >= {
        (kube.FIELD_MANAGER, "Apply")
    }
    # Ours already there though the index did not show it yet: read and applied as always,
    # the autoscaler's replicas kept.
    kube.scale_deployment("racing", kube_namespace, 7)
    reconcile.apply_fleet(body, SPEC, connections, logging.getLogger("test"), absent=True)
    assert reads == ["racing"]
    kept = client.AppsV1Api(kube_api).read_namespaced_deployment("racing", kube_namespace)
    assert kept.spec.replicas == 7
    connections.close()


def test_a_foreign_deployment_the_index_does_not_show_is_never_taken_over(
    kube_api: Any, kube_namespace: str
) -> None:
    apps = client.AppsV1Api(kube_api)
    labels = {"app": "theirs"}
    apps.create_namespaced_deployment(
        kube_namespace,
        {
            "metadata": {"name": "racing", "labels": labels},
            "spec": {
                "replicas": 0,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {"containers": [{"name": "c", "image": "theirs:1"}]},
                },
            },
        },
    )
    before = apps.read_namespaced_deployment("racing", kube_namespace)
    connections = Connections(timeout_s=1.0)
    with pytest.raises(reconcile.NotOwned):
        reconcile.apply_fleet(
            taskqueue(kube_namespace), SPEC, connections, logging.getLogger("test"), absent=True
        )
    after = apps.read_namespaced_deployment("racing", kube_namespace)
    assert after.metadata.resource_version == before.metadata.resource_version
    assert not after.metadata.owner_references
    connections.close()
