"""The disruption guard: worker pods annotated for cluster autoscalers exactly while they
hold a task. The decision is pure (tested first); then the operator as a real process
against a real kube-apiserver and a real redis-server, its pods made by hand."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from taskfleet.producer.queue import Queue
from taskfleet_operator import builders, disruption

from tests.fixtures_cluster import Cluster, hold_tasks
from tests.fixtures_operator import APISERVER_INTERVAL_S, APISERVER_TIMEOUT_S, base_spec
from tests.polling import wait_for

GUARD = {
    "karpenter.sh/do-not-disrupt": "true",
    "cluster-autoscaler.kubernetes.io/safe-to-evict": "false",
}
LONG_LEASE = {"intervalSeconds": 1, "ttlSeconds": 60}


def pod_body(name: str, annotations: dict[str, str], queue: str = "q") -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "uid": f"uid-{name}",
            "labels": {"taskfleet.dev/queue": queue, "pod-template-hash": "5d8f7c9b4"},
            "annotations": annotations,
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "ReplicaSet",
                    "name": f"{queue}-5d8f7c9b4",
                    "uid": "u",
                    "controller": True,
                }
            ],
        }
    }


def guard_of(name: str, annotations: dict[str, str]) -> disruption.PodGuard:
    guard = disruption.pod_guard(pod_body(name, annotations), "q")
    assert guard is not None
    return guard


def test_busy_pods_get_the_guard_idle_ones_lose_it_and_settled_ones_are_left_alone() -> None:
    pods = [
        guard_of("busy-bare", {}),
        guard_of("busy-guarded", dict(GUARD)),
        guard_of("idle-guarded", dict(GUARD)),
        guard_of("idle-bare", {"other": "x"}),
        guard_of("idle-half", {"karpenter.sh/do-not-disrupt": "true"}),
        guard_of("busy-wrong", {**GUARD, "cluster-autoscaler.kubernetes.io/safe-to-evict": "true"}),
    ]
    held = {"busy-bare": 1, "busy-guarded": 3, "busy-wrong": 1}

    changes = {
        pod.name: change for pod, change in disruption.guard_changes(pods, held, enabled=True)
    }

    assert changes == {
        "busy-bare": GUARD,
        "idle-guarded": {
            "cluster-autoscaler.kubernetes.io/safe-to-evict": None,
            "karpenter.sh/do-not-disrupt": None,
        },
        "idle-half": {"karpenter.sh/do-not-disrupt": None},
        "busy-wrong": GUARD,
    }
    assert builders.DISRUPTION_GUARD_ANNOTATIONS == GUARD


def test_with_the_guard_off_every_guard_annotation_is_removed_busy_or_not() -> None:
    pods = [guard_of("busy", dict(GUARD)), guard_of("idle", {})]

    changes = disruption.guard_changes(pods, {"busy": 2}, enabled=False)

    assert [(pod.name, change) for pod, change in changes] == [
        (
            "busy",
            {
                "cluster-autoscaler.kubernetes.io/safe-to-evict": None,
                "karpenter.sh/do-not-disrupt": None,
            },
        )
    ]


def test_a_pod_no_replica_set_of_the_queue_controls_is_not_guarded() -> None:
    stray = pod_body("stray", {})
    stray["metadata"]["ownerReferences"] = []

    assert disruption.pod_guard(stray, "q") is None
    assert disruption.pod_guard(pod_body("other", {}, queue="other"), "q") is None


# ----------------------------------------------------------------------------- the operator


def guard_annotations(cluster: Cluster, pod: str) -> dict[str, str]:
    annotations = cluster.pod(pod).metadata.annotations or {}
    return {k: v for k, v in annotations.items() if k in GUARD}


def wait_guard(cluster: Cluster, pod: str, expected: dict[str, str], what: str) -> None:
    wait_for(
        lambda: guard_annotations(cluster, pod) == expected,
        timeout=APISERVER_TIMEOUT_S,
        interval=APISERVER_INTERVAL_S,
        what=what,
    )


@pytest.mark.apiserver
def test_a_pod_holding_a_task_carries_the_guard_until_it_holds_none(
    cluster: Cluster,
    redis_url: str,
    queue_of: Callable[[str, str], Queue],
    make_broker: Callable[..., Any],
) -> None:
    cluster.create_tq("guarded", base_spec(redis_url, heartbeat=LONG_LEASE))
    for pod in ("guarded-busy", "guarded-idle"):
        cluster.create_pod(pod, "guarded")
    queue = queue_of(cluster.namespace, "guarded")
    make_broker(queue.name, pod="guarded-idle").register(4)
    busy = hold_tasks(make_broker, queue, "guarded-busy", 2)

    wait_guard(cluster, "guarded-busy", GUARD, "the busy pod guarded")
    assert guard_annotations(cluster, "guarded-idle") == {}

    busy.deregister()  # what it held goes back to pending: the pod holds nothing

    wait_guard(cluster, "guarded-busy", {}, "the guard removed once the pod is idle")
    assert cluster.pod("guarded-busy").metadata.annotations["taskfleet.dev/spec-hash"] == "0"


@pytest.mark.apiserver
def test_turning_the_guard_off_removes_it_from_a_busy_pod_and_on_puts_it_back(
    cluster: Cluster,
    redis_url: str,
    queue_of: Callable[[str, str], Queue],
    make_broker: Callable[..., Any],
) -> None:
    cluster.create_tq("toggle", base_spec(redis_url, heartbeat=LONG_LEASE))
    cluster.create_pod("toggle-a", "toggle")
    queue = queue_of(cluster.namespace, "toggle")
    hold_tasks(make_broker, queue, "toggle-a", 1)
    wait_guard(cluster, "toggle-a", GUARD, "the busy pod guarded")

    cluster.patch_tq("toggle", {"disruptionGuard": False})
    wait_guard(cluster, "toggle-a", {}, "the guard removed when turned off")

    cluster.patch_tq("toggle", {"disruptionGuard": True})
    wait_guard(cluster, "toggle-a", GUARD, "the guard back when turned on")
