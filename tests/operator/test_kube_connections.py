"""The operator's own API calls reuse their connections (a real apiserver).

A call made without preloading its reply (``_preload_content=False``) that never reads it
keeps its connection from the pool: the next call then opens a TLS connection of its own.
Sweeps patch a busy queue's status every few seconds, so a handshake per patch is most of
what a sweep costs. What is counted: connections the client opens (urllib3's ``connect``).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import urllib3.connection
from kubernetes import client
from taskfleet_operator import kube
from taskfleet_operator.models import GROUP, PLURAL, VERSION

from tests.fixtures_kube import KubeApiserver

CALLS = 10


@pytest.fixture
def api(kube_apiserver: KubeApiserver, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """The operator's kube module pointed at the test apiserver."""
    with kube_apiserver.api_client() as api_client:
        monkeypatch.setattr(kube, "_api_client", lambda: api_client)
        yield api_client


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
    api: Any, kube_namespace: str, connects: list[int]
) -> None:
    name = f"q-{uuid.uuid4().hex[:6]}"
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "TaskQueue",
        "metadata": {"name": name, "namespace": kube_namespace},
        "spec": {"image": "x", "handler": "m:f", "redis": {"url": "redis://127.0.0.1:1/0"}},
    }
    client.CustomObjectsApi(api).create_namespaced_custom_object(
        GROUP, VERSION, kube_namespace, PLURAL, body
    )
    client.AppsV1Api(api).create_namespaced_deployment(kube_namespace, deployment(name))
    connects.clear()  # what creating them opened (they read their replies)

    for i in range(CALLS):
        kube.patch_taskqueue_status(name, kube_namespace, {"replicas": i})
        kube.scale_deployment(name, kube_namespace, i % 2)
    # Every call went through (the last of each is what the API holds)...
    read = client.CustomObjectsApi(api).get_namespaced_custom_object_status(
        GROUP, VERSION, kube_namespace, PLURAL, name
    )
    assert read["status"]["replicas"] == CALLS - 1
    scaled = client.AppsV1Api(api).read_namespaced_deployment(name, kube_namespace)
    assert scaled.spec.replicas == (CALLS - 1) % 2
    # ...over the connection already open (one more at most: the server may close it).
    assert len(connects) <= 1, f"{len(connects)} connections opened for {2 * CALLS} calls"
