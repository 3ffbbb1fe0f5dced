"""A CPU-bound handler with 1 and N worker processes: what ``--processes`` buys.

``python -m bench.processes [--tasks 400] [--work-ms 10] [--processes N]`` starts a fresh
redis-server (as ``make bench`` does), enqueues ``--tasks`` tasks whose handler burns
``--work-ms`` of pure-Python CPU, and times one worker container's drain, exec to the
last task done, twice: ``taskfleet worker --processes 1 --concurrency N`` (N threads,
one core: the GIL) and ``--processes N --concurrency 1`` (N cores). Same slots, same
tasks. N defaults to the machine's cores. Figures only, never pass/fail.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from taskfleet import Queue

from bench.run import redis_server

REPO = Path(__file__).resolve().parents[1]
QUEUE = "cpu"


def burn(payload: dict[str, Any]) -> int:
    """Pure-Python arithmetic for ``ms`` milliseconds of CPU (holds the GIL throughout)."""
    end = time.thread_time() + float(payload["ms"]) / 1000
    n = 0
    while time.thread_time() < end:
        for i in range(1000):
            n += i * i
    return n


def drain(url: str, tasks: int, work_ms: float, processes: int, concurrency: int) -> float:
    """Tasks per second of one worker container, exec to the last task done."""
    with Queue(QUEUE, url) as queue, tempfile.TemporaryDirectory(prefix="bench-cpu-") as tmp:
        queue.purge()
        queue.enqueue_many([{"payload": {"ms": work_ms}} for _ in range(tasks)])
        argv = [
            *(sys.executable, "-m", "taskfleet", "worker", "--queue", QUEUE),
            *("--handler", "bench.processes:burn", "--redis-url", url, "--log-level", "warning"),
            *("--processes", str(processes), "--concurrency", str(concurrency)),
            *("--runtime-dir", tmp, "--pod", f"cpu-{processes}"),
        ]
        started = time.perf_counter()
        worker = subprocess.Popen(argv, cwd=REPO, env=dict(os.environ, PYTHONPATH=str(REPO)))
        try:
            while queue.stats()["completed"] < tasks:
                if worker.poll() is not None:
                    raise SystemExit(f"worker exited with {worker.returncode}")
                time.sleep(0.005)
            rate = tasks / (time.perf_counter() - started)
        finally:
            worker.terminate()
            worker.wait(timeout=30)
        return rate


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=400)
    parser.add_argument("--work-ms", type=float, default=10.0)
    parser.add_argument("--processes", type=int, default=os.cpu_count() or 2)
    args = parser.parse_args(argv)
    n = max(2, args.processes)
    with redis_server() as (url, _version):
        one = drain(url, args.tasks, args.work_ms, 1, n)
        many = drain(url, args.tasks, args.work_ms, n, 1)
    ideal = 1000 / args.work_ms
    print(f"CPU-bound handler ({args.work_ms:g} ms of CPU per task), {args.tasks} tasks, "
          f"{os.cpu_count()} cores, load {os.getloadavg()[0]:.2f}:")  # fmt: skip
    print(f"  --processes 1 --concurrency {n}: {one:,.0f} tasks/s ({one / ideal:.2f} cores)")
    print(f"  --processes {n} --concurrency 1: {many:,.0f} tasks/s ({many / ideal:.2f} cores)")
    print(f"  speed-up {many / one:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
