"""`make soak-faults`: Redis in trouble, over and over, under load; then every task accounted.

A real redis-server (append-only, ``appendfsync always``, ``busy-reply-threshold`` 100 ms)
with a real replica, ``SOAK_FAULTS_WORKERS`` real ``taskfleet worker`` processes, and a
producer enqueueing continuously (ids of its own, so a batch refused or unanswered is sent
again, which is safe). Then, ``SOAK_FAULTS_CYCLES`` times, each fault for
``SOAK_FAULTS_HOLD_S`` seconds:

- busy: a real Lua script loops past busy-reply-threshold (Redis answers BUSY), then
  ``SCRIPT KILL``;
- full: ``CONFIG SET maxmemory`` at what is used now (OOM on every write), then raised;
- restart: the server stopped (SIGTERM) and started again from its AOF;
- failover: ``FAILOVER TO`` the replica (the server the workers use becomes a replica:
  READONLY), then ``FAILOVER`` back. The workers' URL names one server and no Sentinel
  moves it, so this is a failover and its failback as those workers see them.

At the end the producer stops, the fleet drains what is left, and the accounting is
printed: every acknowledged id is looked up. lost (acknowledged, not done), stuck (still
pending, delayed or running after the settle time), dead, and duplicated runs (a task's
handler ran more than once: at-least-once, allowed only as far as the queue's own
``lost``/``stale``/``released``/``requeued`` counters account for them). Exit 1 unless
lost, stuck and dead are 0, duplicates are accounted for and every worker exited 0.

Settings (environment): ``SOAK_FAULTS_CYCLES`` (3), ``SOAK_FAULTS_HOLD_S`` (4),
``SOAK_FAULTS_WORKERS`` (3), ``SOAK_FAULTS_RATE`` (tasks/s, 200). Not part of
``make check``.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import redis

REPO = Path(__file__).resolve().parents[1]
QUEUE = "soak-faults"
HANDLER = "bench.soak_faults:run_task"
#: Where each worker process appends the ids its handler ran (env, set for the workers).
RUNS_DIR_ENV = "SOAK_FAULTS_RUNS_DIR"
SETTLE_S = 60.0


def run_task(payload: dict[str, Any]) -> dict[str, Any]:
    """The fleet's handler: note the run in a file of this process (not in Redis, which
    is the thing in trouble), then take a few milliseconds."""
    from taskfleet.worker.handlers import current_task

    directory = os.environ[RUNS_DIR_ENV]
    with open(os.path.join(directory, f"runs-{os.getpid()}.txt"), "a") as runs:
        runs.write(current_task().task_id + "\n")
    time.sleep(float(payload.get("s", 0.005)))
    return {}


class Server:
    """A redis-server on a fixed port and directory that can be stopped and started."""

    def __init__(self, directory: Path, port: int, *extra: str) -> None:
        self.directory, self.port, self.extra = directory, port, extra
        self.process: subprocess.Popen[bytes] | None = None
        directory.mkdir(parents=True, exist_ok=True)

    def start(self) -> None:
        binary = shutil.which("redis-server") or "/usr/bin/redis-server"
        self.process = subprocess.Popen(
            [binary, "--port", str(self.port), "--bind", "127.0.0.1",
             "--dir", str(self.directory), "--logfile", str(self.directory / "redis.log"),
             "--save", "", "--appendonly", "yes", "--appendfsync", "always",
             "--busy-reply-threshold", "100", *self.extra],
        )  # fmt: skip
        wait(self.ping, 30, "redis-server to answer")

    def ping(self) -> bool:
        client = self.client(timeout=1)
        try:
            return bool(client.ping())
        except redis.RedisError:
            return False
        finally:
            client.close()

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()  # SIGTERM: the AOF is complete (fsync always anyway)
            self.process.wait(timeout=60)
            self.process = None

    def client(self, timeout: float | None = 5) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=timeout)


def wait(condition: Callable[[], object], limit: float, what: str) -> None:
    deadline = time.monotonic() + limit
    while not condition():
        if time.monotonic() > deadline:
            raise SystemExit(f"soak-faults: timed out waiting for {what}")
        time.sleep(0.05)


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Producer(threading.Thread):
    """Enqueues ``rate`` tasks a second in batches of ids it chose; a batch that fails is
    sent again with the same ids until Redis acknowledges it."""

    def __init__(self, url: str, rate: int) -> None:
        super().__init__(daemon=True)
        self.url, self.rate = url, rate
        self.acknowledged: list[str] = []
        self.refused = 0
        self.stopping = threading.Event()

    def run(self) -> None:
        from taskfleet import Queue

        batch_size = max(1, self.rate // 10)
        with Queue(QUEUE, redis_url=self.url) as queue:
            while not self.stopping.is_set():
                ids = [secrets.token_hex(8) for _ in range(batch_size)]
                items = [{"payload": {"s": 0.005}, "task_id": i} for i in ids]
                while True:
                    try:
                        queue.enqueue_many(items)
                        break
                    except Exception:
                        self.refused += 1
                        if self.stopping.wait(0.2):
                            return  # not acknowledged: not counted
                self.acknowledged += ids
                self.stopping.wait(0.1)


def busy(server: Server, hold: float) -> None:
    def script() -> None:
        client = server.client(timeout=None)
        try:
            client.eval("while true do end", 0)
        except redis.ResponseError:
            pass  # killed
        finally:
            client.close()

    thread = threading.Thread(target=script, daemon=True)
    thread.start()
    time.sleep(hold)  # the fault itself lasts this long
    admin = server.client()
    try:
        wait(lambda: _try(admin.script_kill), 10, "SCRIPT KILL")
    finally:
        admin.close()
    thread.join(10)


def _try(call: Callable[[], object]) -> bool:
    try:
        call()
        return True
    except redis.RedisError:
        return False


def full(server: Server, hold: float) -> None:
    admin = server.client()
    try:
        admin.config_set("maxmemory", str(int(admin.info("memory")["used_memory"])))
        time.sleep(hold)
        admin.config_set("maxmemory", "0")
    finally:
        admin.close()


def restart(server: Server, hold: float) -> None:
    server.stop()
    time.sleep(hold / 2)
    server.start()


def in_sync(master: Server, replica: Server) -> bool:
    client = master.client()
    try:
        info = client.info("replication")
        slave = info.get("slave0")
        # Online is enough: FAILOVER itself pauses writes until the replica caught up.
        return bool(
            info.get("role") == "master"
            and isinstance(slave, dict)
            and slave.get("state") == "online"
            and slave.get("port") == replica.port
        )
    except redis.RedisError:
        return False
    finally:
        client.close()


def failover(master: Server, replica: Server, hold: float) -> None:
    for old, new in ((master, replica), (replica, master)):
        wait(lambda o=old, n=new: in_sync(o, n), 60, "the replica in sync")  # type: ignore[misc]
        client = old.client()
        try:
            client.execute_command("FAILOVER", "TO", "127.0.0.1", new.port, "TIMEOUT", 10000)
        finally:
            client.close()
        wait(lambda n=new: _role(n) == "master", 30, "the failover")  # type: ignore[misc]
        if old is master:
            time.sleep(hold)  # the workers' server is a replica meanwhile: READONLY


def _role(server: Server) -> str:
    client = server.client()
    try:
        return str(client.info("replication").get("role"))
    except redis.RedisError:
        return ""
    finally:
        client.close()


def main() -> int:
    cycles = int(os.environ.get("SOAK_FAULTS_CYCLES", "3"))
    hold = float(os.environ.get("SOAK_FAULTS_HOLD_S", "4"))
    n_workers = int(os.environ.get("SOAK_FAULTS_WORKERS", "3"))
    rate = int(os.environ.get("SOAK_FAULTS_RATE", "200"))
    with tempfile.TemporaryDirectory(prefix="soak-faults-") as tmp:
        root = Path(tmp)
        master = Server(root / "master", free_port())
        replica = Server(root / "replica", free_port())
        replica.extra = ("--replicaof", "127.0.0.1", str(master.port))
        workers: list[subprocess.Popen[bytes]] = []
        try:
            master.start()
            replica.start()
            return run(
                master, replica, workers, root,
                cycles=cycles, hold=hold, n_workers=n_workers, rate=rate,
            )  # fmt: skip
        finally:
            for worker in workers:
                if worker.poll() is None:
                    worker.kill()
                    worker.wait()
            replica.stop()
            master.stop()


def run(
    master: Server,
    replica: Server,
    workers: list[subprocess.Popen[bytes]],
    root: Path,
    *,
    cycles: int,
    hold: float,
    n_workers: int,
    rate: int,
) -> int:
    url = f"redis://127.0.0.1:{master.port}/0"
    runs_dir = root / "runs"
    runs_dir.mkdir()
    env = dict(os.environ, TASKFLEET_REDIS_URL=url, PYTHONPATH=str(REPO),
               PYTHONUNBUFFERED="1", **{RUNS_DIR_ENV: str(runs_dir)})  # fmt: skip
    for i in range(n_workers):
        log = (root / f"worker-{i}.log").open("wb")
        workers.append(
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "taskfleet",
                    "worker",
                    "--queue",
                    QUEUE,
                    "--handler",
                    HANDLER,
                    "--concurrency",
                    "8",
                    "--pod",
                    f"soak-{i}",
                    "--log-format",
                    "json",
                ],
                env=env,
                cwd=REPO,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        )
        log.close()
    producer = Producer(url, rate)
    producer.start()
    started = time.monotonic()
    faults: list[tuple[str, Callable[[], None]]] = [
        ("busy", lambda: busy(master, hold)),
        ("full", lambda: full(master, hold)),
        ("restart", lambda: restart(master, hold)),
        ("failover", lambda: failover(master, replica, hold)),
    ]
    try:
        for cycle in range(1, cycles + 1):
            for name, fault in faults:
                time.sleep(hold)  # load between faults
                t0 = time.monotonic()
                fault()
                print(f"cycle {cycle}: {name:<8} {time.monotonic() - t0:5.1f} s, "
                      f"{len(producer.acknowledged)} acknowledged", flush=True)  # fmt: skip
                for i, worker in enumerate(workers):
                    if worker.poll() is not None:
                        print(f"worker {i} exited with {worker.returncode}")
    finally:
        producer.stopping.set()
        producer.join(30)
    acknowledged = producer.acknowledged
    report = account(url, acknowledged, runs_dir, workers, root)
    report["seconds"] = round(time.monotonic() - started, 1)
    report["producer_retries"] = producer.refused
    print(json.dumps(report, indent=2))
    bad = report["lost"] or report["stuck"] or report["dead"] or report["failed_workers"]
    bad = bad or report["unexplained_duplicates"]
    print("soak-faults:", "FAILED" if bad else "OK")
    return 1 if bad else 0


def account(
    url: str, acknowledged: list[str], runs_dir: Path, workers: list[Any], root: Path
) -> dict[str, Any]:
    from taskfleet import Queue

    final = ("done", "dead", "cancelled")
    with Queue(QUEUE, redis_url=url) as queue:
        deadline = time.monotonic() + SETTLE_S
        while True:
            stats = queue.stats()
            if stats["pending"] + stats["delayed"] + stats["running"] == 0:
                break
            if time.monotonic() > deadline:
                break
            time.sleep(0.5)
        states: Counter[str] = Counter()
        for task_id in acknowledged:
            task = queue.get(task_id)
            states["missing" if task is None else str(task.state.value)] += 1
        stats = queue.stats()
    codes = []
    for worker in workers:
        worker.send_signal(signal.SIGTERM)
        try:
            codes.append(worker.wait(timeout=60))
        except subprocess.TimeoutExpired:
            worker.kill()
            codes.append(-9)
    runs: Counter[str] = Counter()
    for path in runs_dir.glob("runs-*.txt"):
        runs.update(line for line in path.read_text().split())
    duplicates = sum(count - 1 for count in runs.values() if count > 1)
    explained = stats["lost"] + stats["stale"] + stats["released"] + stats["requeued"]
    logs = "".join(p.read_text(errors="replace") for p in root.glob("worker-*.log"))
    records = [json.loads(line) for line in logs.splitlines() if line.startswith("{")]
    events = Counter(r.get("event") for r in records)
    outages = Counter(
        r.get("fault")
        for r in records
        if r.get("event") in ("redis_unreachable", "redis_refusing_writes")
    )
    return {
        "acknowledged": len(acknowledged),
        "done": states["done"],
        "lost": states["missing"],  # acknowledged, and no such task in Redis
        "stuck": sum(v for k, v in states.items() if k not in (*final, "missing")),
        "dead": states["dead"],
        "duplicated_runs": duplicates,
        "unexplained_duplicates": max(0, duplicates - explained),
        "queue_counters": {k: stats[k] for k in ("lost", "stale", "released", "requeued")},
        "worker_exit_codes": codes,
        "failed_workers": sum(1 for c in codes if c != 0),
        "outages_by_fault": dict(outages),
        "worker_events": {
            k: events[k]
            for k in (
                "redis_unreachable",
                "redis_refusing_writes",
                "redis_reachable",
                "worker_failed",
                "unanswered_claims_released",
            )
        },
    }


if __name__ == "__main__":
    sys.exit(main())
