"""Held slots: a call the worker gave up on that never returns is seen, and bounded.

A sync handler's thread can't be killed: past its task's timeout the attempt fails but
the thread keeps its slot. Real worker processes, a real Redis, a real metrics port.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from taskfleet.producer.queue import Queue
from taskfleet.protocol.config import QueueConfig
from taskfleet.protocol.records import WorkerRecord
from taskfleet.worker.held import EXIT_SLOTS_STUCK, all_stuck
from taskfleet.worker.settings import WorkerSettings

from tests.fixtures_redis import free_port
from tests.polling import wait_for
from tests.scrape import scrape, value
from tests.workers.harness import (
    FAST,
    WORKER_INTERVAL_S,
    WORKER_TIMEOUT_S,
    Fleet,
    env_for,
    taskfleet,
)

H = "tests.workers.handlers"


@pytest.fixture
def queue(redis_url: str) -> Iterator[Queue]:
    with Queue("jobs", redis_url=redis_url) as queue:
        queue.configure(QueueConfig(backoff_base_s=0, backoff_max_s=0, lease_ttl_s=1))
        yield queue


def test_a_worker_is_stuck_only_when_every_slot_is() -> None:
    assert not all_stuck(1, 2)
    assert all_stuck(2, 2)


def test_a_held_grace_that_is_not_a_positive_finite_number_is_refused() -> None:
    for grace, says in ((0.0, "positive"), (float("nan"), "finite"), (1e12, "at most")):
        settings = WorkerSettings("jobs", "redis://localhost", "p", "i", held_grace=grace)
        with pytest.raises(ValueError, match=says):
            settings.validate()


def test_a_held_grace_of_zero_is_refused_by_the_worker_command_with_one_line(
    tmp_path: Path,
) -> None:
    env = env_for("redis://127.0.0.1:1/0", tmp_path)
    result = taskfleet(
        "worker", "--queue", "q", "--handler", f"{H}:sleep", "--held-grace", "0", env=env
    )
    assert result.returncode == 2, result.stderr
    assert result.stderr == "taskfleet: error: held grace must be positive, got 0\n"


def test_a_record_without_held_reads_as_none_held() -> None:
    record = WorkerRecord.parse('{"incarnation": "i", "heartbeat_ms": 1, "inflight": 0}')
    assert record is not None and record.held == 0
    record = WorkerRecord.parse('{"incarnation": "i", "heartbeat_ms": 1, "held": 2}')
    assert record is not None and record.held == 2


def test_sync_calls_that_never_return_are_shown_held_then_the_worker_exits_for_a_restart(
    fleet: Fleet, queue: Queue
) -> None:
    port = free_port()
    hung = [queue.enqueue({"hang": True}, timeout=0.5, max_attempts=2) for _ in range(2)]
    worker = fleet.add(
        f"{H}:hang_first",
        args=[*FAST, "--concurrency", "2", "--held-grace", "2", "--metrics-port", str(port)],
    ).start()

    def held() -> int:
        return sum(w.held for w in queue.workers() if w.pod == "pod-a")

    # Past the timeout both attempts failed, yet both threads still run: held, not idle.
    wait_for(lambda: held() == 2, timeout=WORKER_TIMEOUT_S, what="held 2 in workers()")
    (info,) = queue.workers()
    assert (info.inflight, info.concurrency) == (0, 2)
    assert value(scrape(f"http://127.0.0.1:{port}/metrics"), "taskfleet_worker_slots_held") == 2
    for task_id in hung:
        worker.wait_event("slot_held", task=task_id, reason="timeout")
        task = queue.get(task_id)
        assert task is not None and task.error == "TimeoutError: task exceeded its timeout of 0.5s"
    waiting = queue.enqueue({})  # no slot can take it while both are held

    # Past the grace every slot is stuck: the worker drains, deregisters and exits 3.
    assert worker.wait(timeout=WORKER_TIMEOUT_S) == EXIT_SLOTS_STUCK
    for task_id in hung:
        assert worker.has_event("slot_stuck", task=task_id)
    assert worker.has_event("worker_stuck", held=2, stuck=2, concurrency=2)
    assert worker.has_event("tasks_summary", inflight=0, held=2)
    assert [e["event"] for e in worker.events() if e["event"] == "slot_held"] == ["slot_held"] * 2
    assert queue.workers() == []  # deregistered cleanly, not left to go silent
    task = queue.get(waiting)
    assert task is not None and task.state == "pending"

    # Nothing was lost: a fresh worker runs the waiting task and both retries.
    fleet.add(f"{H}:hang_first", pod="pod-b", args=[*FAST, "--concurrency", "2"]).start()

    def all_done() -> bool:
        tasks = [queue.get(task_id) for task_id in (*hung, waiting)]
        return all(t is not None and t.state == "done" for t in tasks)

    wait_for(all_done, timeout=WORKER_TIMEOUT_S, interval=WORKER_INTERVAL_S, what="all done")
    for task_id in hung:
        task = queue.get(task_id)
        assert task is not None and (task.attempts, task.lost) == (2, 0)


def test_one_held_slot_leaves_the_worker_running_on_the_other(fleet: Fleet, queue: Queue) -> None:
    hung = queue.enqueue({"hang": True}, timeout=0.5, max_attempts=1)
    worker = fleet.add(
        f"{H}:hang_first", args=[*FAST, "--concurrency", "2", "--held-grace", "0.5"]
    ).start()
    worker.wait_event("slot_stuck", task=hung)
    later = queue.enqueue({})

    def done() -> bool:
        task = queue.get(later)
        return task is not None and task.state == "done"

    wait_for(done, timeout=WORKER_TIMEOUT_S, interval=WORKER_INTERVAL_S, what="the task done")
    assert worker.alive() and not worker.has_event("worker_stuck")

    # The record's counts are written by the heartbeat, so the beat after the completion
    # is the first to show the freed slot; the held one must stay held.
    def counts() -> list[tuple[int, int]]:
        return [(w.inflight, w.held) for w in queue.workers()]

    wait_for(
        lambda: counts() == [(0, 1)],
        timeout=WORKER_TIMEOUT_S,
        interval=WORKER_INTERVAL_S,
        what=lambda: f"one held slot and none in flight in the record, it says {counts()}",
    )
    assert worker.alive() and not worker.has_event("worker_stuck")
