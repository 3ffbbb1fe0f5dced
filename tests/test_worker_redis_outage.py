"""A Redis restart mid-run: the worker survives, reconnects, logs once, loses nothing."""

from __future__ import annotations

import signal
import time
from pathlib import Path

from taskfleet.queue import Queue

from tests.fixtures_redis import RedisServerFactory
from tests.workers.harness import FAST, Fleet, wait_until


def test_workers_ride_out_a_redis_restart_and_every_task_gets_done(
    redis_server_factory: RedisServerFactory, tmp_path: Path
) -> None:
    server = redis_server_factory(persistent=True)
    fleet = Fleet(server.url, "jobs", tmp_path)
    try:
        with Queue("jobs", redis_url=server.url) as queue:
            ids = queue.enqueue_many([{"payload": {"seconds": 0.05}} for _ in range(60)])
        workers = [
            fleet.add(
                "tests.workers.handlers:sleep", pod=f"pod-{i}", args=[*FAST, "--concurrency", "3"]
            ).start()
            for i in range(2)
        ]

        def done() -> int:
            with Queue("jobs", redis_url=server.url) as queue:
                return queue.stats()["done"]

        wait_until(lambda: done() >= 10, message="some tasks done before the restart")
        server.restart()
        wait_until(lambda: done() == len(ids), timeout=30, message="every task done")

        with Queue("jobs", redis_url=server.url) as queue:
            stats = queue.stats()
            assert stats["dead"] == 0 and stats["pending"] == 0 and stats["running"] == 0
            tasks = [queue.get(task_id) for task_id in ids]
        assert all(task is not None and task.state == "done" for task in tasks)
        outages = 0
        for worker in workers:
            worker.signal(signal.SIGTERM)
            assert worker.wait() == 0
            unreachable = sum(e["event"] == "redis_unreachable" for e in worker.events())
            reachable = sum(e["event"] == "redis_reachable" for e in worker.events())
            # One line per outage, not one per retry (a worker idle at the instant of the
            # restart may not notice it at all).
            assert unreachable == reachable <= 1, worker.log_text()
            outages += unreachable
        assert outages >= 1
    finally:
        fleet.close()


def test_an_outage_longer_than_the_lease_loses_nothing_and_logs_once(
    redis_server_factory: RedisServerFactory, tmp_path: Path
) -> None:
    server = redis_server_factory(persistent=True)
    fleet = Fleet(server.url, "jobs", tmp_path)
    try:
        with Queue("jobs", redis_url=server.url) as queue:
            ids = queue.enqueue_many([{"payload": {"seconds": 0.3}} for _ in range(16)])
        worker = fleet.add(
            "tests.workers.handlers:sleep", args=[*FAST, "--concurrency", "4"]
        ).start()

        def running() -> int:
            with Queue("jobs", redis_url=server.url) as queue:
                return queue.stats()["running"]

        wait_until(lambda: running() > 0, message="tasks running before the outage")
        server.stop()
        worker.wait_event("redis_unreachable")
        # The scenario, not a wait on a condition: stay down past several lease TTLs (1 s),
        # while the worker's handlers finish and its backoff grows.
        time.sleep(2.5)
        server.start()
        worker.wait_event("redis_reachable", timeout=15)

        def done() -> int:
            with Queue("jobs", redis_url=server.url) as queue:
                return queue.stats()["done"]

        wait_until(lambda: done() == len(ids), timeout=30, message=worker.log_text)
        with Queue("jobs", redis_url=server.url) as queue:
            stats = queue.stats()
        assert stats["dead"] == 0 and stats["pending"] == 0 and stats["running"] == 0
        worker.signal(signal.SIGTERM)
        assert worker.wait() == 0
        assert sum(e["event"] == "redis_unreachable" for e in worker.events()) == 1
    finally:
        fleet.close()
