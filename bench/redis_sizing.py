"""`make bench-redis-sizing`: Redis bytes per task, waiting and retained done, by payload size.

A throwaway redis-server (``bench.run.redis_server``); for each payload size, ``SIZING_TASKS``
tasks are enqueued (used_memory before and after: bytes per pending task), then a real
``taskfleet worker`` (the ``echo`` handler: the result is as large as the payload) runs
them all, and used_memory again gives bytes per done task kept for the queue's retention.
``MEMORY USAGE`` of one task's hash is printed beside it. The figures feed docs/redis.md's
sizing. Not part of ``make check``: figures, not a test.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import redis
from taskfleet import Queue
from taskfleet.protocol.keys import QueueKeys

from bench.run import redis_server

QUEUE = "sizing"
SIZES = (16, 256, 1024, 10240)
REPO = Path(__file__).resolve().parents[1]


def used_memory(client: redis.Redis) -> int:
    return int(client.info("memory")["used_memory"])


def drain(url: str, n: int) -> None:
    env = dict(os.environ, TASKFLEET_REDIS_URL=url, PYTHONPATH=str(REPO))
    argv = [sys.executable, "-m", "taskfleet", "worker", "--queue", QUEUE,
            "--handler", "taskfleet.samples:echo", "--concurrency", "32"]  # fmt: skip
    worker = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        with Queue(QUEUE, redis_url=url) as queue:
            deadline = time.monotonic() + 300
            while queue.stats()["done"] < n:
                if worker.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(f"worker ended or too slow: {queue.stats()}")
                time.sleep(0.2)
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait(timeout=30)


def main() -> int:
    n = int(os.environ.get("SIZING_TASKS", "5000"))
    with redis_server() as (url, version):
        client = redis.Redis.from_url(url)
        print(f"redis {version}, {n} tasks per size; bytes per task (used_memory delta / n)")
        print(
            f"{'payload B':>10} {'pending':>10} {'done (retained)':>16} {'MEMORY USAGE task':>18}"
        )
        for size in SIZES:
            client.flushall()
            payload = {"d": "x" * max(0, size - 8)}  # ~size bytes of JSON
            with Queue(QUEUE, redis_url=url) as queue:
                queue.stats()  # the queue's own keys exist before the baseline
                base = used_memory(client)
                ids = []
                for start in range(0, n, 1000):
                    ids += queue.enqueue_many(
                        [{"payload": payload} for _ in range(min(1000, n - start))]
                    )
            pending = (used_memory(client) - base) / n
            drain(url, n)
            done = (used_memory(client) - base) / n
            key = QueueKeys(QUEUE).task(ids[0])
            usage = client.memory_usage(key) or 0
            print(f"{size:>10} {pending:>10.0f} {done:>16.0f} {usage:>18}")
        client.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
