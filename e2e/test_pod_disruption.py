"""Pods deleted, force-deleted and SIGKILLed mid-task: every task still ends done.

Each scenario finds a pod holding tasks, disrupts it, and follows those tasks: finished
where they were, released by a draining worker, or taken back after an abrupt death.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from e2e.lib.fleet import Fleet
from e2e.lib.kube import NodeShell, PodWatch, wait_for

pytest_plugins = ["e2e.lib.fixtures"]


def busy_pod(fleet: Fleet, tasks: int, timeout: float = 45) -> tuple[str, set[str]]:
    """A pod holding ``tasks`` tasks, and their ids."""

    def probe() -> tuple[str, set[str]] | None:
        for pod, count in fleet.queue.holders().most_common():
            if count >= tasks:
                return pod, fleet.queue.held_by(pod)
        return None

    return wait_for(f"a pod holding {tasks} tasks", probe, timeout=timeout)


def exit_code(terminated: dict[str, Any] | None) -> str:
    return "unseen" if terminated is None else str(terminated.get("exitCode"))


def taken_back_from(fleet: Fleet, held: set[str], pod: str, incarnation: str | None = None) -> bool:
    """No task of ``held`` is still running under that pod (or that incarnation of it)."""
    for task_id in held:
        task = fleet.queue.task(task_id)
        if task.get("state") != "running" or task.get("pod") != pod:
            continue
        if incarnation is None or task.get("incarnation") == incarnation:
            return False
    return True


def test_deleting_a_busy_pod_drains_it_and_its_tasks_finish_there_before_the_grace_period(
    make_fleet: Callable[..., Fleet], figures: Callable[[str], None]
) -> None:
    fleet = make_fleet("graceful", replicas=2, concurrency=2, maxTaskDurationSeconds=20)
    fleet.wait_ready(2)
    grace = fleet.deployment()["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    ids = fleet.queue.enqueue_sleepers(8, seconds=5)
    victim, held = busy_pod(fleet, 2)

    watch = PodWatch(fleet.kube, victim)
    start = time.monotonic()
    fleet.kube.delete("pod", victim)
    # preStop runs `taskfleet drain`, SIGTERM reaches PID 1: the worker says it drains.
    wait_for(
        f"{victim} to report draining",
        lambda: fleet.queue.workers().get(victim, {}).get("draining"),
        timeout=15,
        interval=0.2,
    )
    wait_for(
        f"{victim} to be gone", lambda: fleet.kube.get("pod", victim) is None, timeout=grace + 30
    )
    elapsed = time.monotonic() - start
    watch.stop()
    terminated = watch.terminated()
    figures(
        f"graceful delete of a pod with 2 x 5 s tasks: gone after {elapsed:.1f}s "
        f"(grace {grace}s), worker exit {exit_code(terminated)}"
    )
    assert terminated is not None, "the pod's last status never showed its container terminated"
    assert terminated["exitCode"] == 0, f"worker did not exit cleanly in time: {terminated}"

    accounting = fleet.queue.wait_settled(ids, timeout=90)
    accounting.assert_nothing_lost()
    ran_on = {r["id"]: r["pod"] for r in fleet.queue.executions()}
    assert all(ran_on[t] == victim for t in held), "in-flight tasks did not finish on their pod"
    assert accounting.stats.get("requeued", 0) == 0, accounting.summary()
    assert accounting.stats.get("stale", 0) == 0, accounting.summary()


def test_force_deleting_a_busy_pod_gets_its_tasks_requeued_within_seconds(
    make_fleet: Callable[..., Fleet], figures: Callable[[str], None]
) -> None:
    # Lease TTL 60 s (the suite's default): only the operator's pod-gone path is that quick.
    fleet = make_fleet("forced", replicas=2, concurrency=2)
    fleet.wait_ready(2)
    ids = fleet.queue.enqueue_sleepers(8, seconds=8)
    victim, held = busy_pod(fleet, 2)
    before = fleet.queue.stats()

    fleet.kube.run("delete", "pod", victim, "--grace-period=0", "--force")
    gone = time.monotonic()
    assert fleet.kube.get("pod", victim) is None
    wait_for(
        f"the tasks of {victim} to be taken back",
        lambda: not fleet.queue.held_by(victim) and taken_back_from(fleet, held, victim),
        timeout=30,
        interval=0.2,
    )
    elapsed = time.monotonic() - gone
    after = fleet.queue.stats()
    figures(
        f"force delete: {len(held)} tasks back in the queue {elapsed:.1f}s after the pod object "
        f"was deleted (requeued +{after.get('requeued', 0) - before.get('requeued', 0)}, "
        f"released +{after.get('released', 0) - before.get('released', 0)}; lease TTL 60 s)"
    )

    accounting = fleet.queue.wait_settled(ids, timeout=120)
    accounting.assert_nothing_lost()
    ran_on = {r["id"]: r["pod"] for r in fleet.queue.executions()}
    assert all(ran_on[t] != victim for t in held), "a task finished on the force-deleted pod"


def test_a_sigkilled_worker_restarts_and_its_tasks_come_back(
    make_fleet: Callable[..., Fleet], figures: Callable[[str], None]
) -> None:
    fleet = make_fleet("sigkill", replicas=2, concurrency=2)
    fleet.wait_ready(2)
    ids = fleet.queue.enqueue_sleepers(8, seconds=8)
    victim, held = busy_pod(fleet, 2)
    pod = fleet.kube.get("pod", victim)
    assert pod is not None
    status = pod["status"]["containerStatuses"][0]
    incarnation = fleet.queue.workers()[victim]["incarnation"]

    # PID 1 ignores SIGKILL from inside its namespace: the node sends it.
    NodeShell.for_node(pod["spec"]["nodeName"]).kill_container(status["containerID"])
    killed = time.monotonic()
    wait_for(
        f"the tasks of {victim}'s killed incarnation to be taken back",
        lambda: taken_back_from(fleet, held, victim, incarnation),
        timeout=45,
        interval=0.2,
    )
    elapsed = time.monotonic() - killed
    figures(f"SIGKILLed worker: {len(held)} tasks back {elapsed:.1f}s after the kill")

    def restarted() -> bool:
        current = fleet.kube.get("pod", victim)
        statuses = (current or {}).get("status", {}).get("containerStatuses", [{}])
        return bool(statuses[0].get("restartCount", 0) > status.get("restartCount", 0))

    wait_for(f"{victim}'s container to restart", restarted, timeout=60)
    accounting = fleet.queue.wait_settled(ids, timeout=120)
    accounting.assert_nothing_lost()
    for task_id in held:
        assert int(fleet.queue.task(task_id).get("lost") or 0) >= 1, "a lost worker went uncounted"
    fleet.wait_ready(2)


def test_a_task_longer_than_the_drain_deadline_is_released_and_finished_by_another_pod(
    make_fleet: Callable[..., Fleet], figures: Callable[[str], None]
) -> None:
    fleet = make_fleet("overtime", replicas=2, concurrency=1, maxTaskDurationSeconds=5)
    fleet.wait_ready(2)
    grace = fleet.deployment()["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    # Its own timeout lets it outlive the queue's 5 s default (and the drain deadline).
    (task_id,) = fleet.queue.enqueue_sleepers(1, seconds=25, timeout=90)
    victim, _ = busy_pod(fleet, 1)

    watch = PodWatch(fleet.kube, victim)
    start = time.monotonic()
    fleet.kube.delete("pod", victim)

    def running_elsewhere() -> bool:
        task = fleet.queue.task(task_id)
        return task.get("state") == "running" and task.get("pod") not in (None, victim)

    wait_for("the long task to run on another pod", running_elsewhere, timeout=grace + 15)
    released_after = time.monotonic() - start
    wait_for(
        f"{victim} to be gone", lambda: fleet.kube.get("pod", victim) is None, timeout=grace + 30
    )
    watch.stop()
    terminated = watch.terminated()
    figures(
        f"task over the drain deadline (5 s): running on another pod {released_after:.1f}s "
        f"after the delete (grace {grace}s), worker exit {exit_code(terminated)}"
    )
    assert terminated is not None and terminated["exitCode"] == 0, terminated

    accounting = fleet.queue.wait_settled([task_id], timeout=60)
    accounting.assert_nothing_lost()
    records = fleet.queue.executions()
    assert [r["pod"] for r in records if r["id"] == task_id] != [victim]
    assert accounting.stats.get("released", 0) >= 1, accounting.summary()
    assert int(fleet.queue.task(task_id).get("lost") or 0) == 0, "a release counted as a loss"
