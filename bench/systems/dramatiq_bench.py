"""dramatiq with the Redis broker: the adapter and the no-op task (bench/.peers/dramatiq)."""

from __future__ import annotations

import os
import sys

import dramatiq
from dramatiq.brokers.redis import RedisBroker
from harness import record_done

broker = RedisBroker(url=os.environ.get("BENCH_REDIS_URL", "redis://"))
dramatiq.set_broker(broker)


@dramatiq.actor(queue_name="bench")
def noop() -> None:
    record_done()


class DramatiqAdapter:
    name = "dramatiq"
    version = dramatiq.__version__
    batch_method = "group(...).run() (one enqueue script call per task)"
    worker_config = "`dramatiq dramatiq_bench --processes 2 --threads 8` (its defaults here)"

    def __init__(self, redis_url: str):
        self.redis_url = redis_url

    def enqueue_single(self, n: int) -> None:
        for _ in range(n):
            noop.send()

    def enqueue_batches(self, n: int, batch: int) -> None:
        for start in range(0, n, batch):
            size = min(batch, n - start)
            dramatiq.group(noop.message() for _ in range(size)).run()

    def enqueue_one(self) -> None:
        noop.send()

    def purge(self) -> None:
        broker.flush_all()

    def worker_argvs(self, processes: int) -> list[list[str]]:
        argv = [sys.executable, "-m", "dramatiq", "dramatiq_bench", "--threads", "8"]
        return [[*argv, "--processes", str(processes)]]

    def close(self) -> None:
        broker.close()


def make_adapter(redis_url: str) -> DramatiqAdapter:
    return DramatiqAdapter(redis_url)
