"""The autoscaler in the real operator process, against a real kube-apiserver and Redis.

No controller-manager runs in this tier, so the Deployment's replicas are what is
checked (no pods follow them); worker pods are made by hand where the autoscaler must
tell busy pods from idle ones, and act in Redis through the Broker API.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from taskfleet.producer.queue import Queue

from tests.fixtures_cluster import Cluster
from tests.fixtures_operator import (
    APISERVER_INTERVAL_S,
    APISERVER_TIMEOUT_S,
    GROUP,
    PLURAL,
    VERSION,
    OperatorProcess,
    base_spec,
)
from tests.fixtures_redis import RedisServerFactory
from tests.polling import wait_for

pytestmark = pytest.mark.apiserver
LONG_LEASE = {"intervalSeconds": 1, "ttlSeconds": 60}
#: Short enough for a test, long enough that "held" is seen before "down".
WINDOW_S = 2
#: Up to a decision's wait, a scale-down window, and the apiserver round trips.
SCALE_TIMEOUT_S = APISERVER_TIMEOUT_S + WINDOW_S


def autoscaled(redis_url: str, **autoscale: Any) -> dict[str, Any]:
    return base_spec(
        redis_url,
        concurrency=2,
        heartbeat=LONG_LEASE,
        autoscale={
            "minReplicas": 0,
            "maxReplicas": 4,
            "targetUtilizationPercent": 100,
            "scaleDownStabilizationSeconds": WINDOW_S,
            **autoscale,
        },
    )


def wait_replicas(cluster: Cluster, name: str, replicas: int) -> Any:
    def scaled() -> Any:
        deployment = cluster.deployment(name)
        if deployment is not None and deployment.spec.replicas == replicas:
            return deployment
        return None

    return wait_for(
        scaled,
        timeout=SCALE_TIMEOUT_S,
        interval=APISERVER_INTERVAL_S,
        what=f"Deployment {name} at {replicas} replicas",
    )


def wait_status(
    cluster: Cluster, name: str, what: str, check: Callable[[dict[str, Any]], bool]
) -> dict[str, Any]:
    def matching() -> dict[str, Any] | None:
        found: dict[str, Any] = cluster.tq(name).get("status") or {}
        return found if check(found) else None

    status: dict[str, Any] = wait_for(
        matching, timeout=SCALE_TIMEOUT_S, interval=APISERVER_INTERVAL_S, what=what
    )
    return status


def wait_event(cluster: Cluster, reason: str, contains: str) -> str:
    def posted() -> str | None:
        return next((m for m in cluster.event_messages(reason) if contains in m), None)

    message: str = wait_for(
        posted,
        timeout=SCALE_TIMEOUT_S,
        interval=APISERVER_INTERVAL_S,
        what=f"a {reason} event saying {contains!r}",
    )
    return message


def test_an_autoscaled_queue_goes_from_zero_to_its_work_and_back(
    cluster: Cluster,
    redis_url: str,
    queue_of: Callable[[str, str], Queue],
) -> None:
    cluster.create_tq("auto", autoscaled(redis_url))
    wait_replicas(cluster, "auto", 0)
    wait_status(cluster, "auto", "desiredReplicas 0", lambda s: s.get("desiredReplicas") == 0)
    queue = queue_of(cluster.namespace, "auto")

    for i in range(3):
        queue.enqueue({"i": i})
    wait_replicas(cluster, "auto", 2)  # 3 tasks, 2 slots a pod
    wait_event(cluster, "Scaled", "0 -> 2: 3 pending, 0 running")

    for i in range(20):
        queue.enqueue({"i": i})
    wait_replicas(cluster, "auto", 4)
    status = wait_status(
        cluster, "auto", "desiredReplicas 4", lambda s: s.get("desiredReplicas") == 4
    )
    assert "capped by maxReplicas 4: 4" in status["scalingReason"], status

    queue.purge()  # the work goes away
    message = wait_event(cluster, "Scaled", "4 -> 0")
    assert "over-provisioned" in message, message
    wait_replicas(cluster, "auto", 0)


def test_going_down_removes_idle_pods_and_keeps_the_busy_ones(
    cluster: Cluster,
    redis_url: str,
    queue_of: Callable[[str, str], Queue],
    make_broker: Callable[..., Any],
) -> None:
    cluster.create_tq("busy", autoscaled(redis_url, minReplicas=4))
    wait_replicas(cluster, "busy", 4)
    queue = queue_of(cluster.namespace, "busy")
    for i in range(2):
        queue.enqueue({"i": i})
    pods = ["busy-a", "busy-b", "busy-c", "busy-d"]
    for pod in pods:
        cluster.create_pod(pod, "busy")
    held = {}
    for pod in pods:
        broker = make_broker(queue.name, pod=pod)
        broker.register(2)
        tasks = broker.claim(1).tasks if pod in ("busy-a", "busy-b") else []
        broker.heartbeat({t.id: t.token for t in tasks}, len(tasks))
        held[pod] = (broker, tasks)

    # 2 running tasks fit in one pod, but both pods that hold one stay.
    cluster.patch_tq("busy", {"autoscale": {"minReplicas": 0}})
    deployment = wait_replicas(cluster, "busy", 2)
    status = wait_status(
        cluster, "busy", "desiredReplicas 2", lambda s: s.get("desiredReplicas") == 2
    )
    assert "1 busy pod(s) stay until idle" in status["scalingReason"], status
    costs = {}
    for pod in pods:
        read = cluster.pod(pod)
        costs[pod] = read.metadata.annotations["controller.kubernetes.io/pod-deletion-cost"]
        # Every pod's cost was written before the replicas went down.
        assert int(read.metadata.resource_version) < int(deployment.metadata.resource_version)
    assert costs == {"busy-a": "1", "busy-b": "1", "busy-c": "0", "busy-d": "0"}

    for broker, tasks in held.values():
        for task in tasks:
            broker.complete(task.id, task.token)
        broker.heartbeat({}, 0)
    wait_replicas(cluster, "busy", 0)


def test_scaling_an_autoscaled_queue_by_hand_is_answered_and_removing_autoscale_hands_back(
    cluster: Cluster, redis_url: str, queue_of: Callable[[str, str], Queue]
) -> None:
    cluster.create_tq("hands", autoscaled(redis_url, minReplicas=1, maxReplicas=3))
    wait_replicas(cluster, "hands", 1)

    cluster.custom.patch_namespaced_custom_object_scale(
        GROUP, VERSION, cluster.namespace, PLURAL, "hands", {"spec": {"replicas": 5}}
    )
    message = wait_event(cluster, "ReplicasIgnored", "spec.replicas (5) is ignored")
    assert "1..3" in message, message
    assert cluster.deployment("hands").spec.replicas == 1

    cluster.custom.patch_namespaced_custom_object(
        GROUP, VERSION, cluster.namespace, PLURAL, "hands", {"spec": {"autoscale": None}}
    )
    wait_replicas(cluster, "hands", 5)
    wait_status(
        cluster,
        "hands",
        "desiredReplicas back to spec.replicas",
        lambda s: s.get("desiredReplicas") == 5 and s.get("scalingReason") == "spec.replicas",
    )


def test_many_autoscaled_queues_leave_the_operator_free_to_reconcile_others(
    cluster: Cluster, redis_url: str
) -> None:
    # More autoscaled queues than the operator has handler threads (settings: 16): their
    # loops wait on the event loop, so a new queue is still reconciled at once.
    many = 20
    for i in range(many):
        cluster.create_tq(f"many-{i}", autoscaled(redis_url))
    for i in range(many):
        wait_replicas(cluster, f"many-{i}", 0)

    cluster.create_tq("fixed", base_spec(redis_url, replicas=2))

    wait_replicas(cluster, "fixed", 2)
    wait_status(
        cluster,
        "fixed",
        "the fixed queue swept while the others are autoscaled",
        lambda s: s.get("desiredReplicas") == 2,
    )


#: A turn once the probe found the server: the wait for demand, one decision and its
#: Deployment write, and this test's polling of the apiserver.
DECIDED_WITHIN_S = 1.0


def test_a_parked_autoscaler_scales_from_zero_at_once_when_the_probe_finds_its_redis(
    cluster: Cluster, operator_process: OperatorProcess, redis_server_factory: RedisServerFactory
) -> None:
    server = redis_server_factory(persistent=False)
    cluster.create_tq("late", autoscaled(server.url))
    admin = server.admin()
    wait_for(
        lambda: "cmd=blpop" in str(admin.execute_command("CLIENT", "LIST")),
        timeout=SCALE_TIMEOUT_S,
        what="the autoscaler waiting on the queue's demand",
    )
    admin.close()
    resumes = operator_process.log.read_text(errors="replace").count("Redis answers again")
    # Its Redis fails for a moment (as in the first second of a TaskQueue created with its
    # Redis): the autoscaler's wait breaks, and the server is parked, the autoscaler too.
    server.stop()
    server.start()
    wait_for(
        lambda: (
            operator_process.log.read_text(errors="replace").count("Redis answers again") > resumes
        ),
        timeout=SCALE_TIMEOUT_S,
        what="the probe finding the server again",
    )
    queue = Queue(f"{cluster.namespace}.late", server.url)
    try:
        queue.enqueue({})
        enqueued = time.monotonic()
        wait_replicas(cluster, "late", 1)
        # Woken by the probe, the autoscaler waits on the queue's demand again: not for
        # the rest of its parked wait (PARKED_WAIT_S, 5 s).
        assert time.monotonic() - enqueued < DECIDED_WITHIN_S + APISERVER_INTERVAL_S
    finally:
        queue.close()
