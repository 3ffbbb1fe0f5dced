"""Schedules as data: triggers per second with N schedules due every second.

    python -m bench.schedules [--schedules 10000,100000] [--seconds 20] [--firers 2]

Starts one fresh redis-server (bench.run's), stores N schedules (``* * * * * *``, catch-up
``all``, so a slot fired late is still fired, never skipped), then runs ``--firers``
processes, each running the worker's own schedule loop (``taskfleet.worker.firing``, the
code every ``taskfleet worker`` runs in the background) on its own Broker. After the
measured window the firers stop and every schedule is checked slot by slot: one task per
slot from its first slot to its last fired one (no slot twice, none skipped). Redis CPU
per trigger comes from INFO's used_cpu_user + used_cpu_sys over the window.

Figures, never pass/fail. Results go to bench/results/schedules-*.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import sys
import time
from pathlib import Path
from typing import Any

import redis
from taskfleet import Queue

from bench.run import machine, redis_server

QUEUE = "bench-schedules"
RESULTS = Path(__file__).resolve().parent / "results"


def firer(url: str, stop_at: float, out: Any) -> None:
    """One process: the worker's schedule loop until ``stop_at`` (wall clock)."""
    import redis.asyncio as aioredis
    from taskfleet.worker.broker import Broker
    from taskfleet.worker.firing import fire_once

    async def run() -> tuple[int, int]:
        client = aioredis.Redis.from_url(url)
        broker = Broker(QUEUE, client, f"bench-{os.getpid()}", "1", reply_timeout=30)
        claimed_total = created_total = 0
        while time.time() < stop_at:
            claimed, created, wait = await fire_once(broker)
            claimed_total += claimed
            created_total += created
            if claimed < 500:
                await asyncio.sleep(min(wait, max(0.0, stop_at - time.time())))
        await client.aclose()
        return claimed_total, created_total

    out.put(asyncio.run(run()))


def store(queue: Queue, n: int) -> None:
    """N every-second schedules; the first slots spread over the next two seconds."""
    from taskfleet.protocol.calls import run, run_all
    from taskfleet.protocol.schedule_ops import ScheduleOps
    from taskfleet.protocol.schedules import ScheduleDef, due_ms, first_slot

    ops = ScheduleOps(queue.keys)
    now = run(queue.client, queue.reads.clock()) + 2000
    batch = []
    for i in range(n):
        definition = ScheduleDef(
            name=f"s{i}",
            cron="* * * * * *",
            payload=json.dumps({"i": i}),
            catchup="all",
            catchup_limit=10_000,
        )
        slot = first_slot(definition.cron, definition.tz, now)
        batch.append(
            ops.put(
                definition,
                owner="",
                take_over=False,
                paused=False,
                first_slot=slot,
                first_due_ms=due_ms(definition.name, slot or 0, 0),
            )
        )
        if len(batch) == 1000:
            run_all(queue.client, batch)
            batch = []
    if batch:
        run_all(queue.client, batch)


def check(queue: Queue, n: int, first_slot: int) -> dict[str, int]:
    """Slot by slot: fired counts against last slots, tasks present, skipped zero."""
    pipe = queue.client.pipeline(transaction=False)
    for i in range(n):
        pipe.hmget(queue.keys.schedule(f"s{i}"), "last_slot", "fired", "skipped", "next_slot")
    rows = pipe.execute()
    expected = fired = skipped = wrong = 0
    lag = []
    for row in rows:
        last = int(row[0]) if row[0] else first_slot - 1
        expected += last - first_slot + 1
        fired += int(row[1])
        skipped += int(row[2])
        wrong += int(row[1]) != last - first_slot + 1 or int(row[3]) != last + 1
        lag.append(last)
    tasks = int(queue.client.zcard(queue.keys.pending))
    return {
        "slots_expected": expected,
        "tasks_fired": fired,
        "tasks_in_pending": tasks,
        "skipped": skipped,
        "schedules_inconsistent": wrong,
        "oldest_last_slot": min(lag),
        "newest_last_slot": max(lag),
    }


def cpu(client: redis.Redis) -> float:
    info = client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def one(url: str, n: int, seconds: float, firers: int) -> dict[str, Any]:
    client = redis.Redis.from_url(url)
    client.flushall()
    with Queue(QUEUE, client=client) as queue:
        t0 = time.perf_counter()
        store(queue, n)
        stored_s = time.perf_counter() - t0
        first_slot = int(queue.client.hget(queue.keys.schedule("s0"), "next_slot") or 0)
        start_wall = first_slot + 0.2  # measure from the first slot on
        warm = 3.0
        stop_at = start_wall + warm + seconds
        ctx = multiprocessing.get_context("spawn")
        out = ctx.Queue()
        procs = [ctx.Process(target=firer, args=(url, stop_at, out)) for _ in range(firers)]
        for p in procs:
            p.start()
        time.sleep(max(0.0, start_wall + warm - time.time()))
        e0, c0, w0 = queue.stats()["enqueued"], cpu(client), time.time()
        time.sleep(max(0.0, stop_at - time.time()))
        e1, c1, w1 = queue.stats()["enqueued"], cpu(client), time.time()
        per_firer = [out.get(timeout=60) for _ in procs]
        for p in procs:
            p.join(timeout=60)
        triggers = e1 - e0
        checked = check(queue, n, first_slot)
        result: dict[str, Any] = {
            "schedules": n,
            "firers": firers,
            "seconds": round(w1 - w0, 2),
            "store_s": round(stored_s, 2),
            "triggers": triggers,
            "triggers_per_s": round(triggers / (w1 - w0)),
            "demanded_per_s": n,
            "redis_cpu_us_per_trigger": round((c1 - c0) / max(triggers, 1) * 1e6, 1),
            "per_firer_claimed_created": per_firer,
            **checked,
            "lag_s_at_end": round(w1 - checked["oldest_last_slot"], 1),
        }
    client.close()
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--schedules", default="10000,100000")
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--firers", type=int, default=2)
    args = parser.parse_args(argv)
    results = []
    with redis_server() as (url, version):
        for n in (int(x) for x in args.schedules.split(",")):
            print(f"{n} schedules due every second, {args.firers} firers ...", file=sys.stderr)
            result = one(url, n, args.seconds, args.firers)
            print(json.dumps(result), file=sys.stderr)
            results.append(result)
    report = {"machine": machine(), "redis": version, "results": results}
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"schedules-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.write_text(json.dumps(report, indent=2))
    print(
        "\n| schedules | triggers/s | Redis CPU µs/trigger | slots fired | skipped | "
        "inconsistent | lag at end (s) |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for r in results:
        print(
            f"| {r['schedules']:,} | {r['triggers_per_s']:,} | {r['redis_cpu_us_per_trigger']} | "
            f"{r['tasks_fired']:,} | {r['skipped']} | {r['schedules_inconsistent']} | "
            f"{r['lag_s_at_end']} |"
        )
    print(f"\n{path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
