"""Flows of 10,000 tasks: the longest script call (SLOWLOG) while each is enqueued and run.

    python -m bench.flows [--children 10000]

Starts one fresh redis-server (bench.run's) and drives the scripts as a worker does (claim
100, complete them), no worker process, so the figures are the scripts' own:

- fan-out: one task and ``--children`` tasks after it (enqueued 1,000 a call); the root's
  completion readies them, at most 1,000 per call, the rest through later completions;
- children at run time: a running task adds ``--children`` children (1,000 a call,
  ``Queue.add_children``), returns, waits, and is done when the last child is;
- fan-in in one call: a chord of 1,000 tasks and a merge, ``enqueue_flow`` (one atomic
  call, whose time grows with the flow: a larger fan-in is built from run-time children,
  the scenario above, with a merge after the parent);
- a failing chain: ``--children`` tasks in a chain, the first fails for good; every other
  one ends dead (``dependency failed``), 1,000 per call;
- retention of a flow: a parent's ``--children`` children all done but one, past the
  queue's retention (1 s here): sweeps keep them while the flow is open (re-scored, at most
  a sweep's bound a call), then delete them a retention after the last one ends the flow.

Reported per scenario, by script: the most CPU time redis-server spent in one call (from
/proc/<pid>/schedstat around each call, which a loaded machine's preemption does not
inflate) and the longest call by wall time (SLOWLOG, every call of 1 ms or more); and
checks (every task ended as it should). Figures, never pass/fail.
"""

from __future__ import annotations

import argparse
import json
import time
from datetime import UTC, datetime
from importlib import resources
from pathlib import Path
from typing import Any, TypeVar

import redis
from taskfleet import Queue, QueueConfig, chord, group
from taskfleet.producer.encoding import batch_args
from taskfleet.producer.flows import build
from taskfleet.protocol.queue_ops import Ops
from taskfleet.protocol.records import text
from taskfleet.protocol.scripts import Op, SyncScripts

from bench.run import machine, redis_server

RESULTS = Path(__file__).resolve().parent / "results"
T = TypeVar("T")


def log(message: str) -> None:
    print(f"[bench.flows] {message}", flush=True)


def names() -> dict[str, str]:
    manifest = resources.files("taskfleet.protocol") / "bundle" / "manifest.json"
    scripts = json.loads(manifest.read_text(encoding="utf-8"))["scripts"]
    return {s["sha1"]: name for name, s in scripts.items()}


class Driver:
    """Claims and completes as a worker would, by the scripts, each call's CPU measured."""

    def __init__(self, queue: Queue) -> None:
        self.queue = queue
        self.ops = Ops(queue.keys)
        self.scripts = SyncScripts.for_client(queue.client)
        self.calls = 0
        pid = int(queue.client.info("server")["process_id"])
        self.schedstat = Path(f"/proc/{pid}/schedstat")
        self.cpu_max_us: dict[str, int] = {}

    def _cpu_ns(self) -> int:
        return int(self.schedstat.read_text().split()[0])

    def run(self, op: Op[T]) -> T:
        self.calls += 1
        before = self._cpu_ns()
        out = self.scripts.run(op)
        us = (self._cpu_ns() - before) // 1000
        self.cpu_max_us[op.script] = max(self.cpu_max_us.get(op.script, 0), us)
        return out

    def enqueue(self, items: Any, parent: tuple[str, str] | None = None) -> None:
        for start in range(0, len(items), 1000):
            self.run(self.ops.enqueue(batch_args(items[start : start + 1000]), parent=parent))

    def sweep(self) -> None:
        self.run(self.ops.sweep())

    def claim(self, n: int = 100) -> list[tuple[str, str]]:
        raw = self.run(self.ops.claim("bench", "1", n, f"b{self.calls}", 100))
        return [tuple(text(r).split("\0", 2)[:2]) for r in raw.records]  # type: ignore[misc]

    def complete(self, held: list[tuple[str, str]], result: str | None = '{"ok":1}') -> None:
        self.run(self.ops.complete([(i, t, result) for i, t in held]))

    def drain(self) -> int:
        ran = 0
        while True:
            held = self.claim()
            if not held:
                self.sweep()  # what is left on flows:backlog, as a sweep takes it up
                held = self.claim()
                if not held:
                    return ran
            self.complete(held)
            ran += len(held)


def slowest(client: redis.Redis) -> dict[str, Any]:
    by: dict[str, int] = {}
    sha = names()
    for entry in client.slowlog_get(1_000_000):
        words = entry["command"].split(b" ")
        if words[0].upper() == b"EVALSHA" and len(words) > 1:
            name = sha.get(words[1].decode(), "?")
            by[name] = max(by.get(name, 0), int(entry["duration"]))
    return {"max_us": max(by.values(), default=0), "by_script": dict(sorted(by.items()))}


def scenario(url: str, name: str, body: Any) -> dict[str, Any]:
    client = redis.Redis.from_url(url)
    client.flushall()
    client.config_set("slowlog-max-len", 1_000_000)
    client.config_set("slowlog-log-slower-than", 1000)
    client.slowlog_reset()
    with Queue("bench-flows", client=client) as queue:
        started = time.monotonic()
        driver = Driver(queue)
        checks = body(queue, driver)
        took = time.monotonic() - started
    cpu = dict(sorted(driver.cpu_max_us.items()))
    out = {
        "scenario": name,
        "seconds": round(took, 2),
        "calls": driver.calls,
        "cpu_max_us_by_script": cpu,
        "wall": slowest(client),
        "checks": checks,
    }
    client.config_set("slowlog-log-slower-than", 10_000)
    client.slowlog_reset()
    client.close()
    log(f"{name}: {driver.calls} calls, most CPU in one call (us) {cpu}; checks {checks}")
    return out


def fan_out(n: int) -> Any:
    def body(queue: Queue, driver: Driver) -> dict[str, Any]:
        driver.enqueue([{"payload": {"root": 1}, "task_id": "root"}])
        driver.enqueue([{"payload": {"i": i}, "after": ["root"]} for i in range(n)])
        ran = driver.drain()
        stats = queue.stats()
        return {"ran": ran, "done": stats["done"], "waiting": stats["waiting"]}

    return body


def run_time_children(n: int) -> Any:
    def body(queue: Queue, driver: Driver) -> dict[str, Any]:
        driver.enqueue([{"payload": {"doc": 1}, "task_id": "doc"}])
        [(parent, token)] = driver.claim(1)
        children = [{"payload": {"page": i}, "task_id": f"page-{i}"} for i in range(n)]
        driver.enqueue(children, parent=(parent, token))  # 1,000 a call
        driver.complete([(parent, token)], f'{{"pages":{n}}}')
        ran = driver.drain()
        task = queue.get(parent)
        return {"ran": ran, "parent": task.state.value if task else None}

    return body


def chord_in_one_call(n: int) -> Any:
    def body(queue: Queue, driver: Driver) -> dict[str, Any]:
        pages = group(*({"payload": {"page": i}} for i in range(n)))
        items, last = build(chord(pages, {"payload": {"merge": 1}}))
        driver.run(driver.ops.enqueue(batch_args(items)))  # the whole flow: one call
        ran = driver.drain()
        merge = queue.get(last[0])
        return {"ran": ran, "merge": merge.state.value if merge else None}

    return body


def failing_chain(n: int) -> Any:
    def body(queue: Queue, driver: Driver) -> dict[str, Any]:
        items: list[dict[str, Any]] = []
        for i in range(n):
            item: dict[str, Any] = {"payload": {"i": i}, "task_id": f"c{i}", "max_attempts": 1}
            if i:
                item["after"] = [f"c{i - 1}"]
            items.append(item)
        driver.enqueue(items)
        [(first, token)] = driver.claim(1)
        driver.run(driver.ops.fail(first, token, "boom", retryable=False, jitter=0.0, reason=""))
        sweeps = 0
        while queue.stats()["waiting"] and sweeps < n:
            driver.sweep()  # the workers' sweeps take up what the failure left
            sweeps += 1
        last = queue.get(f"c{n - 1}")
        dead = queue.stats()["dead"]
        return {"dead": dead, "sweeps": sweeps, "last": last.state.value if last else None}

    return body


def flow_retention(n: int) -> Any:
    def body(queue: Queue, driver: Driver) -> dict[str, Any]:
        queue.configure(QueueConfig(done_retention_s=1, dead_retention_s=1))
        driver.enqueue([{"payload": {"doc": 1}, "task_id": "doc"}])
        [(parent, token)] = driver.claim(1)
        children = [{"payload": {"page": i}, "task_id": f"page-{i}"} for i in range(n)]
        driver.enqueue(children, parent=(parent, token))
        driver.complete([(parent, token)], f'{{"pages":{n}}}')
        hold: list[tuple[str, str]] = []
        while held := driver.claim():
            if not hold:
                hold, held = held[:1], held[1:]  # one child still runs: the flow is open
            driver.complete(held)
        time.sleep(1.2)  # every finished child is past the retention
        sweeps_open = 0
        while sweeps_open < 2 * (n // 1000 + 1):
            driver.sweep()
            sweeps_open += 1
        kept = queue.stats()["done"]
        driver.complete(hold)  # the last child: the parent is done, the flow ends
        record = queue.flow(parent)
        time.sleep(1.2)
        sweeps_ended = 0
        while queue.stats()["done"] and sweeps_ended < 2 * n:
            driver.sweep()
            sweeps_ended += 1
        return {
            "kept_while_open": kept,
            "sweeps_while_open": sweeps_open,
            "outcome": record.outcome if record else None,
            "sweeps_to_prune_after_end": sweeps_ended,
            "done_left": queue.stats()["done"],
            "flows_done": queue.stats()["flows_done"],
        }

    return body


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--children", type=int, default=10_000)
    args = parser.parse_args(argv)
    n = args.children
    with redis_server() as (url, version):
        results = [
            scenario(url, "fan-out", fan_out(n)),
            scenario(url, "run-time children", run_time_children(n)),
            scenario(url, "chord in one call", chord_in_one_call(min(n, 1000))),
            scenario(url, "failing chain", failing_chain(n)),
            scenario(url, "retention of a flow", flow_retention(n)),
        ]
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"flows-{stamp}.json"
    path.write_text(
        json.dumps(
            {"children": n, "redis": version, "machine": machine(), "results": results}, indent=2
        )
        + "\n"
    )
    log(f"wrote {path}")


if __name__ == "__main__":
    main()
