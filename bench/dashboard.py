"""A dashboard page view's cost to Redis, with a small queue and with 1,000,000 tasks.

Starts a throwaway redis-server (``bench.run.redis_server``), fills one queue through the
queue's own enqueue (``DASHBOARD_TASKS``, default 1,000,000, in batches of 10,000), serves
the dashboard for real (uvicorn on a free port, its sampler quiet during the measurement)
and requests each page ``DASHBOARD_VIEWS`` times (default 20). For each page: the Redis
CPU time of one view (``INFO commandstats``, reset before each view, summed over the
commands the view sent), the commands it sent, and the view's time end to end over HTTP;
medians. The same pages are measured first with 1,000 tasks: a page that scanned would
grow a thousandfold between the two.

    make bench-dashboard            # or: python -m bench.dashboard
"""

from __future__ import annotations

import http.client
import os
import socket
import statistics
import threading
import time

import redis
import uvicorn
from taskfleet import Queue
from taskfleet.dashboard.app import create_app
from taskfleet.dashboard.settings import DashboardSettings

from bench.run import redis_server

QUEUE = "bench-dashboard"
BATCH = 10_000
IGNORED = {"info", "config|resetstat", "config"}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def fill(queue: Queue, total: int) -> float:
    start = time.monotonic()
    have = queue.stats()["pending"]
    while have < total:
        n = min(BATCH, total - have)
        queue.enqueue_many({"payload": {"n": have + i, "note": "x" * 40}} for i in range(n))
        have += n
    return time.monotonic() - start


def redis_cost(admin: redis.Redis) -> tuple[int, int]:
    """(usec of Redis CPU, calls) since the last reset, the bench's own commands left out."""
    usec = calls = 0
    for name, stat in admin.info("commandstats").items():
        command = name.removeprefix("cmdstat_")
        if command not in IGNORED:
            usec += int(stat["usec"])
            calls += int(stat["calls"])
    return usec, calls


def view(port: int, path: str) -> float:
    start = time.perf_counter()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    conn.request("GET", path)
    response = conn.getresponse()
    response.read()
    conn.close()
    if response.status not in (200, 404):  # 404: the search for an id that is not there
        raise SystemExit(f"{path}: HTTP {response.status}")
    return (time.perf_counter() - start) * 1000


def measure(admin: redis.Redis, port: int, pages: list[tuple[str, str]], views: int) -> None:
    print(f"  {'page':<34} {'redis µs':>9} {'commands':>9} {'view ms':>8}")
    for label, path in pages:
        usecs, calls, walls = [], [], []
        for _ in range(views):
            admin.config_resetstat()
            walls.append(view(port, path))
            usec, count = redis_cost(admin)
            usecs.append(usec)
            calls.append(count)
        print(
            f"  {label:<34} {statistics.median(usecs):>9,.0f} "
            f"{statistics.median(calls):>9,.0f} {statistics.median(walls):>8.1f}"
        )


def main() -> None:
    total = int(os.environ.get("DASHBOARD_TASKS", "1000000"))
    views = int(os.environ.get("DASHBOARD_VIEWS", "20"))
    with redis_server() as (url, version):
        admin = redis.Redis.from_url(url)
        queue = Queue(QUEUE, redis_url=url)
        settings = DashboardSettings(redis_url=url, queues=(QUEUE,), sample_s=3600)
        port = _free_port()
        server = uvicorn.Server(
            uvicorn.Config(create_app(settings), port=port, log_level="warning")
        )
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        while not server.started:
            time.sleep(0.01)
        print(f"redis {version}; {views} views per page, medians")
        try:
            for size in (1_000, total):
                seconds = fill(queue, size)
                some_id = queue.enqueue({"look": "me up"})
                last = -(-(size + 1) // settings.page_size)
                pages = [
                    ("queues", "/"),
                    ("queue", f"/queues/{QUEUE}"),
                    ("pending, first page", f"/queues/{QUEUE}/tasks/pending"),
                    ("pending, middle page", f"/queues/{QUEUE}/tasks/pending?page={last // 2}"),
                    ("pending, last page", f"/queues/{QUEUE}/tasks/pending?page={last}"),
                    ("a task", f"/queues/{QUEUE}/tasks/id/{some_id}"),
                    ("search by id", f"/queues/{QUEUE}/search?id=no-such-id"),
                    ("workers", f"/queues/{QUEUE}/workers"),
                ]
                print(f"{size + 1:,} tasks pending (filled in {seconds:.1f}s):")
                measure(admin, port, pages, views)
        finally:
            server.should_exit = True
            thread.join(timeout=10)
            queue.close()
            admin.close()


if __name__ == "__main__":
    main()
