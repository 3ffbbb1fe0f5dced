"""Typed shortcuts over the test apiserver for one namespace, with the operator running:
what the operator tests create, read and wait on.

No kubelet or controller-manager runs in this tier: Deployments get no pods, so worker
pods are created by hand (they stay Pending) and act in Redis through the Broker API
under their pod names.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from taskfleet.producer.queue import Queue

from tests.fixtures_kube import KubeApiserver
from tests.fixtures_operator import GROUP, PLURAL, VERSION, OperatorProcess


class Cluster:
    """Typed shortcuts over the API for one test namespace."""

    def __init__(self, api: client.ApiClient, namespace: str) -> None:
        self.namespace = namespace
        self.core = client.CoreV1Api(api)
        self.apps = client.AppsV1Api(api)
        self.custom = client.CustomObjectsApi(api)

    def create_tq(self, name: str, spec: dict[str, Any]) -> dict[str, Any]:
        body = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "TaskQueue",
            "metadata": {"name": name},
            "spec": spec,
        }
        created: Any = self.custom.create_namespaced_custom_object(
            GROUP, VERSION, self.namespace, PLURAL, body
        )
        return dict(created)

    def tq(self, name: str) -> dict[str, Any]:
        body: Any = self.custom.get_namespaced_custom_object(
            GROUP, VERSION, self.namespace, PLURAL, name
        )
        return dict(body)

    def patch_tq(self, name: str, spec: dict[str, Any]) -> None:
        self.custom.patch_namespaced_custom_object(
            GROUP, VERSION, self.namespace, PLURAL, name, {"spec": spec}
        )

    def condition(self, name: str, kind: str) -> dict[str, Any] | None:
        for condition in self.tq(name).get("status", {}).get("conditions", []):
            if condition["type"] == kind:
                found: dict[str, Any] = condition
                return found
        return None

    def deployment(self, name: str) -> Any:
        try:
            return self.apps.read_namespaced_deployment(name, self.namespace)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def create_pod(self, pod: str, queue: str, *, finalizers: list[str] | None = None) -> Any:
        """A worker pod as the Deployment's ReplicaSet would make it (no controller-manager
        here: the ReplicaSet is named, not created; nothing collects the pod for that)."""
        owner = client.V1OwnerReference(
            api_version="apps/v1",
            kind="ReplicaSet",
            name=f"{queue}-5d8f7c9b4",
            uid="00000000-0000-4000-8000-000000000001",
            controller=True,
        )
        body = client.V1Pod(
            metadata=client.V1ObjectMeta(
                name=pod,
                labels={"taskfleet.dev/queue": queue, "pod-template-hash": "5d8f7c9b4"},
                annotations={"taskfleet.dev/spec-hash": "0"},
                owner_references=[owner],
                finalizers=finalizers,
            ),
            spec=client.V1PodSpec(
                containers=[client.V1Container(name="worker", image="localhost/none:dev")]
            ),
        )
        return self.core.create_namespaced_pod(self.namespace, body)

    def pod(self, name: str) -> Any:
        return self.core.read_namespaced_pod(name, self.namespace)

    def event_messages(self, reason: str) -> list[str]:
        events = self.core.list_namespaced_event(self.namespace).items
        return [str(event.message) for event in events if event.reason == reason]


@pytest.fixture
def cluster(
    kube_apiserver: KubeApiserver, operator_process: OperatorProcess, tq_namespace: str
) -> Iterator[Cluster]:
    with kube_apiserver.api_client() as api:
        yield Cluster(api, tq_namespace)


@pytest.fixture
def queue_of(redis_url: str) -> Iterator[Callable[[str, str], Queue]]:
    queues: list[Queue] = []

    def make(namespace: str, name: str) -> Queue:
        queue = Queue(f"{namespace}.{name}", redis_url)
        queues.append(queue)
        return queue

    yield make
    for queue in queues:
        queue.close()


def hold_tasks(make_broker: Callable[..., Any], queue: Queue, pod: str, n: int) -> Any:
    """Enqueue n tasks and claim them as worker ``pod``; returns the broker."""
    for i in range(n):
        queue.enqueue({"i": i})
    broker = make_broker(queue.name, pod=pod)
    broker.register(4)
    assert len(broker.claim(n).tasks) == n
    return broker
