"""No read per claimed task: the claim record carries all a run reads.

A traced worker process drains grouped tasks, traced tasks and a flow's tasks whose
dependencies handed them results, while ``redis-cli monitor`` records every command the
server runs; from the first claim on, no client reads a hash field (``HGET``, ``HMGET``):
only the scripts do (MONITOR shows their commands too, from ``lua``), and the handler
that asks for its dependency results (``dependency_results``), whose one ``HMGET`` of
their ``in:`` fields needs no read of its ``after`` first: the claim record named them.
The Node worker's twin is clients/node/test/claim-reads.test.ts.
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from pathlib import Path

import redis
from taskfleet.producer.queue import Queue
from taskfleet.protocol.keys import QueueKeys

from tests.needs import need_module
from tests.polling import wait_for
from tests.workers.harness import FAST, REPO, WORKER_TIMEOUT_S, Fleet

need_module("opentelemetry.sdk")

#: Traced enqueues, in a process of their own (a provider set here would trace every
#: later test): the ids on stdout.
TRACED_PRODUCER = """
import sys
from opentelemetry import trace
from taskfleet import Queue
import tests.workers.traced  # sets the provider

with Queue(sys.argv[2], redis_url=sys.argv[1]) as queue:
    with trace.get_tracer("app").start_as_current_span("request"):
        print(" ".join(queue.enqueue_many([{"payload": {"n": i}} for i in range(5)])))
"""

#: A MONITOR line: time, [db client], then the command and its arguments, quoted.
READS = {"HGET", "HMGET"}
LINE = re.compile(r'^[0-9.]+ \[\d+ (?P<client>[^\]]+)\] "(?P<command>[A-Za-z]+)"')


def _after_first_claim(path: Path) -> list[tuple[str, str, str]]:
    """``(client, command, line)`` of each MONITOR line from the first task claimed on (a
    script's ``HSET`` of ``state running``), in order; the client ``lua`` for a script's
    own commands."""
    found: list[tuple[str, str, str]] = []
    claimed = False
    for line in path.read_text(errors="replace").splitlines():
        m = LINE.match(line)
        if m is None:
            continue
        claimed = claimed or (m["client"] == "lua" and '"state" "running"' in line)
        if claimed:
            found.append((m["client"], m["command"].upper(), line))
    return found


def test_grouped_traced_and_flow_tasks_are_drained_with_no_hash_read_after_the_claim(
    fleet: Fleet, queue: Queue, redis_url: str, redis_client: redis.Redis, tmp_path: Path
) -> None:
    produced = subprocess.run(
        [sys.executable, "-c", TRACED_PRODUCER, redis_url, queue.name],
        cwd=REPO,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert produced.returncode == 0, produced.stderr
    traced = produced.stdout.split()
    assert all(redis_client.hexists(queue.keys.task(i), "trace") for i in traced)
    grouped = [queue.enqueue({"g": i}, group=f"tenant-{i % 2}") for i in range(6)]
    first = queue.enqueue({"step": 1})
    second = queue.enqueue({"step": 2})
    joined = queue.enqueue({"step": 3}, after=[first, second], group="tenant-0", task="inputs")
    total = len(traced) + len(grouped) + 3
    done_key = QueueKeys(queue.name).done

    path = tmp_path / "monitor.log"
    with path.open("wb") as out:
        cli = subprocess.Popen(["redis-cli", "-u", redis_url, "monitor"], stdout=out)
        try:
            wait_for(lambda: path.read_bytes().startswith(b"OK"), timeout=10)
            handlers = ["--handler", "inputs=tests.workers.traced:inputs"]
            worker = fleet.add("tests.workers.traced:handle", args=[*FAST, *handlers]).start()
            # ZCARD: the test's own polling reads no hash
            wait_for(lambda: redis_client.zcard(done_key) == total, timeout=WORKER_TIMEOUT_S)
            worker.signal(signal.SIGTERM)
            assert worker.wait() == 0
        finally:
            cli.terminate()
            cli.wait(timeout=10)

    after_claim = _after_first_claim(path)
    assert after_claim, "no claim seen"
    reads = [(c, cmd, line) for c, cmd, line in after_claim if c != "lua" and cmd in READS]
    [(_, command, line)] = reads  # the handler's own ask, nothing of the worker's
    assert command == "HMGET" and f'"in:{first}" "in:{second}"' in line
    [task] = queue.wait([joined], timeout=WORKER_TIMEOUT_S).values()
    assert task.state == "done"
    assert set(task.result) == {first, second}
