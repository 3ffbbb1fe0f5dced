"""Operators sharded by namespace: each serves its own TaskQueues and never sees the
other's (real operator processes against a real apiserver)."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client

from tests.fixtures_kube import KubeApiserver
from tests.fixtures_operator import (
    APISERVER_INTERVAL_S,
    APISERVER_TIMEOUT_S,
    GROUP,
    PLURAL,
    VERSION,
    base_spec,
    running_operator,
)
from tests.polling import wait_for

pytestmark = pytest.mark.apiserver


@pytest.fixture
def two_namespaces(kube_apiserver: KubeApiserver) -> Iterator[tuple[str, str]]:
    names = (f"shard-a-{secrets.token_hex(3)}", f"shard-b-{secrets.token_hex(3)}")
    with kube_apiserver.api_client() as api:
        core = client.CoreV1Api(api)
        for name in names:
            core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
        yield names


def test_operators_scoped_to_disjoint_namespaces_never_touch_each_others_queues(  # noqa: PLR0917
    kube_apiserver: KubeApiserver,
    taskqueue_crd: str,
    operator_kubeconfig: Path,
    two_namespaces: tuple[str, str],
    redis_url: str,
    tmp_path: Path,
) -> None:
    ns_a, ns_b = two_namespaces
    with (
        running_operator(
            kube_apiserver, operator_kubeconfig, tmp_path / "a.log", TASKFLEET_WATCH_NAMESPACES=ns_a
        ) as shard_a,
        running_operator(
            kube_apiserver, operator_kubeconfig, tmp_path / "b.log", TASKFLEET_WATCH_NAMESPACES=ns_b
        ) as shard_b,
        kube_apiserver.api_client() as api,
    ):
        custom = client.CustomObjectsApi(api)
        for namespace, name in ((ns_a, "qa"), (ns_b, "qb")):
            body = {
                "apiVersion": f"{GROUP}/{VERSION}",
                "kind": "TaskQueue",
                "metadata": {"name": name},
                "spec": base_spec(redis_url, replicas=0),
            }
            custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body)

        for shard, served in ((shard_a, f"{ns_a}/qa"), (shard_b, f"{ns_b}/qb")):
            wait_for(
                lambda shard=shard, served=served: f"sweeps of {served} " in shard.tail(10**6),
                timeout=APISERVER_TIMEOUT_S,
                interval=APISERVER_INTERVAL_S,
                what=lambda shard=shard, served=served: (
                    f"the shard serving {served} to sweep it:\n{shard.tail(3000)}"
                ),
            )
        for namespace, name in ((ns_a, "qa"), (ns_b, "qb")):
            custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)

            def gone(namespace: str = namespace, name: str = name) -> bool:
                listed = custom.list_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL)
                return not any(o["metadata"]["name"] == name for o in listed["items"])

            wait_for(
                gone,
                timeout=APISERVER_TIMEOUT_S,
                interval=APISERVER_INTERVAL_S,
                what=f"TaskQueue {namespace}/{name} deleted (its finalizer released)",
            )

        # Neither shard ever saw the other's namespace: not its objects, not its events.
        assert ns_b not in shard_a.tail(10**7), "shard a saw shard b's namespace"
        assert ns_a not in shard_b.tail(10**7), "shard b saw shard a's namespace"
