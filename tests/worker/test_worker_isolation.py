"""``--isolation process`` in real worker processes: a sync handler that never looks at
``cancelled()`` is stopped for real (SIGTERM, then SIGKILL after the grace) on cancel,
timeout, the drain deadline and a lost lease; each outcome is written once, and only once
the child is gone; a leaking handler's child is replaced after ``--max-tasks-per-child``
tasks; a child that dies fails only its attempt."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from taskfleet import Queue, QueueConfig, Task, TaskState

from tests.polling import wait_for
from tests.workers.harness import (
    FAST,
    WORKER_INTERVAL_S,
    WORKER_TIMEOUT_S,
    Fleet,
    WorkerProcess,
    env_for,
    taskfleet,
)

H = "tests.workers.isolated_handlers"
ISOLATED = [*FAST, "--isolation", "process"]


@pytest.fixture
def queue(redis_url: str) -> Iterator[Queue]:
    with Queue("jobs", redis_url=redis_url) as queue:
        queue.configure(QueueConfig(backoff_base_s=0, backoff_max_s=0, lease_ttl_s=1))
        yield queue


def state_of(queue: Queue, task_id: str, *states: TaskState, timeout: float = 15.0) -> Task:
    def check() -> Task | None:
        task = queue.get(task_id)
        return task if task is not None and task.state in states else None

    return wait_for(
        check,
        timeout=timeout,
        interval=WORKER_INTERVAL_S,
        what=lambda: f"task {task_id} to be {states}: {queue.get(task_id)}",
    )


def child_pid(queue: Queue, task_id: str) -> int:
    """The pid the handler reported as its progress (``pid N``) from its child process."""

    def reported() -> int | None:
        task = queue.get(task_id)
        message = (task.progress or {}).get("message", "") if task is not None else ""
        return int(message.split()[1]) if message.startswith("pid ") else None

    return wait_for(
        reported, timeout=WORKER_TIMEOUT_S, interval=WORKER_INTERVAL_S, what="the child's pid"
    )


def running(pid: int) -> bool:
    """Whether ``pid`` still runs code: absent from /proc, or a zombie, is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def wait_gone(pid: int, timeout: float = WORKER_TIMEOUT_S) -> None:
    wait_for(lambda: not running(pid), timeout=timeout, interval=0.02, what=f"pid {pid} gone")


def count(worker: WorkerProcess, event: str, task_id: str) -> int:
    return sum(1 for e in worker.events() if e.get("event") == event and e.get("task") == task_id)


def test_a_runaway_sync_handler_is_stopped_when_its_task_is_cancelled(
    fleet: Fleet, queue: Queue
) -> None:
    task_id = queue.enqueue({})
    worker = fleet.add(f"{H}:runaway", args=ISOLATED).start()
    pid = child_pid(queue, task_id)
    assert pid != worker.pid and running(pid)
    queue.cancel(task_id)
    wait_gone(pid)
    state_of(queue, task_id, TaskState.CANCELLED)
    worker.wait_event("task_cancelled", task=task_id)
    assert queue.stats()["cancelled_total"] == 1
    assert count(worker, "task_cancelled", task_id) == 1
    assert worker.has_event("child_stopped", task=task_id, pid=pid, reason="cancelled")
    assert worker.alive()
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0


def test_a_runaway_sync_handler_is_stopped_when_it_times_out_and_fails_once(
    fleet: Fleet, queue: Queue
) -> None:
    task_id = queue.enqueue({}, timeout=3, max_attempts=1)
    worker = fleet.add(f"{H}:runaway", args=ISOLATED).start()
    pid = child_pid(queue, task_id)
    task = state_of(queue, task_id, TaskState.DEAD)
    # the failure is written only once the child is gone: nothing runs the task any more
    assert not running(pid)
    assert task.error == "TimeoutError: task exceeded its timeout of 3s"
    assert task.attempts == 1
    stats = queue.stats()
    assert (stats["failed"], stats["dead_total"]) == (1, 1)
    worker.wait_event("task_failed", task=task_id)
    assert count(worker, "task_failed", task_id) == 1
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0


def test_a_runaway_sync_handler_is_stopped_at_the_drain_deadline_and_released_once(
    fleet: Fleet, queue: Queue
) -> None:
    task_id = queue.enqueue({})
    worker = fleet.add(f"{H}:runaway", args=[*ISOLATED, "--drain-timeout", "0.5"]).start()
    pid = child_pid(queue, task_id)
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0
    assert not running(pid)
    task = state_of(queue, task_id, TaskState.PENDING)
    assert task.attempts == 0 and task.lost == 0  # released: the start is given back
    assert queue.stats()["released"] == 1
    assert count(worker, "task_released", task_id) == 1
    assert worker.has_event("child_stopped", task=task_id, pid=pid, reason="drain")


def test_a_handler_that_swallows_the_stop_is_killed_after_the_grace(
    fleet: Fleet, queue: Queue
) -> None:
    task_id = queue.enqueue({})
    worker = fleet.add(f"{H}:stubborn", args=ISOLATED).start()
    pid = child_pid(queue, task_id)
    queue.cancel(task_id)
    worker.wait_event("task_stopping", task=task_id, reason="cancelled")
    # the task stays running (its lease extended) while its child may still run
    assert queue.get(task_id).state is TaskState.RUNNING  # type: ignore[union-attr]
    wait_gone(pid, timeout=15)
    state_of(queue, task_id, TaskState.CANCELLED)
    assert worker.has_event("child_killed", task=task_id, pid=pid)
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0


def test_a_runaway_child_is_stopped_when_its_worker_loses_the_lease(
    fleet: Fleet, queue: Queue
) -> None:
    task_id = queue.enqueue({})
    worker = fleet.add(f"{H}:runaway", args=[*ISOLATED, "--drain-timeout", "0.5"]).start()
    pid = child_pid(queue, task_id)
    # A stalled worker (SIGSTOP): its child runs on, its lease lapses and is taken back.
    os.kill(worker.pid, signal.SIGSTOP)
    try:
        wait_for(
            lambda: queue.sweep().requeued or None,
            timeout=WORKER_TIMEOUT_S,
            interval=0.1,
            what="the lapsed lease taken back",
        )
    finally:
        os.kill(worker.pid, signal.SIGCONT)
    worker.wait_event("lease_lost", task=task_id)
    wait_gone(pid)
    worker.wait_event("child_stopped", task=task_id, pid=pid, reason="lease lost")
    task = queue.get(task_id)
    assert task is not None and task.lost == 1
    # taken back, it runs again (here, in a new child, only once the old one is gone)
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0


def test_a_runaway_child_does_not_outlive_its_worker_killed_outright(
    fleet: Fleet, queue: Queue
) -> None:
    task_id = queue.enqueue({})
    worker = fleet.add(f"{H}:runaway", args=ISOLATED).start()
    pid = child_pid(queue, task_id)
    worker.kill()  # SIGKILL: no drain, no stop
    wait_gone(pid)
    # the task comes back through its lease, as for any SIGKILLed worker
    wait_for(
        lambda: queue.sweep().requeued or None,
        timeout=WORKER_TIMEOUT_S,
        interval=0.1,
        what="the dead worker's task taken back",
    )
    task = state_of(queue, task_id, TaskState.PENDING)
    assert task.lost == 1


def test_a_leaking_handlers_child_is_replaced_after_max_tasks_per_child(
    fleet: Fleet, queue: Queue
) -> None:
    ids = queue.enqueue_many([{"payload": {}} for _ in range(6)])
    worker = fleet.add(
        f"{H}:leak", args=[*ISOLATED, "--concurrency", "1", "--max-tasks-per-child", "2"]
    ).start()
    results = [state_of(queue, task_id, TaskState.DONE).result for task_id in ids]
    pids = [r["pid"] for r in results]  # type: ignore[index]
    assert pids[0] == pids[1] != pids[2] == pids[3] != pids[4] == pids[5]
    assert len(set(pids)) == 3 and worker.pid not in pids
    # each child held at most two tasks' leak, then exited and gave it back
    assert max(r["leaked_mb"] for r in results) == 10  # type: ignore[index]
    for old in pids[:4]:
        wait_gone(old)
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0


def test_a_child_killed_mid_task_fails_that_attempt_which_is_retried_and_the_worker_serves_on(
    fleet: Fleet, queue: Queue
) -> None:
    task_id = queue.enqueue({}, max_attempts=3)
    worker = fleet.add(f"{H}:dies_on_first_attempt", args=ISOLATED).start()
    pid = child_pid(queue, task_id)
    os.kill(pid, signal.SIGKILL)  # what the OOM killer does
    task = state_of(queue, task_id, TaskState.DONE)
    assert task.attempts == 2 and task.lost == 0
    assert task.result not in (pid, worker.pid)
    worker.wait_event(
        "task_failed",
        task=task_id,
        error="ChildProcessDied: the task's child process was killed by SIGKILL "
        "(out of memory, or killed from outside)",
    )
    assert queue.stats()["failed"] == 1
    assert worker.alive()
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0


def test_an_async_handler_runs_on_its_childs_own_loop(fleet: Fleet, queue: Queue) -> None:
    task_id = queue.enqueue({})
    worker = fleet.add(f"{H}:async_pid", args=ISOLATED).start()
    result = state_of(queue, task_id, TaskState.DONE).result
    assert result["task"] == task_id and result["pid"] != worker.pid  # type: ignore[index]
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0


def test_a_sync_handler_polling_cancelled_stops_on_a_thread_too(fleet: Fleet, queue: Queue) -> None:
    task_id = queue.enqueue({})
    worker = fleet.add(f"{H}:polite").start()
    pid = child_pid(queue, task_id)
    assert pid == worker.pid  # thread mode: the worker's own process
    queue.cancel(task_id)
    state_of(queue, task_id, TaskState.CANCELLED)
    worker.wait_event("task_cancelled", task=task_id)
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--max-tasks-per-child", "2"],
            "max tasks per child needs process isolation (--isolation process)",
        ),
        (["--isolation", "fork"], "Invalid value for '--isolation'"),
        (
            ["--isolation", "process", "--max-tasks-per-child", "0"],
            "Invalid value for '--max-tasks-per-child'",
        ),
    ],
)
def test_bad_isolation_options_exit_2_with_one_line(
    redis_url: str, tmp_path: Path, args: list[str], message: str
) -> None:
    env = env_for(redis_url, tmp_path / "rt")
    done = taskfleet("worker", "--queue", "jobs", "--handler", f"{H}:pid", *args, env=env)
    assert done.returncode == 2 and message in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


def test_a_handler_that_cant_travel_to_a_child_is_refused_at_start(
    redis_url: str, tmp_path: Path
) -> None:
    env = env_for(redis_url, tmp_path / "rt")
    handler = f"{H}:closure"
    done = taskfleet(
        "worker", "--queue", "jobs", "--handler", handler, "--isolation", "process", env=env
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [
        f"taskfleet: error: --isolation process: handler '{handler}' can't be sent to a child "
        "process (AttributeError); make it a module-level function"
    ]


def test_a_run_is_stopped_only_after_it_began() -> None:
    """Stopping a run twice asks once; the error of the first ask is kept."""
    from taskfleet.worker.runs import Run

    run = Run(task=None, claimed_at=time.monotonic())  # type: ignore[arg-type]
    assert run.stop("timeout", "TimeoutError: x") and not run.stop("cancelled", "other")
    assert (run.stop_reason, run.stop_error) == ("timeout", "TimeoutError: x")


def test_cancelled_is_a_cheap_call_on_the_task_and_a_module_function_false_outside_a_task() -> None:
    from taskfleet import cancelled as module_cancelled
    from taskfleet.worker.context import TaskContext, TaskControl, context_for, current_task

    control = TaskControl("token", lambda *report: None)
    task = TaskContext("q", "t1", 1, "pod", "inc", "redis://x", control=control)
    seen: list[tuple[bool, bool, bool]] = []

    def handler() -> None:
        check = current_task().cancelled
        seen.append((check(), bool(check), module_cancelled()))

    context = context_for(task)
    context.run(handler)
    control.cancelled = True  # what the worker's heartbeat sets
    context.run(handler)
    assert seen == [(False, False, False), (True, True, True)]
    assert module_cancelled() is False  # no task here


def test_each_worker_process_of_a_pod_runs_its_own_children(fleet: Fleet, queue: Queue) -> None:
    ids = queue.enqueue_many([{"payload": {}} for _ in range(6)])
    worker = fleet.add(
        f"{H}:pid", args=[*ISOLATED, "--processes", "2", "--concurrency", "1"]
    ).start()
    pids = {state_of(queue, task_id, TaskState.DONE).result for task_id in ids}
    assert worker.pid not in pids and all(isinstance(p, int) for p in pids)
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0
    for pid in pids:
        wait_gone(pid)  # type: ignore[arg-type]
