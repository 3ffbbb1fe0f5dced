"""Systems outside Python in the harness: a producer process driven over a pipe.

The Node and Go systems (taskfleet's Node client, BullMQ, asynq) enqueue from a producer
process of their own language (``bench/node/producer.mjs``, ``asynqbench producer``),
so their enqueue figures are their clients' own. The adapter sends one command a line
(``single N``, ``batch N B``, ``one``, ``purge``, ``version``, ``quit``) and waits for its
``ok`` line: one pipe round trip per command, timed with it. For ``single N`` and
``batch N B`` that is one round trip for N tasks; for the latency's ``one`` it adds a pipe
round trip (tens of µs) to every sample.

The binaries and packages are prepared by ``bench/native.py`` before the harness runs.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from pathlib import Path

SYSTEMS_DIR = Path(__file__).resolve().parent
BENCH_DIR = SYSTEMS_DIR.parent
NODE_DIR = BENCH_DIR / ".peers" / "node"  # bench/node's files and their node_modules
ASYNQ_BIN = BENCH_DIR / ".peers" / "asynq" / "asynqbench"
# BENCH_TASKFLEET_NODE: another build's dist/src (a before/after comparison of the client)
TASKFLEET_NODE = Path(
    os.environ.get("BENCH_TASKFLEET_NODE", BENCH_DIR.parent / "clients" / "node" / "dist" / "src")
)


def need(path: Path) -> Path:
    if not path.exists():
        raise SystemExit(f"{path} is missing: run `make bench` (bench/native.py prepares it)")
    return path


class Producer:
    """A producer process: one command a line on its stdin, one reply a line back."""

    def __init__(self, argv: list[str], redis_url: str):
        env = dict(os.environ, BENCH_REDIS_URL=redis_url)
        self.proc = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env
        )

    def call(self, command: str) -> str:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        reply = self.proc.stdout.readline().strip()
        if not reply:
            raise RuntimeError(f"producer exited ({self.proc.wait()}) on {command!r}")
        if reply != "ok" and not reply.startswith("ok "):
            raise RuntimeError(f"producer: {command!r}: {reply}")
        return reply[3:]

    def close(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(RuntimeError, OSError):
                self.call("quit")
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class ExternalAdapter:
    """The harness's adapter over a producer process; subclasses give the workers."""

    name: str
    version: str
    batch_method: str | None
    worker_config: str

    def __init__(self, producer: Producer):
        self.producer = producer
        self.version = producer.call("version")

    def enqueue_single(self, n: int) -> None:
        self.producer.call(f"single {n}")

    def enqueue_batches(self, n: int, batch: int) -> None:
        self.producer.call(f"batch {n} {batch}")

    def enqueue_one(self) -> None:
        self.producer.call("one")

    def purge(self) -> None:
        self.producer.call("purge")

    def close(self) -> None:
        self.producer.close()
