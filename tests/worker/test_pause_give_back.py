"""A claim pause gives back the prefetched tasks it covers, and only those: after a
``report_quota`` at 0 (as after a ``RateLimited``) the tasks waiting in the worker for a
thread go back without an attempt, so none of them calls the exhausted provider; a
pause scoped to a group gives back that group's alone, the worker running the others.
Real worker processes (one thread, three prefetched tasks) on a real Redis.
"""

from __future__ import annotations

from typing import Any

import redis
from taskfleet import Queue, TaskState

from tests.polling import wait_for
from tests.task_probes import started, state
from tests.workers.harness import FAST, WORKER_INTERVAL_S, Fleet, WorkerProcess

PROVIDER = "tests.workers.handlers:provider"  # sleep, or meet the provider's limit
ONE_THREAD = [*FAST, "--concurrency", "1", "--prefetch", "3"]


def _worker_with_tasks_waiting(
    fleet: Fleet,
    queue: Queue,
    redis_client: redis.Redis,
    first: dict[str, Any],
    waiting: list[dict[str, Any]],
) -> tuple[WorkerProcess, str, list[str]]:
    """A worker whose one thread runs ``first`` (an enqueue item, held at the gate) while
    ``waiting`` (enqueue items) wait behind it, prefetched."""
    worker = fleet.add(PROVIDER, args=ONE_THREAD).start()
    # The worker learns its runs are short (a moving average under 10 ms: the condition
    # for prefetch), however long its first run took (connecting, importing).
    warmups = queue.enqueue_many([{"payload": {"seconds": 0}} for _ in range(50)])
    wait_for(
        lambda: all(state(queue, t) == TaskState.DONE for t in warmups),
        timeout=15,
        interval=WORKER_INTERVAL_S,
    )
    gated, *behind = queue.enqueue_many([first, *waiting])
    wait_for(
        lambda: (
            started(redis_client, gated)
            and all(state(queue, t) == TaskState.RUNNING for t in behind)
        ),
        timeout=10,
        interval=WORKER_INTERVAL_S,
        what=lambda: f"all held by the worker:\n{fleet.logs()}",
    )
    return worker, gated, behind


def _given_back(
    queue: Queue, redis_client: redis.Redis, worker: WorkerProcess, ids: list[str]
) -> None:
    for task_id in ids:
        task = queue.get(task_id)
        assert task is not None
        assert (task.state, task.attempts) == (TaskState.PENDING, 0), task_id
        assert not started(redis_client, task_id)
        assert worker.has_event("task_released", task=task_id)


def test_a_reported_spent_quota_gives_back_the_prefetched_tasks(
    fleet: Fleet, queue: Queue, redis_client: redis.Redis
) -> None:
    worker, reporter, waiting = _worker_with_tasks_waiting(
        fleet,
        queue,
        redis_client,
        {"payload": {"meets": "quota"}},
        [{"payload": {"seconds": 0}} for _ in range(3)],
    )
    redis_client.rpush("test:gate", "open")  # the reporter reports and returns
    # the thread is free at once, but none of the waiting tasks calls the provider
    wait_for(
        lambda: (
            state(queue, reporter) == TaskState.DONE
            and all(state(queue, t) == TaskState.PENDING for t in waiting)
        ),
        timeout=10,
        interval=WORKER_INTERVAL_S,
        what=fleet.logs,
    )
    assert queue.quota().paused
    _given_back(queue, redis_client, worker, waiting)


def test_a_group_rate_limit_gives_back_only_that_groups_prefetched_tasks(
    fleet: Fleet, queue: Queue, redis_client: redis.Redis
) -> None:
    worker, limited, (a1, b1, a2) = _worker_with_tasks_waiting(
        fleet,
        queue,
        redis_client,
        {"payload": {"meets": "limit", "scope": "group"}, "group": "a"},
        [{"payload": {"seconds": 0}, "group": g} for g in ("a", "b", "a")],
    )
    redis_client.rpush("test:gate", "open")  # a 429: group a pauses
    wait_for(
        lambda: (
            state(queue, b1) == TaskState.DONE
            and all(state(queue, t) == TaskState.PENDING for t in (a1, a2))
        ),
        timeout=10,
        interval=WORKER_INTERVAL_S,
        what=fleet.logs,
    )
    assert state(queue, limited) == TaskState.DELAYED
    assert queue.quota(group="a").paused and not queue.quota().paused
    _given_back(queue, redis_client, worker, [a1, a2])
    # the other group's task ran here, once, never given back
    done = queue.get(b1)
    assert done is not None and done.attempts == 1 and done.pod == worker.pod
    assert not worker.has_event("task_released", task=b1)


def test_a_group_reported_quota_gives_back_only_that_groups_prefetched_tasks(
    fleet: Fleet, queue: Queue, redis_client: redis.Redis
) -> None:
    worker, reporter, (a1, b1, a2) = _worker_with_tasks_waiting(
        fleet,
        queue,
        redis_client,
        {"payload": {"meets": "quota", "scope": "group"}, "group": "a"},
        [{"payload": {"seconds": 0}, "group": g} for g in ("a", "b", "a")],
    )
    redis_client.rpush("test:gate", "open")
    wait_for(
        lambda: (
            state(queue, reporter) == TaskState.DONE
            and state(queue, b1) == TaskState.DONE
            and all(state(queue, t) == TaskState.PENDING for t in (a1, a2))
        ),
        timeout=10,
        interval=WORKER_INTERVAL_S,
        what=fleet.logs,
    )
    _given_back(queue, redis_client, worker, [a1, a2])
    assert not worker.has_event("task_released", task=b1)
    assert queue.quota(group="a").paused and not queue.quota().paused


def test_a_group_scoped_limit_of_a_task_in_no_group_gives_back_every_prefetched_task(
    fleet: Fleet, queue: Queue, redis_client: redis.Redis
) -> None:
    worker, _, waiting = _worker_with_tasks_waiting(
        fleet,
        queue,
        redis_client,
        {"payload": {"meets": "limit", "scope": "group"}},
        [{"payload": {"seconds": 0}, "group": g} for g in ("a", "b", "a")],
    )
    redis_client.rpush("test:gate", "open")  # no group to pause: the queue pauses
    wait_for(
        lambda: all(state(queue, t) == TaskState.PENDING for t in waiting),
        timeout=10,
        interval=WORKER_INTERVAL_S,
        what=fleet.logs,
    )
    assert queue.quota().paused
    _given_back(queue, redis_client, worker, waiting)
