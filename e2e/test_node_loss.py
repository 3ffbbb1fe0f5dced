"""A node lost under a busy fleet: its container frozen, or only its kubelet stopped.

Runs on a kind cluster with at least two worker nodes (``make e2e``); the local
single-node cluster cannot lose a node without losing the test, so it skips there.

What happens to each task (DESIGN.md section 4, "A node lost"):

- Node frozen (kernel hang, the whole node cut off): its pods stay Running in the API for
  minutes, so the pod-deletion fast path cannot fire. Their workers stop renewing leases;
  after ``heartbeat.ttlSeconds`` the next claim of any other worker (or the operator's
  sweep) takes the tasks back, and they run elsewhere. When the node comes back, its
  workers' late completions carry stale tokens and are refused: the queue keeps the
  result of the run that finished on a live node.
- Kubelet stopped (the node's agent lost, its pods alive): the node turns NotReady, yet
  its workers still reach Redis and renew their leases, so nothing is taken from them:
  their tasks finish where they run. The operator does not act on NotReady (it would
  take work from live workers); lease expiry is the signal that a worker is gone.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable
from typing import Any

import pytest

from e2e.lib.fleet import Fleet
from e2e.lib.kube import (
    CLUSTER_ERRORS,
    CLUSTER_INTERVAL_S,
    KUBECTL,
    FrozenNodes,
    Kube,
    node_ready,
)
from tests.polling import wait_for

pytest_plugins = ["e2e.lib.fixtures"]
#: A node is frozen or its kubelet stopped: run alone (make e2e-local runs it after the others).
pytestmark = pytest.mark.exclusive

#: kube-controller-manager's --node-monitor-grace-period (kubeadm's default in 1.34),
#: before which a silent node is still Ready; NotReady is awaited with margin.
NODE_GRACE_S = 50
#: The frozen node's fleet's lease TTL (heartbeat.ttlSeconds): four missed beats of 5 s.
FROZEN_LEASE_TTL_S = 20


def _kind_worker_nodes() -> list[str]:
    raw = subprocess.run(
        [KUBECTL, "get", "nodes", "-o", "json"], capture_output=True, text=True, check=False
    )
    if raw.returncode != 0:
        return []
    nodes = []
    for node in json.loads(raw.stdout)["items"]:
        if not node["spec"].get("providerID", "").startswith("kind://"):
            continue
        taints = node["spec"].get("taints") or []
        if any(t["key"] == "node-role.kubernetes.io/control-plane" for t in taints):
            continue
        nodes.append(node["metadata"]["name"])
    return sorted(nodes)


@pytest.fixture
def kind_workers() -> list[str]:
    nodes = _kind_worker_nodes()
    if len(nodes) < 2:
        pytest.skip("needs a kind cluster with two or more worker nodes (make e2e)")
    return nodes


def _node_of(kube: Kube, pod: str) -> str:
    found = kube.get("pod", pod)
    assert found is not None, f"pod {pod} is gone"
    return str(found["spec"]["nodeName"])


def _docker(*argv: str) -> None:
    subprocess.run(["docker", *argv], check=True, capture_output=True, timeout=60)


def _spread_fleet(make_fleet: Callable[..., Fleet], name: str, nodes: int, **spec: Any) -> Fleet:
    """One worker pod per worker node (required anti-affinity), each running two tasks."""
    fleet = make_fleet(
        name,
        replicas=nodes,
        concurrency=2,
        **spec,
        affinity={
            "podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "labelSelector": {"matchLabels": {"taskfleet.dev/queue": name}},
                        "topologyKey": "kubernetes.io/hostname",
                    }
                ]
            }
        },
    )
    fleet.wait_ready(nodes)
    return fleet


def _victim(fleet: Fleet, kube: Kube, held_per_pod: int) -> tuple[str, str, set[str]]:
    """A pod holding ``held_per_pod`` tasks on a node without the test's Redis (the test
    reaches Redis through that node), its node, and the ids it holds."""
    redis_node = _node_of(kube, "redis")

    def probe() -> tuple[str, str, set[str]] | None:
        for pod, count in fleet.queue.holders().items():
            node = _node_of(kube, pod)
            if count >= held_per_pod and node != redis_node:
                return pod, node, fleet.queue.held_by(pod)
        return None

    return wait_for(
        probe,
        timeout=60,
        interval=CLUSTER_INTERVAL_S,
        what=f"a pod holding {held_per_pod} tasks on a node other than Redis's ({redis_node})",
        ignoring=CLUSTER_ERRORS,
    )


def _lease_ttl(fleet: Fleet) -> float:
    """The queue's lease TTL as the workers apply it (its config in Redis)."""
    raw = fleet.queue.forward.call(lambda c: c.hget(fleet.queue.keys.config, "lease_ttl_s"))
    assert raw is not None, "the queue has no lease TTL in its config"
    return float(raw)


def test_a_frozen_node_s_tasks_come_back_by_lease_expiry_and_finish_elsewhere(
    make_fleet: Callable[..., Fleet],
    namespace: Kube,
    kind_workers: list[str],
    frozen_nodes: FrozenNodes,
    figures: Callable[[str], None],
) -> None:
    # A shorter lease than the default: the take-back waits for one TTL, the rest is the same.
    fleet = _spread_fleet(
        make_fleet,
        "frozen",
        len(kind_workers),
        heartbeat={"intervalSeconds": 5, "ttlSeconds": FROZEN_LEASE_TTL_S},
    )
    ids = fleet.queue.enqueue_sleepers(2 * len(kind_workers), seconds=20)
    pod, node, held = _victim(fleet, namespace, 2)
    ttl = _lease_ttl(fleet)

    frozen_nodes.freeze(node)
    frozen_at = time.monotonic()

    def taken_back() -> bool:
        return all(
            fleet.queue.task(t).get("pod") != pod or fleet.queue.task(t).get("state") != "running"
            for t in held
        )

    wait_for(
        taken_back,
        timeout=2 * ttl + 60,
        interval=0.5,
        what=f"the tasks of {pod} on the frozen node {node} to be taken back",
        ignoring=CLUSTER_ERRORS,
    )
    back_after = time.monotonic() - frozen_at
    figures(
        f"node frozen: {len(held)} tasks of {pod} pending again {back_after:.1f}s after the "
        f"freeze (lease TTL {ttl:g}s; taken back by the next claim with a free slot or a "
        "sweep; the pod stayed Running in the API)"
    )
    accounting = fleet.queue.wait_settled(ids, timeout=120)
    assert accounting.settled, accounting.summary()
    for task_id in held:
        assert fleet.queue.task(task_id).get("pod") != pod, (
            f"{task_id} finished on the frozen pod {pod}"
        )

    # The node comes back: its workers wake up holding tasks that are no longer theirs.
    woke_at = time.time()
    frozen_nodes.thaw(node)

    def frozen_worker_caught_up() -> bool:
        if fleet.queue.held_by(pod):
            return False
        beats = [
            float(info.get("heartbeat_ms", 0)) / 1000  # Redis's clock: this machine's
            for worker, info in fleet.queue.workers().items()
            if worker.split("#")[0] == pod
        ]
        return bool(beats) and min(beats) > woke_at

    wait_for(
        frozen_worker_caught_up,
        timeout=60,
        interval=CLUSTER_INTERVAL_S,
        what=f"the workers of {pod} to beat again and hold nothing",
        ignoring=CLUSTER_ERRORS,
    )
    final = fleet.queue.account(ids)
    final.assert_nothing_lost()
    for task_id in held:
        # fencing: whatever the woken worker tried, the run that finished elsewhere stands
        assert fleet.queue.task(task_id).get("pod") != pod, f"{task_id}: a late write won"
    figures(
        f"node frozen: after it came back, stale completions refused={final.stats.get('stale', 0)}"
        f", leases lost={final.stats.get('lost', 0)}, every task done once in the queue"
    )


def test_a_node_whose_kubelet_stops_keeps_its_live_workers_tasks(
    make_fleet: Callable[..., Fleet],
    namespace: Kube,
    kind_workers: list[str],
    figures: Callable[[str], None],
) -> None:
    seconds = NODE_GRACE_S + 25
    fleet = _spread_fleet(
        make_fleet, "headless", len(kind_workers), maxTaskDurationSeconds=seconds + 60
    )
    ids = fleet.queue.enqueue_sleepers(2 * len(kind_workers), seconds=seconds)
    pod, node, held = _victim(fleet, namespace, 2)
    lost_before = fleet.queue.stats().get("lost", 0)

    _docker("exec", node, "systemctl", "stop", "kubelet")
    stopped_at = time.monotonic()
    try:
        wait_for(
            lambda: not node_ready(namespace, node),
            timeout=NODE_GRACE_S + 40,
            interval=1,
            what=f"node {node} to turn NotReady after its kubelet stopped",
            ignoring=CLUSTER_ERRORS,
        )
        figures(
            f"kubelet stopped: node {node} NotReady after {time.monotonic() - stopped_at:.1f}s;"
            f" its workers kept their {len(held)} tasks"
        )
        # NotReady, and still nothing was taken from the live workers on it
        assert all(fleet.queue.task(t).get("pod") == pod for t in held)
        accounting = fleet.queue.wait_settled(ids, timeout=seconds + 60)
        accounting.assert_nothing_lost()
        for task_id in held:
            record: dict[str, Any] = fleet.queue.task(task_id)
            assert record.get("pod") == pod, f"{task_id} was taken from a live worker: {record}"
        assert fleet.queue.stats().get("lost", 0) == lost_before, "a lease was taken back"
    finally:
        _docker("exec", node, "systemctl", "start", "kubelet")
    wait_for(
        lambda: node_ready(namespace, node),
        timeout=120,
        interval=1,
        what=f"node {node} Ready again",
        ignoring=CLUSTER_ERRORS,
    )
