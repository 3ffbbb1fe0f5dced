"""Running tasks: results, failures, timeouts, heartbeats under CPU load, restarts."""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
import redis.asyncio
from taskfleet.producer.queue import Queue
from taskfleet.protocol.config import QueueConfig
from taskfleet.protocol.keys import QueueKeys
from taskfleet.protocol.tasks import Task
from taskfleet.worker import Worker, WorkerSettings
from taskfleet.worker.broker import Broker, ClaimResult
from taskfleet.worker.handlers import load_handler

from tests.polling import wait_for
from tests.workers.harness import FAST, WORKER_INTERVAL_S, WORKER_TIMEOUT_S, Fleet

H = "tests.workers.handlers"


@pytest.fixture
def queue(redis_url: str) -> Iterator[Queue]:
    with Queue("jobs", redis_url=redis_url) as queue:
        queue.configure(QueueConfig(backoff_base_s=0, backoff_max_s=0, lease_ttl_s=1))
        yield queue


def events(client: redis.Redis) -> list[str]:
    return [e.decode() for e in client.lrange("test:events", 0, -1)]


def finished(queue: Queue, task_id: str, timeout: float = 15.0) -> Task:
    def check() -> Task | None:
        task = queue.get(task_id)
        return task if task is not None and task.state in ("done", "dead") else None

    return wait_for(
        check, timeout=timeout, interval=WORKER_INTERVAL_S, what=f"task {task_id} to finish"
    )


def test_sync_and_async_handlers_store_their_json_result(fleet: Fleet, queue: Queue) -> None:
    for handler in ("sleep", "async_sleep"):
        task_id = queue.enqueue({"seconds": 0.01})
        worker = fleet.add(f"{H}:{handler}", pod=handler).start()
        task = finished(queue, task_id)
        assert task.state == "done" and task.result == {"slept": 0.01}
        worker.signal(signal.SIGTERM)
        assert worker.wait() == 0


def test_each_sync_call_runs_in_a_fresh_context_on_a_reused_thread(
    fleet: Fleet, queue: Queue
) -> None:
    ids = [queue.enqueue({}) for _ in range(3)]
    fleet.add(f"{H}:context_leak", args=[*FAST, "--concurrency", "1"]).start()
    assert [finished(queue, task_id).result for task_id in ids] == ["", "", ""]


def test_an_exception_fails_the_attempt_with_its_type_and_message_then_the_retry_succeeds(
    fleet: Fleet, queue: Queue
) -> None:
    task_id = queue.enqueue({}, max_attempts=3)
    worker = fleet.add(f"{H}:fail_first").start()
    task = finished(queue, task_id)
    assert task.state == "done" and task.attempts == 2
    # the failed attempt is told in the worker's log; the done task shows no error of it
    assert worker.has_event(
        "task_failed", task=task_id, error="ValueError: first attempt fails on purpose"
    )
    assert task.error is None
    assert queue.stats()["retried"] == 1


def test_a_result_that_is_not_json_fails_the_attempt_with_a_clear_error(
    fleet: Fleet, queue: Queue
) -> None:
    task_id = queue.enqueue({}, max_attempts=1)
    fleet.add(f"{H}:unserialisable").start()
    task = finished(queue, task_id)
    assert task.state == "dead"
    assert task.error is not None and "not JSON-serialisable" in task.error


@pytest.mark.parametrize("handler", ["slow_first", "async_slow_first"])
def test_a_task_over_its_timeout_fails_that_attempt_and_the_retry_runs(
    handler: str, fleet: Fleet, queue: Queue, redis_client: redis.Redis
) -> None:
    task_id = queue.enqueue({"seconds": 30}, timeout=0.5, max_attempts=2)
    worker = fleet.add(f"{H}:{handler}", args=[*FAST, "--concurrency", "2"]).start()
    task = finished(queue, task_id)
    assert task.state == "done" and task.attempts == 2
    assert worker.has_event(
        "task_failed", task=task_id, error="TimeoutError: task exceeded its timeout of 0.5s"
    )
    assert task.error is None
    assert "end1:" not in " ".join(events(redis_client))  # the hung call never finished
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0  # a hung sync thread does not keep the worker alive


def test_a_timed_out_sync_handler_keeps_its_slot_until_its_call_returns(
    fleet: Fleet, queue: Queue, redis_client: redis.Redis
) -> None:
    # One slot: the retry can only start once the hung first call has returned.
    task_id = queue.enqueue({"seconds": 2}, timeout=0.5, max_attempts=2)
    worker = fleet.add(f"{H}:slow_first", args=[*FAST, "--concurrency", "1"]).start()
    task = finished(queue, task_id)
    assert task.state == "done" and task.attempts == 2
    assert worker.has_event(
        "task_failed", task=task_id, error="TimeoutError: task exceeded its timeout of 0.5s"
    )
    assert task.error is None
    what = [e.split(":")[0] for e in events(redis_client)]
    assert what == ["start1", "end1", "start2", "end2"], what
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0


def test_heartbeats_keep_the_lease_while_a_sync_handler_burns_cpu(
    fleet: Fleet, queue: Queue, redis_client: redis.Redis
) -> None:
    # Lease TTL 1 s, heartbeat 0.2 s: a handler spinning 3.5 s outlives 3 TTLs.
    task_id = queue.enqueue({"seconds": 3.5})
    worker = fleet.add(f"{H}:spin").start()
    task = finished(queue, task_id)
    assert task.state == "done" and task.attempts == 1 and task.lost == 0
    assert [e.split(":")[0] for e in events(redis_client)] == ["start", "end"]
    stats = queue.stats()
    assert stats["requeued"] == 0 and stats["stale"] == 0
    assert not worker.has_event("lease_lost")


def test_a_restarted_pod_takes_back_what_its_earlier_incarnation_held(
    fleet: Fleet, queue: Queue, redis_client: redis.Redis
) -> None:
    # A long lease: without the takeback at start the task would wait 60 s.
    queue.configure(QueueConfig(lease_ttl_s=60))
    task_id = queue.enqueue({"seconds": 60})
    worker = fleet.add(f"{H}:slow_first", pod="pod-x", args=["--heartbeat-interval", "0.2"])
    worker.start()
    wait_for(
        lambda: any(e.startswith("start1:") for e in events(redis_client)),
        timeout=WORKER_TIMEOUT_S,
        interval=WORKER_INTERVAL_S,
    )
    worker.kill()
    worker.start()  # same pod name, new incarnation
    task = finished(queue, task_id, timeout=10)
    assert task.state == "done" and task.attempts == 2 and task.pod == "pod-x"
    worker.wait_event("earlier_incarnation_requeued", tasks=1)


def test_a_worker_whose_lease_was_taken_back_abandons_the_task_and_writes_nothing(
    fleet: Fleet, queue: Queue, redis_client: redis.Redis
) -> None:
    task_id = queue.enqueue({"seconds": 1.5})
    first = fleet.add(f"{H}:sleep", pod="pod-a").start()
    wait_for(
        lambda: events(redis_client),
        timeout=WORKER_TIMEOUT_S,
        interval=WORKER_INTERVAL_S,
        what="the task started",
    )
    # What the operator does when it believes pod-a is gone.
    assert queue.requeue_pod("pod-a") == 1
    second = fleet.add(f"{H}:sleep", pod="pod-b").start()
    task = finished(queue, task_id)
    assert task.state == "done" and task.lost == 1
    first.wait_event("lease_lost", task=task_id)
    wait_for(
        lambda: first.has_event("task_result_dropped", task=task_id),
        timeout=WORKER_TIMEOUT_S,
        interval=WORKER_INTERVAL_S,
    )
    assert queue.stats()["stale"] == 0  # it never even tried to write
    for worker in (first, second):
        worker.signal(signal.SIGTERM)
        assert worker.wait() == 0


def test_an_unexpected_redis_error_gives_the_tasks_back_as_lost_and_exits_1_with_one_line(
    fleet: Fleet, queue: Queue, redis_client: redis.Redis
) -> None:
    task_id = queue.enqueue({"seconds": 30})
    worker = fleet.add(f"{H}:sleep").start()
    wait_for(
        lambda: events(redis_client),
        timeout=WORKER_TIMEOUT_S,
        interval=WORKER_INTERVAL_S,
        what="the task started",
    )
    # Something clobbers a key of the queue: heartbeats now fail with WRONGTYPE.
    redis_client.delete("tf:{jobs}:workers")
    redis_client.set("tf:{jobs}:workers", "not a hash")
    assert worker.wait() == 1
    failures = [e for e in worker.events() if e["event"] == "worker_failed"]
    assert len(failures) == 1 and "WRONGTYPE" in failures[0]["error"], worker.log_text()
    assert "Traceback" not in worker.log_text()
    # Counted as a loss, not released: a task that makes workers fail must end (max_lost).
    task = queue.get(task_id)
    assert task is not None and task.state == "pending" and task.lost == 1, task


def test_every_worker_option_can_come_from_the_environment(
    fleet: Fleet, queue: Queue, redis_client: redis.Redis
) -> None:
    env = {
        "TASKFLEET_QUEUE": "jobs",
        "TASKFLEET_HANDLER": f"{H}:sleep",
        "TASKFLEET_CONCURRENCY": "3",
        "TASKFLEET_HEARTBEAT_INTERVAL": "0.2",
        "TASKFLEET_LEASE_TTL": "1",
        "TASKFLEET_DRAIN_TIMEOUT": "7",
        "TASKFLEET_LOG_FORMAT": "json",
    }
    worker = fleet.add("unused:unused", pod="from-env", env=env)
    worker.argv = worker.argv[: worker.argv.index("worker") + 1]  # no options at all
    worker.start()
    worker.wait_event("worker_started", concurrency=3, pod="from-env", queue="jobs")
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0
    assert worker.has_event("drain_started", drain_timeout_s=7.0)
    # read, and ignored with a warning: the queue's config sets the lease TTL
    assert worker.has_event("lease_ttl_option_ignored", given_s=1.0), worker.log_text()


def test_a_handlers_own_timeout_error_is_recorded_as_it_is_not_as_a_task_timeout(
    fleet: Fleet, queue: Queue
) -> None:
    task_id = queue.enqueue({}, max_attempts=1, timeout=30)
    fleet.add(f"{H}:raise_timeout").start()
    task = finished(queue, task_id)
    assert task.state == "dead" and task.error == "TimeoutError: upstream took too long"


def test_a_rate_limited_worker_waits_retry_after_ms_instead_of_asking_again_at_once(
    redis_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with Queue("jobs", redis_url=redis_url) as queue:
        queue.configure(QueueConfig(rate_limit_tasks=1, rate_limit_period_s=0.3))
        queue.enqueue_many([{"payload": {}} for _ in range(3)])
    settings = WorkerSettings(
        queue="jobs",
        redis_url=redis_url,
        pod="p",
        incarnation="i",
        runtime_dir=str(tmp_path),
        idle_wait=30,  # so a worker that ignored retry_after_ms and idled would miss the deadline
    )
    worker = Worker(settings, load_handler(f"{H}:async_sleep"))
    replies: list[ClaimResult] = []
    real_claim = Broker.claim

    async def recorded_claim(self: Broker, n: int, **options: int) -> ClaimResult:
        result = await real_claim(self, n, **options)
        replies.append(result)
        return result

    monkeypatch.setattr(Broker, "claim", recorded_claim)

    async def run_until_done() -> int:
        run = asyncio.create_task(worker.run())
        client = redis.asyncio.Redis.from_url(redis_url)
        deadline = time.monotonic() + 10
        while await client.zcard(QueueKeys("jobs").done) < 3:
            assert time.monotonic() < deadline and not run.done(), "3 tasks done in time"
            await asyncio.sleep(0.02)
        await client.aclose()
        worker.request_drain()
        return await run

    assert asyncio.run(run_until_done()) == 0
    held_back = [r.retry_after_ms for r in replies if r.retry_after_ms > 0]
    assert held_back, "the rate limit held tasks back"
    # One token per 0.3 s for 3 tasks: two refills to wait for, each waited out in about
    # one claim (a spinning worker would make hundreds). Bounded loosely: a busy machine
    # may wake a little early.
    assert len(held_back) <= 6, held_back
