"""A worker's Prometheus metrics: a real worker process, a real Redis, its real port."""

from __future__ import annotations

import signal
from collections.abc import Iterator

import pytest
from taskfleet.producer.queue import Queue
from taskfleet.protocol.config import QueueConfig
from taskfleet.worker.metrics import Histogram
from taskfleet.worker.runs import Counters

from tests.fixtures_redis import free_port
from tests.polling import wait_for
from tests.scrape import Samples, scrape, value
from tests.workers.harness import FAST, WORKER_INTERVAL_S, WORKER_TIMEOUT_S, Fleet, taskfleet

H = "tests.workers.handlers"


@pytest.fixture
def queue(redis_url: str) -> Iterator[Queue]:
    with Queue("jobs", redis_url=redis_url) as queue:
        # the default lease: a 1 s one was lost whenever a loaded machine starved the
        # heartbeat for a second, and a held task was then taken back mid-test
        queue.configure(QueueConfig(backoff_base_s=0, backoff_max_s=0))
        yield queue


def test_a_value_on_a_bucket_bound_counts_in_that_bucket_and_buckets_add_up() -> None:
    histogram = Histogram((0.1, 1.0))
    for observed in (0.05, 0.1, 0.5, 1.0, 7.0):
        histogram.observe(observed)
    buckets, total = histogram.cumulative()
    assert buckets == [("0.1", 2.0), ("1.0", 4.0), ("+Inf", 5.0)]
    assert total == pytest.approx(8.65)


def test_failed_counts_both_its_parts() -> None:
    # the exported outcomes are disjoint: failed is not one of them, retried + dead are
    from taskfleet.worker.metrics import OUTCOMES

    assert "failed" not in OUTCOMES
    assert set(OUTCOMES) <= {*vars(Counters()), "done"}


def test_a_worker_exports_each_outcome_its_timings_and_its_state(
    fleet: Fleet, queue: Queue
) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}/metrics"
    done = [queue.enqueue({}) for _ in range(5)]
    dead_at_once = [queue.enqueue({"raise": True}, max_attempts=1) for _ in range(2)]
    queue.enqueue({"raise": True}, max_attempts=3)  # two attempts retried, the third dead
    worker = fleet.add(
        f"{H}:by_payload", args=[*FAST, "--concurrency", "3", "--metrics-port", str(port)]
    ).start()

    def settled() -> Samples | None:
        samples = scrape(url)
        finished = sum(
            value(samples, "taskfleet_worker_tasks_total", outcome=o) or 0 for o in ("done", "dead")
        )
        return samples if finished == 8 else None

    samples = wait_for(
        settled,
        timeout=WORKER_TIMEOUT_S,
        interval=WORKER_INTERVAL_S,
        what=lambda: f"8 tasks finished in the metrics:\n{worker.log_text()}",
        ignoring=(OSError,),  # the port opens a moment after the process starts
    )
    stats = queue.stats()
    assert stats["completed"] == len(done) and stats["dead"] == len(dead_at_once) + 1
    outcomes = {
        o: value(samples, "taskfleet_worker_tasks_total", queue="jobs", outcome=o)
        for o in ("done", "retried", "dead", "released", "stale", "lost")
    }
    assert outcomes == {"done": 5, "retried": 2, "dead": 3, "released": 0, "stale": 0, "lost": 0}
    attempts = 5 + 2 + 3
    assert value(samples, "taskfleet_worker_task_run_seconds_count") == attempts
    assert value(samples, "taskfleet_worker_task_wait_seconds_count") == attempts
    assert value(samples, "taskfleet_worker_task_wait_seconds_bucket", le="+Inf") == attempts
    assert (value(samples, "taskfleet_worker_claim_seconds_count") or 0) >= 1
    assert value(samples, "taskfleet_worker_slots") == 3
    assert value(samples, "taskfleet_worker_inflight") == 0
    assert value(samples, "taskfleet_worker_draining") == 0
    assert value(samples, "taskfleet_worker_redis_up") == 1
    assert value(samples, "taskfleet_worker_redis_outage_seconds_total") == 0
    assert value(samples, "taskfleet_worker_info", handler=f"{H}:by_payload") == 1
    assert (value(samples, "process_cpu_seconds_total") or 0) > 0
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0


def test_a_drain_shows_as_draining_while_a_task_is_still_held(
    fleet: Fleet, queue: Queue, redis_url: str
) -> None:
    import redis

    port = free_port()
    url = f"http://127.0.0.1:{port}/metrics"
    worker = fleet.add(f"{H}:gate", args=[*FAST, "--metrics-port", str(port)]).start()
    queue.enqueue({})
    wait_for(
        lambda: value(scrape(url), "taskfleet_worker_inflight") == 1,
        timeout=WORKER_TIMEOUT_S,
        interval=WORKER_INTERVAL_S,
        what="the gated task held",
        ignoring=(OSError,),
    )
    worker.signal(signal.SIGTERM)
    worker.wait_event("drain_started")
    samples = scrape(url)
    assert value(samples, "taskfleet_worker_draining") == 1
    assert value(samples, "taskfleet_worker_inflight") == 1
    redis.Redis.from_url(redis_url).rpush("test:gate", "go")
    assert worker.wait() == 0


def test_a_metrics_port_in_use_stops_the_worker_with_one_line_and_exit_2(
    fleet: Fleet, queue: Queue
) -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("", 0))
        taken.listen()
        port = taken.getsockname()[1]
        worker = fleet.add(f"{H}:by_payload", args=[*FAST, "--metrics-port", str(port)]).start()
        assert worker.wait() == 2
    assert f"metrics port {port}" in worker.log_text()


def test_a_metrics_port_out_of_range_is_bad_input(fleet: Fleet) -> None:
    worker = fleet.add(f"{H}:by_payload", args=[*FAST, "--metrics-port", "70000"])
    result = taskfleet(*worker.argv[3:], env=worker.env)
    assert result.returncode == 2
    assert "--metrics-port" in result.stderr
