"""`make bench-scale`: how a queue's costs grow with its backlog, against the small size.

    make bench-scale                 # 10^3, 10^5 and 10^6 (several minutes)
    SCALE_QUICK=1 make bench-scale   # 10^3, 10^4 and 10^5 (about a minute)
    .venv/bin/python -m bench.scale --sizes 1000,100000 --sample 5000

A throwaway redis-server (``bench.run.redis_server``). Fills go through the queue's own
enqueue script, batches of ``FILL_BATCH`` several to a pipeline. For each backlog size N:

- **pending**: N + ``--sample`` tasks wait; 2 real ``taskfleet worker`` processes
  (32 slots, the ``echo`` handler) drain the sample: the rate from 10 % of it to the
  last, and Redis CPU per task (``INFO cpu``). Then one client claims as a worker does
  (complete + claim of 8 in one call), enqueueing a task for each one it takes, so the
  backlog stays at N: every script call's server time (SLOWLOG) gives Redis µs per task
  and the p99 of a call; the client's time per call gives the p99 round trip. Redis bytes
  per pending task: ``used_memory`` grown by a fill over the tasks it added.
- **delayed**: the same with N delayed tasks (due in a day) and ``SMALL`` pending.
- **groups**: the claim loop over tasks spread evenly over G groups (each kept at its size).
- **sweep**: the operator's sweep with D delayed tasks not due (one call's time), D due
  (promotion: µs per task, the longest call) and D whose start deadline passed (expiry).

Each figure is compared with its smallest size's (ratio); beyond 20 % it is flagged.
Writes ``bench/results/scale-<stamp>.json`` and the charts (``bench/charts.py``).
Figures, never pass/fail.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import redis
import redis.asyncio
from taskfleet import Queue
from taskfleet.producer.encoding import batch_args, token_base
from taskfleet.protocol.calls import run_all
from taskfleet.protocol.scripts import source
from taskfleet.worker.broker import Broker
from taskfleet.worker.claimed import ClaimedTask

from bench.run import RESULTS_DIR, machine, redis_server

REPO = Path(__file__).resolve().parents[1]
FULL_SIZES = (1_000, 100_000, 1_000_000)
QUICK_SIZES = (1_000, 10_000, 100_000)
GROUPS = (10, 1_000, 10_000)
SWEEP_SIZES = (1_000, 100_000)
FILL_BATCH = 5_000
FILL_PIPELINE = 4
SLOTS = 8  # tasks per claim call, as bench.claim_time_ab and bench.fairness
SMALL = 1_000  # pending tasks beside the delayed ones
FLAG = 0.20  # a figure further than this from its small size's is flagged
WORKERS, CONCURRENCY = 2, 32
PARTS = ("pending", "delayed", "groups", "sweep")
TURNS = 6  # turns of the smallest and the largest backlog, side by side
DAY_S = 86_400


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def sha(name: str) -> bytes:
    return hashlib.sha1(source(name).encode()).hexdigest().encode()


CLAIM_SHAS = {sha("claim"), sha("complete")}
SWEEP_SHAS = {sha("sweep")}


def used_memory(client: redis.Redis) -> int:
    return int(client.info("memory")["used_memory"])


def flush(client: redis.Redis) -> None:
    """FLUSHALL ASYNC (a synchronous one of a million keys outlasts a client's timeout),
    then wait for the memory to be freed: the next fill's used_memory baseline holds."""
    client.flushall(asynchronous=True)
    while int(client.info("memory")["lazyfree_pending_objects"]) > 0:
        time.sleep(0.05)


def redis_cpu_s(client: redis.Redis) -> float:
    cpu = client.info("cpu")
    return float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"])


def fill(queue: Queue, n: int, make: Callable[[int], dict[str, Any]]) -> None:
    """Enqueue n tasks (``make(i)`` each), FILL_PIPELINE batches to a round trip."""
    done = 0
    while done < n:
        ops = []
        for _ in range(FILL_PIPELINE):
            size = min(FILL_BATCH, n - done)
            if size <= 0:
                break
            items = batch_args(make(done + i) for i in range(size))
            ops.append(queue.ops.enqueue(items, token_base()))
            done += size
        run_all(queue.client, ops)


def plain(_: int) -> dict[str, Any]:
    return {"payload": {}}


def delayed(_: int) -> dict[str, Any]:
    return {"payload": {}, "delay": DAY_S}


def filled(
    client: redis.Redis, queue: Queue, n: int, make: Callable[[int], dict[str, Any]]
) -> float:
    """Fill; returns Redis bytes per task the fill added."""
    before = used_memory(client)
    fill(queue, n, make)
    return (used_memory(client) - before) / n if n else 0.0


def start_workers(url: str, name: str) -> list[subprocess.Popen[bytes]]:
    env = dict(os.environ, TASKFLEET_REDIS_URL=url, PYTHONPATH=str(REPO))
    argv = [sys.executable, "-m", "taskfleet", "worker", "--queue", name,
            "--handler", "taskfleet.samples:echo", "--concurrency", str(CONCURRENCY)]  # fmt: skip
    return [
        subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(WORKERS)
    ]


def stop_workers(workers: Sequence[subprocess.Popen[bytes]]) -> None:
    for w in workers:
        w.send_signal(signal.SIGTERM)
    for w in workers:
        try:
            w.wait(timeout=60)
        except subprocess.TimeoutExpired:
            w.kill()
            w.wait()


def drain(url: str, client: redis.Redis, queue: Queue, sample: int) -> dict[str, float]:
    """Real workers drain `sample` tasks: rate and Redis CPU per task from 10 % done."""
    base = queue.stats()["done"]
    # a drain too short to see 10 % done before the end is counted from the exec
    first = (time.perf_counter(), 0, redis_cpu_s(client))
    workers = start_workers(url, queue.name)
    try:
        deadline = time.monotonic() + 600
        mark: tuple[float, int, float] | None = None
        while True:
            done = queue.stats()["done"] - base
            now = time.perf_counter()
            if mark is None and done >= sample // 10:
                mark = (now, done, redis_cpu_s(client))
            if done >= sample and mark is not None:
                m = mark if mark[1] < done else first
                cpu, tasks = redis_cpu_s(client) - m[2], done - m[1]
                return {"drain_per_s": tasks / (now - m[0]), "drain_redis_us": cpu / tasks * 1e6}
            if any(w.poll() is not None for w in workers) or time.monotonic() > deadline:
                raise SystemExit(f"a worker ended or the drain took too long: {queue.stats()}")
            time.sleep(0.01)
    finally:
        stop_workers(workers)


async def claim_loop(
    url: str, name: str, tasks: int, refill: Callable[[Sequence[ClaimedTask]], None]
) -> list[float]:
    """Claim `tasks` as a worker does (complete + claim of SLOTS); each call's client ms."""
    client = redis.asyncio.Redis.from_url(url)
    broker = Broker(name, client, "bench-scale", "1")
    walls: list[float] = []
    running: list[tuple[str, str, str | None]] = []
    taken = 0
    try:
        while taken < tasks:
            start = time.perf_counter()
            if running:
                _, claimed = await broker.complete_and_claim(running, SLOTS)
            else:
                claimed = await broker.claim(SLOTS)
            walls.append((time.perf_counter() - start) * 1000)
            if not claimed.tasks:
                raise SystemExit(f"{name}: the queue ran dry after {taken} tasks")
            taken += len(claimed.tasks)
            running = [(t.id, t.token, None) for t in claimed.tasks]
            refill(claimed.tasks)
        if running:
            await broker.complete_many(running)
    finally:
        await broker.close()
        await client.aclose()
    return walls


def slowlog_on(client: redis.Redis) -> None:
    client.config_set("slowlog-log-slower-than", 0)
    client.config_set("slowlog-max-len", 1_000_000)
    client.slowlog_reset()


def slowlog_off(client: redis.Redis, shas: set[bytes]) -> list[int]:
    """Server µs of each call of the scripts `shas` since slowlog_on."""
    entries = client.slowlog_get(1_000_000)
    client.config_set("slowlog-log-slower-than", 10_000)
    client.config_set("slowlog-max-len", 128)
    client.slowlog_reset()
    out = []
    for e in entries:
        words = e["command"].split()
        if len(words) > 1 and words[0].upper() == b"EVALSHA" and words[1] in shas:
            out.append(int(e["duration"]))
    return out


def p99(values: Sequence[float]) -> float:
    ordered = sorted(values)
    return ordered[max(0, -(-len(ordered) * 99 // 100) - 1)]


def claim_cost(
    url: str,
    client: redis.Redis,
    name: str,
    tasks: int,
    refill: Callable[[Sequence[ClaimedTask]], None],
) -> dict[str, float]:
    slowlog_on(client)
    walls = asyncio.run(claim_loop(url, name, tasks, refill))
    server = slowlog_off(client, CLAIM_SHAS)
    return {
        "claim_redis_us_per_task": sum(server) / tasks,
        # a call completes SLOTS and claims SLOTS: the median call over SLOTS is the cost
        # per task that a preempted redis-server (a loaded machine) hardly moves
        "claim_redis_us_per_task_p50": statistics.median(server) / SLOTS,
        "claim_call_p99_us": p99(server),
        "claim_call_p99_ms": p99(walls),
        "claim_call_p50_ms": statistics.median(walls),
    }


def top_up(queue: Queue, pending: int) -> None:
    missing = pending - queue.stats()["pending"]
    if missing > 0:
        fill(queue, missing, plain)


def refill_plain(queue: Queue) -> Callable[[Sequence[ClaimedTask]], None]:
    return lambda tasks: fill(queue, len(tasks), plain)


def backlog_series(
    url: str, client: redis.Redis, sizes: Sequence[int], *, sample: int, kind: str, turns: int
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """kind 'pending': N pending; 'delayed': N delayed beside SMALL pending."""
    flush(client)
    rows = []
    have = 0
    with Queue(f"scale-{kind}", redis_url=url) as queue:
        queue.stats()  # the queue's own keys exist before any baseline
        for n in sizes:
            log(f"{kind}: filling to {n:,}")
            row: dict[str, Any] = {"size": n}
            start = time.monotonic()
            if kind == "pending":
                row["bytes_per_task"] = filled(client, queue, n + sample - have, plain)
            else:
                row["bytes_per_task"] = (
                    filled(client, queue, n - have, delayed) if n > have else 0.0
                )
                fill(queue, sample + (SMALL if have == 0 else 0), plain)
            have = n
            row["fill_s"] = time.monotonic() - start
            log(f"{kind} {n:,}: draining {sample:,} with {WORKERS} workers")
            row.update(drain(url, client, queue, sample))
            # the workers took a few more than the sample: back to the backlog's size
            top_up(queue, n if kind == "pending" else SMALL)
            log(f"{kind} {n:,}: claim loop, {sample:,} tasks")
            stats = queue.stats()
            row["pending"], row["delayed"] = stats["pending"], stats["delayed"]
            row.update(claim_cost(url, client, queue.name, sample, refill_plain(queue)))
            rows.append(row)
            log(f"{kind} {n:,}: {row}")
        side = (
            side_by_side(url, client, queue, kind, sizes=sizes, sample=sample, turns=turns)
            if len(sizes) > 1
            else {}
        )
    return rows, side


def side_by_side(
    url: str,
    client: redis.Redis,
    big: Queue,
    kind: str,
    *,
    sizes: Sequence[int],
    sample: int,
    turns: int,
) -> dict[str, Any]:
    """The largest backlog (`big`, left as the series ends) and the smallest, filled the
    same way in database 1 of the same server, claimed in turns: their ratio does not
    move with the machine's load the way figures taken minutes apart do."""
    small_url = url.rsplit("/", 1)[0] + "/1"
    chunk = max(SLOTS, sample // 4)
    kept = sizes[0] if kind == "pending" else SMALL
    with Queue(big.name, redis_url=small_url) as small:
        if kind == "pending":
            fill(small, sizes[0], plain)
        else:
            fill(small, sizes[0], delayed)
            fill(small, SMALL, plain)
        sides = {
            "small": (small_url, small, kept),
            "large": (url, big, sizes[-1] if kind == "pending" else SMALL),
        }
        got: dict[str, list[dict[str, float]]] = {"small": [], "large": []}
        for turn in range(turns):
            order = ["small", "large"] if turn % 2 == 0 else ["large", "small"]
            for name in order:
                side_url, queue, backlog = sides[name]
                fill(queue, 2 * chunk, plain)
                row = drain(side_url, client, queue, 2 * chunk)
                top_up(queue, backlog)
                row.update(claim_cost(side_url, client, queue.name, chunk, refill_plain(queue)))
                got[name].append(row)
    out: dict[str, Any] = {"small": sizes[0], "large": sizes[-1], "turns": turns, "tasks": chunk}
    for field, _ in SIDE_FIGURES:
        small_v = statistics.median(r[field] for r in got["small"])
        large_v = statistics.median(r[field] for r in got["large"])
        out[field] = {"small": small_v, "large": large_v, "ratio": large_v / small_v}
    log(f"{kind}, side by side: {out}")
    return out


def groups_series(
    url: str, client: redis.Redis, groups: Sequence[int], tasks: int, turns: int
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Claims over G groups (one queue each, side by side in one database), then the
    fewest and the most groups in turns."""
    flush(client)
    rows, queues, refills = [], [], []
    for g in groups:
        per = max(2, -(-tasks // g))
        queue = Queue(f"scale-groups-{g}", redis_url=url)
        log(f"groups: {g:,} groups of {per:,}")
        fill(queue, g * per, lambda i, g=g: {"payload": {}, "group": f"g{i % g}"})

        def refill(claimed: Sequence[ClaimedTask], queue: Queue = queue) -> None:
            # each task taken is replaced in its own group: every group keeps its size
            fill(queue, len(claimed), lambda i: {"payload": {}, "group": claimed[i].group})

        row: dict[str, Any] = {"groups": g, "tasks_per_group": per}
        row.update(claim_cost(url, client, queue.name, min(tasks, g * per), refill))
        rows.append(row)
        queues.append(queue)
        refills.append(refill)
        log(f"groups {g:,}: {row}")
    side: dict[str, Any] = {}
    if len(groups) > 1:
        chunk = max(SLOTS, tasks // 4)
        got: dict[int, list[dict[str, float]]] = {0: [], -1: []}
        for turn in range(turns):
            for at in (0, -1) if turn % 2 == 0 else (-1, 0):
                name = queues[at].name
                got[at].append(claim_cost(url, client, name, chunk, refills[at]))
        side = {"small": groups[0], "large": groups[-1], "turns": turns, "tasks": chunk}
        for field, _ in COMPARED["groups"]:
            small_v = statistics.median(r[field] for r in got[0])
            large_v = statistics.median(r[field] for r in got[-1])
            side[field] = {"small": small_v, "large": large_v, "ratio": large_v / small_v}
        log(f"groups, side by side: {side}")
    for queue in queues:
        queue.close()
    return rows, side


def sweeps(url: str, name: str) -> Iterator[Any]:
    """Sweep calls until one has nothing to do; yields each call's result."""

    async def run() -> list[Any]:
        client = redis.asyncio.Redis.from_url(url)
        broker = Broker(name, client, "bench-scale", "1")
        out = []
        try:
            while True:
                result = await broker.sweep(max_calls=1)
                out.append(result)
                if not result.promoted and not result.expired:
                    return out
        finally:
            await broker.close()
            await client.aclose()

    yield from asyncio.run(run())


def sweep_series(
    url: str, client: redis.Redis, sizes: Sequence[int], turns: int
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The sweep with D delayed tasks not due (the sizes in turns), then D due, then D
    whose start deadline passed: µs per task of the median call, and the longest call."""
    flush(client)
    rows: list[dict[str, Any]] = [{"size": d} for d in sizes]
    for d in sizes:
        with Queue(f"scale-sweep-{d}", redis_url=url) as queue:
            fill(queue, d, delayed)
    # not due: what every sweep pays while a large delayed set waits, sizes in turns
    idle: dict[int, list[int]] = {d: [] for d in sizes}
    for turn in range(turns):
        for d in sizes if turn % 2 == 0 else sizes[::-1]:
            slowlog_on(client)
            for _ in range(10):
                list(sweeps(url, f"scale-sweep-{d}"))
            idle[d] += slowlog_off(client, SWEEP_SHAS)
    for row in rows:
        row["idle_sweep_us"] = statistics.median(idle[row["size"]])
    # due: every one promoted (or expired), a bounded batch per call
    for row in rows:
        d = row["size"]
        for label, make, field in (
            ("promote", lambda i: {"payload": {}, "delay": 1}, "promoted"),
            ("expire", lambda i: {"payload": {}, "deadline": 1}, "expired"),
        ):
            name = f"scale-{label}-{d}"
            with Queue(name, redis_url=url) as queue:
                fill(queue, d, make)
            time.sleep(1.2)  # every task's run_at / deadline now passed
            slowlog_on(client)
            cpu = redis_cpu_s(client)
            results = list(sweeps(url, name))
            # CPU, not SLOWLOG's wall time: a call of several ms on a loaded machine is
            # preempted, and its wall time is many times its work
            row[f"{label}_cpu_us_per_task"] = (redis_cpu_s(client) - cpu) / d * 1e6
            calls = slowlog_off(client, SWEEP_SHAS)[::-1]  # SLOWLOG lists the newest first
            counts = [getattr(r, field) for r in results]
            if sum(counts) != d or len(calls) != len(results):
                raise SystemExit(f"sweep {label}: {sum(counts)} of {d} in {len(calls)} calls")
            per_task = [us / n for us, n in zip(calls, counts, strict=True) if n]
            # the median call: a preempted redis-server (a loaded machine) stretches a few
            row[f"{label}_us_per_task"] = statistics.median(per_task)
            row[f"{label}_us_per_task_mean"] = sum(calls) / d
            row[f"{label}_longest_call_us"] = max(calls)
            row[f"{label}_median_call_us"] = statistics.median(calls[: len(per_task)])
            row[f"{label}_calls"] = len(calls)
        log(f"sweep {d:,}: {row}")
    side: dict[str, Any] = {}
    if len(sizes) > 1:
        small_v, large_v = rows[0]["idle_sweep_us"], rows[-1]["idle_sweep_us"]
        ratio = {"small": small_v, "large": large_v, "ratio": large_v / small_v}
        side = {"small": sizes[0], "large": sizes[-1], "turns": turns, "idle_sweep_us": ratio}
    return rows, side


# (figure, higher is better) of each series compared with its first row
BACKLOG_FIGURES = [
    ("drain_per_s", True),
    ("drain_redis_us", False),
    ("claim_redis_us_per_task_p50", False),
    ("claim_redis_us_per_task", False),
    ("claim_call_p99_us", False),
    ("claim_call_p99_ms", False),
    ("bytes_per_task", False),
]
SIDE_FIGURES = [
    ("drain_per_s", True),
    ("drain_redis_us", False),
    ("claim_redis_us_per_task_p50", False),
    ("claim_redis_us_per_task", False),
    ("claim_call_p99_us", False),
]
COMPARED = {
    "pending": BACKLOG_FIGURES,
    "delayed": BACKLOG_FIGURES,
    "groups": [
        ("claim_redis_us_per_task_p50", False),
        ("claim_redis_us_per_task", False),
        ("claim_call_p99_us", False),
        ("claim_call_p99_ms", False),
    ],
    "sweep": [
        ("idle_sweep_us", False),
        ("promote_cpu_us_per_task", False),
        ("promote_us_per_task", False),
        ("promote_median_call_us", False),
        ("promote_longest_call_us", False),
        ("expire_cpu_us_per_task", False),
        ("expire_us_per_task", False),
        ("expire_median_call_us", False),
        ("expire_longest_call_us", False),
    ],
}


def compare(report: dict[str, Any]) -> list[str]:
    """One line per figure: each size's value and its ratio to the smallest size's."""
    lines = []
    for series, figures in COMPARED.items():
        rows = report.get(series, [])
        if len(rows) < 2:
            continue
        by = "groups" if series == "groups" else "size"
        for field, higher_better in figures:
            first = rows[0][field]
            cells, flagged = [], False
            for row in rows:
                ratio = row[field] / first if first else float("nan")
                worse = ratio < 1 - FLAG if higher_better else ratio > 1 + FLAG
                flagged |= worse
                mark = "!" if worse else ""
                cells.append(f"{row[by]:,}: {row[field]:,.1f} ({ratio:.2f}x{mark})")
            lines.append(
                f"  {series:<8} {field:<26} "
                + "; ".join(cells)
                + ("  <- beyond 20 %" if flagged else "")
            )
    for kind in ("pending", "delayed", "groups", "sweep"):
        side = report.get(f"{kind}_side_by_side")
        if not side:
            continue
        figures = {"groups": COMPARED["groups"], "sweep": [("idle_sweep_us", False)]}.get(
            kind, SIDE_FIGURES
        )
        for field, higher_better in figures:
            v = side[field]
            worse = v["ratio"] < 1 - FLAG if higher_better else v["ratio"] > 1 + FLAG
            mark = "  <- beyond 20 %" if worse else ""
            lines.append(
                f"  {kind:<8} {field:<26} side by side, {side['turns']} turns each: "
                f"{side['small']:,}: {v['small']:,.1f}; {side['large']:,}: {v['large']:,.1f} "
                f"({v['ratio']:.2f}x){mark}"
            )
    return lines


def ints(text: str) -> list[int]:
    return [int(float(x)) for x in text.split(",") if x]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    quick = bool(os.environ.get("SCALE_QUICK"))
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    default_sizes = ",".join(map(str, QUICK_SIZES if quick else FULL_SIZES))
    p.add_argument("--sizes", type=ints, default=ints(default_sizes), help="backlog sizes")
    p.add_argument("--sample", type=int, default=5_000 if quick else 20_000,
                   help="tasks drained and claimed at each size")  # fmt: skip
    p.add_argument(
        "--turns", type=int, default=TURNS, help="turns of the smallest and largest, side by side"
    )
    p.add_argument("--groups", type=ints, default=list(GROUPS), help="group counts")
    p.add_argument("--group-tasks", type=int, default=20_000, help="tasks over the groups")
    p.add_argument("--sweep", type=ints, default=list(SWEEP_SIZES), help="delayed set sizes")
    p.add_argument("--parts", type=lambda t: t.split(","), default=list(PARTS),
                   help="which of pending,delayed,groups,sweep to run")  # fmt: skip
    p.add_argument("--out", type=Path, default=RESULTS_DIR, help="results and charts folder")
    p.add_argument("--no-charts", action="store_true", help="no PNG/SVG charts")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = datetime.now(UTC)
    report: dict[str, Any] = {
        "started": started.strftime("%Y-%m-%d %H:%M UTC"),
        "machine": machine(),
        "sample": args.sample,
        "slots": SLOTS,
        "workers": f"{WORKERS} x {CONCURRENCY} slots",
    }
    with redis_server() as (url, version):
        report["redis_version"] = version
        client = redis.Redis.from_url(url, socket_timeout=600)
        try:
            for kind in [k for k in ("pending", "delayed") if k in args.parts]:
                rows, side = backlog_series(
                    url, client, args.sizes, sample=args.sample, kind=kind, turns=args.turns
                )
                report[kind], report[f"{kind}_side_by_side"] = rows, side
            if "groups" in args.parts:
                rows, side = groups_series(url, client, args.groups, args.group_tasks, args.turns)
                report["groups"], report["groups_side_by_side"] = rows, side
            if "sweep" in args.parts:
                rows, side = sweep_series(url, client, args.sweep, args.turns)
                report["sweep"], report["sweep_side_by_side"] = rows, side
        finally:
            client.close()
    report["machine"]["loadavg_after"] = [
        float(x) for x in Path("/proc/loadavg").read_text().split()[:3]
    ]
    load = report["machine"]
    print(f"\n{report['started']}, redis {report['redis_version']}, {load['nproc']} cores, "
          f"load {load['loadavg_before'][0]:.1f} before, {load['loadavg_after'][0]:.1f} after; "
          f"each figure against its smallest size's")  # fmt: skip
    print("\n".join(compare(report)))
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"scale-{started.strftime('%Y-%m-%dT%H%MZ')}.json"
    path.write_text(json.dumps(report, indent=2) + "\n")
    log(f"wrote {path}")
    if not args.no_charts:
        from bench import charts

        for written in charts.scale(report, args.out):
            log(f"wrote {written}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
