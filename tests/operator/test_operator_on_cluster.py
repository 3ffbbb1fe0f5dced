"""The operator's Redis work on a real Redis Cluster: TaskQueues whose queues live on
every master, swept, housekept, scraped and polled for demand through one
``?cluster=true`` URL (each TaskQueue's spec as a user writes it)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import redis
from redis.cluster import ClusterPipeline
from taskfleet.producer.queue import Queue
from taskfleet.protocol.calls import run
from taskfleet.protocol.keys import QueueKeys
from taskfleet_operator import builders
from taskfleet_operator.connections import Connections
from taskfleet_operator.models import TaskQueueSpec
from taskfleet_operator.queuemetrics import read_queues
from taskfleet_operator.sweeper import sweep_queue

from tests.fixtures_redis import MakeBroker
from tests.fixtures_redis_cluster import LocalRedisCluster
from tests.polling import wait_for

Key = tuple[str, str]


def spread(cluster: LocalRedisCluster) -> list[Key]:
    """One TaskQueue (namespace "apps") per master."""
    masters = {m.port: None for m in cluster.masters()}
    found: dict[int, Key] = {}
    i = 0
    while len(found) < len(masters):
        key = ("apps", f"tq{i}")
        port = cluster.master_of(QueueKeys(builders.queue_name(*key)).pending).port
        found.setdefault(port, key)
        i += 1
    return list(found.values())


@pytest.fixture
def on_cluster(redis_cluster: LocalRedisCluster) -> Iterator[tuple[Connections, TaskQueueSpec]]:
    spec = TaskQueueSpec.model_validate(
        {"image": "w:dev", "handler": "app:run", "redis": {"url": redis_cluster.url}}
    )
    connections = Connections(2.0)
    try:
        yield connections, spec
    finally:
        connections.close()


def test_the_sweep_takes_back_what_a_gone_pod_held_on_every_master(
    redis_cluster: LocalRedisCluster,
    on_cluster: tuple[Connections, TaskQueueSpec],
    make_broker: MakeBroker,
) -> None:
    connections, spec = on_cluster
    for key in spread(redis_cluster):
        queue: Queue = connections.get(*key, spec)
        queue.configure(builders.queue_config(spec))
        queue.enqueue({"n": 1})
        broker = make_broker(queue.name, "pod-gone", url=redis_cluster.url)
        broker.register(1)
        assert broker.claim(1).tasks
        report = sweep_queue(
            queue, spec, live_pods=[], suspects={"pod-gone"}, pod_gone=lambda _pod: True
        )
        assert report.requeued == {"pod-gone": 1}, report
        assert queue.stats()["pending"] == 1


def test_housekeeping_scrapes_and_demand_polls_reach_every_master(
    redis_cluster: LocalRedisCluster,
    on_cluster: tuple[Connections, TaskQueueSpec],
    make_broker: MakeBroker,
) -> None:
    connections, spec = on_cluster
    keys = spread(redis_cluster)
    queues = [connections.get(*key, spec) for key in keys]
    assert len(connections.by_server()) == 3  # one group per master
    for queue in queues:
        queue.configure(builders.queue_config(spec))
    assert connections.housekeep(keys) == []  # all idle
    queues[1].enqueue({"n": 1})  # pending: woken, and a demand signal
    make_broker(queues[2].name, "pod-a", url=redis_cluster.url).register(3)

    assert connections.housekeep(keys) == [keys[1]]
    assert connections.pop_demand(keys) == [keys[1]]
    readings = {r.queue: r for r in read_queues(connections)}
    assert all(r.up for r in readings.values())
    assert readings[queues[1].name].tasks["pending"] == 1
    assert readings[queues[2].name].slots_alive == 3


def test_housekeeping_on_a_cluster_is_one_pipeline_a_master_even_after_they_lost_the_scripts(
    redis_cluster: LocalRedisCluster,
    on_cluster: tuple[Connections, TaskQueueSpec],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    connections, spec = on_cluster
    keys = spread(redis_cluster)
    queues = [connections.get(*key, spec) for key in keys]
    for queue in queues:
        queue.configure(builders.queue_config(spec))
    for master in redis_cluster.masters():
        with redis_cluster.client(master) as client:
            client.script_flush()  # NOSCRIPT for each sweep: loaded, run again
    queues[0].enqueue({"n": 1}, delay=0.001)  # soon due: the sweep promotes it
    [(_, due_ms)] = queues[0].client.zrange(queues[0].keys.delayed, 0, 0, withscores=True)
    wait_for(lambda: run(queues[0].client, queues[0].reads.clock()) >= due_ms, timeout=10)
    sent: list[int] = []  # each pipeline's count of commands
    execute = ClusterPipeline.execute

    def counted(pipe: ClusterPipeline, *args: Any, **kwargs: Any) -> list[Any]:
        sent.append(len(pipe))
        return execute(pipe, *args, **kwargs)

    monkeypatch.setattr(ClusterPipeline, "execute", counted)
    woken = connections.housekeep(keys)
    monkeypatch.undo()

    assert woken == [keys[0]]  # the promoted task is pending now
    assert queues[0].stats()["pending"] == 1
    # One pipeline a master: its queue's sweep (then run again alone, on NOSCRIPT) and reads.
    reads = len(queues[0].reads.activity().commands)
    assert sent == [1 + reads] * len(keys)
    assert connections.housekeep(keys[1:]) == []


def test_an_evicting_policy_on_one_master_flags_the_cluster(
    redis_cluster: LocalRedisCluster, on_cluster: tuple[Connections, TaskQueueSpec]
) -> None:
    connections, spec = on_cluster
    keys = spread(redis_cluster)
    for key in keys:
        connections.get(*key, spec)
    connections.check_policies()
    assert {connections.policy(*key) for key in keys} == {"noeviction"}
    master = redis_cluster.masters()[1]
    admin = redis.Redis(port=master.port)
    try:
        admin.config_set("maxmemory-policy", "allkeys-lru")
        connections.check_policies()
        assert {connections.policy(*key) for key in keys} == {"allkeys-lru"}
    finally:
        admin.config_set("maxmemory-policy", "noeviction")
        admin.close()
