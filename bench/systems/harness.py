"""The measurement driver every system's bench runs through, inside that system's venv.

It needs only the standard library and redis-py (every peer depends on it), so the same
file runs in the project venv and in each peer venv under bench/.peers/. A system module
(``<name>_bench.py`` beside this file) supplies an ``Adapter`` and its no-op task; the
driver does the timing, so every system is measured by the same code:

1. enqueue rate, one task per call (warm-up calls first, not timed);
2. enqueue rate in batches, with the system's own batch API where it has one;
3. drain rate: the batched tasks are left queued, the worker processes start, and the
   rate is taken between the first 10 % and the last task done (startup is excluded),
   and again from the workers' exec to the last task done (startup and ramp-up included);
4. end-to-end latency on the idle fleet: one task at a time, from just before the enqueue
   call to the moment the producer sees the task's Redis write (BLPOP wakes);
5. cold start: one worker process started on a queue holding one task, exec -> that task
   done, the median of several starts.

The reference task does exactly one Redis write: ``RPUSH bench:done <pid>``. The pids let
the driver report how the work was shared between the worker processes.

Usage: ``python harness.py --system NAME [--variant V] --redis-url URL --out FILE``; the
result is one JSON object (see ``Result``), progress goes to stderr.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import math
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

import redis

DONE_KEY = "bench:done"
SYSTEMS_DIR = Path(__file__).resolve().parent
DRAIN_WARMUP_FRACTION = 0.10
CLK_TCK = os.sysconf("SC_CLK_TCK")
POLL_S = 0.002
STOP_GRACE_S = 15.0

_done_clients: dict[int, redis.Redis] = {}


def record_done() -> None:
    """The reference no-op task's single Redis write (one client per worker process)."""
    pid = os.getpid()
    client = _done_clients.get(pid)  # keyed by pid: a forked child must not share a socket
    if client is None:
        client = _done_clients[pid] = redis.Redis.from_url(os.environ["BENCH_REDIS_URL"])
    client.rpush(DONE_KEY, pid)


class Adapter(Protocol):
    """What a system module provides; the driver never touches the system otherwise."""

    name: str
    version: str
    # How tasks are enqueued in batches, or None when the system has no batch API.
    batch_method: str | None
    # The worker set-up in words (processes, in-process concurrency, notable settings).
    worker_config: str

    def enqueue_single(self, n: int) -> None: ...
    def enqueue_batches(self, n: int, batch: int) -> None: ...
    def enqueue_one(self) -> None: ...
    def purge(self) -> None: ...
    def worker_argvs(self, processes: int) -> list[list[str]]: ...
    def close(self) -> None: ...


@dataclass
class Result:
    system: str
    version: str
    python: str
    n: int
    batch: int
    worker_processes: int
    worker_config: str
    batch_method: str | None
    # Slots per worker process, where the system has them: rows of two systems with the
    # same figure are set side by side (run.py's same-concurrency ratios).
    concurrency: int | None = None
    enqueue_single_per_s: float | None = None
    enqueue_batch_per_s: float | None = None
    drain_per_s: float | None = None
    # The same drain counted from the workers' start (exec) to the last task done: what a
    # user sees of a burst, start-up and ramp-up included.
    drain_from_start_per_s: float | None = None
    # Workers' exec -> first task done, within that drain (one sample).
    drain_first_done_ms: float | None = None
    # One worker process started on a queue holding one task: exec -> that task done,
    # the median of cold_start_runs starts (each a fresh interpreter).
    cold_start_ms: float | None = None
    cold_start_runs: int = 0
    drain_done: int | None = None
    drain_share: list[int] = field(default_factory=list)
    # CPU spent per task over the same window as drain_per_s: all worker processes
    # (children included) and the Redis server. Less sensitive to a busy machine than rates.
    drain_worker_cpu_us: float | None = None
    drain_redis_cpu_us: float | None = None
    # The machine's cores left idle over that window, whoever else ran (/proc/stat; None
    # elsewhere): near 0, the cores were busy, with this drain or with other work.
    drain_idle_cores: float | None = None
    latency_samples: int = 0
    latency_warmup: int = 0
    latency_p50_ms: float | None = None
    latency_p99_ms: float | None = None
    latency_mean_ms: float | None = None
    latency_max_ms: float | None = None
    notes: list[str] = field(default_factory=list)


def log(message: str) -> None:
    print(f"  [{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def percentile(sorted_values: list[float], p: float) -> float:
    """Nearest-rank percentile: a value that was actually observed."""
    rank = max(1, math.ceil(p / 100 * len(sorted_values)))
    return sorted_values[rank - 1]


class WorkerFleet:
    """The system's worker processes, each in its own session so a stop reaches its children."""

    def __init__(self, argvs: list[list[str]], redis_url: str, log_dir: Path):
        self.argvs = argvs
        self.redis_url = redis_url
        self.log_dir = log_dir
        self.processes: list[subprocess.Popen[bytes]] = []

    def start(self) -> None:
        env = dict(os.environ)
        env["BENCH_REDIS_URL"] = self.redis_url
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(SYSTEMS_DIR), env.get("PYTHONPATH", "")) if p
        )
        env["PYTHONUNBUFFERED"] = "1"
        for i, argv in enumerate(self.argvs):
            out = (self.log_dir / f"worker-{i}.log").open("wb")
            self.processes.append(
                subprocess.Popen(
                    argv,
                    cwd=SYSTEMS_DIR,
                    env=env,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            )
            out.close()

    def check_alive(self) -> None:
        for i, proc in enumerate(self.processes):
            if proc.poll() is not None:
                raise RuntimeError(f"worker {i} exited with {proc.returncode}: {self.log_tail(i)}")

    def log_tail(self, i: int) -> str:
        path = self.log_dir / f"worker-{i}.log"
        return path.read_text(errors="replace")[-1500:] if path.exists() else ""

    def stop(self) -> None:
        """SIGTERM (each system's graceful stop), then SIGKILL the group after a bound."""
        for proc in self.processes:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE_S
        for proc in self.processes:
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            # Children that outlived a graceful parent would skew the next system's run.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)


def sessions_cpu_s(sessions: set[int]) -> float:
    """User + system CPU seconds of every live process in these sessions (from /proc)."""
    ticks = 0
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(entry.path, "stat").read_text()
        except OSError:
            continue  # exited meanwhile
        fields = stat.rsplit(")", 1)[1].split()  # after the command name, which may hold spaces
        if int(fields[3]) in sessions:  # field 6: session id
            ticks += int(fields[11]) + int(fields[12])  # fields 14, 15: utime, stime
    return ticks / CLK_TCK


def idle_cores_s() -> float | None:
    """Seconds the machine's cores have spent idle (idle + iowait, all cores; Linux)."""
    try:
        fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()
    except OSError:
        return None
    if not fields or fields[0] != "cpu" or len(fields) < 6:
        return None
    return (int(fields[4]) + int(fields[5])) / CLK_TCK  # the aggregate line: idle, iowait


def redis_cpu_s(client: redis.Redis) -> float:
    info = client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def wait_done(client: redis.Redis, target: int, deadline: float) -> Iterator[tuple[int, float]]:
    """Yield (done count, monotonic time) every poll until target is reached or deadline."""
    while True:
        done = int(client.llen(DONE_KEY))
        now = time.perf_counter()
        yield done, now
        if done >= target or time.monotonic() > deadline:
            return
        time.sleep(POLL_S)


def measure(adapter: Adapter, args: argparse.Namespace, result: Result) -> None:
    # redis-py 8 reads with a 5 s timeout by default: a BLPOP may wait longer than that
    client = redis.Redis.from_url(args.redis_url, socket_timeout=args.latency_timeout + 5)
    n, batch = args.n, args.batch

    log(f"{adapter.name}: enqueue warm-up ({args.enqueue_warmup} single, 1 batch; not timed)")
    adapter.enqueue_single(args.enqueue_warmup)
    adapter.enqueue_batches(batch, batch)
    adapter.purge()

    log(f"{adapter.name}: enqueue {n} one by one")
    t0 = time.perf_counter()
    adapter.enqueue_single(n)
    result.enqueue_single_per_s = n / (time.perf_counter() - t0)
    adapter.purge()

    log(f"{adapter.name}: enqueue {n} in batches of {batch} ({adapter.batch_method})")
    t0 = time.perf_counter()
    adapter.enqueue_batches(n, batch)
    elapsed = time.perf_counter() - t0
    if adapter.batch_method is not None:
        result.enqueue_batch_per_s = n / elapsed
    client.delete(DONE_KEY)

    with tempfile.TemporaryDirectory(prefix=f"bench-{adapter.name}-") as tmp:
        fleet = WorkerFleet(adapter.worker_argvs(args.workers), args.redis_url, Path(tmp))
        try:
            log(f"{adapter.name}: drain {n} queued no-op tasks with {adapter.worker_config}")
            started = time.perf_counter()
            fleet.start()
            measure_drain(client, fleet, args, result, started)
            client.delete(DONE_KEY)
            measure_latency(adapter, client, fleet, args, result)
        except Exception:
            for i in range(len(fleet.processes)):
                log(f"worker {i} log tail:\n{fleet.log_tail(i)}")
            raise
        finally:
            fleet.stop()
    if args.cold_starts:
        measure_cold_start(adapter, client, args, result)
    client.close()


def measure_cold_start(
    adapter: Adapter, client: redis.Redis, args: argparse.Namespace, result: Result
) -> None:
    """Exec of one worker process -> its first task done, on a queue holding one task."""
    log(f"{adapter.name}: cold start, {args.cold_starts} starts of one worker process")
    samples = []
    for _ in range(args.cold_starts):
        adapter.purge()
        client.delete(DONE_KEY)
        adapter.enqueue_one()
        with tempfile.TemporaryDirectory(prefix=f"bench-{adapter.name}-cold-") as tmp:
            fleet = WorkerFleet(adapter.worker_argvs(1), args.redis_url, Path(tmp))
            t0 = time.perf_counter()
            fleet.start()
            try:
                got = client.blpop([DONE_KEY], timeout=args.latency_timeout)
                if got is None:
                    raise RuntimeError(f"no task done within {args.latency_timeout} s of a start")
                samples.append((time.perf_counter() - t0) * 1000)
            finally:
                fleet.stop()
    samples.sort()
    result.cold_start_ms = samples[len(samples) // 2]
    result.cold_start_runs = len(samples)


def measure_drain(
    client: redis.Redis,
    fleet: WorkerFleet,
    args: argparse.Namespace,
    result: Result,
    started: float,
) -> None:
    n = args.n
    warm = math.ceil(n * DRAIN_WARMUP_FRACTION)
    deadline = time.monotonic() + args.drain_timeout
    sessions = {proc.pid for proc in fleet.processes}  # each started a session of its own
    t_warm: float | None = None
    done_warm = 0
    cpu_warm = redis_warm = 0.0
    idle_warm: float | None = None
    done, now = 0, time.perf_counter()
    for polls, (done, now) in enumerate(wait_done(client, n, deadline), 1):
        if result.drain_first_done_ms is None and done >= 1:
            result.drain_first_done_ms = (now - started) * 1000
        if t_warm is None and done >= warm:
            t_warm, done_warm = now, done
            cpu_warm, redis_warm = sessions_cpu_s(sessions), redis_cpu_s(client)
            idle_warm = idle_cores_s()
        if polls % 250 == 0:
            fleet.check_alive()
    if t_warm is not None and done > done_warm and now > t_warm:
        result.drain_per_s = (done - done_warm) / (now - t_warm)
        tasks = done - done_warm
        result.drain_worker_cpu_us = (sessions_cpu_s(sessions) - cpu_warm) / tasks * 1e6
        result.drain_redis_cpu_us = (redis_cpu_s(client) - redis_warm) / tasks * 1e6
        idle_now = idle_cores_s()
        if idle_warm is not None and idle_now is not None:
            result.drain_idle_cores = max(0.0, idle_now - idle_warm) / (now - t_warm)
    if done >= n:
        result.drain_from_start_per_s = n / (now - started)
    if done < n:
        result.notes.append(f"drain stopped at the {args.drain_timeout:.0f} s bound: {done}/{n}")
    # Give duplicates (at-least-once redelivery) a moment to show up before counting.
    time.sleep(0.2)
    pids = [int(p) for p in client.lrange(DONE_KEY, 0, -1)]
    result.drain_done = len(pids)
    result.drain_share = sorted(Counter(pids).values(), reverse=True)
    if len(pids) > n:
        result.notes.append(f"drain: {len(pids) - n} tasks ran more than once")


def measure_latency(
    adapter: Adapter,
    client: redis.Redis,
    fleet: WorkerFleet,
    args: argparse.Namespace,
    result: Result,
) -> None:
    total = args.latency_warmup + args.latency_samples
    log(f"{adapter.name}: latency, {total} tasks one at a time ({args.latency_warmup} warm-up)")
    samples: list[float] = []
    for i in range(total):
        # Idle fleet: let the workers finish acknowledging and go back to waiting.
        time.sleep(args.latency_gap_ms / 1000)
        t0 = time.perf_counter()
        adapter.enqueue_one()
        got = client.blpop([DONE_KEY], timeout=args.latency_timeout)
        t1 = time.perf_counter()
        if got is None:
            fleet.check_alive()
            raise RuntimeError(f"task {i} not done within {args.latency_timeout} s")
        if i >= args.latency_warmup:
            samples.append((t1 - t0) * 1000)
    samples.sort()
    result.latency_samples = len(samples)
    result.latency_warmup = args.latency_warmup
    result.latency_p50_ms = percentile(samples, 50)
    result.latency_p99_ms = percentile(samples, 99)
    result.latency_mean_ms = sum(samples) / len(samples)
    result.latency_max_ms = samples[-1]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--system", required=True)
    parser.add_argument(
        "--variant", default=None, help="a system's variant (taskfleet: async, metrics)"
    )
    parser.add_argument("--redis-url", required=True)
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--n", type=int, default=20_000)
    parser.add_argument("--batch", type=int, default=1_000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--enqueue-warmup", type=int, default=500)
    parser.add_argument("--latency-samples", type=int, default=300)
    parser.add_argument("--latency-warmup", type=int, default=20)
    parser.add_argument("--latency-gap-ms", type=float, default=5.0)
    # A bound, not a figure: a Node worker's cold start took 4-5 s on a machine at load 20.
    parser.add_argument("--latency-timeout", type=float, default=30.0)
    parser.add_argument("--drain-timeout", type=float, default=120.0)
    parser.add_argument("--cold-starts", type=int, default=5, help="0 to skip")
    args = parser.parse_args(argv)
    for name in ("n", "batch", "workers", "latency_samples"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    if args.n < args.batch:
        parser.error("--n must be at least --batch")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    os.environ["BENCH_REDIS_URL"] = args.redis_url
    sys.path.insert(0, str(SYSTEMS_DIR))
    module: Any = importlib.import_module(f"{args.system}_bench")
    adapter: Adapter = (
        module.make_adapter(args.redis_url, args.variant)
        if args.variant
        else module.make_adapter(args.redis_url)
    )
    result = Result(
        system=adapter.name,
        version=adapter.version,
        python=platform.python_version(),
        n=args.n,
        batch=args.batch,
        worker_processes=args.workers,
        worker_config=adapter.worker_config,
        batch_method=adapter.batch_method,
        concurrency=getattr(adapter, "concurrency", None),
    )
    try:
        measure(adapter, args, result)
    finally:
        adapter.close()
    args.out.write_text(json.dumps(asdict(result), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
