"""The demand signal: whoever watches the queue from outside (the autoscaler, the
operator's sweep) learns at once that it has new work.

Every enqueue that creates a task, pending, delayed or handed straight to an idle worker,
and every task put back in pending, leaves one element on the queue's ``demand`` list
(never more than one); the autoscaler blocks on it and the operator polls it.
"""

from __future__ import annotations

import redis
from taskfleet import Queue
from taskfleet.protocol.tasks import TaskState

from tests.fixtures_redis import MakeBroker


def test_an_enqueue_with_no_idle_worker_signals_demand_once_per_burst(
    queue: Queue, redis_client: redis.Redis
) -> None:
    demand = queue.keys.demand
    assert redis_client.llen(demand) == 0
    queue.enqueue({"n": 0})
    assert redis_client.llen(demand) == 1
    queue.enqueue_many([{"payload": {"n": i}} for i in range(1, 200)])
    assert redis_client.llen(demand) == 1  # a burst is one signal, however large
    assert redis_client.blpop([demand], timeout=1) is not None
    assert redis_client.llen(demand) == 0
    queue.enqueue({"n": 200})  # work arriving after the signal was taken signals again
    assert redis_client.llen(demand) == 1


def test_a_delayed_task_is_work_too(queue: Queue, redis_client: redis.Redis) -> None:
    queue.enqueue({"later": True}, delay=3600)
    assert redis_client.llen(queue.keys.demand) == 1
    assert queue.stats()["delayed"] == 1


def test_a_task_handed_to_an_idle_worker_still_signals_work(
    queue: Queue, make_broker: MakeBroker, redis_client: redis.Redis
) -> None:
    # The queue now holds a running task: the operator must sweep it (its lease can
    # expire) even though no worker needed waking.
    worker = make_broker(queue.name, "pod-a", "inc-1")
    assert worker.claim(4, idle_ms=5000).tasks == []  # registered idle
    handed = queue.enqueue({"x": 1})
    assert queue.get(handed).state is TaskState.RUNNING  # type: ignore[union-attr]
    assert redis_client.llen(queue.keys.demand) == 1


def test_an_enqueue_that_creates_nothing_signals_nothing(
    queue: Queue, redis_client: redis.Redis
) -> None:
    task_id = queue.enqueue({"x": 1}, task_id="once")
    assert redis_client.blpop([queue.keys.demand], timeout=1) is not None
    assert queue.enqueue({"x": 1}, task_id="once") == task_id  # the same task: no change
    assert redis_client.llen(queue.keys.demand) == 0


def test_purge_removes_the_demand_signal(queue: Queue, redis_client: redis.Redis) -> None:
    queue.enqueue({"x": 1})
    assert redis_client.llen(queue.keys.demand) == 1
    queue.purge()
    assert redis_client.exists(queue.keys.demand) == 0
