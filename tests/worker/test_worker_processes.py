"""``taskfleet worker --processes N``: a supervisor, N worker processes, real signals.

Each process is the worker ``<pod>#<i>``; the tests find their pids in the supervisor's
``process_started`` log lines and signal them as the kernel (OOM) or kubelet would.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import redis
from taskfleet.producer.queue import Queue
from taskfleet.protocol.workernames import per_pod, pod_of, process_name, workers_of
from taskfleet.worker.supervisor import CrashPolicy

from tests.polling import wait_for
from tests.workers.harness import FAST, REPO, WORKER_INTERVAL_S, WORKER_TIMEOUT_S, Fleet

GATE = "tests.workers.handlers:gate"
STARTING = "tests.workers.starting:noop"
TWO = [*FAST, "--processes", "2", "--prefetch", "0"]


def started(client: redis.Redis) -> dict[str, str]:
    """Task id -> worker name, for every task a handler started."""
    out = {}
    for raw in client.lrange("test:events", 0, -1):
        what, task_id, worker = raw.decode().split(":", 2)
        if what == "start":
            out[task_id] = worker
    return out


def child_pids(worker: Any, index: int) -> list[int]:
    """Pids the supervisor forked for process ``index``, in order."""
    return [
        int(e["pid"])
        for e in worker.events()
        if e.get("event") == "process_started" and e.get("process") == index
    ]


def wait(condition: Any, what: Any, timeout: float = WORKER_TIMEOUT_S) -> Any:
    return wait_for(condition, timeout=timeout, interval=WORKER_INTERVAL_S, what=what)


def test_a_killed_process_is_forked_again_and_only_its_tasks_are_taken_back(
    fleet: Fleet, queue: Queue, redis_client: redis.Redis
) -> None:
    first, second = queue.enqueue({"n": 1}), queue.enqueue({"n": 2})
    worker = fleet.add(GATE, pod="pod-a", args=TWO).start()
    holders = wait(lambda: len(s := started(redis_client)) == 2 and s, fleet.logs)
    assert sorted(holders.values()) == ["pod-a#1", "pod-a#2"]  # one task each
    victim = next(t for t, w in holders.items() if w == "pod-a#1")
    survivor = second if victim == first else first
    [pid] = child_pids(worker, 1)

    os.kill(pid, signal.SIGKILL)
    wait(lambda: len(child_pids(worker, 1)) == 2, fleet.logs)
    # The new process 1 registers under pod-a#1 and takes back what the killed one held.
    wait(lambda: (t := queue.get(victim)) is not None and t.lost == 1, lambda: queue.get(victim))
    kept = queue.get(survivor)
    assert kept is not None and kept.state == "running" and kept.lost == 0
    assert kept.pod == "pod-a#2" and kept.attempts == 1
    redis_client.rpush("test:gate", "go", "go")  # the survivor's gate, and the re-run's
    wait(
        lambda: all((t := queue.get(i)) is not None and t.state == "done" for i in holders),
        lambda: [queue.get(i) for i in holders],
    )
    assert child_pids(worker, 2) and len(child_pids(worker, 2)) == 1  # never restarted
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0
    assert queue.stats()["workers"] == 0


def test_sigterm_while_processes_start_drains_them_at_once_and_exits_0(
    fleet: Fleet, queue: Queue, tmp_path: Path
) -> None:
    hold = tmp_path / "hold"
    hold.touch()
    worker = fleet.add(
        STARTING, pod="pod-a", args=TWO, env={"TASKFLEET_TEST_HOLD": str(hold)}
    ).start()
    # Both processes are inside their start (the handler's import): no loop, no handlers.
    wait(lambda: len(list(tmp_path.glob("hold.*"))) == 2, fleet.logs)
    task_id = queue.enqueue({"n": 1})
    worker.signal(signal.SIGTERM)
    worker.wait_event("supervisor_drain")
    hold.unlink()  # the starts end now, after the signal reached both processes
    assert worker.wait() == 0
    assert len([e for e in worker.events() if e.get("event") == "drain_started"]) == 2
    task = queue.get(task_id)
    assert task is not None and task.state == "pending" and task.attempts == 0
    assert queue.stats()["workers"] == 0


def test_sigterm_while_a_crashed_process_waits_for_its_refork_ends_the_pod_with_0(
    fleet: Fleet, tmp_path: Path
) -> None:
    crash = tmp_path / "crash"
    crash.touch()
    worker = fleet.add(
        STARTING, pod="pod-a", args=TWO, env={"TASKFLEET_TEST_CRASH": str(crash)}
    ).start()
    # The fourth quick exit in a row of a slot waits 1 s before its re-fork: both slots
    # are then waiting, no process runs.
    worker.wait_event("process_restart", in_s=1.0, process=1)
    worker.wait_event("process_restart", in_s=1.0, process=2)
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0
    events = [e.get("event") for e in worker.events()]
    assert "process_started" not in events[events.index("supervisor_drain") :]
    assert worker.has_event("supervisor_drain")
    assert not worker.has_event("crash_loop")


def test_a_crash_loop_ends_the_pod_with_the_processes_exit_code(
    fleet: Fleet, tmp_path: Path
) -> None:
    crash = tmp_path / "crash"
    crash.touch()
    worker = fleet.add(
        STARTING, pod="pod-a", args=TWO, env={"TASKFLEET_TEST_CRASH": str(crash)}
    ).start()
    assert worker.wait(timeout=30) == 3
    assert worker.has_event("crash_loop", exits=CrashPolicy().limit + 1)


def test_a_process_whose_configuration_is_refused_ends_the_pod_with_2(fleet: Fleet) -> None:
    worker = fleet.add("tests.workers.handlers:no_such_handler", args=TWO).start()
    assert worker.wait() == 2
    assert worker.has_event("process_refused")
    assert "no_such_handler" in worker.log_text()


def test_drain_waits_until_every_process_has_drained(
    fleet: Fleet, queue: Queue, redis_client: redis.Redis
) -> None:
    for n in range(2):
        queue.enqueue({"n": n})
    worker = fleet.add(GATE, pod="pod-a", args=TWO).start()
    wait(lambda: len(started(redis_client)) == 2, fleet.logs)
    drain = subprocess.Popen(
        [sys.executable, "-m", "taskfleet", "drain", "--wait", "--timeout", "20"],
        env=worker.env,
        cwd=REPO,
    )
    try:
        worker.wait_event("drain_started")
        redis_client.rpush("test:gate", "go")  # one process finishes its task and exits
        worker.wait_event("process_exited", code=0)
        assert drain.poll() is None  # the other one still holds its task
        redis_client.rpush("test:gate", "go")
        assert drain.wait(timeout=WORKER_TIMEOUT_S) == 0
    finally:
        drain.kill()
    assert worker.wait() == 0
    assert len([e for e in worker.events() if e.get("event") == "process_exited"]) == 2
    assert queue.stats()["completed"] == 2


def test_a_pod_name_with_the_process_separator_is_refused(fleet: Fleet) -> None:
    worker = fleet.add(STARTING, pod="pod#1", args=TWO).start()
    assert worker.wait() == 2
    assert "must not contain '#'" in worker.log_text()


@pytest.mark.parametrize(
    ("exits", "delay"),
    [(1, 0.0), (2, 0.25), (3, 0.5), (4, 1.0), (5, 2.0), (6, None)],
)
def test_a_slot_that_keeps_ending_waits_longer_each_time_then_ends_the_pod(
    exits: int, delay: float | None
) -> None:
    assert CrashPolicy().delay(exits) == delay


def test_the_backoff_stops_growing_at_its_cap() -> None:
    policy = CrashPolicy(limit=100)
    assert policy.delay(50) == policy.backoff_max


def test_worker_names_map_back_to_their_pod() -> None:
    names = [process_name("web-1", 1), process_name("web-1", 2), "web-2", "web-10#1"]
    assert [pod_of(n) for n in names] == ["web-1", "web-1", "web-2", "web-10"]
    assert workers_of("web-1", names) == ["web-1#1", "web-1#2"]
    assert per_pod(dict.fromkeys(names, 2)) == {"web-1": 4, "web-2": 2, "web-10": 2}
