"""When the operator sweeps a TaskQueue: idle queues rarely, and at once when woken. The
idleness rule is a table; the demand poll runs against a real redis-server; the wake-up
of an idle queue by an enqueue runs in the real operator against a real apiserver."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import redis
from taskfleet.producer.queue import Queue
from taskfleet.protocol.bundle import source
from taskfleet_operator import builders, wakeups
from taskfleet_operator.connections import Connections
from taskfleet_operator.models import TaskQueueSpec
from taskfleet_operator.status import Outage

from tests.fixtures_cluster import Cluster
from tests.fixtures_kube import KubeApiserver
from tests.fixtures_operator import (
    APISERVER_INTERVAL_S,
    APISERVER_TIMEOUT_S,
    OperatorProcess,
    base_spec,
    running_operator,
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
DEAD_URL = "redis://127.0.0.1:1/0"  # nothing listens on port 1
QUIET = {"pending": 0, "delayed": 0, "running": 0, "dead": 4, "done": 100}


@dataclass
class Report:
    stats: dict[str, int] = field(default_factory=lambda: dict(QUIET))
    requeued: dict[str, int] = field(default_factory=dict)
    suspects: set[str] = field(default_factory=set)
    schedule_errors: dict[str, str] = field(default_factory=dict)
    quota: Any = None
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


def test_the_demand_poll_reads_every_queue_of_a_server_in_one_command_and_pops_only_on_demand(
    redis_url: str,
) -> None:
    connections = Connections(2.0)
    keys = [("ns", f"q{i}") for i in range(5)]
    spec = TaskQueueSpec.model_validate({**FIELDS, "redis": {"url": redis_url}})
    queues = {key: connections.get(*key, spec) for key in keys}
    client = queues[keys[0]].client

    def commands() -> int:
        return int(client.info("stats")["total_commands_processed"])

    try:
        before = commands()
        assert connections.pop_demand(keys) == []
        # INFO itself counts once; an idle poll is one EXISTS of the 5 demand lists.
        assert commands() - before - 1 == 1

        queues[keys[1]].enqueue({"x": 1})
        queues[keys[3]].enqueue_many([{"payload": {"x": i}} for i in range(3)])
        before = commands()

        woken = connections.pop_demand([*keys, ("ns", "never-connected")])

        # The EXISTS, then 5 LPOPs in one pipeline.
        used = commands() - before - 1
        assert sorted(woken) == [keys[1], keys[3]]
        assert used == 1 + len(keys)
        assert connections.pop_demand(keys) == []  # popped: a burst wakes a queue once
    finally:
        connections.close()


def test_the_demand_poll_sleeps_while_no_queue_is_idle_and_polls_once_one_is(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A replica with no idle queue (a standby serves none) does not wake every interval
    to find that out; the first queue to go idle starts the poll, which then wakes it on
    its enqueue's demand signal."""
    connections = Connections(2.0)
    key = ("ns", "quiet")
    spec = TaskQueueSpec.model_validate({**FIELDS, "redis": {"url": redis_url}})
    queue = connections.get(*key, spec)
    wakers = wakeups.Wakers()
    selects: list[bool] = []
    idle = wakers.idle

    def counted(*, demand_polled: bool = False) -> list[tuple[str, str]]:
        selects.append(demand_polled)
        return idle(demand_polled=demand_polled)

    monkeypatch.setattr(wakers, "idle", counted)

    async def scenario() -> tuple[int, set[tuple[str, str]]]:
        woken, all_woken = set[tuple[str, str]](), asyncio.Event()

        def wake(woke: tuple[str, str]) -> None:
            woken.add(woke)
            all_woken.set()

        wakers.attach(wake)
        wakers.register(key)  # served, busy: not idle
        executor, closing = ThreadPoolExecutor(1), threading.Event()
        poll = asyncio.create_task(
            wakeups.poll_demand(wakers, connections, 0.05, wakeups.in_threads(executor, closing))
        )
        try:
            # A second at a 50 ms interval with no queue idle: the old loop passed 20 times.
            await asyncio.sleep(1.0)
            at_rest = len(selects)
            queue.enqueue({"x": 1})
            wakers.set_idle(key, True)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(all_woken.wait(), WAIT_S)
            return at_rest, woken
        finally:
            poll.cancel()
            closing.set()
            executor.shutdown(wait=True)

    try:
        at_rest, woken = asyncio.run(scenario())
    finally:
        connections.close()
    assert at_rest == 1
    assert woken == {key}, "the poll found the enqueue's demand once the queue was idle"
    assert queue.client.llen(queue.keys.demand) == 0


def test_the_demand_polls_groups_follow_queues_that_connect_go_or_whose_server_is_parked(
    redis_url: str,
) -> None:
    # The poll keeps its grouping of the queues between polls: a queue that connects
    # later, one that goes and a server parked or resumed must each show at the next poll.
    connections = Connections(2.0)
    keys = [("ns", f"q{i}") for i in range(3)]
    late = ("ns", "late")  # polled before it is connected
    spec = TaskQueueSpec.model_validate({**FIELDS, "redis": {"url": redis_url}})
    queues = {key: connections.get(*key, spec) for key in keys}
    polled = [*keys, late]
    try:
        assert connections.pop_demand(polled) == []
        assert connections.pop_demand(polled) == []  # the same queues: the groups kept

        queues[late] = connections.get(*late, spec)  # connects: polled from now on
        queues[late].enqueue({"x": 1})
        assert connections.pop_demand(polled) == [late]

        queues[keys[0]].enqueue({"x": 2})
        connections.forget(*keys[0])  # gone: its demand is no longer read
        assert connections.pop_demand(polled) == []

        queues[keys[1]].enqueue({"x": 3})
        fault = connections.report(*keys[1], redis.BusyLoadingError("Redis is loading"))
        assert fault is not None
        assert connections.pop_demand(polled) == []  # its server parked: left out
        (target,) = connections.outages.targets()
        assert connections.outages.probed(target, None)  # resumed
        assert connections.pop_demand(polled) == [keys[1]]
    finally:
        connections.close()


def test_idle_housekeeping_sweeps_every_idle_queue_in_pipelines_and_wakes_only_those_with_work(
    redis_url: str, make_broker: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    connections = Connections(2.0)
    keys = [("ns", f"q{i}") for i in range(6)]
    spec = TaskQueueSpec.model_validate({**FIELDS, "redis": {"url": redis_url}})
    queues = {key: connections.get(*key, spec) for key in keys}
    down = ("other", "down")  # a TaskQueue whose Redis does not answer
    connections.get(*down, TaskQueueSpec.model_validate({**FIELDS, "redis": {"url": DEAD_URL}}))
    try:
        for queue in queues.values():
            queue.configure(builders.queue_config(spec))
        done_id = queues[keys[0]].enqueue({"x": 0})  # q0: its task done, nothing left
        broker = make_broker(queues[keys[0]].name)
        broker.register(1)
        task = broker.claim(1).tasks[0]
        broker.complete(task.id, task.token)
        assert queues[keys[0]].get(done_id).state == "done"
        queues[keys[1]].enqueue({"x": 1})  # q1: pending
        queues[keys[2]].enqueue({"x": 2}, delay=600)  # q2: delayed
        queues[keys[3]].enqueue({"x": 3})  # q3: running
        runner = make_broker(queues[keys[3]].name)
        runner.register(1)
        assert runner.claim(1).tasks
        queues[keys[4]].client.delete(queues[keys[4]].keys.config)  # q4: settings lost
        queues[keys[5]].schedule("hourly", "0 * * * *", {})  # q5: a schedule to fire
        client = queues[keys[0]].client
        client.script_load(source("sweep"))  # a NOSCRIPT'd call would count twice below
        client.config_resetstat()
        # The pipelines sent to this server, counted (each still a real one).
        sent: list[int] = []
        execute = redis.client.Pipeline.execute

        def counted(pipe: redis.client.Pipeline, raise_on_error: bool = True) -> list[Any]:
            if pipe.connection_pool is client.connection_pool:
                sent.append(len(pipe.command_stack))
            return execute(pipe, raise_on_error)

        monkeypatch.setattr(redis.client.Pipeline, "execute", counted)

        woken = connections.housekeep([*keys, down, ("ns", "never-connected")], per_pipeline=4)
        monkeypatch.undo()

        # A server that does not answer is parked, not woken: its probe wakes its queues.
        assert sorted(woken) == sorted(keys[1:])
        assert connections.fault(*down) is not None
        # One sweep script a queue, in 2 pipelines of at most 4 queues, and no SCRIPT EXISTS
        # round trip before them (a script the server lost is loaded on its NOSCRIPT).
        calls = client.info("commandstats")
        assert calls["cmdstat_evalsha"]["calls"] == len(keys)
        assert "cmdstat_script|exists" not in calls
        assert len(sent) == 2
        assert connections.housekeep([keys[0]]) == []  # idle stays idle
    finally:
        connections.close()


def test_a_wake_from_another_thread_ends_the_wait_and_a_stop_ends_it_too() -> None:
    async def scenario() -> tuple[float, float]:
        event, stopped = asyncio.Event(), _Stopped()
        loop = asyncio.get_running_loop()
        start = loop.time()
        await asyncio.gather(
            asyncio.to_thread(lambda: loop.call_soon_threadsafe(event.set)),
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


class _Stopped:
    def __init__(self) -> None:
        self.flag = asyncio.Event()

    async def wait(self) -> None:
        await self.flag.wait()


def test_wakes_reach_the_sweep_loop_from_its_loop_at_once_and_from_threads() -> None:
    async def scenario() -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
        wakers, got = wakeups.Wakers(), []
        wakers.attach(got.append)
        wakers.register(("ns", "q"))
        wakers.wake(("ns", "q"))  # an async handler's wake: no round through the loop
        wakers.wake(("ns", "unknown"))  # a queue the loop does not serve: nothing
        at_once = list(got)
        await asyncio.to_thread(wakers.wake, ("ns", "q"))
        for _ in range(100):
            if len(got) == 2:
                break
            await asyncio.sleep(0.01)
        wakers.unregister(("ns", "q"))
        wakers.wake(("ns", "q"))
        return at_once, got

    at_once, got = asyncio.run(scenario())
    assert at_once == [("ns", "q")]
    assert got == [("ns", "q"), ("ns", "q")]


def test_a_lone_first_sweep_runs_at_once_and_a_burst_waits_for_its_end() -> None:
    async def scenario() -> tuple[bool, bool, bool, bool]:
        gate = wakeups.FirstSweeps(quiet_s=0.2, most_s=WAIT_S)
        stopped = _Stopped()
        await gate.turn(stopped)  # a lone creation: returns without waiting
        second = asyncio.create_task(gate.turn(stopped))
        third = asyncio.create_task(gate.turn(stopped))
        await asyncio.sleep(0)
        held = not second.done() and not third.done()
        await asyncio.wait({second, third}, timeout=WAIT_S)
        released = second.done() and third.done()
        # A stop ends a held turn too (a gate that holds for as long as the test waits).
        gate = wakeups.FirstSweeps(quiet_s=WAIT_S, most_s=WAIT_S)
        await gate.turn(stopped)
        fourth = asyncio.create_task(gate.turn(stopped))
        await asyncio.sleep(0)
        held_again = not fourth.done()
        stopped.flag.set()
        await asyncio.wait({fourth}, timeout=WAIT_S)
        return held, released, held_again, fourth.done()

    held, released, held_again, stopped_ends = asyncio.run(scenario())
    assert held  # created right after another: held back
    assert released  # no creation since: both run
    assert held_again
    assert stopped_ends


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

    def enqueue_woke_it() -> bool:
        """Enqueue into the idle queue and see the demand poll wake it. A sweep already
        under way (woken by the create) may see the tasks first: the queue is then busy and
        its demand list unread, so that round proves nothing; empty the queue, wait until
        it is idle again, and try again."""
        idle_before = operator_process.tail(200_000).count(idle_line)
        for i in range(3):
            queue.enqueue({"i": i})
        wait_for(
            lambda: cluster.tq("quiet").get("status", {}).get("pending") == 3,
            timeout=APISERVER_TIMEOUT_S,
            interval=APISERVER_INTERVAL_S,
            what="the enqueued tasks in status",
        )
        if queue.client.llen(queue.keys.demand) == 0:
            return True  # the poll took the enqueue's signal: nothing else reads it
        queue.client.delete(queue.keys.pending, queue.keys.demand)
        wait_for(
            lambda: operator_process.tail(200_000).count(idle_line) > idle_before,
            timeout=APISERVER_TIMEOUT_S,
            interval=APISERVER_INTERVAL_S,
            what="the emptied queue idle again",
        )
        return False

    wait_for(
        enqueue_woke_it,
        timeout=3 * APISERVER_TIMEOUT_S,
        interval=APISERVER_INTERVAL_S,
        what="the enqueue to wake the idle queue's sweep",
    )


@pytest.mark.apiserver
def test_the_idle_housekeeping_pass_wakes_an_idle_queue_that_needs_a_sweep(  # noqa: PLR0917
    kube_apiserver: KubeApiserver,
    taskqueue_crd: str,
    operator_kubeconfig: Path,
    kube_namespace: str,
    redis_url: str,
    queue_of: Callable[[str, str], Queue],
    tmp_path: Path,
) -> None:
    """An operator whose housekeeping pass runs every second and whose full idle sweeps
    (every ten seconds) are slower than the waits here: the pass finds an idle queue whose
    settings are gone and wakes it for a full sweep, which writes them again."""
    with (
        running_operator(
            kube_apiserver,
            operator_kubeconfig,
            tmp_path / "operator.log",
            TASKFLEET_WATCH_NAMESPACES=kube_namespace,
            TASKFLEET_IDLE_SWEEP_INTERVAL="1",
        ) as operator,
        kube_apiserver.api_client() as api,
    ):
        cluster = Cluster(api, kube_namespace)
        cluster.create_tq("kept", base_spec(redis_url, replicas=0))
        wait_for(
            lambda: f"sweeps of {kube_namespace}/kept idle" in operator.tail(200_000),
            timeout=APISERVER_TIMEOUT_S,
            interval=APISERVER_INTERVAL_S,
            what=lambda: f"the queue found idle:\n{operator.tail(3000)}",
        )
        queue = queue_of(kube_namespace, "kept")
        woke = f"woke {kube_namespace}/kept"

        def lost_settings_woke_it() -> bool:
            """Delete the queue's settings (a Redis that came back empty) and see whether
            the pass wakes it for them. A sweep already under way (woken by the create)
            may restore them first: then that round proves nothing, try again."""
            queue.client.delete(queue.keys.config)
            wait_for(
                lambda: queue.client.exists(queue.keys.config),
                timeout=8.0,  # under the full idle sweep's 10 s
                interval=APISERVER_INTERVAL_S,
                what=lambda: f"the queue's settings restored:\n{operator.tail(3000)}",
            )
            return woke in operator.tail(200_000)

        wait_for(
            lost_settings_woke_it,
            timeout=APISERVER_TIMEOUT_S,
            interval=APISERVER_INTERVAL_S,
            what=lambda: f"the pass to wake the idle queue:\n{operator.tail(3000)}",
        )
