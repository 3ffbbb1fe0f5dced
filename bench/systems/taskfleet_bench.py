"""taskfleet: the adapter and the reference no-op task (runs in the project venv)."""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import sys
import tempfile

import taskfleet
from taskfleet import AsyncQueue, Queue

QUEUE = "bench"
# Slots per worker process (run.py --taskfleet-concurrency): sync handlers run in a thread
# pool of this size, and it bounds the batch one claim takes.
CONCURRENCY = int(os.environ.get("BENCH_TASKFLEET_CONCURRENCY", "32"))
# The workers' --log-level (run.py --taskfleet-log-level); empty: none given, the worker's
# default, as a user runs it (its log lines go to a file per process, as a pod's do).
LOG_LEVEL = os.environ.get("BENCH_TASKFLEET_LOG_LEVEL", "")


class TaskfleetAdapter:
    version = taskfleet.__version__
    batch_method = "Queue.enqueue_many (one script call per batch)"

    def __init__(self, redis_url: str, variant: str | None):
        if variant not in (None, "sync", "async", "metrics", "groups"):
            raise ValueError(
                f"taskfleet variant must be sync, async, metrics or groups, not {variant!r}"
            )
        self.is_async = variant == "async"
        # metrics: the sync handler with a Prometheus endpoint per worker process, for the
        # cost of metrics on the drain (compare with the plain sync row of the same run)
        self.metrics = variant == "metrics"
        # groups: the same drain with every task in one of 100 groups (fair claiming on)
        self.groups = 100 if variant == "groups" else 0
        self.name = {"async": "taskfleet (async handler)", "metrics": "taskfleet (metrics on)"}.get(
            variant or "", "taskfleet"
        )
        self.handler = "taskfleet_tasks:anoop" if self.is_async else "taskfleet_tasks:noop"
        kind = (
            "async handler on the loop; its 1-by-1 enqueue goes through AsyncQueue"
            if self.is_async
            else f"sync handler in threads, default --prefetch {2 * CONCURRENCY}"
        )
        if self.metrics:
            kind += ", --metrics-port: each process serves its metrics"
        level = f" --log-level {LOG_LEVEL}" if LOG_LEVEL else ""
        self.worker_config = f"2 x `taskfleet worker --concurrency {CONCURRENCY}{level}` ({kind})"
        self.redis_url = redis_url
        self.queue = Queue(QUEUE, redis_url)
        self.runtime = tempfile.mkdtemp(prefix="bench-taskfleet-")

    def enqueue_single(self, n: int) -> None:
        if self.is_async:  # the async row's producer is AsyncQueue, one awaited call each
            asyncio.run(self._enqueue_single_async(n))
            return
        enqueue = self.queue.enqueue
        for _ in range(n):
            enqueue({})

    async def _enqueue_single_async(self, n: int) -> None:
        async with AsyncQueue(QUEUE, self.redis_url) as queue:
            enqueue = queue.enqueue
            for _ in range(n):
                await enqueue({})

    def enqueue_batches(self, n: int, batch: int) -> None:
        for start in range(0, n, batch):
            size = min(batch, n - start)
            if self.groups:
                items = [
                    {"payload": {}, "group": f"g{(start + i) % self.groups}"} for i in range(size)
                ]
                self.queue.enqueue_many(items)
            else:
                self.queue.enqueue_many([{"payload": {}} for _ in range(size)])

    def enqueue_one(self) -> None:
        self.queue.enqueue({})

    def purge(self) -> None:
        self.queue.purge()

    def worker_argvs(self, processes: int) -> list[list[str]]:
        # Distinct pod names and runtime dirs: each process is its own worker identity.
        return [
            [
                *(sys.executable, "-m", "taskfleet", "worker", "--queue", QUEUE),
                *("--handler", self.handler, "--concurrency", str(CONCURRENCY)),
                *("--pod", f"bench-{i}", "--runtime-dir", os.path.join(self.runtime, str(i))),
                *(("--log-level", LOG_LEVEL) if LOG_LEVEL else ()),
                *("--redis-url", self.redis_url),
                *(("--metrics-port", str(_free_port())) if self.metrics else ()),
            ]
            for i in range(processes)
        ]

    def close(self) -> None:
        self.queue.close()
        shutil.rmtree(self.runtime, ignore_errors=True)


def make_adapter(redis_url: str, variant: str | None = None) -> TaskfleetAdapter:
    return TaskfleetAdapter(redis_url, variant)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port
