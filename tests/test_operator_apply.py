"""The reconcile's apply of the worker Deployment against a real apiserver, racing the
autoscaler's write to the same Deployment."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client
from taskfleet_operator import kube, reconcile
from taskfleet_operator.connections import Connections
from taskfleet_operator.models import TaskQueueSpec

from tests.fixtures_kube import KubeApiserver

SPEC = TaskQueueSpec.model_validate(
    {
        "handler": "taskfleet.samples:echo",
        "image": "localhost/taskfleet-worker:dev",
        "redis": {"url": "redis://127.0.0.1:1/0"},
        "autoscale": {"minReplicas": 1, "maxReplicas": 10},
    }
)


@pytest.fixture
def api(kube_apiserver: KubeApiserver, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """The operator's kube module pointed at the test apiserver."""
    with kube_apiserver.api_client() as api_client:
        monkeypatch.setattr(kube, "_api_client", lambda: api_client)
        yield api_client


def taskqueue(namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "taskfleet.dev/v1alpha1",
        "kind": "TaskQueue",
        "metadata": {"name": "racing", "namespace": namespace, "uid": str(uuid.uuid4())},
        "spec": {},
    }


def test_an_apply_racing_the_autoscaler_keeps_the_replicas_the_autoscaler_just_set(
    api: Any, kube_namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The reconcile reads the Deployment, the autoscaler scales it, the reconcile applies:
    the apply must not set back the autoscaler's replicas from its stale read.

    The interleaving is forced (a real scale lands between the real read and the real
    apply, once); the conflict and everything after it are the apiserver's own."""
    body = taskqueue(kube_namespace)
    log = logging.getLogger("test")
    connections = Connections(timeout_s=1.0)
    reconcile.apply_fleet(body, SPEC, connections, log)  # created at minReplicas
    apps = client.AppsV1Api(api)
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
    api: Any, kube_namespace: str, monkeypatch: pytest.MonkeyPatch
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
