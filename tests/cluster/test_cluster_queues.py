"""Queues spread over every master of a real Redis Cluster: the Queue API, the worker's
side of the protocol and every CLI command, through one ``?cluster=true`` URL naming
one node."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
from taskfleet.producer.encoding import encode_task
from taskfleet.producer.queue import Queue
from taskfleet.protocol.calls import run_all
from taskfleet.protocol.config import QueueConfig
from taskfleet.protocol.errors import NotReplicated
from taskfleet.protocol.keys import QueueKeys

from tests.fixtures_redis import BlockingBroker, MakeBroker
from tests.fixtures_redis_cluster import REDIS_CLI, LocalRedisCluster
from tests.operations import run_every_operation
from tests.polling import wait_for
from tests.workers.harness import env_for, taskfleet


def test_queues_hash_to_every_master(redis_cluster: LocalRedisCluster) -> None:
    names = redis_cluster.queue_names()
    masters = [redis_cluster.master_of(QueueKeys(n).pending).port for n in names]
    assert sorted(masters) == sorted(m.port for m in redis_cluster.masters())


def test_every_operation_runs_on_queues_on_every_master(
    redis_cluster: LocalRedisCluster, make_broker: MakeBroker
) -> None:
    for name in redis_cluster.queue_names():
        with Queue(name, redis_url=redis_cluster.url) as queue:

            def make(pod: str, incarnation: str, name: str = name) -> BlockingBroker:
                return make_broker(name, pod, incarnation, url=redis_cluster.url)

            run_every_operation(queue, make)
            queue.purge()
            assert queue.client.dbsize() == 0


def test_script_ops_pipelined_with_reads_run_once_on_masters_that_lost_their_scripts(
    redis_cluster: LocalRedisCluster,
) -> None:
    # What the operator's sweep sends: script ops and reads in one pipeline (run_all). A
    # master that lost its scripts answers NOSCRIPT, having run nothing: loaded, run again.
    for name in redis_cluster.queue_names("lost"):
        with Queue(name, redis_url=redis_cluster.url) as queue:
            for master in redis_cluster.masters():
                with redis_cluster.client(master) as client:
                    client.script_flush()
            task = encode_task({"n": 1}, task_id="a")
            created, stats, sweep = run_all(
                queue.client, [queue.ops.enqueue([task]), queue.reads.stats(), queue.ops.sweep()]
            )
            assert created == [True] and sweep.requeued == 0
            assert stats["pending"] == 0  # read before the lost enqueue ran again
            assert queue.stats()["pending"] == 1
            assert run_all(queue.client, [queue.ops.enqueue([task])]) == [[False]]


def test_every_key_a_script_touches_on_a_cluster_carries_its_queues_hash_tag(
    redis_cluster: LocalRedisCluster, make_broker: MakeBroker, tmp_path: Path
) -> None:
    # Scripts are sent the queue's key prefixes as KEYS and build task, pod, wake and
    # schedule keys from them (they never spell a key: test_protocol_scripts). MONITOR on
    # the queue's master shows every command the scripts ran: each key is of the queue.
    name = redis_cluster.queue_names("m")[0]
    master = redis_cluster.master_of(QueueKeys(name).pending)
    log = tmp_path / "monitor.log"
    with log.open("wb") as out:
        monitor = subprocess.Popen(
            [REDIS_CLI, "-p", str(master.port), "monitor"], stdout=out, stderr=subprocess.STDOUT
        )
    try:
        with redis_cluster.client(master) as client:
            wait_for(lambda: client.echo("monitor-ready") and "monitor-ready" in log.read_text())
        with Queue(name, redis_url=redis_cluster.url) as queue:

            def make(pod: str, incarnation: str) -> BlockingBroker:
                return make_broker(name, pod, incarnation, url=redis_cluster.url)

            run_every_operation(queue, make)
            queue.enqueue({"handed": "off"})  # straight to no one: no idle worker
        with redis_cluster.client(master) as client:
            wait_for(lambda: client.echo("monitor-done") and "monitor-done" in log.read_text())
    finally:
        monitor.terminate()
        monitor.wait()
    lines = [line for line in log.read_text().splitlines() if " lua] " in line]
    keys = {k for line in lines for k in re.findall(r'"(tf:[^"]*)"', line)}
    assert len(lines) > 50 and len(keys) > 10
    prefix = QueueKeys(name).prefix
    assert all(key.startswith(prefix) for key in keys), sorted(keys)


def test_workers_lists_workers_with_the_server_clock_of_the_queues_node(
    redis_cluster: LocalRedisCluster, make_broker: MakeBroker
) -> None:
    for name in redis_cluster.queue_names():
        with Queue(name, redis_url=redis_cluster.url) as queue:
            worker = make_broker(name, "pod-w", "1", url=redis_cluster.url)
            worker.register(2)
            [info] = queue.workers()
            assert (info.pod, info.alive, info.concurrency) == ("pod-w", True, 2)


def test_an_enqueue_waits_for_a_replica_and_says_when_none_confirmed(
    redis_cluster: LocalRedisCluster,
) -> None:
    name = redis_cluster.queue_names()[1]
    with Queue(
        name, redis_url=redis_cluster.url_of(redis_cluster.servers[0], "wait_replicas=1")
    ) as queue:
        task_id = queue.enqueue({"n": 1})
        assert queue.enqueue_many([{"payload": {"n": 2}}, {"payload": {"n": 3}}])
    replica = redis_cluster.replica_of(redis_cluster.master_of(QueueKeys(name).pending))
    with redis_cluster.client(replica) as client:
        client.execute_command("READONLY")
        assert client.hget(QueueKeys(name).task(task_id), "state") == b"pending"
    # Two replicas asked, one exists: the write is on the master, not confirmed on two.
    url = redis_cluster.url_of(redis_cluster.servers[0], "wait_replicas=2&wait_timeout_ms=200")
    with Queue(name, redis_url=url) as queue:
        with pytest.raises(NotReplicated) as raised:
            queue.enqueue({"n": 4}, task_id="t4")
        assert (raised.value.acked, raised.value.wanted, raised.value.task_ids) == (1, 2, ["t4"])
        assert queue.get("t4") is not None
        with pytest.raises(NotReplicated):  # enqueueing it again is safe and says the same
            queue.enqueue({"n": 4}, task_id="t4")
        assert queue.stats()["enqueued"] == 4


def test_every_cli_command_works_on_queues_on_every_master(
    redis_cluster: LocalRedisCluster, tmp_path: Path
) -> None:
    env = env_for(redis_cluster.url, tmp_path)
    names = redis_cluster.queue_names()
    for name in names:
        enqueued = taskfleet("enqueue", name, "--payload", '{"n": 1}', "--count", "3", env=env)
        assert enqueued.returncode == 0, enqueued.stderr
        one = taskfleet("enqueue", name, "--id", "t1", env=env)
        assert one.returncode == 0, one.stderr
        stats = taskfleet("stats", name, "--json", env=env)
        assert json.loads(stats.stdout)["pending"] == 4, stats.stderr
        shown = taskfleet("task", name, "t1", "--json", env=env)
        assert json.loads(shown.stdout)["state"] == "pending", shown.stderr
        configured = taskfleet("configure", name, "--lease-ttl", "7", env=env)
        assert configured.returncode == 0, configured.stderr
        for args in (
            ("add", name, "nightly", "0 3 * * *"),
            ("pause", name, "nightly"),
            ("resume", name, "nightly"),
            ("ls", name, "--json"),
            ("rm", name, "nightly"),
        ):
            done = taskfleet("schedule", *args, env=env)
            assert done.returncode == 0, (args, done.stderr)
        for args in (
            ("ls", name, "pending", "--json"),
            ("cancel", name, "t1", "--json"),
            ("retry", name, "--all", "--json"),
            ("purge", name, "--cancelled", "--json"),
            ("workers", name, "--json"),
        ):
            done = taskfleet(*args, env=env)
            assert done.returncode == 0, (args, done.stderr)
        with Queue(name, redis_url=redis_cluster.url) as queue:
            assert queue.config().lease_ttl_s == 7
            assert queue.schedules() == []
    top = taskfleet("top", "--json", env=env)
    assert top.returncode == 0, top.stderr
    assert sorted(view["name"] for view in json.loads(top.stdout)) == sorted(names)


def test_a_worker_drains_a_queue_on_each_master(
    redis_cluster: LocalRedisCluster, tmp_path: Path
) -> None:
    from tests.workers.harness import Fleet

    for name in redis_cluster.queue_names("w"):
        with Queue(name, redis_url=redis_cluster.url) as queue:
            queue.configure(QueueConfig(lease_ttl_s=2))
            ids = queue.enqueue_many([{"payload": {"i": i}} for i in range(20)])
            fleet = Fleet(redis_cluster.url, name, tmp_path / name)
            (tmp_path / name).mkdir()
            try:
                fleet.add("taskfleet.samples:echo", pod="p").start()
                finished = queue.wait(ids, timeout=20)
                assert all(t.state == "done" for t in finished.values())
            finally:
                fleet.close()
