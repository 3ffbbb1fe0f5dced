"""Following a task: the time from the write of a task's progress or end to its
follower's ``Queue.follow`` yielding it, across processes on one machine.

``python -m bench.follow_latency [--tasks 16] [--steps 20] [--every-ms 550]
[--interval 600]`` starts a fresh redis-server, enqueues ``--tasks`` tasks, starts one
follower process (a thread per task, ``Queue.follow(id, interval=--interval)``) and a
``taskfleet worker`` whose handler reports step i of ``--steps``, one every
``--every-ms`` ms. At each yield the follower takes the difference between its clock
and the stored ``progress_at`` (or ``finished_at`` for the end), both this machine's
clock. Prints p50, p99 and the maximum, and the load average. With ``--interval 600`` a
poll would wait minutes: what is seen comes from the wake-ups. Figures only, never
pass/fail.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from taskfleet import Queue

from bench.output_latency import percentile
from bench.run import redis_server

REPO = Path(__file__).resolve().parents[1]
QUEUE = "follow"
FOLLOWER = """
import json, sys, threading, time
from taskfleet import Queue
progress, ends = [], []
def follow(q, task_id):
    last = None
    for task in q.follow(task_id, interval=float(sys.argv[3]), timeout=600):
        now = time.time()
        if task.finished and task.finished_at is not None:
            ends.append(now - task.finished_at.timestamp())
        elif task.progress_at is not None and task.progress_at != last:
            progress.append(now - task.progress_at.timestamp())
        last = task.progress_at
with Queue(sys.argv[1], sys.argv[2]) as q:
    threads = [threading.Thread(target=follow, args=(q, i)) for i in sys.argv[4:]]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
print(json.dumps({"progress": progress, "ends": ends}))
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=16)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--every-ms", type=float, default=550.0)
    parser.add_argument("--interval", type=float, default=600.0)
    args = parser.parse_args(argv)
    env = dict(os.environ, PYTHONPATH=str(REPO))
    with redis_server() as (url, version), tempfile.TemporaryDirectory() as tmp:
        with Queue(QUEUE, url) as queue:
            payload = {"steps": args.steps, "every_ms": args.every_ms}
            ids = queue.enqueue_many([{"payload": payload}] * args.tasks)
        follower = subprocess.Popen(
            [sys.executable, "-c", FOLLOWER, QUEUE, url, str(args.interval), *ids],
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            text=True,
        )
        worker = subprocess.Popen(
            [
                *(sys.executable, "-m", "taskfleet", "worker", "--queue", QUEUE),
                *("--handler", "bench.output_handlers:stepper", "--redis-url", url),
                *("--concurrency", str(args.tasks), "--log-level", "warning"),
                *("--runtime-dir", tmp, "--pod", "stepper"),
            ],
            cwd=REPO,
            env=env,
        )
        try:
            print(
                f"{args.tasks} tasks followed, {args.steps} steps each, one every "
                f"{args.every_ms:g} ms, interval {args.interval:g} s, Redis {version}, "
                f"{os.cpu_count()} cores, load {os.getloadavg()[0]:.2f} before:"
            )
            stdout, _ = follower.communicate(timeout=args.steps * args.every_ms / 1000 + 120)
            seen = json.loads(stdout)
            for name, values in (("progress", seen["progress"]), ("end", seen["ends"])):
                ms = [d * 1000 for d in values]
                print(
                    f"{name}: {len(ms)} seen, write -> yield p50 {percentile(ms, 0.5):.2f} ms, "
                    f"p99 {percentile(ms, 0.99):.2f} ms, max {max(ms):.2f} ms"
                )
            print(f"load after: {os.getloadavg()[0]:.2f}")
        finally:
            worker.terminate()
            worker.wait(timeout=30)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
