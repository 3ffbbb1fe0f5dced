"""Scaling a TaskQueue and rolling its pods under load: idle pods go first, nothing is lost."""

from __future__ import annotations

import time
from collections.abc import Callable

from e2e.lib.fleet import Fleet
from e2e.lib.kube import wait_for

pytest_plugins = ["e2e.lib.fixtures"]

DELETION_COST = "controller.kubernetes.io/pod-deletion-cost"


def test_scaling_down_removes_the_idle_pod_and_lets_busy_pods_finish_their_tasks(
    make_fleet: Callable[..., Fleet], figures: Callable[[str], None]
) -> None:
    fleet = make_fleet("scale", replicas=3, concurrency=1)
    pods = set(fleet.wait_ready(3))

    # Two long tasks on a fleet of three single-slot pods: exactly one pod stays idle.
    long_ids = fleet.queue.enqueue_sleepers(2, seconds=15)

    def two_holders() -> set[str] | None:
        holders = fleet.queue.holders()
        return set(holders) if len(holders) == 2 else None

    busy = wait_for("two pods holding one task each", two_holders, timeout=30)
    (idle,) = pods - busy
    # The operator ranks pods by the in-flight counts workers report with each heartbeat.
    wait_for(
        "the busy pods to report their task",
        lambda: all(fleet.queue.workers().get(p, {}).get("inflight") for p in busy),
        timeout=15,
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

    wait_for(f"the idle pod {idle} to be the one removed", idle_pod_went_alone, timeout=60)
    # The operator ranked the pods by in-flight tasks before lowering replicas.
    for pod in fleet.pods():
        name = pod["metadata"]["name"]
        if name in busy:
            cost = pod["metadata"].get("annotations", {}).get(DELETION_COST)
            assert cost is not None and int(cost) > 0, f"busy pod {name} has deletion cost {cost}"

    accounting = fleet.queue.wait_settled(long_ids, timeout=60)
    accounting.assert_nothing_lost()
    ran_on = {r["id"]: r["pod"] for r in fleet.queue.executions()}
    assert {ran_on[t] for t in long_ids} == busy, "a busy task was moved instead of finished"

    # Up and down again under a steady load: still nothing lost, nothing run twice.
    ids = fleet.queue.enqueue_sleepers(30, seconds=2)
    start = time.monotonic()
    fleet.scale(3)
    fleet.wait_ready(3)
    wait_for("work on every pod", lambda: len(fleet.queue.holders()) >= 2, timeout=30)
    fleet.scale(1)
    accounting = fleet.queue.wait_settled(ids, timeout=150)
    figures(f"scale 2->3->1 under load: 30 tasks x 2 s settled in {time.monotonic() - start:.1f}s")
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
    wait_for("tasks running on the old pods", fleet.queue.holders, timeout=30)

    start = time.monotonic()
    fleet.kube.patch_merge(
        "taskqueue", fleet.name, {"spec": {"env": [{"name": "E2E_REVISION", "value": "2"}]}}
    )
    wait_for(
        "a new pod template",
        lambda: fleet.deployment()["spec"]["template"]["metadata"]["annotations"] != old_template,
        timeout=30,
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
