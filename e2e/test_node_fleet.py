"""A fleet of Node.js workers (`runtime: node`) under the operator: pods deleted, force
deleted, SIGKILLed, scaled and rolled mid-task, and every task still done exactly once.

The image is examples/node-app-image (JS handlers FROM the Node worker image); its
`./handlers.js:sleepAndRecord` is the Node twin of the Python sample handler, recording
each finished execution in a Redis list, so the same ledger (e2e/lib/ledger.py) accounts
for every task. The scenarios follow test_pod_disruption.py and
test_scaling_and_rollout.py, on one fleet each to keep the run short.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from e2e.lib.fleet import Fleet
from e2e.lib.kube import (
    CLUSTER_ERRORS,
    CLUSTER_INTERVAL_S,
    VERSIONS,
    NodeShell,
    PodWatch,
)
from e2e.test_pod_disruption import busy_pod, exit_code, taken_back_from
from tests.polling import wait_for

pytest_plugins = ["e2e.lib.fixtures"]

NODE_APP_IMAGE = VERSIONS.get("EXAMPLE_NODE_APP_IMAGE", "localhost/taskfleet-example-node-app:dev")
NODE_SPEC: dict[str, Any] = {
    "image": NODE_APP_IMAGE,
    "runtime": "node",
    "handler": "./handlers.js:sleepAndRecord",
}


def node_fleet(make_fleet: Callable[..., Fleet], name: str, **spec: Any) -> Fleet:
    fleet = make_fleet(name, **NODE_SPEC, **spec)
    container = fleet.container()
    assert container["command"] == ["taskfleet-node", "worker"], container["command"]
    hook = container["lifecycle"]["preStop"]["exec"]["command"]
    assert hook[:2] == ["taskfleet-node", "drain"], hook
    return fleet


def delta(before: dict[str, int], after: dict[str, int], counter: str) -> int:
    return after.get(counter, 0) - before.get(counter, 0)


def test_node_workers_drain_on_delete_and_their_tasks_come_back_after_force_delete_and_sigkill(
    make_fleet: Callable[..., Fleet], figures: Callable[[str], None]
) -> None:
    fleet = node_fleet(make_fleet, "node-disrupt", maxTaskDurationSeconds=20)
    fleet.wait_ready(2)
    grace = fleet.deployment()["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    every: list[str] = []

    # 1. Graceful delete: the preStop `taskfleet-node drain --wait` drains the worker while
    # its tasks run; they finish there, and the worker exits 0 before the grace period.
    ids = fleet.queue.enqueue_sleepers(8, seconds=5)
    every += ids
    victim, held = busy_pod(fleet, 2)
    before = fleet.queue.stats()
    watch = PodWatch(fleet.kube, victim)
    start = time.monotonic()
    fleet.kube.delete("pod", victim)
    wait_for(
        lambda: fleet.queue.workers().get(victim, {}).get("draining"),
        timeout=15,
        interval=0.2,
        what=f"{victim} to report draining",
        ignoring=CLUSTER_ERRORS,
    )
    runtime = fleet.kube.exec(victim, "ls", "/tmp/taskfleet", container="worker").split()
    assert any(name.startswith("drain-waiter.") for name in runtime), (
        f"no `taskfleet-node drain` hook registered in {victim} while it drains: {runtime}"
    )
    fleet.wait_pod_gone(victim, timeout=grace + 30)
    watch.stop()
    terminated = watch.terminated()
    figures(
        f"node fleet, graceful delete with 2 x 5 s tasks: gone after "
        f"{time.monotonic() - start:.1f}s (grace {grace}s), worker exit {exit_code(terminated)}"
    )
    assert terminated is not None and terminated["exitCode"] == 0, terminated
    accounting = fleet.queue.wait_settled(ids, timeout=90)
    accounting.assert_nothing_lost()
    held_runs = [(r["id"], r["pod"]) for r in fleet.queue.executions() if r["id"] in held]
    assert sorted(held_runs) == sorted((t, victim) for t in held), (
        f"in-flight tasks of {victim} did not finish there exactly once: {held_runs}"
    )
    after = accounting.stats
    assert (delta(before, after, "requeued"), delta(before, after, "stale")) == (0, 0), after
    failed_hooks = [
        e.get("message", "")
        for e in fleet.kube.events(victim)
        if e.get("reason") == "FailedPreStopHook"
    ]
    assert not failed_hooks, f"preStop hook reported failed: {failed_hooks}"
    fleet.wait_ready(2)

    # 2. Force delete: no drain; the operator's pod-gone path takes the tasks back well
    # inside the 60 s lease TTL, and none finishes on the deleted pod afterwards.
    ids = fleet.queue.enqueue_sleepers(8, seconds=8)
    every += ids
    victim, held = busy_pod(fleet, 2)
    before = fleet.queue.stats()
    fleet.kube.run("delete", "pod", victim, "--grace-period=0", "--force")
    gone, deleted_at = time.monotonic(), time.time()
    wait_for(
        lambda: not fleet.queue.held_by(victim) and taken_back_from(fleet.queue, held, victim),
        timeout=30,
        interval=0.2,
        what=f"the tasks of {victim} to be taken back",
        ignoring=CLUSTER_ERRORS,
    )
    after = fleet.queue.stats()
    figures(
        f"node fleet, force delete: {len(held)} tasks back {time.monotonic() - gone:.1f}s "
        f"after the pod object was deleted (lease TTL 60 s)"
    )
    assert (delta(before, after, "requeued"), delta(before, after, "released")) == (
        len(held),
        0,
    ), after
    fleet.queue.wait_settled(ids, timeout=120).assert_nothing_lost()
    late = [
        r
        for r in fleet.queue.executions()
        if r["id"] in held and r["pod"] == victim and r["at"] >= deleted_at
    ]
    assert not late, f"tasks finished on the force-deleted pod: {late}"
    fleet.wait_ready(2)

    # 3. SIGKILL of the worker (PID 1, from the node): the container restarts, and the
    # killed incarnation's tasks are taken back and counted lost.
    ids = fleet.queue.enqueue_sleepers(8, seconds=8)
    every += ids
    victim, held = busy_pod(fleet, 2)
    pod = fleet.kube.get("pod", victim)
    assert pod is not None
    status = pod["status"]["containerStatuses"][0]
    incarnation = fleet.queue.workers()[victim]["incarnation"]
    NodeShell.for_node(pod["spec"]["nodeName"]).kill_container(status["containerID"])
    killed = time.monotonic()
    wait_for(
        lambda: taken_back_from(fleet.queue, held, victim, incarnation),
        timeout=45,
        interval=0.2,
        what=f"the tasks of {victim}'s killed incarnation to be taken back",
        ignoring=CLUSTER_ERRORS,
    )
    figures(
        f"node fleet, SIGKILLed worker: {len(held)} tasks back "
        f"{time.monotonic() - killed:.1f}s after the kill"
    )

    def restarted() -> bool:
        current = fleet.kube.get("pod", victim)
        statuses = (current or {}).get("status", {}).get("containerStatuses", [{}])
        return bool(statuses[0].get("restartCount", 0) > status.get("restartCount", 0))

    wait_for(
        restarted,
        timeout=60,
        interval=CLUSTER_INTERVAL_S,
        what=f"{victim}'s container to restart",
        ignoring=CLUSTER_ERRORS,
    )
    fleet.queue.wait_settled(ids, timeout=120).assert_nothing_lost()
    for task_id in held:
        assert int(fleet.queue.task(task_id).get("lost") or 0) >= 1, "a lost worker went uncounted"

    # All three rounds together: each task done, and run more than once only where the
    # queue refused a stale completion.
    fleet.queue.account(every).assert_nothing_lost()
    fleet.wait_ready(2)


def test_a_node_fleet_scaled_and_rolled_under_load_runs_every_task_exactly_once(
    make_fleet: Callable[..., Fleet], figures: Callable[[str], None]
) -> None:
    fleet = node_fleet(make_fleet, "node-roll", env=[{"name": "E2E_REVISION", "value": "1"}])
    first = set(fleet.wait_ready(2))
    old_template = fleet.deployment()["spec"]["template"]["metadata"]["annotations"]

    count = 40
    ids = fleet.queue.enqueue_sleepers(count, seconds=2)
    start = time.monotonic()
    # kubectl scale on the TaskQueue (its scale subresource): up, work on every pod, down.
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
    old = set(fleet.wait_ready(1))
    accounting = fleet.queue.wait_settled(ids, timeout=120)
    figures(
        f"node fleet, scale 2->3->1 under load: {count} tasks x 2 s settled in "
        f"{time.monotonic() - start:.1f}s"
    )
    accounting.assert_nothing_lost()
    # Scaled down by drains: nothing taken back, nothing refused, each task ran once.
    assert accounting.stats.get("requeued", 0) == 0, accounting.summary()
    assert accounting.stats.get("stale", 0) == 0, accounting.summary()
    assert all(accounting.executions[t] == 1 for t in ids), accounting.summary()

    # A rollout (a new env value) under load: the old pod drains while the new one already
    # works.
    rolled = fleet.queue.enqueue_sleepers(24, seconds=3)
    ids += rolled
    wait_for(
        lambda: old <= set(fleet.queue.holders()),
        timeout=30,
        interval=0.2,
        what="tasks running on the old pod",
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
    new = set(fleet.wait_ready(1))
    assert not new & (first | three), "an old pod survived the rollout"
    assert fleet.env().get("E2E_REVISION") == "2"

    accounting = fleet.queue.wait_settled(ids, timeout=180)
    figures(
        f"node fleet, rollout under load: 24 tasks x 3 s settled "
        f"{time.monotonic() - start:.1f}s after the change"
    )
    accounting.assert_nothing_lost()
    # Drained, never killed: nothing taken back, nothing refused, each task ran once.
    assert accounting.stats.get("requeued", 0) == 0, accounting.summary()
    assert accounting.stats.get("stale", 0) == 0, accounting.summary()
    assert all(accounting.executions[t] == 1 for t in ids), accounting.summary()
    # The old pods left the worker registry themselves (a drained exit deregisters), and
    # the new pod serves the queue.
    assert not set(fleet.queue.workers()) & (first | three)
    ran_on = {r["pod"] for r in fleet.queue.executions() if r["id"] in rolled}
    assert ran_on & old and ran_on & new, f"the rollout's load did not span it: {ran_on}"
    after = fleet.queue.enqueue_sleepers(2, seconds=0)
    fleet.queue.wait_settled(after, timeout=60).assert_nothing_lost()
    ran_on = {r["pod"] for r in fleet.queue.executions() if r["id"] in after}
    assert ran_on <= new, f"tasks after the rollout ran on {ran_on}, not the new pod {new}"
