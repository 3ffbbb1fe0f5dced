"""The handler API and verdicts in real worker processes: progress and real cost written
in batches, cancellation of running tasks (sync and async handlers), permanent failures
and retries the handler asks for."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Iterator

import pytest
import redis
from taskfleet import AsyncQueue, CancelOutcome, Queue, QueueConfig, Task, TaskState

from tests.polling import wait_for
from tests.workers.harness import WORKER_INTERVAL_S, WORKER_TIMEOUT_S, Fleet

H = "tests.workers.control_handlers"


@pytest.fixture
def queue(redis_url: str) -> Iterator[Queue]:
    with Queue("jobs", redis_url=redis_url) as queue:
        queue.configure(QueueConfig(backoff_base_s=0, backoff_max_s=0, lease_ttl_s=1))
        yield queue


def events(client: redis.Redis) -> list[str]:
    return [e.decode() for e in client.lrange("test:events", 0, -1)]


def state_of(queue: Queue, task_id: str, *states: TaskState) -> Task:
    def check() -> Task | None:
        task = queue.get(task_id)
        return task if task is not None and task.state in states else None

    return wait_for(
        check,
        timeout=WORKER_TIMEOUT_S,
        interval=WORKER_INTERVAL_S,
        what=lambda: f"task {task_id} to be {states}: {queue.get(task_id)}",
    )


def test_a_chatty_handlers_progress_and_cost_reach_the_task_in_few_writes(
    fleet: Fleet, queue: Queue
) -> None:
    queue.configure(QueueConfig(lease_ttl_s=1, rate_limit_cost=1000, rate_limit_period_s=3600))
    task_id = queue.enqueue({"steps": 5000, "cost": 7}, cost=100)
    queue.client.config_resetstat()
    worker = fleet.add(f"{H}:progressing").start()

    def reported() -> Task | None:
        task = queue.get(task_id)
        done = task is not None and task.cost_used == 7 and task.progress
        return task if done and task.progress.get("done") == 5000 else None

    task = wait_for(reported, timeout=WORKER_TIMEOUT_S, interval=WORKER_INTERVAL_S, what="reports")
    assert task.progress == {"done": 5000, "total": 5000, "fraction": 1.0, "message": "step 5000"}
    assert task.state is TaskState.RUNNING
    # 5001 reports, a handful of script calls: one per report interval at most
    calls = queue.client.info("commandstats").get("cmdstat_evalsha", {}).get("calls", 0)
    assert calls < 100
    # the 93 units the estimate over-charged are back in the bucket (1000 - 100 + 93)
    tokens = float(queue.client.hget(queue.keys.bucket_cost, "tokens") or 0)
    assert tokens == pytest.approx(993, abs=2)
    queue.client.rpush("test:gate", "go")
    assert state_of(queue, task_id, TaskState.DONE).result == "opened"
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0


def test_follow_yields_progress_until_the_task_finishes(fleet: Fleet, queue: Queue) -> None:
    task_id = queue.enqueue({"steps": 3})
    fleet.add(f"{H}:progressing").start()
    seen = []
    for task in queue.follow(task_id, interval=0.02, timeout=WORKER_TIMEOUT_S):
        seen.append(task)
        if task.progress is not None and task.state is TaskState.RUNNING:
            queue.client.rpush("test:gate", "go")
    assert seen[-1].state is TaskState.DONE
    assert any(t.progress == {"done": 3, "total": 3, "fraction": 1.0, "message": "step 3"}
               for t in seen)  # fmt: skip


@pytest.mark.parametrize("client", ["sync", "async"])
def test_a_follower_is_woken_by_each_progress_report_and_the_end_not_by_a_poll(
    fleet: Fleet, queue: Queue, redis_url: str, client: str
) -> None:
    # interval=600: a poll would wake once in ten minutes; every change here wakes it
    task_id = queue.enqueue({"steps": 3})
    fleet.add(f"{H}:stepping").start()

    def seen_one(task: Task, seen: list[Task]) -> None:
        step = task.progress["done"] if task.state is TaskState.RUNNING and task.progress else 0
        if step and step not in steps:  # a report may come again: the same step
            steps.append(step)
            queue.client.rpush("test:gate", "go")  # the handler reports its next step
        seen.append(task)

    seen: list[Task] = []
    steps: list[int] = []
    if client == "sync":
        for task in queue.follow(task_id, interval=600, timeout=WORKER_TIMEOUT_S):
            seen_one(task, seen)
    else:

        async def follow() -> None:
            async with AsyncQueue(queue.name, redis_url) as aq:
                async for task in aq.follow(task_id, interval=600, timeout=WORKER_TIMEOUT_S):
                    seen_one(task, seen)

        asyncio.run(follow())
    assert steps == [1, 2, 3]
    assert seen[-1].state is TaskState.DONE and seen[-1].result == "stepped"


@pytest.mark.parametrize(
    ("handler", "event"),
    [("until_cancelled", "saw-cancel"), ("async_until_cancelled", "coroutine-cancelled")],
)
def test_a_running_task_is_cancelled_through_the_heartbeat_and_ends_cancelled(
    fleet: Fleet, queue: Queue, handler: str, event: str
) -> None:
    task_id = queue.enqueue({})
    worker = fleet.add(f"{H}:{handler}").start()
    wait_for(
        lambda: f"start:{task_id}" in events(queue.client),
        timeout=WORKER_TIMEOUT_S,
        interval=WORKER_INTERVAL_S,
        what="the handler to start",
    )
    assert queue.cancel(task_id) is CancelOutcome.REQUESTED
    task = state_of(queue, task_id, TaskState.CANCELLED)
    assert task.result is None
    assert f"{event}:{task_id}" in events(queue.client)
    worker.wait_event("task_cancelled", task=task_id)
    # the worker goes on serving: the next task runs
    follow_up = queue.enqueue({})
    wait_for(
        lambda: f"start:{follow_up}" in events(queue.client),
        timeout=WORKER_TIMEOUT_S,
        interval=WORKER_INTERVAL_S,
        what="the next task to start",
    )
    queue.cancel(follow_up)
    state_of(queue, follow_up, TaskState.CANCELLED)
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0


def test_a_permanent_failure_goes_dead_at_once_with_its_reason(fleet: Fleet, queue: Queue) -> None:
    task_id = queue.enqueue({}, max_attempts=5)
    fleet.add(f"{H}:permanent").start()
    task = state_of(queue, task_id, TaskState.DEAD)
    assert (task.reason, task.attempts) == ("permanent", 1)
    assert task.error == "PermanentFailure: no such user"
    assert events(queue.client).count(f"start:{task_id}") == 1


def test_a_retry_the_handler_asks_for_does_not_spend_an_attempt(fleet: Fleet, queue: Queue) -> None:
    task_id = queue.enqueue({"times": 3, "delay": 0.05}, max_attempts=1)
    worker = fleet.add(f"{H}:rate_limited").start()
    task = state_of(queue, task_id, TaskState.DONE)
    assert (task.result, task.attempts, task.deferred) == ("ok after 4 runs", 1, 3)
    assert queue.stats()["deferred"] == 3
    worker.wait_event("task_deferred", task=task_id)
