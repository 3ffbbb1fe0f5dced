"""`make soak-faults`, its flows part: flows in flight, a 0.1.x worker joining late,
SIGKILLs; then nothing left ``waiting`` whose dependencies have ended, and nothing lost.

A real redis-server (AOF) and ``SOAK_FLOWS_WORKERS`` real ``taskfleet worker`` processes of
this tree. The producer enqueues chains (``SOAK_FLOWS_CHAINS`` of 4 steps), fan-ins (half
as many chords of 5 into 1) and grouped tasks (5 groups). Then a 0.1.x worker
(release/previous.env's LEVEL1_COMMIT, its own venv from release/previous-library.sh) joins
while they run: it completes dependencies without resolving their dependants (it knows nothing
of flows), and while it is registered new flows and groups are refused (``OlderWorker``),
so the producer sends plain tasks. A worker of this tree is SIGKILLed and started again;
then the old worker is SIGKILLed, its leases run out, and once its record is a lease old
the producer enqueues a second round of flows and groups. The workers' housekeeping
(repair.lua, after each sweep) frees what the old worker stranded.

At the end: every acknowledged id is looked up (lost: no such task; stuck: not finished),
and every task left in ``waiting`` has its dependencies read: ``stranded`` counts those
whose dependencies have all ended. Exit 1 unless lost, stuck, dead and stranded are 0.
``flow_repairs`` (the queue's counter) says how many tasks the repair freed.

Settings (environment): ``SOAK_FLOWS_CHAINS`` (40), ``SOAK_FLOWS_WORKERS`` (2),
``SOAK_FLOWS_OLD_S`` (seconds the old worker serves, 6). Not part of ``make check``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
QUEUE = "soak-flows"
HANDLER = "bench.soak_flows:step"
#: Worker options: fast beats and a short lease, so a killed worker's tasks come back soon
WORKER_ARGS = ["--heartbeat-interval", "0.5", "--lease-ttl", "3", "--concurrency", "4"]
SETTLE_S = 120.0
GROUPS = 5


def step(payload: dict[str, Any]) -> dict[str, Any]:
    """The handler of both releases' workers: a few milliseconds of work. Imports nothing
    of taskfleet, so the 0.1.x worker runs it from its own venv."""
    time.sleep(float(payload.get("s", 0.02)))
    return {"ok": True}


def previous_venv() -> Path:
    built = subprocess.run(
        [str(REPO / "release/previous-library.sh")], capture_output=True, text=True, check=False
    )
    if built.returncode != 0:
        raise SystemExit(f"soak-flows: release/previous-library.sh failed:\n{built.stderr}")
    return Path(built.stdout.strip().splitlines()[-1])


class Fleet:
    def __init__(self, root: Path, url: str) -> None:
        self.root, self.url = root, url
        self.processes: dict[str, subprocess.Popen[bytes]] = {}
        self.codes: dict[str, int] = {}

    def start(self, pod: str, program: list[str]) -> None:
        env = dict(os.environ, TASKFLEET_REDIS_URL=self.url, PYTHONPATH=str(REPO),
                   PYTHONUNBUFFERED="1", TASKFLEET_POD_NAME=pod)  # fmt: skip
        with (self.root / f"worker-{pod}.log").open("ab") as log:
            self.processes[pod] = subprocess.Popen(
                [*program, "worker", "--queue", QUEUE, "--handler", HANDLER, "--pod", pod,
                 "--log-format", "json", *WORKER_ARGS],
                env=env, cwd=REPO, stdout=log, stderr=subprocess.STDOUT,
            )  # fmt: skip

    def kill(self, pod: str) -> None:
        process = self.processes.pop(pod)
        process.send_signal(signal.SIGKILL)
        process.wait()

    def stop_all(self) -> None:
        for pod, process in list(self.processes.items()):
            process.send_signal(signal.SIGTERM)
            try:
                self.codes[pod] = process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                process.kill()
                self.codes[pod] = -9
        self.processes.clear()

    def events(self, name: str) -> int:
        count = 0
        for path in self.root.glob("worker-*.log"):
            for line in path.read_text(errors="replace").splitlines():
                if line.startswith("{") and json.loads(line).get("event") == name:
                    count += 1
        return count


def enqueue_flows(queue: Any, round_: int, chains: int) -> list[str]:
    from taskfleet.producer.flows import chain, chord, group

    ids: list[str] = []
    for _ in range(chains):
        ids += queue.enqueue_flow(chain(*({"payload": {"s": 0.02}} for _s in range(4)))).ids
    for _ in range(chains // 2):
        header = group(*({"payload": {"s": 0.02}} for _s in range(5)))
        ids += queue.enqueue_flow(chord(header, {"payload": {"s": 0.01}})).ids
    for i in range(chains):
        ids.append(queue.enqueue({"s": 0.01}, group=f"tenant-{(i + round_) % GROUPS}"))
    return ids


def stranded(queue: Any) -> list[str]:
    """Waiting tasks whose dependencies have all ended (done, dead, cancelled, missing)."""
    client = queue.client
    out = []
    for raw in client.zrange(queue.keys.waiting, 0, -1):
        task_id = raw.decode()
        after = client.hget(queue.keys.task(task_id), "after")
        deps = json.loads(after) if after else []
        states = [client.hget(queue.keys.task(d), "state") for d in deps]
        if all(s in (None, b"done", b"dead", b"cancelled") for s in states):
            out.append(task_id)
    return out


def main() -> int:
    from taskfleet import Queue
    from taskfleet.protocol.errors import OlderWorker

    from bench.soak_faults import Server, free_port

    chains = int(os.environ.get("SOAK_FLOWS_CHAINS", "40"))
    n_workers = int(os.environ.get("SOAK_FLOWS_WORKERS", "2"))
    old_s = float(os.environ.get("SOAK_FLOWS_OLD_S", "6"))
    old_program = [str(previous_venv() / "bin" / "taskfleet")]
    this_program = [sys.executable, "-m", "taskfleet"]
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="soak-flows-") as tmp:
        root = Path(tmp)
        server = Server(root / "redis", free_port())
        server.start()
        url = f"redis://127.0.0.1:{server.port}/0"
        fleet = Fleet(root, url)
        try:
            with Queue(QUEUE, redis_url=url) as queue:
                for i in range(n_workers):
                    fleet.start(f"new-{i}", this_program)
                acknowledged = enqueue_flows(queue, 0, chains)
                time.sleep(1)
                fleet.kill("new-0")
                fleet.start("new-0", this_program)
                fleet.start("old-0", old_program)
                refused = 0
                deadline = time.monotonic() + old_s
                while time.monotonic() < deadline:
                    try:
                        acknowledged += enqueue_flows(queue, 1, 2)
                    except OlderWorker:
                        refused += 1  # it serves the queue: flows and groups wait
                        acknowledged += [queue.enqueue({"s": 0.01}) for _ in range(10)]
                    time.sleep(0.2)
                fleet.kill("old-0")
                fleet.kill(f"new-{n_workers - 1}")
                fleet.start(f"new-{n_workers - 1}", this_program)
                deadline = time.monotonic() + 60
                while True:  # accepted once the old worker's record is a lease old
                    try:
                        acknowledged += enqueue_flows(queue, 2, chains)
                        break
                    except OlderWorker:
                        if time.monotonic() > deadline:
                            raise
                        time.sleep(0.5)
                settle = time.monotonic() + SETTLE_S
                while time.monotonic() < settle:
                    stats = queue.stats()
                    if stats["pending"] + stats["delayed"] + stats["running"] == 0 and (
                        stats["waiting"] == 0 or stranded(queue)
                    ):
                        break
                    time.sleep(0.5)
                # the repair runs every few beats after a settle time: give it that long
                wait_stranded = time.monotonic() + 30
                while stranded(queue) and time.monotonic() < wait_stranded:
                    time.sleep(0.5)
                left = stranded(queue)
                states: dict[str, int] = {}
                for task_id in acknowledged:
                    task = queue.get(task_id)
                    state = "missing" if task is None else str(task.state.value)
                    states[state] = states.get(state, 0) + 1
                stats = queue.stats()
        finally:
            fleet.stop_all()
            server.stop()
        report = {
            "acknowledged": len(acknowledged),
            "done": states.get("done", 0),
            "lost": states.get("missing", 0),
            "stuck": sum(v for k, v in states.items() if k not in ("done", "dead", "missing")),
            "dead": states.get("dead", 0),
            "stranded": len(left),
            "flow_repairs": stats["flow_repairs"],
            "flows_refused_while_old_worker_served": refused,
            "flow_repaired_log_lines": fleet.events("flow_repaired"),
            "worker_exit_codes": fleet.codes,
            "seconds": round(time.monotonic() - started, 1),
        }
    print(json.dumps(report, indent=2))
    bad = report["lost"] or report["stuck"] or report["dead"] or report["stranded"]
    bad = bad or any(code != 0 for code in fleet.codes.values())
    print("soak-flows:", "FAILED" if bad else "OK")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
