"""No task can stall a fleet: whatever a task holds or a handler does, every task ends done
or dead with a reason, and the worker goes on serving the others.

Each test is one class of stall: a task the worker cannot read, a failure of the worker
while it holds a task, an async handler that raises what looks like the worker's own
cancellation or exit, and one that ignores its timeout.
"""

from __future__ import annotations

import signal

import redis
from taskfleet.producer.queue import Queue
from taskfleet.protocol.config import QueueConfig
from taskfleet.protocol.tasks import Task

from tests.polling import wait_for
from tests.workers.harness import FAST, WORKER_INTERVAL_S, Fleet

H = "tests.workers.handlers"
HOSTILE = "tests.workers.hostile:hostile"


def finished(queue: Queue, task_id: str, timeout: float = 15.0) -> Task:
    def check() -> Task | None:
        task = queue.get(task_id)
        return task if task is not None and task.state in ("done", "dead") else None

    return wait_for(
        check, timeout=timeout, interval=WORKER_INTERVAL_S, what=f"task {task_id} to finish"
    )


def ended(client: redis.Redis, queue: Queue, task_id: str) -> dict[str, str]:
    """State, reason and attempts as stored, for hashes no model need be able to read."""
    fields = ("state", "reason", "attempts")

    def check() -> dict[str, str] | None:
        raw = client.hmget(queue.keys.task(task_id), fields)
        got = {k: v.decode() for k, v in zip(fields, raw, strict=True) if v is not None}
        return got if got.get("state") in ("done", "dead") else None

    return wait_for(
        check, timeout=15.0, interval=WORKER_INTERVAL_S, what=f"task {task_id} to finish"
    )


def test_tasks_the_worker_cannot_read_go_dead_with_a_reason_and_the_others_run(
    fleet: Fleet, queue: Queue, redis_client: redis.Redis
) -> None:
    """A hash a foreign writer edited: numbers that aren't, a payload nested too deep for
    the JSON parser (RecursionError, not ValueError), a cost Lua would print as 1e+14."""
    queue.configure(QueueConfig(max_attempts=5))
    bad = {
        "cost": ("cost", "abc", "bad task"),
        "attempts": ("max_attempts", "three", "bad task"),
        "timeout": ("timeout", "-inf", "bad task"),
        "nested": ("payload", '{"a":' + "[" * 200_000 + "]" * 200_000 + "}", "bad payload"),
    }
    ids = {}
    for name, (field, value, _) in bad.items():
        ids[name] = queue.enqueue({"seconds": 0}, priority=5)
        redis_client.hset(queue.keys.task(ids[name]), field, value)
    big_cost = queue.enqueue({"seconds": 0}, priority=5)
    redis_client.hset(queue.keys.task(big_cost), "cost", str(10**14))
    good = [queue.enqueue({"seconds": 0}) for _ in range(5)]
    worker = fleet.add(f"{H}:sleep", args=[*FAST, "--concurrency", "2"]).start()

    for name, (_, _, reason) in bad.items():
        # not retried (one attempt): it could never run
        expected = {"state": "dead", "reason": reason, "attempts": "1"}
        assert ended(redis_client, queue, ids[name]) == expected, name
    assert finished(queue, big_cost).state == "done"
    assert all(finished(queue, t).state == "done" for t in good)
    assert worker.alive(), worker.log_text()
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0, worker.log_text()
    assert "Traceback" not in worker.log_text()


def test_a_task_that_makes_every_worker_fail_goes_dead_after_max_lost_failures(
    fleet: Fleet, queue: Queue
) -> None:
    """A worker that fails gives back what it holds as lost, not released: the poison
    task's count of losses ends it, and the tasks behind it then run."""
    queue.configure(QueueConfig(max_lost=2))
    poison = queue.enqueue({"poison": True}, priority=10)
    rest = [queue.enqueue({"n": i}) for i in range(3)]
    args = [*FAST, "--concurrency", "1", "--prefetch", "0"]
    worker = fleet.add("tests.workers.faults:ok", args=args)
    failures = 0
    while (task := queue.get(poison)) is not None and task.state != "dead":
        assert failures < 3, f"still {task.state} after {failures} failed workers"
        assert worker.start().wait() == 1, worker.log_text()  # as a restarted container
        failures += 1
    assert failures == 3  # lost once per failure; max_lost 2: the third loss is fatal
    assert task.reason == "worker lost" and task.lost == 3, task
    worker.start()
    assert all(finished(queue, t).state == "done" for t in rest)
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0, worker.log_text()


def test_an_async_handler_raising_cancelled_error_itself_fails_its_attempt(
    fleet: Fleet, queue: Queue
) -> None:
    """``sub.cancel(); await sub`` in a handler is its failure, not the worker's
    cancellation: written, retried, dead at max_attempts; the slot is free again."""
    queue.configure(QueueConfig(max_attempts=2, backoff_base_s=0, backoff_max_s=0))
    ids = [queue.enqueue({"do": what}) for what in ("cancel-self", "raise-cancelled")]
    worker = fleet.add(HOSTILE, args=[*FAST, "--concurrency", "1"]).start()
    for task_id in ids:
        task = finished(queue, task_id)
        assert (task.state, task.reason, task.attempts) == ("dead", "failed", 2), task
        assert "CancelledError" in (task.error or ""), task
    after = queue.enqueue({"do": "nothing"})
    assert finished(queue, after).state == "done"
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0, worker.log_text()


def test_an_async_handler_raising_system_exit_or_keyboard_interrupt_fails_its_attempt(
    fleet: Fleet, queue: Queue
) -> None:
    queue.configure(QueueConfig(max_attempts=1))
    exits = queue.enqueue({"do": "exit"})
    interrupts = queue.enqueue({"do": "interrupt"})
    worker = fleet.add(HOSTILE, args=[*FAST, "--concurrency", "2"]).start()
    for task_id, error in ((exits, "SystemExit"), (interrupts, "KeyboardInterrupt")):
        task = finished(queue, task_id)
        assert task.state == "dead" and error in (task.error or ""), task
    after = queue.enqueue({"do": "nothing"})
    assert finished(queue, after).state == "done"
    assert worker.alive(), worker.log_text()
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0, worker.log_text()


def test_an_async_handler_that_swallows_its_timeout_fails_and_keeps_its_slot_until_it_returns(
    fleet: Fleet, queue: Queue, redis_client: redis.Redis
) -> None:
    """It is not ``done`` past its timeout: the attempt fails when the time is up, and
    the slot stays taken (concurrency 1: the next task waits) until the call returns."""
    queue.configure(QueueConfig(max_attempts=1))
    stubborn = queue.enqueue({"do": "swallow-cancel", "seconds": 3}, timeout=0.5)
    worker = fleet.add(HOSTILE, args=[*FAST, "--concurrency", "1"]).start()
    task = finished(queue, stubborn)
    assert task.state == "dead" and "TimeoutError" in (task.error or ""), task
    assert task.result is None
    waiting = queue.enqueue({"do": "nothing"})
    assert finished(queue, waiting).state == "done"
    # The stubborn call ran on after its failure; the next task began only once it ended.
    order = [e.decode().split(":")[:2] for e in redis_client.lrange("test:events", 0, -1)]
    assert order.index(["end", stubborn]) < order.index(["start", waiting]), order
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0, worker.log_text()
