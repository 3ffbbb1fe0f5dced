"""celery with the Redis broker: the adapter and the reference no-op task (bench/.peers/celery)."""

from __future__ import annotations

import os
import sys

import celery
from celery import Celery, group
from harness import record_done

# No result backend: the producer observes completion through the task's own write,
# the same way for every system, so celery does no result bookkeeping it would not need.
app = Celery("celery_bench", broker=os.environ.get("BENCH_REDIS_URL", "redis://"))
app.conf.worker_hijack_root_logger = False
app.conf.broker_connection_retry_on_startup = True


@app.task(ignore_result=True)
def noop() -> None:
    record_done()


class CeleryAdapter:
    name = "celery"
    version = celery.__version__
    batch_method = "group(...).apply_async() (one publish per task)"
    # --pool=solo runs tasks in the consuming process: two processes that each fetch and
    # execute, like the other systems' workers (prefork would add a parent per fleet).
    worker_config = "2 x `celery worker --pool=solo` (prefetch multiplier 4)"

    def __init__(self, redis_url: str):
        self.redis_url = redis_url

    def enqueue_single(self, n: int) -> None:
        for _ in range(n):
            noop.delay()

    def enqueue_batches(self, n: int, batch: int) -> None:
        for start in range(0, n, batch):
            size = min(batch, n - start)
            group(noop.s() for _ in range(size)).apply_async()

    def enqueue_one(self) -> None:
        noop.delay()

    def purge(self) -> None:
        # Not FLUSHDB: kombu keeps its queue bindings in Redis and would drop messages.
        app.control.purge()

    def worker_argvs(self, processes: int) -> list[list[str]]:
        argv = [sys.executable, "-m", "celery", "-A", "celery_bench", "worker", "--pool=solo"]
        return [[*argv, "--loglevel=WARNING", "-n", f"bench{i}@%h"] for i in range(processes)]

    def close(self) -> None:
        app.close()


def make_adapter(redis_url: str) -> CeleryAdapter:
    return CeleryAdapter(redis_url)
