"""Pods deleted, force-deleted and SIGKILLed mid-task: every task still ends done.

Each scenario finds a pod holding tasks, disrupts it, and follows those tasks: finished
where they were, released by a draining worker, or taken back after an abrupt death.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections import Counter
from collections.abc import Callable
from functools import partial
from typing import Any, TypeVar, cast

import pytest
import redis

from e2e.lib.fleet import Fleet
from e2e.lib.kube import (
    CLUSTER_ERRORS,
    CLUSTER_INTERVAL_S,
    KUBECTL,
    Kube,
    LogStream,
    NodeShell,
    PodWatch,
    log_events,
)
from e2e.lib.ledger import QueueView
from e2e.lib.portforward import PortForward
from tests.polling import wait_for

pytest_plugins = ["e2e.lib.fixtures"]

T = TypeVar("T")

#: How many busy pods the lingering-worker scenario force-deletes: 8 in `make check`, 20 in
#: `make e2e-heavy` (each adds about 4.5 s); more deletes, more chances for a race to show.
FORCE_DELETES = int(os.environ.get("TASKFLEET_E2E_FORCE_DELETES", "8"))


def busy_pod(fleet: Fleet, tasks: int, timeout: float = 45) -> tuple[str, set[str]]:
    """A pod holding ``tasks`` tasks, and their ids."""

    def probe() -> tuple[str, set[str]] | None:
        for pod, count in fleet.queue.holders().most_common():
            if count >= tasks:
                return pod, fleet.queue.held_by(pod)
        return None

    return wait_for(
        probe,
        timeout=timeout,
        interval=CLUSTER_INTERVAL_S,
        what=f"a pod holding {tasks} tasks",
        ignoring=CLUSTER_ERRORS,
    )


def exit_code(terminated: dict[str, Any] | None) -> str:
    return "unseen" if terminated is None else str(terminated.get("exitCode"))


def taken_back_from(
    queue: QueueView, held: set[str], pod: str, incarnation: str | None = None
) -> bool:
    """No task of ``held`` is still running under that pod (or that incarnation of it)."""
    for task_id in held:
        task = queue.task(task_id)
        if task.get("state") != "running" or task.get("pod") != pod:
            continue
        if incarnation is None or task.get("incarnation") == incarnation:
            return False
    return True


def test_deleting_a_busy_pod_drains_it_and_its_tasks_finish_there_before_the_grace_period(
    make_fleet: Callable[..., Fleet], figures: Callable[[str], None]
) -> None:
    # debug: each task done is a line of its own (task_done), whose order the test reads
    fleet = make_fleet(
        "graceful",
        replicas=2,
        concurrency=2,
        maxTaskDurationSeconds=20,
        env=[{"name": "TASKFLEET_LOG_LEVEL", "value": "debug"}],
    )
    fleet.wait_ready(2)
    grace = fleet.deployment()["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    ids = fleet.queue.enqueue_sleepers(8, seconds=5)
    victim, held = busy_pod(fleet, 2)

    watch = PodWatch(fleet.kube, victim)
    # The worker's own log, followed to its exit: a deleted pod takes its logs with it.
    stream = LogStream(fleet.kube, victim, "worker")
    wait_for(
        lambda: any(e["event"] == "worker_started" for e in log_events(stream.lines)),
        timeout=15,
        interval=0.2,
        what=f"the log stream of {victim} to attach",
        ignoring=CLUSTER_ERRORS,
    )
    start = time.monotonic()
    fleet.kube.delete("pod", victim)
    # The kubelet runs the preStop hook first and sends SIGTERM only once it returns, which
    # `taskfleet drain --wait` does when nothing is in flight: a draining worker with its
    # tasks still running, while the hook's process is alive, was drained by the hook.
    wait_for(
        lambda: fleet.queue.workers().get(victim, {}).get("draining"),
        timeout=15,
        interval=0.2,
        what=f"{victim} to report draining",
        ignoring=CLUSTER_ERRORS,
    )
    runtime = fleet.kube.exec(victim, "ls", "/tmp/taskfleet", container="worker").split()
    still_held = fleet.queue.held_by(victim)
    assert any(name.startswith("drain-waiter.") for name in runtime), (
        f"no `taskfleet drain` hook registered in {victim} while it drains: {runtime}"
    )
    wait_for(
        lambda: fleet.kube.get("pod", victim) is None,
        timeout=grace + 30,
        interval=CLUSTER_INTERVAL_S,
        what=f"{victim} to be gone",
        ignoring=CLUSTER_ERRORS,
    )
    elapsed = time.monotonic() - start
    watch.stop()
    events = log_events(stream.stop())
    terminated = watch.terminated()
    figures(
        f"graceful delete of a pod with 2 x 5 s tasks: gone after {elapsed:.1f}s "
        f"(grace {grace}s), worker exit {exit_code(terminated)}"
    )
    assert terminated is not None, "the pod's last status never showed its container terminated"
    assert terminated["exitCode"] == 0, f"worker did not exit cleanly in time: {terminated}"

    # The order in the worker's log: the hook's drain while the tasks ran, the tasks
    # finished, then the kubelet's SIGTERM (a second drain request) finds nothing in
    # flight, and the worker stops. A SIGTERM after the worker has gone leaves no line.
    names = [e["event"] for e in events]
    trail = [e for e in events if e["event"].startswith(("drain_", "worker_stopped", "task_"))]
    assert names.count("drain_started") == 1, f"expected one drain: {trail}"
    drain_at = names.index("drain_started")
    assert int(events[drain_at]["inflight"]) >= 1 and still_held, (
        f"the drain did not start while tasks were in flight: {trail}"
    )
    done_at = [i for i, e in enumerate(events) if e["event"] == "task_done" and e["task"] in held]
    assert len(done_at) == len(held) and min(done_at) > drain_at, (
        f"the held tasks did not finish after the drain started: {trail}"
    )
    assert "worker_stopped" in names and names.index("worker_stopped") > max(done_at), trail
    for i, event in enumerate(events):
        if event["event"] == "drain_forced":
            assert i > max(done_at) and int(event["inflight"]) == 0, (
                f"a second SIGTERM arrived before the hook's drain was done: {trail}"
            )
    assert "drain_waiters_left" not in names, f"the hook outlived the worker's wait: {trail}"
    sigterm_seen = "drain_forced" in names

    accounting = fleet.queue.wait_settled(ids, timeout=90)
    accounting.assert_nothing_lost()
    # Every execution record, not the last per task: each in-flight task ran once, there.
    held_runs = [(r["id"], r["pod"]) for r in fleet.queue.executions() if r["id"] in held]
    assert sorted(held_runs) == sorted((t, victim) for t in held), (
        f"in-flight tasks of {victim} did not finish there exactly once: {held_runs}"
    )
    assert accounting.stats.get("requeued", 0) == 0, accounting.summary()
    assert accounting.stats.get("stale", 0) == 0, accounting.summary()
    # The hook exits before the worker does, so the kubelet never reports it as killed.
    failed_hooks = [
        e.get("message", "")
        for e in fleet.kube.events(victim)
        if e.get("reason") == "FailedPreStopHook"
    ]
    assert not failed_hooks, f"preStop hook reported failed: {failed_hooks}"
    figures(
        "graceful delete: hook drain, tasks done, "
        + ("kubelet SIGTERM seen by the drained worker" if sigterm_seen else "worker gone first")
    )


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
    deleted_at = time.time()  # the handler stamps its records with the node's wall clock
    assert fleet.kube.get("pod", victim) is None
    wait_for(
        lambda: not fleet.queue.held_by(victim) and taken_back_from(fleet.queue, held, victim),
        timeout=30,
        interval=0.2,
        what=f"the tasks of {victim} to be taken back",
        ignoring=CLUSTER_ERRORS,
    )
    elapsed = time.monotonic() - gone
    after = fleet.queue.stats()
    requeued = after.get("requeued", 0) - before.get("requeued", 0)
    released = after.get("released", 0) - before.get("released", 0)
    figures(
        f"force delete: {len(held)} tasks back in the queue {elapsed:.1f}s after the pod object "
        f"was deleted (requeued +{requeued}, released +{released}; lease TTL 60 s)"
    )
    # Taken back by the operator's pod-gone path, well inside the lease TTL, and not handed
    # back by the worker: a force delete gives it no drain.
    assert (requeued, released) == (len(held), 0), after

    accounting = fleet.queue.wait_settled(ids, timeout=120)
    accounting.assert_nothing_lost()
    # Every execution record: none of the held tasks finished on the victim once it was
    # deleted (its container may linger for the kubelet's short kill window).
    late = [
        r
        for r in fleet.queue.executions()
        if r["id"] in held and r["pod"] == victim and r["at"] >= deleted_at
    ]
    assert not late, f"tasks finished on the force-deleted pod: {late}"


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
        lambda: taken_back_from(fleet.queue, held, victim, incarnation),
        timeout=45,
        interval=0.2,
        what=f"the tasks of {victim}'s killed incarnation to be taken back",
        ignoring=CLUSTER_ERRORS,
    )
    elapsed = time.monotonic() - killed
    figures(f"SIGKILLed worker: {len(held)} tasks back {elapsed:.1f}s after the kill")

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

    wait_for(
        running_elsewhere,
        timeout=grace + 15,
        interval=CLUSTER_INTERVAL_S,
        what="the long task to run on another pod",
        ignoring=CLUSTER_ERRORS,
    )
    released_after = time.monotonic() - start
    wait_for(
        lambda: fleet.kube.get("pod", victim) is None,
        timeout=grace + 30,
        interval=CLUSTER_INTERVAL_S,
        what=f"{victim} to be gone",
        ignoring=CLUSTER_ERRORS,
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


class PodIpRedis:
    """The test's Redis reached at its pod's IP (the local cluster's node is this machine):
    port-forwards go through the kubelet, and a cut-off node's kubelet answers none."""

    def __init__(self, kube: Kube):
        pod = kube.get("pod", "redis")
        assert pod is not None and pod["status"].get("podIP"), "the Redis pod has no IP"
        self.client = redis.Redis(
            host=pod["status"]["podIP"], port=6379, socket_timeout=5, decode_responses=True
        )

    def call(self, fn: Callable[[redis.Redis], T], *, timeout: float = 60) -> T:
        return fn(self.client)


def _on_kind() -> bool:
    context = subprocess.run(
        [KUBECTL, "config", "current-context"], capture_output=True, text=True, check=False
    ).stdout.strip()
    return context.startswith("kind-")


@pytest.mark.exclusive  # the node's kubelet is stopped: no other pod starts or stops meanwhile
def test_force_deleted_busy_pods_whose_workers_linger_lose_no_task_and_count_each_loss_once(
    make_fleet: Callable[..., Fleet], figures: Callable[[str], None]
) -> None:
    if _on_kind():
        pytest.skip(
            "needs the local cluster (make e2e-local): Redis is read at its pod's IP while "
            "the node's kubelet is stopped, and kind's pod IPs are not reachable from here"
        )
    # A force delete removes the pod object at once; its container lives on until its
    # kubelet kills it: here the node is cut off (its kubelet stopped) for a few heartbeats
    # around each delete. The operator takes back the pod's tasks (one loss each) and
    # tombstones the pod, so the lingering worker, finding its record gone, cannot register
    # again, claim the tasks just taken back and lose them a second time.
    deletions = FORCE_DELETES
    cut_off_s = 3.0  # three heartbeats of the lingering worker
    task_s, fresh_s = 10, 6  # victims' tasks have 4 s or more to run at the delete
    # maxLost above any task's possible losses: a task dead of "worker lost" would hide a count.
    fleet = make_fleet(
        "forced-many",
        replicas=3,
        concurrency=2,
        maxLost=deletions + 5,
        heartbeat={"intervalSeconds": 1, "ttlSeconds": 60},
    )
    fleet.wait_ready(3)
    direct = QueueView(
        cast(PortForward, PodIpRedis(fleet.kube)), fleet.queue.queue, fleet.queue.record_key
    )
    ids: list[str] = []
    #: (victim, wall clock just before its delete and once it returned, the tasks it held)
    deletes: list[tuple[str, float, float, set[str]]] = []
    start = time.monotonic()

    def live_busy_pod() -> tuple[str, set[str]] | None:
        """A live pod whose tasks all started within ``fresh_s``: none ends near the delete."""
        alive = {p["metadata"]["name"] for p in fleet.ready_pods()}
        done = {d[0] for d in deletes}
        seconds, micros = direct.forward.call(lambda c: c.time())
        now_ms = seconds * 1000 + micros // 1000
        for pod, _ in direct.holders().most_common():
            if pod not in alive or pod in done:
                continue
            held = direct.held_by(pod)
            starts = [int(direct.task(t).get("started_at") or 0) for t in held]
            if held and all(now_ms - start < fresh_s * 1000 for start in starts):
                return pod, held
        return None

    for _ in range(deletions):
        if fleet.queue.stats()["pending"] < 6:
            ids += fleet.queue.enqueue_sleepers(12, seconds=task_s)
        victim, held = wait_for(
            live_busy_pod,
            timeout=60,
            interval=0.2,
            what="a live pod holding tasks",
            ignoring=CLUSTER_ERRORS,
        )
        pod = fleet.kube.get("pod", victim)
        assert pod is not None
        with NodeShell.for_node(pod["spec"]["nodeName"]).kubelet_stopped():
            # Read just before the delete, and again just after it: a task claimed in
            # between was held at the deletion too (the second read may find it taken back).
            deleted_at = time.time()  # the handler stamps its records with the node's clock
            fleet.kube.run("delete", "pod", victim, "--grace-period=0", "--force")
            returned_at = time.time()
            held |= direct.held_by(victim)
            deletes.append((victim, deleted_at, returned_at, held))
            wait_for(
                partial(taken_back_from, direct, held, victim),
                timeout=30,
                interval=0.2,
                what=f"the tasks of {victim} to be taken back",
                ignoring=CLUSTER_ERRORS,
            )
            # The node stays cut off for the scenario's length: the lingering worker's
            # heartbeats find its record gone meanwhile (ended early if it claims again).
            until = time.monotonic() + cut_off_s
            while time.monotonic() < until and not direct.held_by(victim):
                time.sleep(0.2)
    deleting = time.monotonic() - start

    accounting = fleet.queue.wait_settled(ids, timeout=120)
    accounting.assert_nothing_lost()
    fleet.wait_ready(3)
    # Each task a victim held at its delete was lost once there: none of them could finish
    # before it (victims are picked with 4 s or more of their tasks to run).
    losses: Counter[str] = Counter(t for *_, held in deletes for t in held)
    early = [
        (r["id"], victim)
        for r in fleet.queue.executions()
        for victim, deleted_at, _, held in deletes
        if r["id"] in held and r["pod"] == victim and r["at"] < deleted_at
    ]
    assert not early, f"held tasks finished before their pod's delete: {early}"
    counted = {t: n for t, n in accounting.lost.items() if n}
    wrong = {t: (counted.get(t, 0), losses[t]) for t in ids if counted.get(t, 0) != losses[t]}
    figures(
        f"{deletions} force deletes of busy pods in {deleting:.0f}s: {len(ids)} tasks done, "
        f"{sum(losses.values())} losses, counted {sum(counted.values())}"
    )
    assert sum(losses.values()) >= deletions, f"the deleted pods held too few tasks: {losses}"
    assert not {d[0] for d in deletes} & set(fleet.queue.workers()), "a deleted pod registered"
    assert not wrong, f"lost: counted, real per task: {wrong} ({accounting.summary()})"
