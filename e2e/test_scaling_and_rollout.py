"""Scaling a TaskQueue and rolling its pods under load: idle pods go first, nothing is lost."""

from __future__ import annotations

import time
from collections.abc import Callable

from e2e.lib.fleet import Fleet
from e2e.lib.kube import CLUSTER_ERRORS, CLUSTER_INTERVAL_S, PodWatch
from tests.polling import wait_for

pytest_plugins = ["e2e.lib.fixtures"]

DELETION_COST = "controller.kubernetes.io/pod-deletion-cost"


def test_scaling_down_removes_the_idle_pod_and_lets_busy_pods_finish_their_tasks(
    make_fleet: Callable[..., Fleet], figures: Callable[[str], None]
) -> None:
    fleet = make_fleet("scale", replicas=3, concurrency=1)
    pods = set(fleet.wait_ready(3))

    # Two long tasks on a fleet of three single-slot pods: exactly one pod stays idle, and
    # the tasks outlast the operator's ranking and the ReplicaSet's pick.
    long_ids = fleet.queue.enqueue_sleepers(2, seconds=20)

    def two_holders() -> set[str] | None:
        holders = fleet.queue.holders()
        return set(holders) if len(holders) == 2 else None

    busy = wait_for(
        two_holders,
        timeout=30,
        interval=CLUSTER_INTERVAL_S,
        what="two pods holding one task each",
        ignoring=CLUSTER_ERRORS,
    )
    (idle,) = pods - busy
    # The operator ranks pods by the in-flight counts workers report with each heartbeat.
    wait_for(
        lambda: all(fleet.queue.workers().get(p, {}).get("inflight") for p in busy),
        timeout=15,
        interval=CLUSTER_INTERVAL_S,
        what="the busy pods to report their task",
        ignoring=CLUSTER_ERRORS,
    )

    # Every version of every pod from before the scale-down: the costs the ReplicaSet saw.
    watch = PodWatch(fleet.kube, selector=fleet.selector)
    wait_for(
        lambda: len(watch.versions) >= 3,
        timeout=15,
        interval=CLUSTER_INTERVAL_S,
        what="the pod watch to list the fleet",
        ignoring=CLUSTER_ERRORS,
    )
    fleet.scale(2)
    assert fleet.taskqueue()["spec"]["replicas"] == 2

    def idle_pod_went_alone() -> bool:
        current = {p["metadata"]["name"]: p for p in fleet.pods()}
        leaving = idle not in current or bool(current[idle]["metadata"].get("deletionTimestamp"))
        busy_stay = all(
            name in current and not current[name]["metadata"].get("deletionTimestamp")
            for name in busy
        )
        assert busy_stay, f"a busy pod is being removed while {idle} idles: {sorted(current)}"
        return leaving

    wait_for(
        idle_pod_went_alone,
        timeout=60,
        interval=CLUSTER_INTERVAL_S,
        what=f"the idle pod {idle} to be the one removed",
        ignoring=CLUSTER_ERRORS,
    )
    wait_for(
        watch.deleted,
        timeout=15,
        interval=CLUSTER_INTERVAL_S,
        what="the watch to see the removal",
        ignoring=CLUSTER_ERRORS,
    )
    watch.stop()
    seen = watch.annotations_before_deletion(DELETION_COST)
    assert set(seen) == pods, f"the watch saw {sorted(seen)} before the removal, not {pods}"
    # The operator ranked the pods by in-flight tasks before lowering replicas: an unset
    # cost on a busy pod means the ReplicaSet picked by something else.
    unset = sorted(p for p in busy if seen[p] is None)
    assert not unset, f"busy pods without a deletion cost at scale-down: {unset} ({seen})"
    costs = {pod: int(cost or 0) for pod, cost in seen.items()}
    removed = set(watch.deleted())
    assert removed == {idle}, f"removed {sorted(removed)}, expected the idle {idle} ({costs})"
    kept = pods - removed
    assert max(costs[p] for p in removed) < min(costs[p] for p in kept), (
        f"the removed pods were not the cheapest: {costs}"
    )
    assert all(costs[idle] < costs[p] for p in busy), f"idle not cheaper than busy: {costs}"
    figures(
        f"scale 3->2: deletion costs before the pick idle={costs[idle]} "
        f"busy={sorted(costs[p] for p in busy)}; removed the idle pod"
    )

    accounting = fleet.queue.wait_settled(long_ids, timeout=60)
    accounting.assert_nothing_lost()
    # Every execution record, not the last per task: a task that ran twice shows up.
    long_runs = [(r["id"], r["pod"]) for r in fleet.queue.executions() if r["id"] in long_ids]
    assert sorted(t for t, _ in long_runs) == sorted(long_ids), f"re-run: {long_runs}"
    assert {p for _, p in long_runs} == busy, f"a busy task was moved, not finished: {long_runs}"

    # Up and down again under a steady load: still nothing lost, nothing run twice. Enough
    # 2 s tasks to keep every slot busy through the scale-up and the scale-down (one slot a
    # pod: what is left after the scale-down runs on the one pod that stays).
    count = 30
    ids = fleet.queue.enqueue_sleepers(count, seconds=2)
    start = time.monotonic()
    fleet.scale(3)
    three = set(fleet.wait_ready(3))
    wait_for(
        lambda: three <= set(fleet.queue.holders()),
        timeout=30,
        interval=0.2,
        what="work on every pod",
        ignoring=CLUSTER_ERRORS,
    )
    fleet.scale(1)
    accounting = fleet.queue.wait_settled(ids, timeout=150)
    elapsed = time.monotonic() - start
    figures(f"scale 2->3->1 under load: {count} tasks x 2 s settled in {elapsed:.1f}s")
    accounting.assert_nothing_lost()
    assert accounting.stats.get("requeued", 0) == 0, accounting.summary()
    assert accounting.stats.get("stale", 0) == 0, accounting.summary()
    fleet.wait_ready(1)


def test_a_rollout_under_load_drains_old_pods_and_runs_every_task_exactly_once(
    make_fleet: Callable[..., Fleet], figures: Callable[[str], None]
) -> None:
    fleet = make_fleet(
        "rollout", replicas=2, concurrency=2, env=[{"name": "E2E_REVISION", "value": "1"}]
    )
    old_pods = set(fleet.wait_ready(2))
    old_template = fleet.deployment()["spec"]["template"]["metadata"]["annotations"]

    ids = fleet.queue.enqueue_sleepers(24, seconds=3)
    wait_for(
        fleet.queue.holders,
        timeout=30,
        interval=CLUSTER_INTERVAL_S,
        what="tasks running on the old pods",
        ignoring=CLUSTER_ERRORS,
    )

    start = time.monotonic()
    fleet.kube.patch_merge(
        "taskqueue", fleet.name, {"spec": {"env": [{"name": "E2E_REVISION", "value": "2"}]}}
    )
    wait_for(
        lambda: fleet.deployment()["spec"]["template"]["metadata"]["annotations"] != old_template,
        timeout=30,
        interval=CLUSTER_INTERVAL_S,
        what="a new pod template",
        ignoring=CLUSTER_ERRORS,
    )
    fleet.kube.run(
        "rollout",
        "status",
        f"deployment/{fleet.deployment()['metadata']['name']}",
        "--timeout=180s",
        timeout=200,
    )
    new_pods = set(fleet.wait_ready(2))
    assert not new_pods & old_pods, "old pods survived the rollout"
    assert fleet.env().get("E2E_REVISION") == "2"

    accounting = fleet.queue.wait_settled(ids, timeout=150)
    elapsed = time.monotonic() - start
    figures(f"rollout under load: 24 tasks x 3 s settled {elapsed:.1f}s after the change")
    accounting.assert_nothing_lost()
    # Drained, not killed: no task needed taking back and every one ran exactly once.
    assert accounting.stats.get("requeued", 0) == 0, accounting.summary()
    assert accounting.stats.get("stale", 0) == 0, accounting.summary()
    assert all(accounting.executions[t] == 1 for t in ids), accounting.summary()
    # Old pods left the worker registry themselves (a clean exit deregisters).
    assert not set(fleet.queue.workers()) & old_pods
    ran_on = {r["pod"] for r in fleet.queue.executions()}
    assert ran_on & old_pods and ran_on & new_pods, f"work did not span the rollout: {ran_on}"
