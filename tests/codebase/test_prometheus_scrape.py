"""A real Prometheus scrapes a real worker: the figures PromQL reads back are the queue's.

The prometheus binary (Debian package ``prometheus``) runs with a static target: the
worker's metrics port. Skipped without it, except in CI.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from taskfleet.producer.queue import Queue

from tests.fixtures_redis import free_port
from tests.needs import need
from tests.polling import wait_for
from tests.prometheus import (
    PROMETHEUS,
    PROMETHEUS_INTERVAL_S,
    PROMETHEUS_TIMEOUT_S,
    Prometheus,
    static_job,
)
from tests.workers.harness import FAST, Fleet


@pytest.fixture
def metrics_port() -> int:
    return free_port()


@pytest.fixture
def prometheus(tmp_path: Path, metrics_port: int) -> Iterator[Prometheus]:
    if PROMETHEUS is None:
        need(False, "needs the prometheus binary (Debian: prometheus; make deps)")
    server = Prometheus(tmp_path, [static_job("taskfleet-workers", f"127.0.0.1:{metrics_port}")])
    try:
        yield server
    finally:
        server.close()


def test_prometheus_reads_back_each_task_a_worker_finished(
    fleet: Fleet, redis_url: str, prometheus: Prometheus, metrics_port: int
) -> None:
    with Queue("jobs", redis_url=redis_url) as queue:
        for _ in range(20):
            queue.enqueue({})
        for _ in range(3):
            queue.enqueue({"raise": True}, max_attempts=1)
        worker = fleet.add(
            "tests.workers.handlers:by_payload",
            args=[*FAST, "--concurrency", "4", "--metrics-port", str(metrics_port)],
        ).start()

        def scraped(promql: str, want: float) -> bool:
            return prometheus.scalar(promql) == want

        def waited(promql: str, want: float) -> None:
            wait_for(
                lambda: scraped(promql, want),
                timeout=PROMETHEUS_TIMEOUT_S,
                interval=PROMETHEUS_INTERVAL_S,
                what=lambda: (
                    f"{promql} == {want}; worker log:\n{worker.log_text()}\n"
                    f"prometheus log:\n{prometheus.log.read_text(errors='replace')[-3000:]}"
                ),
                ignoring=(OSError,),
            )

        waited('sum(taskfleet_worker_tasks_total{outcome="done"})', 20)
        waited('sum(taskfleet_worker_tasks_total{outcome="dead"})', 3)
        waited("sum(taskfleet_worker_task_run_seconds_count)", 23)
        waited('up{job="taskfleet-workers"}', 1)
        waited("taskfleet_worker_inflight", 0)
        stats = queue.stats()
        assert stats["completed"] == 20 and stats["dead"] == 3
