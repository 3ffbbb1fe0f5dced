"""A worker's CPU per task with two builds, alternating, in one process each: the steady
figure of a change to the per-task path on a shared machine.

    python -m bench.worker_ab SRC_A SRC_B [--rounds 4] [--n 20000] [--handler write]
        [--tasks plain|traced-grouped]

``SRC_A`` and ``SRC_B``: directories holding a taskfleet library (``worker-image`` of a
checkout or an export: it goes first on ``PYTHONPATH``). Each round, on one fresh
redis-server flushed between runs, a fresh process of each side (the order alternating
by round) enqueues ``--n`` tasks and drains them with one ``Worker`` at its defaults and
32 slots (``make bench``'s per-process settings). ``--handler``: ``write`` (sync, one
``RPUSH`` through a redis-py client, as ``make bench``'s handler), ``async-write`` (the
same from an async handler, through ``redis.asyncio``), or ``none`` (sync, returns at
once: the worker's own cost alone). ``--tasks traced-grouped``: every task enqueued
inside a span of a configured tracer provider (no exporter) and in one of 10 groups, the
worker traced too. Over the drain from its 10th percent to its end:
the process's CPU per task (user + system, every thread), redis-server's CPU per task
(``/proc/<pid>/schedstat``), script calls (``EVALSHA``) per task and the process's
context switches per task (voluntary, involuntary), and the rate. Medians by side at the
end, with the load average. Figures, never pass/fail.

    python -m bench.worker_ab --floor [--n 20000]

The handler's write alone, no worker: ``--n`` ``RPUSH``es from 32 threads sharing one
redis-py client, then from 32 asyncio tasks sharing one ``redis.asyncio`` client; the
process's CPU and redis-server's per write. What a worker running that handler can't go
below.
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

_CHILD = r"""
import asyncio, json, os, sys, time
from pathlib import Path
import redis, redis.asyncio
from taskfleet import Queue
from taskfleet.worker.core import Worker
from taskfleet.worker.handlers import Handler
from taskfleet.worker.settings import WorkerSettings

url, n, kind, tasks = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
c = redis.Redis.from_url(url)
pid = int(c.info("server")["process_id"])
span = None
if tasks == "traced-grouped":
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    trace.set_tracer_provider(TracerProvider())
    span = trace.get_tracer("ab").start_as_current_span("produce")
    span.__enter__()
with Queue("ab", url) as q:
    for s in range(0, n, 1000):
        if span is None:
            q.enqueue_many([{"payload": {}} for _ in range(min(1000, n - s))])
        else:
            k = min(1000, n - s)
            q.enqueue_many([{"payload": {}, "group": f"g{i % 10}"} for i in range(k)])
if span is not None:
    span.__exit__(None, None, None)
writer = redis.Redis.from_url(url)
awriter = redis.asyncio.Redis.from_url(url)

def write(payload):
    writer.rpush("ab:done", 1)

async def async_write(payload):
    await awriter.rpush("ab:done", 1)

def none(payload):
    return None

func = {"write": write, "async-write": async_write, "none": none}[kind]
settings = WorkerSettings(queue="ab", redis_url=url, pod="ab", incarnation=str(os.getpid()),
                          concurrency=32)
worker = Worker(settings, Handler.of("ab:" + kind, func))

def switches():
    vol = invol = 0
    for t in os.listdir("/proc/self/task"):
        try:
            for line in open(f"/proc/self/task/{t}/status"):
                if line.startswith("voluntary_ctxt_switches"):
                    vol += int(line.split()[1])
                elif line.startswith("nonvoluntary_ctxt_switches"):
                    invol += int(line.split()[1])
        except OSError:
            pass
    return vol, invol

def rcpu():
    return int(Path(f"/proc/{pid}/schedstat").read_text().split()[0]) / 1e9

def evalsha():
    return c.info("commandstats").get("cmdstat_evalsha", {}).get("calls", 0)

async def main():
    run = asyncio.create_task(worker.run())
    while worker.counters.completed < n // 10:
        await asyncio.sleep(0.005)
    first = worker.counters.completed
    s0, r0, e0 = switches(), rcpu(), evalsha()
    p0, w0 = time.process_time(), time.monotonic()
    while worker.counters.completed < n:
        await asyncio.sleep(0.005)
    p1, w1 = time.process_time(), time.monotonic()
    s1, r1, e1 = switches(), rcpu(), evalsha()
    done = worker.counters.completed - first
    worker.request_drain()
    await run
    await awriter.aclose()
    print(json.dumps({
        "cpu_us": (p1 - p0) / done * 1e6, "redis_us": (r1 - r0) / done * 1e6,
        "calls": (e1 - e0) / done, "vol": (s1[0] - s0[0]) / done,
        "invol": (s1[1] - s0[1]) / done, "rate": done / (w1 - w0),
    }))

asyncio.run(main())
writer.close()
c.close()
"""

_FLOOR = r"""
import asyncio, sys, threading, time
from pathlib import Path
import redis, redis.asyncio

url, n = sys.argv[1], int(sys.argv[2])
admin = redis.Redis.from_url(url)
pid = int(admin.info("server")["process_id"])

def rcpu():
    return int(Path(f"/proc/{pid}/schedstat").read_text().split()[0]) / 1e9

def report(what, p, r, w, done):
    print(f"{what}: {p / done * 1e6:.1f} us CPU per write, Redis {r / done * 1e6:.1f} us, "
          f"{done / w:,.0f}/s")

client = redis.Redis.from_url(url)
client.rpush("ab:floor", 1)
per = n // 32

def writes():
    for _ in range(per):
        client.rpush("ab:floor", 1)

threads = [threading.Thread(target=writes) for _ in range(32)]
r0, p0, w0 = rcpu(), time.process_time(), time.monotonic()
for t in threads:
    t.start()
for t in threads:
    t.join()
report("redis-py, 32 threads", time.process_time() - p0, rcpu() - r0, time.monotonic() - w0,
       per * 32)
client.close()

async def main():
    aclient = redis.asyncio.Redis.from_url(url)
    await aclient.rpush("ab:floor", 1)

    async def awrites():
        for _ in range(per):
            await aclient.rpush("ab:floor", 1)

    r0, p0, w0 = rcpu(), time.process_time(), time.monotonic()
    await asyncio.gather(*[awrites() for _ in range(32)])
    report("redis.asyncio, 32 tasks", time.process_time() - p0, rcpu() - r0,
           time.monotonic() - w0, per * 32)
    await aclient.aclose()

asyncio.run(main())
admin.close()
"""

FIELDS = ("cpu_us", "redis_us", "calls", "vol", "invol", "rate")


def drain_once(src: Path, url: str, n: int, handler: str, tasks: str) -> dict[str, float]:
    env = dict(os.environ, PYTHONPATH=str(src))
    out = subprocess.run(
        [sys.executable, "-c", _CHILD, url, str(n), handler, tasks],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    )
    result: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def _line(label: str, r: dict[str, float]) -> str:
    return (
        f"{label}: worker CPU {r['cpu_us']:6.1f} us/task  Redis CPU {r['redis_us']:5.1f} us/task"
        f"  script calls {r['calls']:.3f}/task  switches {r['vol']:.2f}+{r['invol']:.2f}/task"
        f"  {r['rate']:,.0f}/s"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("a", type=Path, nargs="?")
    parser.add_argument("b", type=Path, nargs="?")
    parser.add_argument("--floor", action="store_true")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--n", type=int, default=20000)
    parser.add_argument("--handler", choices=("write", "async-write", "none"), default="write")
    parser.add_argument("--tasks", choices=("plain", "traced-grouped"), default="plain")
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.n < 1000:
        print("--rounds must be at least 1 and --n at least 1000", file=sys.stderr)
        return 2
    if args.floor:
        with redis_server() as (url, _version):
            print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
            subprocess.run([sys.executable, "-c", _FLOOR, url, str(args.n)], check=True)
        return 0
    if args.a is None or args.b is None:
        print("give two library directories (SRC_A SRC_B), or --floor", file=sys.stderr)
        return 2
    for src in (args.a, args.b):
        if not (src / "taskfleet" / "__init__.py").is_file():
            print(
                f"{src}: no taskfleet library there (give a worker-image directory)",
                file=sys.stderr,
            )
            return 2
    sides = {"A": args.a, "B": args.b}
    results: dict[str, list[dict[str, float]]] = {"A": [], "B": []}
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    with redis_server() as (url, _version):
        client = redis.Redis.from_url(url)
        try:
            for i in range(args.rounds):
                for side in ("A", "B") if i % 2 == 0 else ("B", "A"):
                    client.flushall()
                    r = drain_once(sides[side], url, args.n, args.handler, args.tasks)
                    results[side].append(r)
                    print(_line(f"round {i + 1} {side}", r), flush=True)
        finally:
            client.close()
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    for side in ("A", "B"):
        median = {f: statistics.median(r[f] for r in results[side]) for f in FIELDS}
        print(_line(f"median {side} ({sides[side]})", median))
    return 0


if __name__ == "__main__":
    sys.exit(main())
