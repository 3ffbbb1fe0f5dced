"""Redis time of the claim path for a queue without groups, before and after: each side
(a venv) drains 10,000 ungrouped tasks by claims of 8 (complete + claim in one script
call) and the server logs every call (SLOWLOG); sides alternate on one redis-server.
Script time is what a change of the scripts costs; a loaded machine swings drain rates
far more than this.

    .venv/bin/python -m bench.claim_time_ab   # BASE_PYTHON=... (default: the main checkout)
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

import redis

from bench.run import redis_server

BASE = Path(os.environ.get("BASE_PYTHON", "/work/main/.venv/bin/python"))
ROUNDS = int(os.environ.get("ROUNDS", "4"))
N = 10_000

SIDE = r"""
import asyncio, json, sys
import redis, redis.asyncio
from taskfleet import Queue
from taskfleet.worker.broker import Broker
url, n = sys.argv[1], int(sys.argv[2])
c = redis.Redis.from_url(url)
c.flushall()
with Queue("ab", url) as q:
    for s in range(0, n, 1000):
        q.enqueue_many([{"payload": {}} for _ in range(1000)])
c.config_set("slowlog-log-slower-than", 0)
c.config_set("slowlog-max-len", 1000000)
c.slowlog_reset()
async def drain():
    a = redis.asyncio.Redis.from_url(url)
    b = Broker("ab", a, "bench", "1")
    running = []
    while True:
        if running:
            _, got = await b.complete_and_claim(running, 8)
        else:
            got = await b.claim(8)
        running = [(t.id, t.token, None) for t in got.tasks]
        if not running:
            break
    await b.close()
    await a.aclose()
asyncio.run(drain())
us = [int(e["duration"]) for e in c.slowlog_get(1000000) if e["command"].startswith(b"EVALSHA")]
c.config_set("slowlog-log-slower-than", 10000)
print(json.dumps(us))
"""


def side(python: Path, url: str) -> list[int]:
    out = subprocess.run([str(python), "-c", SIDE, url, str(N)], check=True, capture_output=True)
    return list(json.loads(out.stdout))


def main() -> int:
    rows: dict[str, list[float]] = {"before": [], "after": []}
    with redis_server() as (url, _):
        client = redis.Redis.from_url(url)
        for i in range(ROUNDS):
            order = [("before", BASE), ("after", Path(sys.executable))]
            for key, python in order if i % 2 == 0 else order[::-1]:
                us = side(python, url)
                rows[key].append(statistics.median(us))
        client.close()
    print(f"\nscript time per call, complete + claim of 8, {N:,} ungrouped tasks, {ROUNDS} rounds:")
    for key, values in rows.items():
        print(f"  {key:>6}: median µs per call {', '.join(f'{v:.0f}' for v in values)}")
    before, after = statistics.mean(rows["before"]), statistics.mean(rows["after"])
    print(f"  after: {(after - before) / before * 100:+.1f} % script time against before")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
