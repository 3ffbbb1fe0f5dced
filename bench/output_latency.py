"""Streamed output: the time from ``emit`` in a worker's handler to a reader of
``Queue.stream`` in another process, across processes on one machine.

``python -m bench.output_latency [--chunks 2000] [--every-ms 5] [--readers 1]`` starts a
fresh redis-server, enqueues one task, starts ``--readers`` reader processes on its
stream and a ``taskfleet worker`` whose handler emits ``--chunks`` chunks, one every
``--every-ms`` ms, each carrying the wall-clock time of its emit. Each reader takes the
difference at arrival. Prints p50, p99 and the maximum per reader, and the load average.
Figures only, never pass/fail.
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

from bench.run import redis_server

REPO = Path(__file__).resolve().parents[1]
QUEUE = "output"
READER = """
import json, sys, time
from taskfleet import Queue
out = []
with Queue(sys.argv[1], sys.argv[2]) as q:
    for chunk in q.stream(sys.argv[3]):
        out.append(time.time() - chunk.data["t"])
print(json.dumps(out))
"""


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p * len(ordered)))]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, default=2000)
    parser.add_argument("--every-ms", type=float, default=5.0)
    parser.add_argument("--readers", type=int, default=1)
    args = parser.parse_args(argv)
    env = dict(os.environ, PYTHONPATH=str(REPO))
    with redis_server() as (url, version), tempfile.TemporaryDirectory() as tmp:
        with Queue(QUEUE, url) as queue:
            task_id = queue.enqueue({"chunks": args.chunks, "every_ms": args.every_ms})
        readers = [
            subprocess.Popen(
                [sys.executable, "-c", READER, QUEUE, url, task_id],
                cwd=REPO,
                env=env,
                stdout=subprocess.PIPE,
                text=True,
            )
            for _ in range(args.readers)
        ]
        worker = subprocess.Popen(
            [
                *(sys.executable, "-m", "taskfleet", "worker", "--queue", QUEUE),
                *("--handler", "bench.output_handlers:emitter", "--redis-url", url),
                *("--log-level", "warning", "--runtime-dir", tmp, "--pod", "emitter"),
            ],
            cwd=REPO,
            env=env,
        )
        try:
            print(
                f"{args.chunks} chunks, one every {args.every_ms:g} ms, Redis {version}, "
                f"{os.cpu_count()} cores, load {os.getloadavg()[0]:.2f} before:"
            )
            for i, reader in enumerate(readers, 1):
                stdout, _ = reader.communicate(timeout=args.chunks * args.every_ms / 1000 + 120)
                ms = [d * 1000 for d in json.loads(stdout)]
                print(
                    f"reader {i}: {len(ms)} chunks, emit -> read p50 {percentile(ms, 0.5):.2f} ms, "
                    f"p99 {percentile(ms, 0.99):.2f} ms, max {max(ms):.2f} ms"
                )
            print(f"load after: {os.getloadavg()[0]:.2f}")
        finally:
            worker.terminate()
            worker.wait(timeout=30)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
