"""Redis Cluster figures: drain rate and Redis CPU per task per master, next to one server.

``python -m bench.cluster [--tasks 20000]`` (``make bench-cluster``) starts one plain
redis-server and a 3-master, 3-replica cluster on loopback, and for each set-up drains
``--tasks`` no-op tasks (``taskfleet.samples:echo``) with one worker per queue:

- single: one queue on one server (the ``make bench`` set-up);
- cluster, 1 queue: one queue, so one slot, so one master does all the work;
- cluster, 3 queues: one queue per master, a third of the tasks each, drained together.

Redis CPU per task is each master's ``used_cpu_user + used_cpu_sys`` over the drain,
divided by the tasks of its queues. Then the durability cost: single enqueues per
second with and without ``?wait_replicas=1``. Figures only, never pass/fail; on a
machine with fewer cores than processes the aggregate drain cannot show the gain, the
per-master CPU split does.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import redis
from taskfleet import Queue

from tests.fixtures_redis import RedisServer
from tests.fixtures_redis_cluster import LocalRedisCluster

REPO = Path(__file__).resolve().parents[1]
CONCURRENCY = "16"


def _cpu(port: int) -> float:
    with redis.Redis(port=port) as client:
        info = client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def drain(url: str, names: list[str], tasks: int, ports: list[int], tmp: Path) -> str:
    """Drain ``tasks`` spread over ``names`` (one worker each); a result line."""
    queues = [Queue(name, url) for name in names]
    for i, queue in enumerate(queues):
        queue.purge()
        share = tasks // len(queues) + (1 if i < tasks % len(queues) else 0)
        for start in range(0, share, 1000):
            queue.enqueue_many([{"payload": {}} for _ in range(min(1000, share - start))])
    before = {port: _cpu(port) for port in ports}
    workers = []
    started = time.perf_counter()
    for name in names:
        argv = [
            *(sys.executable, "-m", "taskfleet", "worker", "--queue", name),
            *("--handler", "taskfleet.samples:echo", "--redis-url", url),
            *("--log-level", "warning", "--concurrency", CONCURRENCY),
            *("--runtime-dir", str(tmp / name), "--pod", f"bench-{name}"),
        ]
        env = dict(os.environ, PYTHONPATH=str(REPO))
        workers.append(subprocess.Popen(argv, cwd=REPO, env=env))
    try:
        while sum(q.stats()["completed"] for q in queues) < tasks:
            time.sleep(0.02)
        seconds = time.perf_counter() - started
    finally:
        for worker in workers:
            worker.terminate()
        for worker in workers:
            worker.wait(timeout=30)
    per_master = []
    for port in ports:
        done = sum(q.stats()["completed"] for q in queues if _owner(q, port))
        used = _cpu(port) - before[port]
        if done:
            per_master.append(f"{used / done * 1e6:.0f} µs/task on :{port} ({done} tasks)")
    for queue in queues:
        queue.close()
    return f"{tasks / seconds:,.0f} tasks/s; Redis CPU " + ", ".join(per_master)


def _owner(queue: Queue, port: int) -> bool:
    client = queue.client
    if isinstance(client, redis.RedisCluster):
        node = client.get_node_from_key(queue.keys.pending)  # type: ignore[no-untyped-call]
        return int(node.port) == port
    return True


def enqueue_rate(url: str, seconds: float = 3.0) -> float:
    with Queue("enqueue-bench", url) as queue:
        queue.purge()
        n = 0
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            queue.enqueue({})
            n += 1
        queue.purge()
    return n / seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--tasks", type=int, default=20000)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-cluster-") as raw:
        tmp = Path(raw)
        single = RedisServer(tmp / "single")
        cluster = LocalRedisCluster(tmp / "cluster")
        single.start()
        cluster.start()
        try:
            names = cluster.queue_names("bench")
            masters = [m.port for m in cluster.masters()]
            print(
                f"single server:       {drain(single.url, ['b0'], args.tasks, [single.port], tmp)}"
            )
            print(f"cluster, 1 queue:    {drain(cluster.url, names[:1], args.tasks, masters, tmp)}")
            print(f"cluster, 3 queues:   {drain(cluster.url, names, args.tasks, masters, tmp)}")
            plain = enqueue_rate(cluster.url)
            waited = enqueue_rate(cluster.url_of(cluster.servers[0], "wait_replicas=1"))
            print(
                f"single enqueues on the cluster: {plain:,.0f}/s; with wait_replicas=1: "
                f"{waited:,.0f}/s"
            )
        finally:
            cluster.stop()
            single.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
