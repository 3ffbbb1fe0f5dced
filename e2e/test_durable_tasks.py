"""A long task that survives its pod: the shipped ``resumable_steps`` sample checkpoints
after each step; its pod is force-deleted after step 3. The operator puts the task back,
another pod runs it, and that attempt starts after the last checkpoint, not at step 1.
The task's history shows the first attempt lost with the pod that vanished.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import redis

from e2e.lib.fleet import Fleet
from e2e.lib.kube import CLUSTER_ERRORS, CLUSTER_INTERVAL_S
from tests.polling import wait_for

pytest_plugins = ["e2e.lib.fixtures"]

STEPS = 6
STEP_SECONDS = 3


def test_a_checkpointed_task_resumes_after_its_last_step_when_its_pod_is_force_deleted(
    make_fleet: Callable[..., Fleet],
) -> None:
    from taskfleet.producer.queue import Queue

    fleet = make_fleet("steps", replicas=2, handler="taskfleet.samples:resumable_steps")
    fleet.wait_ready(2)
    view = fleet.queue

    def read(fn: Callable[[Queue], Any]) -> Any:
        def call(_: redis.Redis) -> Any:
            with Queue(view.queue, fleet.forward.url) as queue:
                return fn(queue)

        return fleet.forward.call(call)

    payload = {"steps": STEPS, "seconds": STEP_SECONDS, "record_key": view.record_key}
    task_id: str = read(lambda q: q.enqueue(payload))

    def after_step_3() -> Any:
        task = read(lambda q: q.get(task_id))
        done = (task.checkpoint or {}).get("done", 0) if task is not None else 0
        return task if done >= 3 else None

    task = wait_for(
        after_step_3,
        timeout=120,
        interval=CLUSTER_INTERVAL_S,
        what="step 3 checkpointed",
        ignoring=CLUSTER_ERRORS,
    )
    victim = task.pod
    assert victim, task
    fleet.kube.delete("pod", victim, "--grace-period=0", "--force")

    def finished() -> Any:
        task = read(lambda q: q.get(task_id))
        return task if task is not None and task.finished else None

    task = wait_for(
        finished,
        timeout=180,
        interval=CLUSTER_INTERVAL_S,
        what="the task to finish on another pod",
        ignoring=CLUSTER_ERRORS,
    )
    assert task.state == "done", task
    resumed_after = task.result["resumed_after"]
    # Started after a checkpoint of the lost run (step 3, or a later one it wrote before
    # the kubelet stopped it), never at step 1; and ran each step after it once.
    assert 3 <= resumed_after < STEPS, task.result
    assert task.result["ran"] == list(range(resumed_after + 1, STEPS + 1)), task.result
    assert task.pod != victim, task
    first = task.history[0]
    assert (first.outcome, first.pod) == ("lost", victim), task.history
    assert task.history[-1].outcome == "done", task.history
