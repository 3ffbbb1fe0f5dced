"""Redis and the operator restarted mid-load: workers and sweeper pick up where they were."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from e2e.lib.fleet import Fleet, Operator
from e2e.lib.kube import CLUSTER_ERRORS, CLUSTER_INTERVAL_S, NodeShell, is_ready
from tests.polling import wait_for

pytest_plugins = ["e2e.lib.fixtures"]


def test_workers_ride_out_a_redis_restart_mid_load_and_nothing_is_lost(
    make_fleet: Callable[..., Fleet], figures: Callable[[str], None]
) -> None:
    fleet = make_fleet("redis-restart", replicas=2, concurrency=2)
    pods = fleet.wait_ready(2)
    ids = fleet.queue.enqueue_sleepers(20, seconds=2)
    wait_for(
        lambda: (s := fleet.queue.stats())["done"] >= 4 and s["running"] > 0,
        timeout=60,
        interval=CLUSTER_INTERVAL_S,
        what="some tasks done and some running",
        ignoring=CLUSTER_ERRORS,
    )

    redis_pod = fleet.kube.get("pod", "redis")
    assert redis_pod is not None
    status = redis_pod["status"]["containerStatuses"][0]
    # SIGKILL from the node: an abrupt crash; the append-only file in the pod's emptyDir
    # holds every acknowledged write, and the container restarts in the same pod.
    NodeShell.for_node(redis_pod["spec"]["nodeName"]).kill_container(status["containerID"])
    killed = time.monotonic()

    def redis_back() -> bool:
        current = fleet.kube.get("pod", "redis") or {"metadata": {}}
        restarts = (
            current.get("status", {}).get("containerStatuses", [{}])[0].get("restartCount", 0)
        )
        return restarts > status.get("restartCount", 0) and is_ready(current)

    wait_for(
        redis_back,
        timeout=90,
        interval=CLUSTER_INTERVAL_S,
        what="the Redis container to restart",
        ignoring=CLUSTER_ERRORS,
    )
    figures(f"Redis killed mid-load: back after {time.monotonic() - killed:.1f}s")

    accounting = fleet.queue.wait_settled(ids, timeout=180)
    figures(
        f"Redis restart: all {len(ids)} tasks settled {time.monotonic() - killed:.1f}s after it"
    )
    accounting.assert_nothing_lost()
    # The workers reconnected rather than crash-looping.
    for pod in fleet.pods():
        restarts = pod["status"]["containerStatuses"][0].get("restartCount", 0)
        assert restarts == 0, f"worker {pod['metadata']['name']} restarted {restarts} times"
    assert set(pods) <= set(fleet.queue.workers()), "a worker did not register again"


@pytest.mark.exclusive  # the suite's operator is stopped and started
def test_an_operator_restarted_mid_load_requeues_a_dead_pods_tasks_exactly_once(
    make_fleet: Callable[..., Fleet], operator: Operator, figures: Callable[[str], None]
) -> None:
    fleet = make_fleet("operator-restart", replicas=2, concurrency=2)
    fleet.wait_ready(2)
    # Tasks well inside the 30 s task timeout, long enough to be mid-run at the kill.
    ids = fleet.queue.enqueue_sleepers(4, seconds=20)

    def busy() -> tuple[str, set[str]] | None:
        for pod, count in fleet.queue.holders().most_common(1):
            if count >= 2:
                return pod, fleet.queue.held_by(pod)
        return None

    victim, held = wait_for(
        busy,
        timeout=45,
        interval=CLUSTER_INTERVAL_S,
        what="a pod holding 2 tasks",
        ignoring=CLUSTER_ERRORS,
    )
    pod = fleet.kube.get("pod", victim)
    assert pod is not None
    node = NodeShell.for_node(pod["spec"]["nodeName"])
    container_id = pod["status"]["containerStatuses"][0]["containerID"]
    before = fleet.queue.stats()
    replicas = operator.deployment()["spec"]["replicas"]
    operator.kube.run("scale", f"deployment/{operator.name}", "--replicas=0")
    try:
        wait_for(
            lambda: not operator.kube.pods(operator.selector),
            timeout=120,
            interval=CLUSTER_INTERVAL_S,
            what="the operator to stop",
            ignoring=CLUSTER_ERRORS,
        )
        # The worker stops dead, then its pod vanishes: no SIGTERM from the kubelet can make
        # it hand its tasks back. Like a lost node, while nobody watches. Frozen rather than
        # killed: the kubelet would restart a killed container in the pod before the
        # deletion, and that new worker (same pod name) would take back, claim and then hand
        # back what the dead one held, leaving nothing for the operator to do.
        node.freeze_container(container_id)
        fleet.kube.run("delete", "pod", victim, "--grace-period=0", "--force")
        assert fleet.queue.held_by(victim) == held, "tasks moved while the operator was down"
    finally:
        operator.kube.run("scale", f"deployment/{operator.name}", f"--replicas={replicas}")
    wait_for(
        operator.ready_pods,
        timeout=120,
        interval=CLUSTER_INTERVAL_S,
        what="a ready operator pod",
        ignoring=CLUSTER_ERRORS,
    )
    back = time.monotonic()
    wait_for(
        lambda: not fleet.queue.held_by(victim),
        timeout=40,
        interval=0.2,
        what=f"the tasks of {victim} to be taken back after the operator's restart",
        ignoring=CLUSTER_ERRORS,
    )
    elapsed = time.monotonic() - back
    figures(
        f"operator restart: a pod that died while it was down had its tasks requeued "
        f"{elapsed:.1f}s after the new operator pod became ready"
    )

    accounting = fleet.queue.wait_settled(ids, timeout=150)
    accounting.assert_nothing_lost()
    requeued = accounting.stats.get("requeued", 0) - before.get("requeued", 0)
    released = accounting.stats.get("released", 0) - before.get("released", 0)
    assert (requeued, released) == (len(held), 0), accounting.summary()
    for task_id in held:
        lost = int(fleet.queue.task(task_id).get("lost") or 0)
        assert lost == 1, f"task {task_id} counted lost {lost} times"
