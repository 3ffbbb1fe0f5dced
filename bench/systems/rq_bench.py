"""rq: the adapter and the reference no-op task (runs in bench/.peers/rq)."""

from __future__ import annotations

import sys

import redis
import rq
from harness import record_done
from rq import Queue

QUEUE = "bench"


def noop() -> None:
    record_done()


class RqAdapter:
    name = "rq"
    version = rq.__version__
    batch_method = "Queue.enqueue_many (one pipeline per batch)"
    # The default Worker forks a child per job; SimpleWorker runs jobs in the worker
    # process itself, the fastest set-up rq offers, so that is what is measured.
    worker_config = "2 x `rq worker --worker-class rq.worker.SimpleWorker`"

    def __init__(self, redis_url: str):
        self.client = redis.Redis.from_url(redis_url)
        self.redis_url = redis_url
        self.queue = Queue(QUEUE, connection=self.client)

    def enqueue_single(self, n: int) -> None:
        for _ in range(n):
            self.queue.enqueue(noop)

    def enqueue_batches(self, n: int, batch: int) -> None:
        for start in range(0, n, batch):
            size = min(batch, n - start)
            self.queue.enqueue_many([Queue.prepare_data(noop) for _ in range(size)])

    def enqueue_one(self) -> None:
        self.queue.enqueue(noop)

    def purge(self) -> None:
        self.client.flushdb()

    def worker_argvs(self, processes: int) -> list[list[str]]:
        argv = [
            sys.executable, "-m", "rq.cli", "worker", "--url", self.redis_url,
            "--worker-class", "rq.worker.SimpleWorker", "--logging_level", "WARNING", QUEUE,
        ]  # fmt: skip
        return [argv] * processes

    def close(self) -> None:
        self.client.close()


def make_adapter(redis_url: str) -> RqAdapter:
    return RqAdapter(redis_url)
