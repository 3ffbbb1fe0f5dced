"""Controlling tasks on a real cluster: a running task cancelled inside its pod, and dead
tasks replayed once a rollout fixed their handler."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import redis

from e2e.lib.fleet import Fleet
from e2e.lib.kube import CLUSTER_ERRORS, CLUSTER_INTERVAL_S
from tests.polling import wait_for

pytest_plugins = ["e2e.lib.fixtures"]

FAILING_HANDLER = "taskfleet.samples:fail"
FIXED_HANDLER = "taskfleet.samples:echo"


def _on_queue(fleet: Fleet, fn: Callable[[Any], Any]) -> Any:
    """``fn(queue)`` with the library's ``Queue`` through the test's port-forward."""
    from taskfleet.producer.queue import Queue

    def call(_: redis.Redis) -> Any:
        with Queue(fleet.queue.queue, fleet.forward.url) as queue:
            return fn(queue)

    return fleet.forward.call(call)


def _state(fleet: Fleet, task_id: str) -> str | None:
    task = _on_queue(fleet, lambda q: q.get(task_id))
    return None if task is None else task.state.value


def test_a_running_task_cancelled_inside_its_pod_stops_and_ends_cancelled(
    make_fleet: Callable[..., Fleet],
) -> None:
    fleet = make_fleet("cancel", replicas=1, concurrency=1)
    fleet.wait_ready(1)
    [long_id] = fleet.queue.enqueue_sleepers(1, seconds=25)
    [waiting_id] = fleet.queue.enqueue_sleepers(1, seconds=25)
    wait_for(
        lambda: _state(fleet, long_id) == "running",
        timeout=60,
        interval=CLUSTER_INTERVAL_S,
        what="the long task to run in the pod",
        ignoring=CLUSTER_ERRORS,
    )
    # progress reaches the producer while it runs
    wait_for(
        lambda: (t := _on_queue(fleet, lambda q: q.get(long_id))) and t.progress,
        timeout=30,
        interval=CLUSTER_INTERVAL_S,
        what="the long task's progress",
        ignoring=CLUSTER_ERRORS,
    )
    assert _on_queue(fleet, lambda q: q.cancel(waiting_id)).value == "cancelled"
    assert _on_queue(fleet, lambda q: q.cancel(long_id)).value == "requested"
    # the worker learns it from its next heartbeat (2 s) and the handler stops early
    wait_for(
        lambda: _state(fleet, long_id) == "cancelled",
        timeout=15,
        interval=CLUSTER_INTERVAL_S,
        what="the running task to end cancelled well before its 25 s",
        ignoring=CLUSTER_ERRORS,
    )
    assert _state(fleet, waiting_id) == "cancelled"
    stats = _on_queue(fleet, lambda q: q.stats())
    assert (stats["cancelled"], stats["done"], stats["running"]) == (2, 0, 0)
    assert fleet.queue.executions() == []  # neither ran to its end


def test_dead_tasks_are_replayed_after_a_rollout_fixed_their_handler(
    make_fleet: Callable[..., Fleet],
) -> None:
    fleet = make_fleet("replay", replicas=1, handler=FAILING_HANDLER, maxAttempts=1)
    fleet.wait_ready(1)
    ids = _on_queue(fleet, lambda q: q.enqueue_many([{"payload": {"n": i}} for i in range(5)]))
    wait_for(
        lambda: _on_queue(fleet, lambda q: q.stats())["dead"] == 5,
        timeout=60,
        interval=CLUSTER_INTERVAL_S,
        what="the five tasks to go dead",
        ignoring=CLUSTER_ERRORS,
    )
    fleet.kube.patch_merge("taskqueue", fleet.name, {"spec": {"handler": FIXED_HANDLER}})

    def rolled_out() -> bool:
        # every pod of the failing handler gone, not merely unready: a pod that is
        # terminating still claims until its preStop hook has run, and a replayed
        # task it took would fail once more before the fixed pod ran it
        pods = fleet.pods()
        if len(pods) != len(fleet.ready_pods()):
            return False
        handlers = {
            c["args"][c["args"].index("--handler") + 1]
            for p in pods
            for c in p["spec"]["containers"]
            if "--handler" in c.get("args", [])
        }
        return len(pods) == 1 and handlers == {FIXED_HANDLER}

    wait_for(
        rolled_out,
        timeout=120,
        interval=CLUSTER_INTERVAL_S,
        what="the rollout of the fixed handler",
        ignoring=CLUSTER_ERRORS,
    )
    assert _on_queue(fleet, lambda q: q.retry(max_attempts=2)) == 5
    wait_for(
        lambda: _on_queue(fleet, lambda q: q.stats())["done"] == 5,
        timeout=60,
        interval=CLUSTER_INTERVAL_S,
        what="the replayed tasks to run once more and succeed",
        ignoring=CLUSTER_ERRORS,
    )
    tasks = _on_queue(fleet, lambda q: [q.get(i) for i in ids])
    assert [(t.state.value, t.attempts, t.result) for t in tasks] == [
        ("done", 1, {"n": n}) for n in range(5)
    ]
