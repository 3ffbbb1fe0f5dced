"""Workers on a real Redis Cluster ride out failovers with nothing lost.

Three worker processes drain a queue whose slot lives on one master; once a third of
the tasks are done, that master is failed over: planned (``CLUSTER FAILOVER`` on its
replica: the old master comes back as a replica and answers MOVED), or killed
(SIGKILL: its replica is elected after the node timeout). The workers wait the outage
out, follow the slot to its new master and go on; none exits.

Accounting at the end: every task done, none dead, none lost; a task ran more than once
only where the queue counted why: its holder was presumed lost (the task's ``lost``), or
a write of the old master never reached the new one, so a completion came back stale
(stats ``stale``). The executions are recorded on another master, which stays up.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from pathlib import Path

import pytest
from taskfleet.producer.queue import Queue
from taskfleet.protocol.config import QueueConfig
from taskfleet.protocol.connect import connect

from tests.fixtures_redis_cluster import LocalRedisCluster
from tests.polling import wait_for
from tests.workers.harness import WORKER_INTERVAL_S, Fleet

TASKS = 300
WORKERS = 3
ARGS = ["--heartbeat-interval", "0.3", "--concurrency", "4"]


@pytest.mark.parametrize("how", ["cluster-failover", "sigkill-master"])
def test_workers_follow_their_queue_through_a_failover_and_lose_nothing(
    redis_cluster: LocalRedisCluster, tmp_path: Path, how: str
) -> None:
    queue_name, elsewhere = redis_cluster.queue_names("fo")[:2]
    records = f"runs:{{{elsewhere}}}"
    master = redis_cluster.master_of(f"tf:{{{queue_name}}}:pending")
    # Named by a node of another shard; with a killed master, every write waits for a
    # replica, the set-up whose acknowledged writes a failover cannot take away.
    seed = redis_cluster.master_of(records)
    query = "wait_replicas=1&wait_timeout_ms=5000" if how == "sigkill-master" else ""
    url = redis_cluster.url_of(seed, query)
    rng = random.Random()
    queue = Queue(queue_name, redis_url=url)
    queue.configure(QueueConfig(lease_ttl_s=2, max_lost=50, backoff_base_s=0, backoff_max_s=0))
    ids = queue.enqueue_many(
        [
            {"payload": {"seconds": round(rng.uniform(0, 0.02), 3), "record_key": records}}
            for _ in range(TASKS)
        ]
    )
    fleet = Fleet(url, queue_name, tmp_path)
    reader = connect(url)
    try:
        workers = [
            fleet.add("taskfleet.samples:sleep_and_record", pod=f"w-{i}", args=ARGS).start()
            for i in range(WORKERS)
        ]
        wait_for(
            lambda: queue.stats()["done"] >= TASKS // 3,
            timeout=30,
            interval=WORKER_INTERVAL_S,
            what=lambda: f"a third done: {queue.stats()}\n{fleet.logs()}",
        )
        if how == "cluster-failover":
            new_master = redis_cluster.failover(master)
        else:
            new_master = redis_cluster.kill_master(master)
            # Back as a replica of the new master: until then the shard has no replica,
            # and every waited write waits its full timeout.
            redis_cluster.revive(master)
        done_at_failover = queue.stats()["done"]
        wait_for(
            lambda: queue.stats()["done"] == TASKS,
            timeout=60,
            interval=WORKER_INTERVAL_S,
            what=lambda: f"all done: {queue.stats()}\n{fleet.logs()}",
        )
        stats = queue.stats()
        assert stats["dead"] == 0 and stats["pending"] == 0 and stats["delayed"] == 0, stats
        assert all(w.alive() for w in workers), fleet.logs()
        node = f"127.0.0.1:{new_master.port}"
        # A worker whose blocking wait the failover broke probes Redis after a backoff; the
        # fleet's other calls may finish the tasks first: the report comes, not before.
        wait_for(
            lambda: any(w.has_event("redis_reachable", node=node) for w in workers),
            timeout=30,
            interval=WORKER_INTERVAL_S,
            what=lambda: f"a worker reporting {node} reachable\n{fleet.logs()}",
        )

        runs = Counter(json.loads(r)["id"] for r in reader.lrange(records, 0, -1))
        assert set(runs) == set(ids), f"never run: {set(ids) - set(runs)}"
        unexplained = 0
        for task_id in ids:
            task = queue.get(task_id)
            assert task is not None and task.state == "done", task
            unexplained += max(0, runs[task_id] - 1 - task.lost)
        # Each re-run the lost counts do not explain follows a stale completion.
        assert unexplained <= stats["stale"], (unexplained, stats)
        print(
            f"{how}: {stats['lost']} lost, {stats['stale']} stale, "
            f"{sum(runs.values()) - TASKS} extra runs of {TASKS}, "
            f"{TASKS - done_at_failover} not done when the failover ended"
        )
    finally:
        fleet.close()
        queue.close()
        reader.close()
