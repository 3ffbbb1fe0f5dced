"""Prefetch: claimed tasks that wait in a sync handler's worker for a free thread.

Each test first runs a few instant tasks, so the worker knows its runs are short (the
condition for prefetch), then holds its only thread with a ``gate`` task: the tasks
claimed behind it wait in the worker, and what happens to them is the subject.
"""

from __future__ import annotations

import signal
import time

import redis
from taskfleet.producer.queue import Queue
from taskfleet.protocol.tasks import TaskState

from tests.polling import wait_for
from tests.task_probes import started, state
from tests.workers.harness import FAST, WORKER_INTERVAL_S, Fleet, WorkerProcess

ROUTE = "tests.workers.handlers:route"  # the gate for {"gate": true}, else sleep
ONE_THREAD = [*FAST, "--concurrency", "1", "--prefetch", "3"]


def hold_the_thread_with_tasks_waiting(
    fleet: Fleet, queue: Queue
) -> tuple[WorkerProcess, str, list[str]]:
    """A worker whose one thread runs a gate task while three tasks wait behind it."""
    worker = fleet.add(ROUTE, args=ONE_THREAD).start()
    # enough short runs that the moving average is under the prefetch limit however
    # long the first one took (it connects to Redis: 100 ms on a loaded machine)
    warmups = queue.enqueue_many([{"payload": {"seconds": 0}} for _ in range(50)])
    wait_for(
        lambda: all(state(queue, t) == TaskState.DONE for t in warmups),
        timeout=15,
        interval=WORKER_INTERVAL_S,
    )
    gate = queue.enqueue({"gate": True})
    waiting = [queue.enqueue({"seconds": 0}) for _ in range(3)]
    wait_for(
        lambda: all(state(queue, t) == TaskState.RUNNING for t in [gate, *waiting]),
        timeout=10,
        interval=WORKER_INTERVAL_S,
        what=lambda: f"all four held by the worker:\n{fleet.logs()}",
    )
    return worker, gate, waiting


def test_a_drain_gives_prefetched_tasks_back_at_once_and_finishes_the_running_one(
    fleet: Fleet, queue: Queue, redis_client: redis.Redis
) -> None:
    worker, gate, waiting = hold_the_thread_with_tasks_waiting(fleet, queue)
    worker.signal(signal.SIGTERM)
    # Released while the gate task still runs: not after the drain deadline.
    wait_for(
        lambda: all(state(queue, t) == TaskState.PENDING for t in waiting),
        timeout=10,
        interval=WORKER_INTERVAL_S,
    )
    assert state(queue, gate) == TaskState.RUNNING
    redis_client.rpush("test:gate", "open")
    assert worker.wait() == 0
    assert state(queue, gate) == TaskState.DONE
    for task_id in waiting:
        task = queue.get(task_id)
        assert task is not None
        assert (task.state, task.attempts, task.lost) == (TaskState.PENDING, 0, 0)
        assert not started(redis_client, task_id)
        assert worker.has_event("task_released", task=task_id)
        assert task.history == []  # never begun: no attempt to tell of


def test_tasks_waiting_a_second_for_a_busy_thread_go_back_for_another_worker(
    fleet: Fleet, queue: Queue, redis_client: redis.Redis
) -> None:
    worker, gate, waiting = hold_the_thread_with_tasks_waiting(fleet, queue)
    worker.wait_event("prefetch_withdrawn", tasks=3)
    wait_for(
        lambda: all(state(queue, t) == TaskState.PENDING for t in waiting),
        timeout=10,
        interval=WORKER_INTERVAL_S,
    )
    # The busy worker does not claim them again: prefetch is off until runs are short.
    other = fleet.add(ROUTE, pod="pod-b").start()
    wait_for(
        lambda: all(state(queue, t) == TaskState.DONE for t in waiting),
        timeout=15,
        interval=WORKER_INTERVAL_S,
    )
    for task_id in waiting:
        task = queue.get(task_id)
        assert task is not None
        assert (task.pod, task.attempts, task.lost) == ("pod-b", 1, 0)
        # the hand-back of a run no thread began is no attempt of its history
        assert [(a.attempt, a.pod, a.outcome) for a in task.history] == [(1, "pod-b", "done")]
    assert state(queue, gate) == TaskState.RUNNING
    redis_client.rpush("test:gate", "open")
    wait_for(lambda: state(queue, gate) == TaskState.DONE, timeout=10, interval=WORKER_INTERVAL_S)
    for process in (worker, other):
        process.signal(signal.SIGTERM)
        assert process.wait() == 0
    assert len([e for e in worker.events() if e.get("event") == "prefetch_withdrawn"]) == 1


def test_a_prefetched_tasks_timeout_counts_from_its_start_not_from_its_claim(
    fleet: Fleet, queue: Queue, redis_client: redis.Redis
) -> None:
    worker = fleet.add(ROUTE, args=ONE_THREAD).start()
    # enough short runs that the moving average is under the prefetch limit however
    # long the first one took (it connects to Redis: 100 ms on a loaded machine)
    warmups = queue.enqueue_many([{"payload": {"seconds": 0}} for _ in range(50)])
    wait_for(
        lambda: all(state(queue, t) == TaskState.DONE for t in warmups),
        timeout=15,
        interval=WORKER_INTERVAL_S,
    )
    gate = queue.enqueue({"gate": True})
    quick = queue.enqueue({"seconds": 0}, timeout=0.3)
    wait_for(
        lambda: state(queue, quick) == TaskState.RUNNING, timeout=10, interval=WORKER_INTERVAL_S
    )
    held_since = time.monotonic()
    # Hold it waiting well past its timeout (but under the 1 s prefetch wait) ...
    wait_for(lambda: time.monotonic() - held_since > 0.6, timeout=5, interval=WORKER_INTERVAL_S)
    redis_client.rpush("test:gate", "open")
    # ... then it runs in no time: done on its first attempt, no timeout recorded.
    wait_for(lambda: state(queue, quick) == TaskState.DONE, timeout=10, interval=WORKER_INTERVAL_S)
    task = queue.get(quick)
    assert task is not None
    assert (task.attempts, task.error) == (1, None), task
    assert state(queue, gate) == TaskState.DONE
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0


def test_prefetched_tasks_of_a_sigkilled_worker_come_back_and_run_once(
    fleet: Fleet, queue: Queue, redis_client: redis.Redis
) -> None:
    worker, gate, waiting = hold_the_thread_with_tasks_waiting(fleet, queue)
    worker.kill()
    # The pod's next incarnation takes back what the killed one held, prefetched or not.
    worker.start()
    redis_client.rpush("test:gate", "open")
    wait_for(
        lambda: all(state(queue, t) == TaskState.DONE for t in [gate, *waiting]),
        timeout=15,
        interval=WORKER_INTERVAL_S,
        what=lambda: f"all done:\n{fleet.logs()}",
    )
    starts = [e.decode().split(":")[1] for e in redis_client.lrange("test:events", 0, -1)]
    for task_id in waiting:
        task = queue.get(task_id)
        assert task is not None
        # Counted as lost (the worker held its lease), yet it ran once: it never began.
        assert (task.lost, starts.count(task_id)) == (1, 2), task  # a start and an end
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0
