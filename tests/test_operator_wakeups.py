"""When the operator sweeps a TaskQueue: idle queues rarely, and at once when woken. The
idleness rule is a table; the demand poll runs against a real redis-server; the wake-up
of an idle queue by an enqueue runs in the real operator against a real apiserver."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from taskfleet.producer.queue import Queue
from taskfleet_operator import wakeups
from taskfleet_operator.connections import Connections
from taskfleet_operator.models import TaskQueueSpec
from taskfleet_operator.status import Outage

from tests.fixtures_cluster import Cluster
from tests.fixtures_operator import (
    APISERVER_INTERVAL_S,
    APISERVER_TIMEOUT_S,
    OperatorProcess,
    base_spec,
)
from tests.polling import wait_for

FIELDS: dict[str, Any] = {
    "image": "w:1",
    "handler": "app:run",
    "redis": {"url": "redis://r:6379/0"},
    "replicas": 2,
}
SPEC = TaskQueueSpec.model_validate(FIELDS)
SCHEDULED = TaskQueueSpec.model_validate(
    {**FIELDS, "schedules": [{"name": "nightly", "cron": "0 3 * * *", "payload": {}}]}
)
WAIT_S = 10.0
QUIET = {"pending": 0, "delayed": 0, "running": 0, "dead": 4, "done": 100}


@dataclass
class Report:
    stats: dict[str, int] = field(default_factory=lambda: dict(QUIET))
    requeued: dict[str, int] = field(default_factory=dict)
    suspects: set[str] = field(default_factory=set)
    schedule_errors: dict[str, str] = field(default_factory=dict)
    active_schedules: int = 0


def fleet(asked: int = 2, replicas: int = 2, ready: int = 2) -> dict[str, Any]:
    return {"spec": {"replicas": asked}, "status": {"replicas": replicas, "readyReplicas": ready}}


@pytest.mark.parametrize(
    ("spec", "outcome", "deployment", "live", "idle"),
    [
        (SPEC, Report(), fleet(), 2, True),  # done and dead tasks do not count
        (SPEC, Report({**QUIET, "pending": 1}), fleet(), 2, False),
        (SPEC, Report({**QUIET, "running": 3}), fleet(), 2, False),  # leases to watch
        (SPEC, Report({**QUIET, "delayed": 1}), fleet(), 2, False),  # a task coming due
        (SPEC, Report(requeued={"pod-a": 2}), fleet(), 2, False),
        (SPEC, Report(suspects={"pod-b"}), fleet(), 2, False),  # a pod to ask about again
        (SPEC, Outage("RedisUnreachable", "down"), fleet(), 2, False),  # report the return
        (SCHEDULED, Report(), fleet(), 2, False),  # slots to fire
        (SPEC, Report(active_schedules=1), fleet(), 2, False),  # API schedules, fleet at zero
        (SPEC, Report(), fleet(ready=1), 2, False),  # a pod coming up
        (SPEC, Report(), fleet(), 3, False),  # a pod going away
        (SPEC, Report(), None, 0, False),  # the Deployment not seen yet
    ],
)
def test_a_queue_is_idle_only_when_a_sweep_has_nothing_to_watch(
    spec: TaskQueueSpec, outcome: Any, deployment: Any, live: int, idle: bool
) -> None:
    assert wakeups.after_sweep(spec, outcome, deployment, live).idle is idle


def test_the_demand_poll_reads_every_queue_of_a_server_in_one_round_trip(
    redis_url: str,
) -> None:
    connections = Connections(2.0)
    keys = [("ns", f"q{i}") for i in range(5)]
    spec = TaskQueueSpec.model_validate({**FIELDS, "redis": {"url": redis_url}})
    queues = {key: connections.get(*key, spec) for key in keys}
    try:
        queues[keys[1]].enqueue({"x": 1})
        queues[keys[3]].enqueue_many([{"payload": {"x": i}} for i in range(3)])
        client = queues[keys[0]].client
        before = int(client.info("stats")["total_commands_processed"])

        woken = connections.pop_demand([*keys, ("ns", "never-connected")])

        # INFO itself counts once; the poll is 5 LPOPs in one pipeline.
        used = int(client.info("stats")["total_commands_processed"]) - before - 1
        assert sorted(woken) == [keys[1], keys[3]]
        assert used == len(keys)
        assert connections.pop_demand(keys) == []  # popped: a burst wakes a queue once
    finally:
        connections.close()


def test_a_wake_from_another_thread_ends_the_wait_and_a_stop_ends_it_too() -> None:
    class Stopped:
        def __init__(self) -> None:
            self.flag = asyncio.Event()

        async def wait(self) -> None:
            await self.flag.wait()

    async def scenario() -> tuple[float, float]:
        wakers = wakeups.Wakers()
        event = wakers.register(("ns", "q"))
        stopped = Stopped()
        loop = asyncio.get_running_loop()
        start = loop.time()
        await asyncio.gather(
            asyncio.to_thread(wakers.wake, ("ns", "q")),
            wakeups.wait(event, stopped, WAIT_S),
        )
        woken_after = loop.time() - start
        event.clear()
        loop.call_soon(stopped.flag.set)
        start = loop.time()
        await wakeups.wait(event, stopped, WAIT_S)
        return woken_after, loop.time() - start

    woken_after, stopped_after = asyncio.run(scenario())
    assert woken_after < WAIT_S  # not the timeout: the wake ended it
    assert stopped_after < WAIT_S


@pytest.mark.apiserver
def test_an_idle_queue_is_swept_when_a_task_is_enqueued(
    cluster: Cluster,
    redis_url: str,
    queue_of: Callable[[str, str], Queue],
    operator_process: OperatorProcess,
) -> None:
    # The test operator's idle interval (600 s) is longer than this test: only the
    # enqueue's demand signal can bring the count into status.
    cluster.create_tq("quiet", base_spec(redis_url, replicas=0))
    idle_line = f"sweeps of {cluster.namespace}/quiet idle"
    wait_for(
        lambda: idle_line in operator_process.tail(200_000),
        timeout=APISERVER_TIMEOUT_S,
        interval=APISERVER_INTERVAL_S,
        what="the operator to find the new queue idle",
    )
    queue = queue_of(cluster.namespace, "quiet")

    for i in range(3):
        queue.enqueue({"i": i})

    def woken() -> bool:
        # The poll took the enqueue's signal (nothing else reads a fixed queue's demand)
        # and the sweep it woke shows the tasks.
        polled = queue.client.llen(queue.keys.demand) == 0
        return polled and cluster.tq("quiet").get("status", {}).get("pending") == 3

    wait_for(
        woken,
        timeout=APISERVER_TIMEOUT_S,
        interval=APISERVER_INTERVAL_S,
        what="the enqueue to wake the idle queue's sweep",
    )
