"""A single enqueue's cost with two builds, alternating: client CPU, Redis CPU, rate.

    python -m bench.enqueue_ab SRC_A SRC_B [--rounds 5] [--n 10000]
    python -m bench.enqueue_ab SRC_A SRC_B --node   # the Node client's queue.enqueue

``SRC_A`` and ``SRC_B``: directories holding a taskfleet library (``worker-image`` of a
checkout or an export: it goes first on ``PYTHONPATH``), or with ``--node`` built Node
clients (``clients/node``, its ``dist/`` built). Each round, on one fresh redis-server
flushed between runs, a fresh process of each side (the order alternating by round)
makes 500 untimed enqueues, then ``--n`` single enqueues one after another (payload
``{}``, as ``make bench``'s 1-by-1 row), and reports over them: the process's own CPU
per call (user + system: it moves far less with the machine's load than the rate),
redis-server's CPU per call (``/proc/<pid>/schedstat``: time it ran, which a busy
machine's waiting does not inflate), and the wall rate. Medians and means by side at
the end, with the load average. Figures, never pass/fail.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

import redis

from bench.run import redis_server

_PY_CHILD = r"""
import json, os, sys, time
from pathlib import Path
url, n = sys.argv[1], int(sys.argv[2])
from taskfleet import Queue
q = Queue("bench", url)
pid = int(q.client.info("server")["process_id"])
def rcpu():
    return int(Path(f"/proc/{pid}/schedstat").read_text().split()[0])
for _ in range(500):
    q.enqueue({})
r0, c0, w0 = rcpu(), time.process_time(), time.perf_counter()
for _ in range(n):
    q.enqueue({})
w1, c1, r1 = time.perf_counter(), time.process_time(), rcpu()
q.close()
print(json.dumps({"client_us": (c1 - c0) / n * 1e6, "redis_us": (r1 - r0) / n / 1e3,
                  "rate": n / (w1 - w0)}))
"""

_NODE_CHILD = r"""
import { readFileSync } from "node:fs";
import { pathToFileURL } from "node:url";
const [entry, url, nText] = process.argv.slice(2);
const n = Number(nText);
const { Queue } = await import(pathToFileURL(entry).href);
const q = new Queue("bench", { redisUrl: url });
const info = await q.client.info("server");
const pid = Number(/process_id:(\d+)/.exec(info)[1]);
const rcpu = () => Number(readFileSync(`/proc/${pid}/schedstat`, "utf8").split(" ")[0]);
for (let i = 0; i < 500; i++) await q.enqueue({});
const r0 = rcpu(), c0 = process.cpuUsage(), w0 = performance.now();
for (let i = 0; i < n; i++) await q.enqueue({});
const w1 = performance.now(), c1 = process.cpuUsage(c0), r1 = rcpu();
await q.close();
console.log(JSON.stringify({ client_us: (c1.user + c1.system) / n, redis_us: (r1 - r0) / n / 1e3,
  rate: n / ((w1 - w0) / 1000) }));
"""


def one(src: Path, url: str, n: int, node: bool) -> dict[str, float]:
    if node:
        entry = src / "dist" / "src" / "index.js"
        cmd = ["node", "--input-type=module", "-", str(entry), url, str(n)]
        out = subprocess.run(cmd, input=_NODE_CHILD, capture_output=True, text=True, check=True)
    else:
        env = {**os.environ, "PYTHONPATH": str(src)}
        cmd = [sys.executable, "-c", _PY_CHILD, url, str(n)]
        out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
    result: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("a", type=Path)
    parser.add_argument("b", type=Path)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--n", type=int, default=10000)
    parser.add_argument("--node", action="store_true")
    args = parser.parse_args(argv)
    sides = {"A": args.a.resolve(), "B": args.b.resolve()}
    runs: dict[str, list[dict[str, float]]] = {"A": [], "B": []}
    print(f"load average before: {os.getloadavg()}")
    with redis_server() as (url, version):
        client = redis.Redis.from_url(url)
        for r in range(args.rounds):
            order = ["A", "B"] if r % 2 == 0 else ["B", "A"]
            for side in order:
                client.flushall()
                res = one(sides[side], url, args.n, args.node)
                runs[side].append(res)
                print(
                    f"round {r + 1} {side}: client {res['client_us']:.1f} us/call, "
                    f"redis {res['redis_us']:.1f} us/call, {res['rate']:,.0f}/s",
                    flush=True,
                )
        client.close()
    print(f"load average after: {os.getloadavg()}; Redis {version}")
    for side in ("A", "B"):
        rs = runs[side]
        for key in ("client_us", "redis_us", "rate"):
            values = [x[key] for x in rs]
            print(
                f"{side} {key}: median {statistics.median(values):,.1f} "
                f"mean {statistics.fmean(values):,.1f}  ({', '.join(f'{v:,.1f}' for v in values)})"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
