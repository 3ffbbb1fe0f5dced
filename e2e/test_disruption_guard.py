"""The disruption guard on a real cluster: a worker pod carries karpenter.sh/do-not-disrupt
and cluster-autoscaler.kubernetes.io/safe-to-evict while it holds a task, an idle pod
does not, and the busy pod loses them once its task is done."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from e2e.lib.fleet import Fleet
from e2e.lib.kube import CLUSTER_ERRORS, CLUSTER_INTERVAL_S
from tests.polling import wait_for

pytest_plugins = ["e2e.lib.fixtures"]

GUARD = {
    "karpenter.sh/do-not-disrupt": "true",
    "cluster-autoscaler.kubernetes.io/safe-to-evict": "false",
}


def guard_of(fleet: Fleet, pod: str) -> dict[str, str]:
    body: dict[str, Any] | None = fleet.kube.get("pod", pod)
    assert body is not None, f"pod {pod} is gone"
    annotations = body["metadata"].get("annotations") or {}
    return {k: v for k, v in annotations.items() if k in GUARD}


def test_the_guard_annotations_follow_a_busy_pod_and_stay_off_an_idle_one(
    make_fleet: Callable[..., Fleet], figures: Callable[[str], None]
) -> None:
    fleet = make_fleet("guarded", replicas=2, concurrency=1)
    pods = fleet.wait_ready(2)
    assert all(guard_of(fleet, pod) == {} for pod in pods)

    (task_id,) = fleet.queue.enqueue_sleepers(1, seconds=15)
    busy = wait_for(
        lambda: next(iter(fleet.queue.holders()), None),
        timeout=60,
        interval=0.2,
        what="a pod holding the task",
        ignoring=CLUSTER_ERRORS,
    )
    (idle,) = [pod for pod in pods if pod != busy]
    wait_for(
        lambda: guard_of(fleet, busy) == GUARD,
        timeout=15,
        interval=0.2,
        what=f"the busy pod {busy} guarded",
        ignoring=CLUSTER_ERRORS,
    )
    assert guard_of(fleet, idle) == {}
    assert fleet.queue.held_by(busy) == {task_id}  # still running: guarded while busy

    fleet.queue.wait_settled([task_id], timeout=60).assert_nothing_lost()
    wait_for(
        lambda: guard_of(fleet, busy) == {},
        timeout=15,
        interval=CLUSTER_INTERVAL_S,
        what=f"the guard removed from {busy} once idle",
        ignoring=CLUSTER_ERRORS,
    )
    assert guard_of(fleet, idle) == {}
    figures(f"disruption guard followed {busy} busy and idle; {idle} never guarded")
