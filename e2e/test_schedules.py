"""A TaskQueue's schedule fires once per slot from the workers, with the operator stopped."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import redis

from e2e.lib.fleet import Fleet, Operator
from e2e.lib.kube import CLUSTER_ERRORS, CLUSTER_INTERVAL_S
from tests.polling import wait_for

pytest_plugins = ["e2e.lib.fixtures"]

EVERY_S = 5


def schedule_state(fleet: Fleet, name: str) -> dict[str, str]:
    key = fleet.queue.keys.schedule(name)
    raw = fleet.forward.call(lambda c: c.hgetall(key))
    return {str(k): str(v) for k, v in raw.items()}


def tasks_exist(fleet: Fleet, task_ids: list[str]) -> list[bool]:
    def read(client: redis.Redis) -> list[Any]:
        pipe = client.pipeline(transaction=False)
        for task_id in task_ids:
            pipe.exists(fleet.queue.keys.task(task_id))
        return list(pipe.execute())

    return [bool(x) for x in fleet.forward.call(read)]


@pytest.mark.exclusive  # the suite's operator is stopped and started
def test_a_taskqueue_schedule_fires_once_per_slot_with_the_operator_stopped(
    make_fleet: Callable[..., Fleet], operator: Operator, figures: Callable[[str], None]
) -> None:
    payload = {"seconds": 0, "record_key": "e2e:schedules:executions"}
    fleet = make_fleet(
        "schedules",
        replicas=2,
        concurrency=2,
        schedules=[{"name": "tick", "cron": f"*/{EVERY_S} * * * * *", "payload": payload}],
    )
    fleet.wait_ready(2)
    # The operator synced the schedule into the queue's store and a slot fired.
    wait_for(
        lambda: int(schedule_state(fleet, "tick").get("fired") or 0) >= 1,
        timeout=60,
        interval=CLUSTER_INTERVAL_S,
        what="the schedule synced and fired once",
        ignoring=CLUSTER_ERRORS,
    )

    replicas = operator.deployment()["spec"]["replicas"]
    operator.kube.run("scale", f"deployment/{operator.name}", "--replicas=0")
    try:
        wait_for(
            lambda: not operator.kube.pods(operator.selector),
            timeout=120,
            interval=CLUSTER_INTERVAL_S,
            what="the operator to stop",
            ignoring=CLUSTER_ERRORS,
        )
        before = schedule_state(fleet, "tick")
        first = int(before["last_slot"]) + EVERY_S
        wait_for(
            lambda: int(schedule_state(fleet, "tick")["last_slot"]) >= first + 4 * EVERY_S,
            timeout=90,
            interval=CLUSTER_INTERVAL_S,
            what="five more slots fired with the operator down",
            ignoring=CLUSTER_ERRORS,
        )
        after = schedule_state(fleet, "tick")
    finally:
        operator.kube.run("scale", f"deployment/{operator.name}", f"--replicas={replicas}")
        wait_for(
            operator.ready_pods,
            timeout=180,
            interval=CLUSTER_INTERVAL_S,
            what="a ready operator pod",
            ignoring=CLUSTER_ERRORS,
        )

    slots = list(range(first, int(after["last_slot"]) + 1, EVERY_S))
    fired = int(after["fired"]) - int(before["fired"])
    figures(f"schedule with the operator down: {fired} slots fired by the workers")
    assert fired == len(slots), (before, after)  # once per slot: none twice, none skipped
    assert int(after["skipped"]) == int(before["skipped"]) == 0
    assert all(tasks_exist(fleet, [f"sched:tick:{slot}" for slot in slots]))
