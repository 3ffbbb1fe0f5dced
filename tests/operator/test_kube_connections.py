"""The operator's own API calls reuse their connections (a real apiserver).

A call made without preloading its reply (``_preload_content=False``) that never reads it
keeps its connection from the pool: the next call then opens a TLS connection of its own.
Sweeps patch a busy queue's status every few seconds, so a handshake per patch is most of
what a sweep costs. What is counted: connections the client opens (urllib3's ``connect``).
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
import urllib3.connection
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from taskfleet_operator import kube
from taskfleet_operator.models import GROUP, PLURAL, VERSION

CALLS = 10


@pytest.fixture
def connects(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many connections the process opens from now on (one entry each)."""
    opened: list[int] = []
    for cls in (urllib3.connection.HTTPConnection, urllib3.connection.HTTPSConnection):
        original = cls.connect

        def connect(self: Any, original: Any = original) -> None:
            opened.append(1)
            original(self)

        monkeypatch.setattr(cls, "connect", connect)
    return opened


def deployment(name: str) -> dict[str, Any]:
    labels = {"app": name}
    container = {"name": "w", "image": "localhost/taskfleet-worker:dev"}
    return {
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "replicas": 0,
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": {"containers": [container]}},
        },
    }


@pytest.mark.usefixtures("taskqueue_crd")
def test_status_patches_and_scales_reuse_one_connection(
    kube_api: Any, kube_namespace: str, connects: list[int]
) -> None:
    # The session's operator (when a test before this one started it) reconciles every
    # TaskQueue: it writes this one's status too and makes a Deployment of its name. So the
    # Deployment scaled here has a name of its own and no queue label, and the status is
    # not read back: each call raises when the API refuses it (the reply is read).
    name = f"q-{uuid.uuid4().hex[:6]}"
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "TaskQueue",
        "metadata": {"name": name, "namespace": kube_namespace},
        "spec": {"image": "x", "handler": "m:f", "redis": {"url": "redis://127.0.0.1:1/0"}},
    }
    client.CustomObjectsApi(kube_api).create_namespaced_custom_object(
        GROUP, VERSION, kube_namespace, PLURAL, body
    )
    scaled_name = f"scaled-{name}"
    client.AppsV1Api(kube_api).create_namespaced_deployment(kube_namespace, deployment(scaled_name))
    connects.clear()  # what creating them opened (they read their replies)

    for i in range(CALLS):
        kube.patch_taskqueue_status(name, kube_namespace, {"requeuedTotal": i})
        kube.scale_deployment(scaled_name, kube_namespace, i % 2)
    # Every call went through (the last scale is what the API holds)...
    scaled = client.AppsV1Api(kube_api).read_namespaced_deployment(scaled_name, kube_namespace)
    assert scaled.spec.replicas == (CALLS - 1) % 2
    # ...over the connection already open (one more at most: the server may close it).
    assert len(connects) <= 1, f"{len(connects)} connections opened for {2 * CALLS} calls"


@pytest.mark.usefixtures("taskqueue_crd")
def test_a_refused_status_patch_raises_and_gives_its_connection_back(
    kube_api: Any, kube_namespace: str, connects: list[int]
) -> None:
    missing = f"missing-{uuid.uuid4().hex[:6]}"
    for _ in range(CALLS):
        with pytest.raises(ApiException) as refused:
            kube.patch_taskqueue_status(missing, kube_namespace, {"requeuedTotal": 1})
        assert refused.value.status == 404
    assert len(connects) <= 1, f"{len(connects)} connections opened for {CALLS} calls"
