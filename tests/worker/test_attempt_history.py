"""Every attempt of a task kept with it: who ran it, when, how it ended, and why."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from taskfleet.producer.queue import Queue
from taskfleet.protocol.config import QueueConfig
from taskfleet.protocol.tasks import Task

from tests.polling import wait_for
from tests.workers.harness import FAST, WORKER_INTERVAL_S, Fleet

H = "tests.workers.handlers"
HANDLERS_FILE = Path(__file__).resolve().parents[1] / "workers" / "handlers.py"


@pytest.fixture
def queue(redis_url: str) -> Iterator[Queue]:
    with Queue("jobs", redis_url=redis_url) as queue:
        queue.configure(QueueConfig(backoff_base_s=0, backoff_max_s=0, lease_ttl_s=1))
        yield queue


def finished(queue: Queue, task_id: str, timeout: float = 20.0) -> Task:
    def check() -> Task | None:
        task = queue.get(task_id)
        return task if task is not None and task.finished else None

    return wait_for(
        check, timeout=timeout, interval=WORKER_INTERVAL_S, what=f"task {task_id} to finish"
    )


@pytest.mark.parametrize("isolation", ["thread", "process"])
def test_a_task_that_failed_twice_then_succeeded_shows_three_attempts(
    fleet: Fleet, queue: Queue, isolation: str
) -> None:
    task_id = queue.enqueue({}, max_attempts=5)
    fleet.add(f"{H}:fail_twice", pod="pod-h", args=[*FAST, "--isolation", isolation]).start()
    task = finished(queue, task_id)
    assert task.state == "done"
    assert [(a.attempt, a.pod, a.outcome) for a in task.history] == [
        (1, "pod-h", "failed"),
        (2, "pod-h", "failed"),
        (3, "pod-h", "done"),
    ]
    for attempt in task.history:
        assert attempt.started_at is not None and attempt.ended_at is not None
        assert attempt.started_at <= attempt.ended_at
    assert task.history[0].ended_at <= task.history[1].started_at  # type: ignore[operator]
    assert [a.error for a in task.history] == ["KeyError: 'missing'"] * 2 + [None]
    # the traceback names the handler's file and the line that raised
    line = next(
        n
        for n, text in enumerate(HANDLERS_FILE.read_text().splitlines(), 1)
        if 'return payload["missing"]' in text
    )
    for attempt in task.history[:2]:
        assert attempt.traceback is not None
        assert f'handlers.py", line {line}, in fail_twice' in attempt.traceback
        assert attempt.traceback.rstrip().endswith("KeyError: 'missing'")
        assert len(attempt.traceback) <= 4096
    assert task.traceback == task.history[1].traceback
    assert task.history[2].traceback is None


@pytest.mark.parametrize("isolation", ["thread", "process"])
def test_an_attempt_past_its_timeout_shows_timed_out(
    fleet: Fleet, queue: Queue, isolation: str
) -> None:
    task_id = queue.enqueue({"seconds": 30}, max_attempts=1, timeout=1)
    fleet.add(f"{H}:sleep", pod="pod-t", args=[*FAST, "--isolation", isolation]).start()
    task = finished(queue, task_id, timeout=30)
    assert task.state == "dead"
    assert [(a.attempt, a.pod, a.outcome) for a in task.history] == [(1, "pod-t", "timed out")]


def test_a_task_taken_back_from_a_killed_worker_shows_lost_with_that_pod(
    fleet: Fleet, queue: Queue, redis_url: str
) -> None:
    task_id = queue.enqueue({"hang": True})
    first = fleet.add(f"{H}:hang_first", pod="pod-doomed").start()
    client = redis.Redis.from_url(redis_url)
    wait_for(
        lambda: client.lrange("test:events", 0, -1),
        timeout=15,
        what="the first attempt to start",
    )
    first.kill()  # SIGKILL: nothing is given back, the lease runs out
    fleet.add(f"{H}:hang_first", pod="pod-heir").start()
    task = finished(queue, task_id)
    assert task.state == "done"
    assert [(a.attempt, a.pod, a.outcome) for a in task.history] == [
        (1, "pod-doomed", "lost"),
        (2, "pod-heir", "done"),
    ]
    assert task.history[0].ended_at is not None and task.history[0].error is None


def test_a_task_that_runs_once_stores_no_history_field(
    fleet: Fleet, queue: Queue, redis_url: str
) -> None:
    task_id = queue.enqueue({"seconds": 0})
    fleet.add(f"{H}:sleep", pod="pod-once").start()
    task = finished(queue, task_id)
    # the done attempt is told by the task's own fields: the common path writes nothing
    assert [(a.attempt, a.pod, a.outcome) for a in task.history] == [(1, "pod-once", "done")]
    raw = redis.Redis.from_url(redis_url).hgetall(queue.keys.task(task_id))
    assert b"history" not in raw
