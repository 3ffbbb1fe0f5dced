"""A TaskQueue on a Redis Cluster running in Kubernetes: six Redis pods (a StatefulSet of
the image the suite already uses), clustered with ``redis-cli --cluster create`` on their
pod IPs (3 masters, 3 replicas); the TaskQueue's ``redis.url`` names the cluster's Service
with ``?cluster=true``. Tasks enqueued from inside a worker pod (the cluster's nodes
announce pod IPs, reachable only in the cluster) are all done."""

from __future__ import annotations

import json
import os
from typing import Any

from e2e.lib.fleet import Operator, taskqueue_manifest
from e2e.lib.kube import CLUSTER_ERRORS, CLUSTER_INTERVAL_S, VERSIONS, Kube, is_ready
from tests.polling import wait_for

pytest_plugins = ["e2e.lib.fixtures"]

NODES = 6
# The image the suite's own Redis runs (e2e.lib.fixtures reads it the same way).
REDIS_IMAGE = os.environ.get("TASKFLEET_REDIS_IMAGE") or VERSIONS.get(
    "REDIS_IMAGE", "localhost/taskfleet-redis:7.0"
)
NAME = "rediscluster"
LABELS = {"app.kubernetes.io/name": NAME, "app.kubernetes.io/part-of": "taskfleet-e2e"}


def cluster_manifests() -> list[dict[str, Any]]:
    """A headless Service (stable pod names), a Service over every node (the URL's
    host), and the StatefulSet of cluster-enabled redis-servers."""
    port = {"name": "redis", "port": 6379, "targetPort": 6379}
    container = {
        "name": "redis",
        "image": REDIS_IMAGE,
        "imagePullPolicy": "IfNotPresent",
        "command": ["redis-server"],
        "args": [
            *("--port", "6379", "--bind", "0.0.0.0", "--protected-mode", "no"),
            *("--cluster-enabled", "yes", "--cluster-config-file", "/data/nodes.conf"),
            *("--cluster-node-timeout", "2000", "--dir", "/data"),
            *("--appendonly", "yes", "--appendfsync", "everysec", "--save", ""),
        ],
        "ports": [{"name": "redis", "containerPort": 6379}],
        "readinessProbe": {"tcpSocket": {"port": "redis"}, "periodSeconds": 2},
        "resources": {"requests": {"cpu": "20m", "memory": "32Mi"}, "limits": {"memory": "128Mi"}},
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
        },
        "volumeMounts": [{"name": "data", "mountPath": "/data"}],
    }
    pod_security = {
        "runAsNonRoot": True,
        "runAsUser": 65534,
        "runAsGroup": 65534,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    return [
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": f"{NAME}-nodes", "labels": LABELS},
            "spec": {"clusterIP": "None", "selector": LABELS, "ports": [port]},
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": NAME, "labels": LABELS},
            "spec": {"selector": LABELS, "ports": [port]},
        },
        {
            "apiVersion": "apps/v1",
            "kind": "StatefulSet",
            "metadata": {"name": NAME, "labels": LABELS},
            "spec": {
                "serviceName": f"{NAME}-nodes",
                "replicas": NODES,
                "podManagementPolicy": "Parallel",
                "selector": {"matchLabels": LABELS},
                "template": {
                    "metadata": {"labels": LABELS},
                    "spec": {
                        "terminationGracePeriodSeconds": 5,
                        "securityContext": pod_security,
                        "containers": [container],
                        "volumes": [{"name": "data", "emptyDir": {}}],
                    },
                },
            },
        },
    ]


def start_cluster(kube: Kube) -> None:
    kube.apply(*cluster_manifests())

    def ready_ips() -> list[str] | None:
        pods = [p for p in kube.pods(f"app.kubernetes.io/name={NAME}") if is_ready(p)]
        ips = [p["status"].get("podIP") for p in pods]
        return ips if len(pods) == NODES and all(ips) else None

    ips = wait_for(
        ready_ips,
        timeout=180,
        interval=CLUSTER_INTERVAL_S,
        what="six ready Redis pods",
        ignoring=CLUSTER_ERRORS,
    )
    kube.exec(
        f"{NAME}-0",
        *("redis-cli", "--cluster", "create", *(f"{ip}:6379" for ip in ips)),
        *("--cluster-replicas", "1", "--cluster-yes"),
        timeout=120,
    )
    for i in range(NODES):
        wait_for(
            lambda i=i: (
                "cluster_state:ok" in kube.exec(f"{NAME}-{i}", "redis-cli", "cluster", "info")
            ),
            timeout=60,
            interval=CLUSTER_INTERVAL_S,
            what=f"cluster_state:ok on {NAME}-{i}",
            ignoring=CLUSTER_ERRORS,
        )


def test_a_taskqueue_on_a_redis_cluster_runs_its_tasks_to_done(
    namespace: Kube, operator: Operator
) -> None:
    start_cluster(namespace)
    assert namespace.namespace is not None
    url = f"redis://{NAME}.{namespace.namespace}.svc:6379/0?cluster=true"
    namespace.apply(
        taskqueue_manifest("clustered", namespace.namespace, redis={"url": url}, replicas=2)
    )
    selector = "taskfleet.dev/queue=clustered"
    pods = wait_for(
        lambda: [p["metadata"]["name"] for p in namespace.running_pods(selector)][:2] or None,
        timeout=180,
        interval=CLUSTER_INTERVAL_S,
        what="ready worker pods of the clustered TaskQueue",
        ignoring=CLUSTER_ERRORS,
    )
    container = namespace.get("pod", pods[0])
    assert container is not None
    args = [*container["spec"]["containers"][0].get("command", []),
            *container["spec"]["containers"][0].get("args", [])]  # fmt: skip
    queue = args[args.index("--queue") + 1]
    tasks = 40
    namespace.exec(
        pods[0],
        *("taskfleet", "enqueue", queue, "--count", str(tasks)),
        *("--payload", json.dumps({"seconds": 0.05, "record_key": f"e2e:{{{queue}}}:runs"})),
    )

    def stats() -> dict[str, Any]:
        out = namespace.exec(pods[0], "taskfleet", "stats", queue, "--json")
        data: dict[str, Any] = json.loads(out)
        return data

    final = wait_for(
        lambda: (s := stats())["done"] == tasks and s,
        timeout=120,
        interval=CLUSTER_INTERVAL_S,
        what=f"all {tasks} tasks done on the Redis Cluster",
        ignoring=CLUSTER_ERRORS,
    )
    assert final["dead"] == 0 and final["pending"] == 0 and final["running"] == 0, final
