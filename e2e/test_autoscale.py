"""Autoscaling on a real cluster: from zero pods to the work and back, nothing lost."""

from __future__ import annotations

from collections.abc import Callable

from e2e.lib.fleet import Fleet
from e2e.lib.kube import CLUSTER_ERRORS, CLUSTER_INTERVAL_S
from tests.polling import wait_for

pytest_plugins = ["e2e.lib.fixtures"]

WINDOW_S = 10


def test_a_queue_at_zero_wakes_on_its_first_tasks_grows_to_the_work_and_returns_to_zero(
    make_fleet: Callable[..., Fleet], figures: Callable[[str], None]
) -> None:
    fleet = make_fleet(
        "auto",
        concurrency=2,
        autoscale={
            "minReplicas": 0,
            "maxReplicas": 3,
            "scaleDownStabilizationSeconds": WINDOW_S,
        },
    )
    wait_for(
        lambda: fleet.deployment()["spec"]["replicas"] == 0 and not fleet.pods(),
        timeout=60,
        interval=CLUSTER_INTERVAL_S,
        what="an autoscaled queue without work at zero pods",
        ignoring=CLUSTER_ERRORS,
    )
    fleet.wait_status(
        "Ready at zero pods", lambda s: s.get("desiredReplicas") == 0 and _ready(s), timeout=30
    )

    # 12 tasks of 3 s, 2 slots a pod: 6 pods wanted, 3 allowed.
    ids = fleet.queue.enqueue_sleepers(12, seconds=3)
    fleet.wait_status(
        "desiredReplicas 3, capped by maxReplicas",
        lambda s: s.get("desiredReplicas") == 3 and "maxReplicas 3" in s.get("scalingReason", ""),
        timeout=30,
    )
    accounting = fleet.queue.wait_settled(ids, timeout=180)
    accounting.assert_nothing_lost()
    runs = fleet.queue.executions()
    assert sorted(r["id"] for r in runs) == sorted(ids), f"a task ran twice: {runs}"
    ran_on = {r["pod"] for r in runs}
    assert 1 <= len(ran_on) <= 3, f"more pods than maxReplicas ran tasks: {sorted(ran_on)}"

    tasks = [fleet.queue.task(task_id) for task_id in ids]
    created = min(int(t["created_at"]) for t in tasks)
    first_start = min(int(t["started_at"]) for t in tasks)
    last_finish = max(int(t["finished_at"]) for t in tasks)
    figures(
        f"autoscale 0->3: first task started {(first_start - created) / 1000:.1f}s after the "
        f"enqueue (pod start included); 12 x 3 s settled in {(last_finish - created) / 1000:.1f}s "
        f"on {len(ran_on)} pods"
    )

    wait_for(
        lambda: fleet.deployment()["spec"]["replicas"] == 0 and not fleet.pods(),
        timeout=WINDOW_S + 90,
        interval=CLUSTER_INTERVAL_S,
        what="back to zero pods a window after the work",
        ignoring=CLUSTER_ERRORS,
    )
    stats = fleet.queue.stats()
    assert stats.get("requeued", 0) == 0, f"a task was taken back from a vanished pod: {stats}"
    assert stats.get("released", 0) == 0, f"a scale-down handed a task back: {stats}"


def _ready(status: dict[str, object]) -> bool:
    conditions = status.get("conditions") or []
    assert isinstance(conditions, list)
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)
