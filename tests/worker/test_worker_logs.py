"""The worker's log at its default level: no line per task done, a ``tasks_summary`` that
counts them, and every failure still a line of its own at once; at debug, a line per task."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from typing import Any

import pytest
from taskfleet.producer.queue import Queue
from taskfleet.protocol.config import QueueConfig

from tests.polling import wait_for
from tests.workers.harness import FAST, WORKER_INTERVAL_S, Fleet

ECHO = "taskfleet.samples:echo"
#: returns what the payload says, or raises (``{"raise": {}}``)
BREAKER = "tests.workers.breaking:sync_breaker"


@pytest.fixture
def queue(redis_url: str) -> Iterator[Queue]:
    with Queue("jobs", redis_url=redis_url) as queue:
        queue.configure(QueueConfig(max_attempts=1, backoff_base_s=0, backoff_max_s=0))
        yield queue


def ended(queue: Queue, ids: list[str]) -> None:
    def check() -> bool:
        return all((t := queue.get(i)) is not None and t.state in ("done", "dead") for i in ids)

    wait_for(check, timeout=15.0, interval=WORKER_INTERVAL_S, what="every task to end")


def named(events: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    return [e for e in events if e.get("event") == name]


def test_at_info_tasks_done_are_counted_in_a_summary_and_a_failure_is_logged_at_once(
    fleet: Fleet, queue: Queue
) -> None:
    done = [queue.enqueue({"return": {"value": i}}) for i in range(5)]
    worker = fleet.add(BREAKER, args=[*FAST, "--concurrency", "2"]).start()
    ended(queue, done)
    failing = queue.enqueue({"raise": {}})  # one attempt: dead
    worker.wait_event("task_failed", task=failing)  # at once, not in a summary
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0
    events = worker.events()
    assert named(events, "task_done") == []
    [summary] = named(events, "tasks_summary")  # the last window's, before the totals
    assert (summary["done"], summary["failed"], summary["dead"]) == (5, 1, 1), summary
    assert summary["level"] == "info" and summary["lost"] == summary["stale"] == 0
    assert summary["done_ms_max"] >= summary["done_ms_mean"] >= 0
    order = [e["event"] for e in events]
    assert order.index("tasks_summary") < order.index("worker_stopped")
    [stopped] = named(events, "worker_stopped")
    assert (stopped["completed"], stopped["failed"]) == (5, 1)


def test_at_debug_each_task_done_is_a_line_of_its_own(fleet: Fleet, queue: Queue) -> None:
    ids = [queue.enqueue({"n": i}) for i in range(3)]
    worker = fleet.add(ECHO, args=[*FAST, "--log-level", "debug"]).start()
    ended(queue, ids)
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0
    events = worker.events()
    assert sorted(e["task"] for e in named(events, "task_done")) == sorted(ids)
    assert all(e["level"] == "debug" for e in named(events, "task_done"))
    assert named(events, "tasks_summary")[-1]["done"] == 3


def test_at_warning_neither_the_tasks_nor_the_summary_are_logged(
    fleet: Fleet, queue: Queue
) -> None:
    ids = [queue.enqueue({"n": i}) for i in range(3)]
    worker = fleet.add(ECHO, args=[*FAST, "--log-level", "warning"]).start()
    ended(queue, ids)
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0
    names = {e["event"] for e in worker.events()}
    assert not names & {"task_done", "tasks_summary", "worker_stopped"}, names
