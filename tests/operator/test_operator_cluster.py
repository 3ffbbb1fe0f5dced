"""The operator as a real process against a real kube-apiserver and a real redis-server.

No kubelet or controller-manager runs in this tier: Deployments get no pods, so worker
pods are created by hand (they stay Pending) and act in Redis through the Broker API
under their pod names. Garbage collection does not run either: ownership is checked
through ownerReferences, not cascades.
"""

from __future__ import annotations

import base64
import json
import secrets
from collections.abc import Callable
from typing import Any

import pytest
import redis
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from taskfleet.producer.queue import Queue

from tests.fixtures_cluster import Cluster, hold_tasks
from tests.fixtures_operator import (
    APISERVER_INTERVAL_S,
    APISERVER_TIMEOUT_S,
    GROUP,
    PLURAL,
    VERSION,
    OperatorProcess,
    base_spec,
)
from tests.polling import wait_for

pytestmark = pytest.mark.apiserver
HOLD_FINALIZER = "taskfleet.dev/test-hold"
FINALIZER = "taskfleet.dev/finalizer"  # kopf's, as the operator names it
# Leases that cannot expire within any deadline here, so lease expiry never takes
# tasks back in place of the path under test.
LONG_LEASE = {"intervalSeconds": 1, "ttlSeconds": 60}


def test_a_new_taskqueue_gets_an_owned_worker_deployment_and_a_status(
    cluster: Cluster, redis_url: str, queue_of: Callable[[str, str], Queue]
) -> None:
    tq = cluster.create_tq("emails", base_spec(redis_url, replicas=2, maxConcurrency=9))

    deployment = wait_for(
        lambda: cluster.deployment("emails"),
        timeout=APISERVER_TIMEOUT_S,
        interval=APISERVER_INTERVAL_S,
        what="Deployment created",
    )
    owner = deployment.metadata.owner_references[0]
    assert (owner.kind, owner.name, owner.uid) == ("TaskQueue", "emails", tq["metadata"]["uid"])
    assert owner.controller is True
    assert deployment.spec.replicas == 2
    pod = deployment.spec.template.spec
    assert pod.containers[0].command == ["taskfleet", "worker"]
    assert pod.containers[0].args[:2] == ["--queue", f"{cluster.namespace}.emails"]
    assert pod.termination_grace_period_seconds == 315
    assert pod.security_context.run_as_non_root is True

    def reported() -> Any:
        """status from both the reconcile handler (observedGeneration) and a sweep, in one
        read (a second read could see a sweep the first did not)"""
        status = cluster.tq("emails").get("status", {})
        reachable = [c for c in status.get("conditions", []) if c["type"] == "RedisReachable"]
        swept = bool(reachable) and reachable[0]["status"] == "True"
        return status if swept and "observedGeneration" in status else None

    status = wait_for(reported, timeout=APISERVER_TIMEOUT_S, interval=APISERVER_INTERVAL_S)
    assert status["selector"] == "taskfleet.dev/queue=emails"
    assert status["observedGeneration"] == tq["metadata"]["generation"]
    assert status["pending"] == 0
    assert status["livePods"] == 0
    [ready] = [c for c in status["conditions"] if c["type"] == "Ready"]
    assert (ready["status"], ready["reason"]) == ("False", "WorkersNotReady")
    assert queue_of(cluster.namespace, "emails").config().max_concurrency == 9


def test_updating_the_spec_updates_the_deployment_and_the_queue_settings(
    cluster: Cluster, redis_url: str, queue_of: Callable[[str, str], Queue]
) -> None:
    cluster.create_tq("resize", base_spec(redis_url))
    first = wait_for(
        lambda: cluster.deployment("resize"),
        timeout=APISERVER_TIMEOUT_S,
        interval=APISERVER_INTERVAL_S,
        what="Deployment created",
    )
    first_hash = first.spec.template.metadata.annotations["taskfleet.dev/spec-hash"]

    cluster.patch_tq("resize", {"image": "localhost/taskfleet-worker:v2", "maxLost": 5})

    def updated() -> Any:
        """Deployment runs the new image"""
        deployment = cluster.deployment("resize")
        image = deployment.spec.template.spec.containers[0].image
        return deployment if image == "localhost/taskfleet-worker:v2" else None

    deployment = wait_for(updated, timeout=APISERVER_TIMEOUT_S, interval=APISERVER_INTERVAL_S)
    assert deployment.spec.template.metadata.annotations["taskfleet.dev/spec-hash"] != first_hash
    queue = queue_of(cluster.namespace, "resize")
    wait_for(
        lambda: queue.config().max_lost == 5,
        timeout=APISERVER_TIMEOUT_S,
        interval=APISERVER_INTERVAL_S,
        what="max_lost written to Redis",
    )


def test_a_deleted_worker_deployment_is_created_again(cluster: Cluster, redis_url: str) -> None:
    cluster.create_tq("restore", base_spec(redis_url))
    first = wait_for(
        lambda: cluster.deployment("restore"),
        timeout=APISERVER_TIMEOUT_S,
        interval=APISERVER_INTERVAL_S,
        what="Deployment created",
    )

    cluster.apps.delete_namespaced_deployment("restore", cluster.namespace)

    def recreated() -> Any:
        """a new Deployment (another uid) exists"""
        deployment = cluster.deployment("restore")
        return deployment if deployment and deployment.metadata.uid != first.metadata.uid else None

    again = wait_for(recreated, timeout=APISERVER_TIMEOUT_S, interval=APISERVER_INTERVAL_S)
    assert again.metadata.owner_references[0].name == "restore"


def test_new_pods_are_counted_and_enqueued_tasks_show_in_status(
    cluster: Cluster, redis_url: str, queue_of: Callable[[str, str], Queue]
) -> None:
    cluster.create_tq("counts", base_spec(redis_url))
    cluster.create_pod("counts-a", "counts")
    queue = queue_of(cluster.namespace, "counts")
    for i in range(3):
        queue.enqueue({"i": i})

    def counted() -> Any:
        """status shows 3 pending tasks and 1 live pod"""
        status = cluster.tq("counts").get("status", {})
        return status.get("pending") == 3 and status.get("livePods") == 1

    wait_for(counted, timeout=APISERVER_TIMEOUT_S, interval=APISERVER_INTERVAL_S)


def test_scaling_down_sets_deletion_costs_from_in_flight_counts_before_the_replicas(
    cluster: Cluster,
    redis_url: str,
    queue_of: Callable[[str, str], Queue],
    make_broker: Callable[..., Any],
) -> None:
    cluster.create_tq("scale", base_spec(redis_url, replicas=3))
    wait_for(
        lambda: cluster.deployment("scale"),
        timeout=APISERVER_TIMEOUT_S,
        interval=APISERVER_INTERVAL_S,
        what="Deployment created",
    )
    for pod in ("scale-busy", "scale-idle", "scale-new"):
        cluster.create_pod(pod, "scale")
    queue = queue_of(cluster.namespace, "scale")
    busy = hold_tasks(make_broker, queue, "scale-busy", 2)
    busy.heartbeat({}, 2, False)
    make_broker(queue.name, pod="scale-idle").register(4)

    cluster.custom.patch_namespaced_custom_object_scale(
        GROUP, VERSION, cluster.namespace, PLURAL, "scale", {"spec": {"replicas": 1}}
    )

    def scaled() -> Any:
        """Deployment scaled to 1"""
        deployment = cluster.deployment("scale")
        return deployment if deployment.spec.replicas == 1 else None

    deployment = scaled_deployment = wait_for(
        scaled, timeout=APISERVER_TIMEOUT_S, interval=APISERVER_INTERVAL_S
    )
    # The pods as they were just before the write that lowered the replicas (etcd keeps
    # every revision of this single-member store; nothing else writes this Deployment in
    # this tier): each cost was already there. Later writes to the pods (a sweep's) can't
    # change what that revision holds.
    before = int(deployment.metadata.resource_version) - 1
    pods: list[Any] = cluster.core.list_namespaced_pod(
        cluster.namespace, resource_version=str(before), resource_version_match="Exact"
    ).items
    cost = "controller.kubernetes.io/pod-deletion-cost"
    costs = {
        p.metadata.name: (p.metadata.annotations or {}).get(cost)
        for p in pods
        if p.metadata.name in ("scale-busy", "scale-idle", "scale-new")
    }
    assert costs == {"scale-busy": "2", "scale-idle": "0", "scale-new": "0"}
    assert scaled_deployment.spec.replicas == 1


def test_deleting_a_worker_pod_puts_its_tasks_back_in_pending_within_seconds(
    cluster: Cluster,
    redis_url: str,
    queue_of: Callable[[str, str], Queue],
    make_broker: Callable[..., Any],
) -> None:
    # A lease TTL far beyond the deadline: only the operator can take the tasks back.
    cluster.create_tq("orphans", base_spec(redis_url, heartbeat=LONG_LEASE))
    cluster.create_pod("orphans-a", "orphans")
    queue = queue_of(cluster.namespace, "orphans")
    hold_tasks(make_broker, queue, "orphans-a", 3)
    assert queue.stats()["running"] == 3

    cluster.core.delete_namespaced_pod("orphans-a", cluster.namespace)

    wait_for(
        lambda: queue.stats()["pending"] == 3,
        timeout=10,
        interval=APISERVER_INTERVAL_S,
        what="tasks back in pending",
    )
    assert queue.stats()["running"] == 0
    # The sweep's slow path would requeue too (two sweeps later) with its own message;
    # this one comes only from the pod-deletion handler.
    wait_for(
        lambda: (
            "requeued 3 tasks of pod orphans-a: pod orphans-a was deleted"
            in cluster.event_messages("Requeued")
        ),
        timeout=APISERVER_TIMEOUT_S,
        interval=APISERVER_INTERVAL_S,
        what="the pod-deletion handler's Requeued event on the TaskQueue",
    )
    wait_for(
        lambda: cluster.tq("orphans").get("status", {}).get("requeuedTotal") == 3,
        timeout=APISERVER_TIMEOUT_S,
        interval=APISERVER_INTERVAL_S,
        what="status.requeuedTotal == 3",
    )


def test_a_failed_worker_pod_still_in_the_api_gets_its_tasks_back_at_once(
    cluster: Cluster,
    redis_url: str,
    queue_of: Callable[[str, str], Queue],
    make_broker: Callable[..., Any],
) -> None:
    # An evicted pod stays in the API with phase Failed: its containers will not run
    # again, so its tasks must not wait for their leases (60 s here) to expire.
    cluster.create_tq("evicted", base_spec(redis_url, heartbeat=LONG_LEASE))
    cluster.create_pod("evicted-a", "evicted")
    queue = queue_of(cluster.namespace, "evicted")
    hold_tasks(make_broker, queue, "evicted-a", 2)

    cluster.core.patch_namespaced_pod_status(
        "evicted-a",
        cluster.namespace,
        {"status": {"phase": "Failed", "reason": "Evicted", "message": "low on memory"}},
    )

    wait_for(
        lambda: queue.stats()["pending"] == 2,
        timeout=10,
        interval=APISERVER_INTERVAL_S,
        what="the failed pod's tasks back in pending",
    )
    assert cluster.pod("evicted-a").status.phase == "Failed"  # still in the API
    wait_for(
        lambda: (
            "requeued 2 tasks of pod evicted-a: pod evicted-a has stopped (phase Failed)"
            in cluster.event_messages("Requeued")
        ),
        timeout=APISERVER_TIMEOUT_S,
        interval=APISERVER_INTERVAL_S,
        what="the Requeued event naming the failed pod",
    )


def test_a_pod_the_index_has_not_seen_keeps_its_tasks_while_the_api_has_it(
    cluster: Cluster,
    redis_url: str,
    queue_of: Callable[[str, str], Queue],
    make_broker: Callable[..., Any],
) -> None:
    cluster.create_tq("lagging", base_spec(redis_url, heartbeat=LONG_LEASE))
    # Without the queue label the operator's pod index never lists this pod: the same
    # view a lagging index gives of a pod created a moment ago.
    cluster.core.create_namespaced_pod(
        cluster.namespace,
        client.V1Pod(
            metadata=client.V1ObjectMeta(name="lagging-a"),
            spec=client.V1PodSpec(
                containers=[client.V1Container(name="worker", image="localhost/none:dev")]
            ),
        ),
    )
    queue = queue_of(cluster.namespace, "lagging")
    hold_tasks(make_broker, queue, "lagging-a", 2)
    # A worker with no pod in the API, registered after lagging-a: the sweep that takes
    # its task back had lagging-a suspect too.
    hold_tasks(make_broker, queue, "lagging-ghost", 1)

    wait_for(
        lambda: queue.stats()["pending"] >= 1,
        timeout=10,
        interval=APISERVER_INTERVAL_S,
        what="the ghost worker's task requeued by the sweep",
    )
    wait_for(
        lambda: "is gone from the API" in " ".join(cluster.event_messages("Requeued")),
        timeout=APISERVER_TIMEOUT_S,
        interval=APISERVER_INTERVAL_S,
        what="the sweep's Requeued event for the ghost",
    )

    stats = queue.stats()
    assert (stats["pending"], stats["running"]) == (1, 2)
    assert not [m for m in cluster.event_messages("Requeued") if "lagging-a" in m]


def test_a_terminating_pod_keeps_its_tasks_until_it_is_gone(
    cluster: Cluster,
    redis_url: str,
    queue_of: Callable[[str, str], Queue],
    make_broker: Callable[..., Any],
) -> None:
    # Leases outlive the test: only the operator could take linger-a's tasks back.
    cluster.create_tq("linger", base_spec(redis_url, heartbeat=LONG_LEASE))
    cluster.create_pod("linger-a", "linger", finalizers=[HOLD_FINALIZER])
    queue = queue_of(cluster.namespace, "linger")
    hold_tasks(make_broker, queue, "linger-a", 2)
    cluster.core.delete_namespaced_pod("linger-a", cluster.namespace)
    assert cluster.pod("linger-a").metadata.deletion_timestamp is not None

    # Each round registers a worker with no pod in the API at all; the sweep takes its task
    # back after two sweeps, so every round proves two more sweeps saw linger-a Terminating.
    for round_ in range(1, 4):
        hold_tasks(make_broker, queue, f"linger-ghost-{round_}", 1)
        wait_for(
            lambda round_=round_: queue.stats()["pending"] >= round_,  # type: ignore[misc]
            timeout=10,
            interval=APISERVER_INTERVAL_S,
            what=f"ghost worker {round_}'s task requeued by the sweep",
        )
        stats = queue.stats()
        assert (stats["pending"], stats["running"]) == (round_, 2)

    cluster.core.patch_namespaced_pod(
        "linger-a", cluster.namespace, {"metadata": {"finalizers": None}}
    )
    wait_for(
        lambda: queue.stats()["pending"] == 5,
        timeout=10,
        interval=APISERVER_INTERVAL_S,
        what="linger-a's tasks requeued",
    )


def test_a_missing_redis_secret_is_reported_and_recovers_when_the_secret_appears(
    cluster: Cluster,
    redis_url: str,
    redis_client: redis.Redis,
    operator_process: OperatorProcess,
) -> None:
    password = f"pw-{secrets.token_hex(8)}"
    # A user with a password on the shared server; the default user stays open.
    redis_client.acl_setuser(
        "tq-op",
        enabled=True,
        passwords=[f"+{password}"],
        categories=["+@all"],
        keys=["*"],
        channels=["*"],
        reset=True,
    )
    secret_url = redis_url.replace("redis://", f"redis://tq-op:{password}@")
    spec = base_spec(redis_url)
    spec["redis"] = {"secretRef": {"name": "redis-auth"}}
    cluster.create_tq("secret", spec)

    def reported() -> Any:
        """RedisReachable=False with reason SecretUnavailable"""
        condition = cluster.condition("secret", "RedisReachable")
        return condition if condition and condition["reason"] == "SecretUnavailable" else None

    condition = wait_for(reported, timeout=APISERVER_TIMEOUT_S, interval=APISERVER_INTERVAL_S)
    assert condition["status"] == "False"
    assert "redis-auth" in condition["message"]
    wait_for(
        lambda: any("redis-auth" in m for m in cluster.event_messages("SecretUnavailable")),
        timeout=APISERVER_TIMEOUT_S,
        interval=APISERVER_INTERVAL_S,
        what="the SecretUnavailable event",
    )
    deployment = wait_for(
        lambda: cluster.deployment("secret"),
        timeout=APISERVER_TIMEOUT_S,
        interval=APISERVER_INTERVAL_S,
        what="Deployment created",
    )
    env = {var.name: var for var in deployment.spec.template.spec.containers[0].env}
    assert env["TASKFLEET_REDIS_URL"].value is None
    assert env["TASKFLEET_REDIS_URL"].value_from.secret_key_ref.name == "redis-auth"

    cluster.core.create_namespaced_secret(
        cluster.namespace,
        client.V1Secret(
            metadata=client.V1ObjectMeta(name="redis-auth"),
            data={"url": base64.b64encode(secret_url.encode()).decode()},
        ),
    )

    def recovered() -> Any:
        """RedisReachable=True"""
        condition = cluster.condition("secret", "RedisReachable")
        return condition is not None and condition["status"] == "True"

    wait_for(recovered, timeout=APISERVER_TIMEOUT_S, interval=APISERVER_INTERVAL_S)
    # kopf posts events from a queue of its own: the event may follow the status patch.
    wait_for(
        lambda: any("reachable again" in m for m in cluster.event_messages("RedisReachable")),
        timeout=APISERVER_TIMEOUT_S,
        interval=APISERVER_INTERVAL_S,
        what="the RedisReachable event",
    )
    everything = [
        operator_process.log.read_text(errors="replace"),
        json.dumps(cluster.tq("secret")),
        json.dumps(
            [e.to_dict() for e in cluster.core.list_namespaced_event(cluster.namespace).items],
            default=str,
        ),
        json.dumps(cluster.deployment("secret").to_dict(), default=str),
    ]
    assert not [text for text in everything if password in text]


def test_a_secret_that_holds_no_redis_url_is_reported_without_its_value(
    cluster: Cluster, redis_url: str, operator_process: OperatorProcess
) -> None:
    password = f"pw-{secrets.token_hex(8)}"
    value = f"http://tq:{password}@redis:6379/0"
    cluster.core.create_namespaced_secret(
        cluster.namespace,
        client.V1Secret(
            metadata=client.V1ObjectMeta(name="redis-bad"),
            data={"url": base64.b64encode(value.encode()).decode()},
        ),
    )
    spec = base_spec(redis_url)
    spec["redis"] = {"secretRef": {"name": "redis-bad"}}
    cluster.create_tq("badsecret", spec)

    def reported() -> Any:
        """RedisReachable=False with reason SecretUnavailable"""
        condition = cluster.condition("badsecret", "RedisReachable")
        return condition if condition and condition["reason"] == "SecretUnavailable" else None

    condition = wait_for(reported, timeout=APISERVER_TIMEOUT_S, interval=APISERVER_INTERVAL_S)
    expected = f"key 'url' of Secret {cluster.namespace}/redis-bad is not a usable Redis URL"
    assert condition["message"].startswith(expected)
    wait_for(
        lambda: any(m.startswith(expected) for m in cluster.event_messages("SecretUnavailable")),
        timeout=APISERVER_TIMEOUT_S,
        interval=APISERVER_INTERVAL_S,
        what="the SecretUnavailable event",
    )
    assert operator_process.alive()
    everything = [
        operator_process.log.read_text(errors="replace"),
        json.dumps(cluster.tq("badsecret")),
        json.dumps(
            [e.to_dict() for e in cluster.core.list_namespaced_event(cluster.namespace).items],
            default=str,
        ),
    ]
    assert not [text for text in everything if password in text]


def test_an_unreachable_redis_is_reported_without_crashing_the_operator(
    cluster: Cluster, operator_process: OperatorProcess
) -> None:
    cluster.create_tq("down", base_spec("redis://127.0.0.1:1/0"))

    def reported() -> Any:
        """RedisReachable=False with reason RedisUnreachable"""
        condition = cluster.condition("down", "RedisReachable")
        return condition if condition and condition["reason"] == "RedisUnreachable" else None

    condition = wait_for(reported, timeout=APISERVER_TIMEOUT_S, interval=APISERVER_INTERVAL_S)
    assert condition["status"] == "False"
    # the event is posted after the condition's patch: wait for it too
    wait_for(
        lambda: cluster.event_messages("RedisUnreachable"),
        timeout=APISERVER_TIMEOUT_S,
        interval=APISERVER_INTERVAL_S,
        what="the RedisUnreachable event",
    )
    ready = cluster.condition("down", "Ready")
    assert ready is not None and ready["status"] == "False"
    assert operator_process.alive() and operator_process.healthy()


def test_a_spec_the_crd_cannot_check_is_reported_as_invalid(
    cluster: Cluster, redis_url: str
) -> None:
    spec = base_spec(redis_url, schedules=[{"name": "bad", "cron": "61 * * * *"}])
    cluster.create_tq("invalid", spec)

    def reported() -> Any:
        """Ready=False with reason InvalidSpec"""
        condition = cluster.condition("invalid", "Ready")
        return condition if condition and condition["reason"] == "InvalidSpec" else None

    condition = wait_for(reported, timeout=APISERVER_TIMEOUT_S, interval=APISERVER_INTERVAL_S)
    assert "cron" in condition["message"]
    wait_for(
        lambda: cluster.event_messages("InvalidSpec"),
        timeout=APISERVER_TIMEOUT_S,
        interval=APISERVER_INTERVAL_S,
        what="the InvalidSpec event",
    )
    assert cluster.deployment("invalid") is None


def test_a_deployment_the_apiserver_rejects_is_reported_on_the_taskqueue_and_sweeps_keep_it(
    cluster: Cluster, redis_url: str, queue_of: Callable[[str, str], Queue]
) -> None:
    # The CRD passes tolerations through; only the Deployment's schema knows the operators.
    tolerations = [{"key": "k", "operator": "Maybe", "effect": "NoSchedule"}]
    cluster.create_tq("rejected", base_spec(redis_url, tolerations=tolerations))

    def reported() -> Any:
        """Ready=False with reason DeploymentRejected"""
        condition = cluster.condition("rejected", "Ready")
        return condition if condition and condition["reason"] == "DeploymentRejected" else None

    condition = wait_for(reported, timeout=APISERVER_TIMEOUT_S, interval=APISERVER_INTERVAL_S)
    assert "Maybe" in condition["message"]
    wait_for(
        lambda: cluster.event_messages("DeploymentRejected"),
        timeout=APISERVER_TIMEOUT_S,
        interval=APISERVER_INTERVAL_S,
        what="the DeploymentRejected event",
    )

    # Only a sweep writes the counts: one that sees this task ran after the rejection.
    queue_of(cluster.namespace, "rejected").enqueue({"x": 1})
    wait_for(
        lambda: cluster.tq("rejected").get("status", {}).get("pending") == 1,
        what="a sweep after the rejection counted the task",
    )
    ready = cluster.condition("rejected", "Ready")
    assert ready is not None
    assert (ready["status"], ready["reason"]) == ("False", "DeploymentRejected")
    assert cluster.deployment("rejected") is None  # and the sweep did not try to restore it


def test_on_delete_purge_removes_the_queue_data_and_retain_keeps_it(
    cluster: Cluster, redis_url: str, queue_of: Callable[[str, str], Queue]
) -> None:
    cluster.create_tq("purged", base_spec(redis_url, onDelete="Purge"))
    cluster.create_tq("kept", base_spec(redis_url))
    purged, kept = queue_of(cluster.namespace, "purged"), queue_of(cluster.namespace, "kept")
    purged.enqueue({"x": 1})
    kept.enqueue({"x": 1})
    for name in ("purged", "kept"):
        wait_for(
            lambda name=name: (  # type: ignore[misc]
                cluster.tq(name).get("status", {}).get("pending") == 1
            ),
            timeout=APISERVER_TIMEOUT_S,
            interval=APISERVER_INTERVAL_S,
            what=f"{name} swept",
        )
    # Only the Purge handler needs kopf's finalizer: a Retain queue carries none.
    assert FINALIZER in cluster.tq("purged")["metadata"].get("finalizers", [])
    assert FINALIZER not in cluster.tq("kept")["metadata"].get("finalizers", [])
    for name in ("purged", "kept"):
        cluster.custom.delete_namespaced_custom_object(
            GROUP, VERSION, cluster.namespace, PLURAL, name
        )

    wait_for(
        lambda: _gone(cluster, "purged") and _gone(cluster, "kept"),
        timeout=APISERVER_TIMEOUT_S,
        interval=APISERVER_INTERVAL_S,
        what="both TaskQueues deleted",
    )
    client_ = redis.Redis.from_url(redis_url)
    try:
        assert list(client_.scan_iter(match=purged.keys.pattern)) == []
    finally:
        client_.close()
    assert kept.stats()["pending"] == 1


def _gone(cluster: Cluster, name: str) -> bool:
    try:
        cluster.tq(name)
    except ApiException as exc:
        return bool(exc.status == 404)
    return False


def test_a_queue_with_the_finalizer_of_an_older_operator_is_handled_and_deleted(
    cluster: Cluster, redis_url: str
) -> None:
    """Operators that swept each TaskQueue in a kopf daemon put kopf's finalizer on every
    one; no handler needs it on a Retain queue now, and kopf takes it off."""
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "TaskQueue",
        "metadata": {"name": "older", "finalizers": [FINALIZER]},
        "spec": base_spec(redis_url),
    }
    cluster.custom.create_namespaced_custom_object(GROUP, VERSION, cluster.namespace, PLURAL, body)
    wait_for(
        lambda: cluster.tq("older").get("status", {}).get("pending") == 0,
        timeout=APISERVER_TIMEOUT_S,
        interval=APISERVER_INTERVAL_S,
        what="the queue swept",
    )
    wait_for(
        lambda: FINALIZER not in cluster.tq("older")["metadata"].get("finalizers", []),
        timeout=APISERVER_TIMEOUT_S,
        interval=APISERVER_INTERVAL_S,
        what="kopf's finalizer taken off (no handler requires it)",
    )
    cluster.custom.delete_namespaced_custom_object(
        GROUP, VERSION, cluster.namespace, PLURAL, "older"
    )
    wait_for(
        lambda: _gone(cluster, "older"),
        timeout=APISERVER_TIMEOUT_S,
        interval=APISERVER_INTERVAL_S,
        what="the queue deleted (the older operator's finalizer released)",
    )
