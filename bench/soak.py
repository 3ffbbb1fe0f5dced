"""`make soak`: a million tasks through a small fleet, watching Redis memory and script times.

Starts a throwaway redis-server (``bench.run.redis_server``: free port, temp dir, no
persistence) and a few ``taskfleet worker`` processes (``bench.systems.harness.WorkerFleet``)
with the queue's default settings (retention included: done tasks stay an hour, so memory
grows with them). A producer enqueues at full speed in batches of 1000, keeping at most
``SOAK_BACKLOG`` tasks waiting, while the run prints Redis memory and progress every few
seconds. At the end: the slowest script calls (``SLOWLOG``), and the accounting:
enqueued = done + dead, nothing pending, delayed or running, every worker exited 0.
Exit code 1 if any of that does not hold. Not part of ``make check``: figures, not a test.

Settings (environment): ``SOAK_TASKS`` (1,000,000), ``SOAK_WORKERS`` (3),
``SOAK_CONCURRENCY`` (32 per worker), ``SOAK_BACKLOG`` (20,000), ``SOAK_SAMPLE_S`` (3).
"""

from __future__ import annotations

import hashlib
import os
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import redis
from taskfleet import Queue
from taskfleet.protocol.bundle import NAMES, source

from bench.run import redis_server
from bench.systems.harness import WorkerFleet

QUEUE = "soak"
BATCH = 1000
HANDLER = "taskfleet.samples:echo"
#: Calls at least this slow are kept by SLOWLOG (microseconds).
SLOWLOG_US = 1000


def _env_int(name: str, default: int) -> int:
    value = int(os.environ.get(name, default))
    if value < 1:
        raise SystemExit(f"{name} must be at least 1, not {value}")
    return value


@dataclass
class Settings:
    tasks: int
    workers: int
    concurrency: int
    backlog: int
    sample_s: float

    @classmethod
    def from_env(cls) -> Settings:
        return cls(
            tasks=_env_int("SOAK_TASKS", 1_000_000),
            workers=_env_int("SOAK_WORKERS", 3),
            concurrency=_env_int("SOAK_CONCURRENCY", 32),
            backlog=_env_int("SOAK_BACKLOG", 20_000),
            sample_s=float(os.environ.get("SOAK_SAMPLE_S", "3")),
        )


class Producer(threading.Thread):
    """Enqueues ``total`` tasks in batches, holding the waiting backlog under ``backlog``."""

    def __init__(self, url: str, total: int, backlog: int) -> None:
        super().__init__(name="soak-producer", daemon=True)
        self.url, self.total, self.backlog = url, total, backlog
        self.sent = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            with Queue(QUEUE, redis_url=self.url) as queue:
                pending_key = queue.keys.pending
                while self.sent < self.total:
                    if queue.client.zcard(pending_key) >= self.backlog:
                        time.sleep(0.005)  # a throttle, not a wait for a condition
                        continue
                    size = min(BATCH, self.total - self.sent)
                    queue.enqueue_many([{"payload": {}} for _ in range(size)])
                    self.sent += size
        except BaseException as exc:
            self.error = exc


def script_names() -> dict[str, str]:
    """sha1 of each script's source -> its name (SLOWLOG shows EVALSHA <sha>)."""
    return {hashlib.sha1(source(n).encode()).hexdigest(): n for n in NAMES}


def describe(command: bytes | str, names: dict[str, str]) -> str:
    """A SLOWLOG command as the script's name for EVALSHA, else its first words."""
    text = command.decode(errors="replace") if isinstance(command, bytes) else command
    words = text.split()
    if len(words) > 1 and words[0].upper() == "EVALSHA":
        return names.get(words[1], words[1][:12])
    return " ".join(words[:2])[:60]


def mb(value: int) -> str:
    return f"{value / 1e6:,.1f}"


def main() -> int:
    settings = Settings.from_env()
    print(
        f"soak: {settings.tasks:,} tasks, {settings.workers} x `taskfleet worker "
        f"--concurrency {settings.concurrency}` ({HANDLER}), backlog <= {settings.backlog:,}, "
        "default queue settings",
        flush=True,
    )
    with redis_server() as (url, version), tempfile.TemporaryDirectory(prefix="soak-") as tmp:
        client = redis.Redis.from_url(url)
        client.config_set("slowlog-log-slower-than", SLOWLOG_US)
        client.config_set("slowlog-max-len", 10_000)
        client.slowlog_reset()
        queue = Queue(QUEUE, client=client)
        argvs = [
            [
                *(sys.executable, "-m", "taskfleet", "worker", "--queue", QUEUE),
                *("--handler", HANDLER, "--concurrency", str(settings.concurrency)),
                *("--pod", f"soak-{i}", "--runtime-dir", os.path.join(tmp, str(i))),
                *("--log-level", "warning", "--redis-url", url),
            ]
            for i in range(settings.workers)
        ]
        fleet = WorkerFleet(argvs, url, Path(tmp))
        fleet.start()
        producer = Producer(url, settings.tasks, settings.backlog)
        started = time.monotonic()
        producer.start()
        print(f"Redis {version}; memory and progress every {settings.sample_s:g} s:\n")
        header = (
            f"{'s':>7} {'enqueued':>10} {'done':>10} {'dead':>6} {'waiting':>8} {'running':>8}"
            f" {'tasks/s':>8} {'used MB':>9} {'rss MB':>9} {'peak MB':>9}"
        )
        print(header + "\n" + "-" * len(header), flush=True)
        deadline = started + settings.tasks / 500 + 300  # even at 500 tasks/s
        last_done, last_t = 0, started
        failed = False
        stats = queue.stats()
        while True:
            time.sleep(settings.sample_s)
            now = time.monotonic()
            stats = queue.stats()
            mem = client.info("memory")
            finished = stats["done"] + stats["dead"]
            rate = (stats["completed"] - last_done) / (now - last_t)
            last_done, last_t = stats["completed"], now
            print(
                f"{now - started:>7.0f} {stats['enqueued']:>10,} {stats['done']:>10,}"
                f" {stats['dead']:>6,} {stats['pending'] + stats['delayed']:>8,}"
                f" {stats['running']:>8,} {rate:>8,.0f} {mb(mem['used_memory']):>9}"
                f" {mb(mem['used_memory_rss']):>9} {mb(mem['used_memory_peak']):>9}",
                flush=True,
            )
            if producer.error is not None:
                print(f"producer failed: {producer.error!r}")
                failed = True
                break
            try:
                fleet.check_alive()
            except RuntimeError as exc:
                print(f"a worker exited: {exc}")
                failed = True
                break
            if not producer.is_alive() and finished >= settings.tasks:
                break
            if now > deadline:
                print("deadline passed before every task finished")
                failed = True
                break
        elapsed = time.monotonic() - started
        fleet.stop()
        codes = [proc.returncode for proc in fleet.processes]
        stats = queue.stats()
        mem = client.info("memory")

        names = script_names()
        slow = sorted(client.slowlog_get(10_000), key=lambda e: -e["duration"])
        print(f"\nslowest script calls (SLOWLOG, at least {SLOWLOG_US} µs; {len(slow)} kept):")
        for entry in slow[:5]:
            print(f"  {entry['duration']:>8,} µs  {describe(entry['command'], names)}")
        durations = sorted(e["duration"] for e in slow)
        if durations:
            print(f"  median of those kept: {durations[len(durations) // 2]:,} µs")
        if not slow:
            print("  none")

        print(f"\naccounting after {elapsed:,.0f} s ({settings.tasks / elapsed:,.0f} tasks/s):")
        for name in (
            "enqueued", "done", "dead", "pending", "delayed", "running", "completed", "failed",
            "retried", "dead_total", "lost", "requeued", "released", "stale", "expired",
        ):  # fmt: skip
            print(f"  {name:<10} {stats[name]:>12,}")
        print(f"  worker exit codes: {codes}")
        print(
            f"  Redis memory at the end: {mb(mem['used_memory'])} MB used, "
            f"{mb(mem['used_memory_rss'])} MB rss, {mb(mem['used_memory_peak'])} MB peak; "
            f"{mem['used_memory'] / max(1, stats['done'] + stats['dead']):,.0f} bytes "
            "per retained task"
        )
        problems = []
        if stats["enqueued"] != settings.tasks:
            problems.append(f"enqueued {stats['enqueued']:,}, expected {settings.tasks:,}")
        if stats["enqueued"] != stats["done"] + stats["dead"]:
            problems.append("enqueued != done + dead")
        if stats["pending"] or stats["delayed"] or stats["running"]:
            problems.append("tasks left pending, delayed or running")
        if any(code != 0 for code in codes):
            problems.append(f"worker exit codes {codes}")
        client.close()
        if failed or problems:
            print("\nFAILED: " + "; ".join(problems or ["see above"]))
            return 1
        print("\nOK: every task accounted for")
        return 0


if __name__ == "__main__":
    sys.exit(main())
