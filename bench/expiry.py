"""Mass expiry: N tasks whose start deadline passed at the head of a queue, and live
tasks enqueued behind them.

    python -m bench.expiry [--expired 200000] [--workers 2] [--deadline-ms 1] [--timeout 120]

Starts one fresh redis-server (bench.run's), enqueues ``--expired`` tasks in batches of
1,000, each with a start deadline ``--deadline-ms`` after its enqueue, and waits until every
deadline has passed: the tasks are pending, expired, and nobody has touched them yet. Then
SLOWLOG is set to keep every call of 1 ms or more, ``--workers`` worker processes start
(``taskfleet worker``, handler ``taskfleet.samples:echo``, default settings), and from the
moment the first one has registered and the first expired task is dead, a live task is
enqueued behind the expired ones every 100 ms until every expired task is dead; the live
tasks alternate between no deadline and a deadline an hour away (a task of the same run
of deadlines as the expired ones).

Reported: the clearing time (first worker registered -> the last expired task dead, and
the rate), every script call counted (INFO commandstats) and the longest ones from
SLOWLOG, by script, with how many took over 5 ms; each live task's claim latency (its
``started_at`` - ``created_at``, both the server's clock); Redis CPU per expired task; and
checks: every expired task counted ``expired`` and ``dead_total`` and in the dead set, a
sample of 1,000 read back dead with reason ``expired``, every live task run once.

Figures, never pass/fail. Results go to bench/results/expiry-*.json.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from importlib import resources
from pathlib import Path
from typing import Any

import redis
from taskfleet import Queue

from bench.run import machine, redis_server

QUEUE = "bench-expiry"
RESULTS = Path(__file__).resolve().parent / "results"
#: The bound reported against: no script call longer than this.
LONG_CALL_US = 5000
#: SLOWLOG keeps the calls that took at least this long (shorter ones are only counted).
SLOWLOG_FROM_US = 1000


def log(message: str) -> None:
    print(f"[bench.expiry] {message}", flush=True)


def script_names() -> dict[str, str]:
    """SHA1 -> script name, from the bundle the library in use loads."""
    bundle = resources.files("taskfleet.protocol") / "bundle" / "manifest.json"
    manifest = json.loads(bundle.read_text(encoding="utf-8"))
    return {s["sha1"]: name for name, s in manifest["scripts"].items()}


def preempted(client: redis.Redis) -> int:
    """Times the kernel took the CPU from redis-server (it never gives it up otherwise while
    it runs a script): its nonvoluntary context switches, from /proc."""
    pid = int(client.info("server")["process_id"])
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("nonvoluntary_ctxt_switches:"):
            return int(line.split()[1])
    return 0


def server_ms(client: redis.Redis) -> int:
    seconds, micros = client.time()
    return int(seconds) * 1000 + int(micros) // 1000


def redis_cpu(client: redis.Redis) -> float:
    info = client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def fill(queue: Queue, client: redis.Redis, n: int, deadline_ms: int) -> tuple[float, list[str]]:
    """``n`` pending tasks with a start deadline; returns the enqueue time (s) and their ids."""
    started = time.monotonic()
    ids: list[str] = []
    for start in range(0, n, 1000):
        size = min(1000, n - start)
        ids += queue.enqueue_many(
            [{"payload": {"i": i}, "deadline": deadline_ms / 1000} for i in range(size)]
        )
    took = time.monotonic() - started
    passed = server_ms(client) + deadline_ms + 2
    while server_ms(client) <= passed:
        time.sleep(0.01)
    return took, ids


def pin(client: redis.Redis) -> str:
    """Redis on the first CPU, this driver and the workers it starts on the others: the
    workers claim as fast as Redis answers, and on a small machine they would otherwise
    preempt Redis in the middle of a script call (SLOWLOG counts that time too)."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        return "not pinned (one CPU)"
    os.sched_setaffinity(int(client.info("server")["process_id"]), {cpus[0]})
    os.sched_setaffinity(0, set(cpus[1:]))  # the workers started from here inherit it
    return f"redis-server on CPU {cpus[0]}, the workers and the driver on {cpus[1:]}"


def start_workers(url: str, processes: int, runtime: str) -> list[subprocess.Popen[bytes]]:
    return [
        subprocess.Popen(
            [
                *(sys.executable, "-m", "taskfleet", "worker", "--queue", QUEUE),
                *("--handler", "taskfleet.samples:echo", "--concurrency", "8"),
                *("--pod", f"expiry-{i}", "--runtime-dir", os.path.join(runtime, str(i))),
                *("--log-level", "warning", "--redis-url", url),
            ]
        )
        for i in range(processes)
    ]


def stop_workers(workers: list[subprocess.Popen[bytes]]) -> None:
    for proc in workers:
        proc.send_signal(signal.SIGTERM)
    for proc in workers:
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def script_calls(client: redis.Redis) -> int:
    """Script calls the server has run (INFO commandstats)."""
    stats = client.info("commandstats")
    return int(stats.get("cmdstat_evalsha", {}).get("calls", 0))


def slowlog(client: redis.Redis, names: dict[str, str], calls: int) -> dict[str, Any]:
    """The script calls SLOWLOG kept (SLOWLOG_FROM_US and longer), by script: how many,
    the longest, how many over LONG_CALL_US; ``calls``: every script call in the window."""
    entries = client.slowlog_get(1_000_000)
    by_script: dict[str, list[int]] = {}
    for entry in entries:
        words = entry["command"].split(b" ")
        if words[0].upper() != b"EVALSHA" or len(words) < 2:
            continue
        name = names.get(words[1].decode(), words[1].decode()[:12])
        by_script.setdefault(name, []).append(int(entry["duration"]))
    every = [us for durations in by_script.values() for us in durations]
    edges = [1000, 2000, 3000, 5000, 10_000, 20_000]
    histogram = {
        f"{lo // 1000}-{hi // 1000} ms": sum(1 for us in every if lo <= us < hi)
        for lo, hi in itertools.pairwise(edges)
    }
    histogram[f"{edges[-1] // 1000}+ ms"] = sum(1 for us in every if us >= edges[-1])
    return {
        "script_calls": calls,
        f"calls_from_{SLOWLOG_FROM_US}_us": len(every),
        "max_us": max(every, default=0),
        "over_5ms": sum(1 for us in every if us > LONG_CALL_US),
        "histogram": histogram,
        "by_script": {
            name: {"calls": len(d), "max_us": max(d), "mean_us": round(sum(d) / len(d), 1)}
            for name, d in sorted(by_script.items())
        },
    }


def measure(url: str, args: argparse.Namespace) -> dict[str, Any]:
    client = redis.Redis.from_url(url)
    queue = Queue(QUEUE, redis_url=url)
    runtime = tempfile.mkdtemp(prefix="bench-expiry-")
    try:
        n = args.expired
        log(f"enqueueing {n:,} tasks with a {args.deadline_ms} ms start deadline")
        enqueue_s, ids = fill(queue, client, n, args.deadline_ms)
        assert queue.stats()["pending"] == n
        # Calls of 1 ms and more: every one of those is logged (a script's own commands
        # are logged too in Redis 7, and logging them all would slow every call down)
        client.config_set("slowlog-max-len", 1_000_000)
        client.config_set("slowlog-log-slower-than", SLOWLOG_FROM_US)
        calls0 = script_calls(client)
        client.slowlog_reset()
        pinned = pin(client) if args.pin else "not pinned"
        log(f"{n:,} expired and pending; starting {args.workers} worker processes ({pinned})")
        workers = start_workers(url, args.workers, runtime)
        try:
            while not queue.workers():
                time.sleep(0.002)
            t0 = time.monotonic()
            cpu0, preempted0 = redis_cpu(client), preempted(client)
            live: list[tuple[str, float]] = []
            next_live = None
            done_at = None
            while time.monotonic() - t0 < args.timeout:
                cleared = int(client.hget(queue.keys.stats, "expired") or 0)  # one HGET
                now = time.monotonic()
                if cleared >= n:
                    done_at = now
                    break
                if next_live is None and cleared > 0:
                    next_live = now  # the workers are at it: live tasks from now on
                if next_live is not None and now >= next_live:
                    deadline = 3600.0 if len(live) % 2 else None
                    live.append((queue.enqueue({"live": len(live)}, deadline=deadline), now - t0))
                    next_live += 0.1
                time.sleep(0.005)
            clear_s = (done_at or time.monotonic()) - t0
            cpu = redis_cpu(client) - cpu0
            redis_preempted = preempted(client) - preempted0
            expired = queue.stats()["expired"]
            finished = queue.wait([task_id for task_id, _ in live], timeout=30)
        finally:
            stop_workers(workers)
        calls = slowlog(client, script_names(), script_calls(client) - calls0)
        client.config_set("slowlog-log-slower-than", 10_000)
        client.config_set("slowlog-max-len", 128)
        client.slowlog_reset()
        latencies = []
        for task_id, at in live:
            task = finished[task_id]
            assert task.started_at is not None and task.created_at is not None
            ms = (task.started_at - task.created_at).total_seconds() * 1000
            latencies.append({"enqueued_at_s": round(at, 3), "claim_ms": ms})
        stats = queue.stats()
        sample = [queue.get(task_id) for task_id in random.sample(ids, min(len(ids), 1000))]
        checks = {
            "expired_counted": stats["expired"] == n,
            "dead_total": stats["dead_total"] == n,
            "dead_set": stats["dead"] == n,
            "pending_left": stats["pending"],
            "live_ran_once": all(t.attempts == 1 for t in finished.values()),
            "sample_of_1000_dead_expired": all(
                t is not None and t.state == "dead" and t.reason == "expired" for t in sample
            ),
        }
        claim_ms = sorted(x["claim_ms"] for x in latencies)
        return {
            "expired": n,
            "cleared": expired,
            "workers": args.workers,
            "deadline_ms": args.deadline_ms,
            "cpus": pinned,
            "enqueue_s": round(enqueue_s, 2),
            "clear_s": round(clear_s, 3),
            "clear_per_s": round(expired / clear_s) if clear_s else None,
            "redis_cpu_s": round(cpu, 3),
            "redis_preempted": redis_preempted,
            "redis_cpu_us_per_expired": round(cpu * 1e6 / expired, 2) if expired else None,
            "slowlog": calls,
            "live": latencies,
            "live_claim_ms_first": latencies[0]["claim_ms"] if latencies else None,
            "live_claim_ms_median": claim_ms[len(claim_ms) // 2] if claim_ms else None,
            "live_claim_ms_max": claim_ms[-1] if claim_ms else None,
            "checks": checks,
        }
    finally:
        queue.close()
        client.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--expired", type=int, default=200_000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--deadline-ms", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=120.0, help="give up clearing after")
    parser.add_argument(
        "--pin",
        action="store_true",
        help="redis-server on a CPU of its own, the workers on the others (a dedicated "
        "machine; on a shared one the scheduler does better)",
    )
    parser.add_argument("--no-write", action="store_true", help="print only")
    args = parser.parse_args(argv)
    info = machine()
    with redis_server() as (url, version):
        result = measure(url, args)
    result["redis"] = version
    result["machine"] = info | {"loadavg_after": [float(x) for x in os.getloadavg()]}
    print(json.dumps(result, indent=2))
    s = result["slowlog"]
    log(
        f"{result['cleared']:,} of {result['expired']:,} expired tasks cleared in "
        f"{result['clear_s']} s ({result['clear_per_s']:,}/s); longest script call "
        f"{s['max_us']:,} µs, {s['over_5ms']} over 5 ms of {s['script_calls']:,}; live task "
        f"claimed {result['live_claim_ms_first']} ms after its enqueue (of "
        f"{len(result['live'])}: median {result['live_claim_ms_median']} ms, worst "
        f"{result['live_claim_ms_max']} ms)"
    )
    if not args.no_write:
        RESULTS.mkdir(exist_ok=True)
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
        out = RESULTS / f"expiry-{stamp}.json"
        out.write_text(json.dumps(result, indent=2) + "\n")
        log(f"wrote {out}")


if __name__ == "__main__":
    main()
