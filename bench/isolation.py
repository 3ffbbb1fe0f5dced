"""What ``--isolation process`` costs per task, against thread mode.

``python -m bench.isolation [--tasks 2000] [--concurrency 1,4] [--rounds 2]`` starts a
fresh redis-server (as ``make bench`` does) and times one worker's drain of ``--tasks``
no-op tasks, from its first task done to its last (the steady state: the worker's start
and its children's first start are left out), in three modes: threads, process
isolation (one reused child per slot), and process isolation with
``--max-tasks-per-child 1`` (a new child per task: the worst case of recycling; the
handler's module imports nothing, so an application's own import time comes on top). The
figure per mode is the best of ``--rounds``; the cost per task is the difference of the
per-task times against threads at the same concurrency. Figures only, never pass/fail.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from taskfleet import Queue

from bench.run import redis_server

REPO = Path(__file__).resolve().parents[1]
QUEUE = "isolation"

MODES: dict[str, list[str]] = {
    "thread": [],
    "process": ["--isolation", "process"],
    "process, new child per task": ["--isolation", "process", "--max-tasks-per-child", "1"],
}


def drain(url: str, tasks: int, concurrency: int, mode: list[str]) -> float:
    """Tasks per second of one worker, first task done to last."""
    with Queue(QUEUE, url) as queue, tempfile.TemporaryDirectory(prefix="bench-iso-") as tmp:
        queue.purge()
        queue.enqueue_many([{"payload": {}} for _ in range(tasks)])
        argv = [
            *(sys.executable, "-m", "taskfleet", "worker", "--queue", QUEUE),
            *("--handler", "bench.isolation_handlers:noop", "--redis-url", url),
            *("--log-level", "warning"),
            *("--concurrency", str(concurrency), *mode),
            *("--runtime-dir", tmp, "--pod", "iso"),
        ]
        worker = subprocess.Popen(argv, cwd=REPO, env=dict(os.environ, PYTHONPATH=str(REPO)))
        try:
            first = None
            while (done := queue.stats()["completed"]) < tasks:
                if worker.poll() is not None:
                    raise SystemExit(f"worker exited with {worker.returncode}")
                if first is None and done:
                    first = (time.perf_counter(), done)
                time.sleep(0.002)
            assert first is not None
            started, already = first
            return (tasks - already) / (time.perf_counter() - started)
        finally:
            worker.terminate()
            worker.wait(timeout=30)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=2000)
    parser.add_argument("--concurrency", default="1,4")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args(argv)
    levels = [int(c) for c in args.concurrency.split(",")]
    with redis_server() as (url, _version):
        print(f"no-op tasks, {args.tasks} per drain, best of {args.rounds}, "
              f"{os.cpu_count()} cores, load {os.getloadavg()[0]:.2f}:")  # fmt: skip
        for concurrency in levels:
            rates: dict[str, float] = {}
            for name, mode in MODES.items():
                # the new-child-per-task mode is slow: a twentieth of the tasks is enough
                n = args.tasks if "new child" not in name else max(20, args.tasks // 20)
                rates[name] = max(drain(url, n, concurrency, mode) for _ in range(args.rounds))
            base = 1e6 / rates["thread"]
            for name, rate in rates.items():
                per_task = 1e6 / rate
                extra = "" if name == "thread" else f", +{per_task - base:,.0f} us per task"
                print(f"  --concurrency {concurrency}, {name}: {rate:,.0f} tasks/s "
                      f"({per_task:,.0f} us per task{extra})")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
