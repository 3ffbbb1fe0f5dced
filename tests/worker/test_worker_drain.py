"""Graceful drain: SIGTERM, the drain deadline, a second signal, and ``taskfleet drain``."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis
from taskfleet.producer.queue import Queue
from taskfleet.protocol.tasks import TaskState
from taskfleet.worker import Worker, WorkerSettings
from taskfleet.worker.broker import Broker, ClaimResult
from taskfleet.worker.handlers import load_handler
from taskfleet.worker.runtime import live_waiters, register_waiter

from tests.polling import wait_for
from tests.workers.harness import FAST, REPO, WORKER_INTERVAL_S, WORKER_TIMEOUT_S, Fleet, taskfleet

SLEEP = "tests.workers.handlers:sleep"


def events(client: redis.Redis, what: str) -> list[str]:
    return [e.decode() for e in client.lrange("test:events", 0, -1) if e.startswith(what.encode())]


def test_sigterm_lets_in_flight_tasks_finish_and_claims_nothing_more(
    fleet: Fleet, queue: Queue, redis_client: redis.Redis
) -> None:
    running = [queue.enqueue({"seconds": 1.0}) for _ in range(2)]
    worker = fleet.add(SLEEP, args=[*FAST, "--concurrency", "2"]).start()
    wait_for(
        lambda: len(events(redis_client, "start")) == 2,
        timeout=WORKER_TIMEOUT_S,
        interval=WORKER_INTERVAL_S,
        what="two tasks started",
    )
    waiting = queue.enqueue({"seconds": 0})
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0
    for task_id in running:
        task = queue.get(task_id)
        assert task is not None and task.state == "done", task
    waiting_task = queue.get(waiting)
    assert waiting_task is not None and waiting_task.state == "pending"
    assert worker.has_event("drain_started", inflight=2)
    assert queue.stats()["workers"] == 0


def test_drain_deadline_releases_the_unfinished_task_and_another_worker_completes_it(
    fleet: Fleet, queue: Queue, redis_client: redis.Redis
) -> None:
    task_id = queue.enqueue({"seconds": 2.0})
    first = fleet.add(SLEEP, pod="pod-a", args=[*FAST, "--drain-timeout", "0.3"]).start()
    wait_for(
        lambda: events(redis_client, "start"),
        timeout=WORKER_TIMEOUT_S,
        interval=WORKER_INTERVAL_S,
        what=lambda: f"start: {fleet.logs()}",
    )
    first.signal(signal.SIGTERM)
    assert first.wait() == 0
    assert first.has_event("task_released", task=task_id)
    released = queue.get(task_id)
    assert released is not None and released.state == "pending"
    assert released.attempts == 0  # a release is not an attempt

    second = fleet.add(SLEEP, pod="pod-b").start()
    wait_for(
        lambda: (t := queue.get(task_id)) is not None and t.state == "done",
        timeout=15,
        interval=WORKER_INTERVAL_S,
        what=lambda: f"{queue.get(task_id)}\n{fleet.logs()}",
    )
    done = queue.get(task_id)
    assert done is not None and done.attempts == 1 and done.pod == "pod-b"
    # the run that began and was given back is in the history
    assert [(a.pod, a.outcome) for a in done.history] == [("pod-a", "released"), ("pod-b", "done")]
    assert queue.stats()["released"] == 1
    second.signal(signal.SIGTERM)
    assert second.wait() == 0


def test_second_signal_releases_at_once_and_exits_zero(
    fleet: Fleet, queue: Queue, redis_client: redis.Redis
) -> None:
    task_id = queue.enqueue({"seconds": 60})
    worker = fleet.add(SLEEP, args=[*FAST, "--drain-timeout", "60"]).start()
    wait_for(
        lambda: events(redis_client, "start"),
        timeout=WORKER_TIMEOUT_S,
        interval=WORKER_INTERVAL_S,
        what=lambda: f"start: {fleet.logs()}",
    )
    worker.signal(signal.SIGTERM)
    worker.wait_event("drain_started")
    worker.signal(signal.SIGINT)
    assert worker.wait(timeout=10) == 0
    assert worker.has_event("drain_forced")
    task = queue.get(task_id)
    assert task is not None and task.state == "pending" and task.attempts == 0


def test_drain_command_waits_until_the_worker_holds_no_task(
    fleet: Fleet, queue: Queue, redis_client: redis.Redis
) -> None:
    task_id = queue.enqueue({"seconds": 1.0})
    worker = fleet.add(SLEEP).start()
    wait_for(
        lambda: events(redis_client, "start"),
        timeout=WORKER_TIMEOUT_S,
        interval=WORKER_INTERVAL_S,
        what=lambda: f"start: {fleet.logs()}",
    )
    result = taskfleet("drain", "--wait", "--timeout", "20", env=worker.env)
    assert result.returncode == 0, result.stderr
    # --wait returned: the task is finished and written, before the worker even exits.
    task = queue.get(task_id)
    assert task is not None and task.state == "done"
    assert worker.wait() == 0


def test_drain_command_gives_up_with_exit_1_while_a_task_still_runs(
    fleet: Fleet, queue: Queue, redis_client: redis.Redis
) -> None:
    queue.enqueue({"seconds": 60})
    worker = fleet.add(SLEEP, args=[*FAST, "--drain-timeout", "60"]).start()
    wait_for(
        lambda: events(redis_client, "start"),
        timeout=WORKER_TIMEOUT_S,
        interval=WORKER_INTERVAL_S,
        what=lambda: f"start: {fleet.logs()}",
    )
    result = taskfleet("drain", "--wait", "--timeout", "0.5", env=worker.env)
    assert result.returncode == 1
    assert result.stderr.strip() == "taskfleet: error: worker still holds tasks after 0.5s"
    assert worker.alive()


def test_drain_command_without_a_worker_says_so_in_one_line(tmp_path: Path) -> None:
    env = {"PYTHONPATH": str(REPO), "TASKFLEET_RUNTIME_DIR": str(tmp_path / "none")}
    result = subprocess.run(
        [sys.executable, "-m", "taskfleet", "drain", "--wait"],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert result.returncode == 1
    assert result.stderr.startswith("taskfleet: error: no worker runtime file at ")
    assert len(result.stderr.splitlines()) == 1


def test_drain_waiters_count_only_while_their_process_lives(tmp_path: Path) -> None:
    own = register_waiter(tmp_path)
    assert own is not None
    assert live_waiters(tmp_path) == [os.getpid()]

    child = subprocess.Popen(["true"])
    child.wait()
    gone = tmp_path / f"drain-waiter.{child.pid}"
    gone.write_text(json.dumps({"pidns": None, "start": None}))
    # Our own pid, but recorded with another start time: the pid was reused.
    reused = json.loads(own.read_text()) | {"start": "0"}
    own.write_text(json.dumps(reused))

    assert live_waiters(tmp_path) == []
    assert not gone.exists() and not own.exists()


def test_tasks_of_a_claim_in_flight_when_the_drain_starts_are_released_not_run(
    redis_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with Queue("q", redis_url=redis_url) as queue:
        task_id = queue.enqueue({"seconds": 0})
    settings = WorkerSettings(
        queue="q", redis_url=redis_url, pod="p", incarnation="i", runtime_dir=str(tmp_path)
    )
    worker = Worker(settings, load_handler("tests.workers.handlers:async_sleep"))
    real_claim = Broker.claim

    async def claim_then_drain(self: Broker, n: int, **options: int) -> ClaimResult:
        result = await real_claim(self, n, **options)
        if result.tasks:
            worker.request_drain()  # the SIGTERM lands while the reply is on its way
        return result

    monkeypatch.setattr(Broker, "claim", claim_then_drain)
    assert asyncio.run(worker.run()) == 0
    assert worker.counters.released == 1
    with Queue("q", redis_url=redis_url) as queue:
        task = queue.get(task_id)
        assert task is not None
        assert (task.state, task.attempts, task.lost) == (TaskState.PENDING, 0, 0)
        assert queue.client.lrange("test:events", 0, -1) == []  # the handler never ran


#: Seconds after the worker's stop signals are caught (``taskfleet.worker.earlystop``, the
#: first thing the ``taskfleet worker`` command does): at once, within the imports of click,
#: redis and the worker (about a second on a busy machine), at the Redis calls of the
#: start, and after it. Before they are caught the process is the bare interpreter, which
#: holds nothing: the kernel's default ends it, as it would any program.
EARLY_SIGNAL_AFTER_S = (0.0, 0.15, 0.3, 0.5, 0.7, 1.1)
SIGTERM_BIT = 1 << (signal.SIGTERM - 1)


def catches_sigterm(pid: int) -> bool:
    """Whether the process has a handler for SIGTERM (/proc/PID/status, SigCgt)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigCgt:"):
            return bool(int(line.split()[1], 16) & SIGTERM_BIT)
    return False


def test_a_worker_signalled_at_any_point_of_its_start_drains_and_exits_0_losing_nothing(
    fleet: Fleet, queue: Queue
) -> None:
    tasks = [queue.enqueue({"seconds": 0.2}) for _ in range(12)]
    workers = [fleet.add(SLEEP, pod=f"early-{i}") for i in range(len(EARLY_SIGNAL_AFTER_S))]
    for worker, after in zip(workers, EARLY_SIGNAL_AFTER_S, strict=True):
        worker.start()
        wait_for(
            lambda w=worker: catches_sigterm(w.pid),
            timeout=WORKER_TIMEOUT_S,
            interval=0.005,
            what=lambda w=worker: f"{w.pod} to catch SIGTERM: {fleet.logs()}",
        )
        caught = time.monotonic()
        time.sleep(max(0.0, caught + after - time.monotonic()))  # the signal's moment
        worker.signal(signal.SIGTERM)
    codes = {worker.pod: worker.wait() for worker in workers}
    assert codes == {worker.pod: 0 for worker in workers}, fleet.logs()
    for task_id in tasks:  # finished by the drain, or never claimed: none lost
        task = queue.get(task_id)
        assert task is not None and task.state in ("done", "pending"), task
        assert task.lost == 0, task
    assert queue.stats()["workers"] == 0
