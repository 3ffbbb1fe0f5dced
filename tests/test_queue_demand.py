"""The demand signal: whoever sizes the fleet learns at once that work waits for a worker.

Tasks that become pending with no idle worker to take them push one element onto the
queue's ``demand`` list (never more than one), which an autoscaler blocks on; tasks handed
straight to an idle worker push nothing.
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


def test_delayed_tasks_signal_no_demand_until_they_are_due(
    queue: Queue, redis_client: redis.Redis
) -> None:
    queue.enqueue({"later": True}, delay=3600)
    assert redis_client.llen(queue.keys.demand) == 0
    assert queue.stats()["delayed"] == 1


def test_a_task_handed_to_an_idle_worker_signals_no_demand(
    queue: Queue, make_broker: MakeBroker, redis_client: redis.Redis
) -> None:
    worker = make_broker(queue.name, "pod-a", "inc-1")
    assert worker.claim(4, idle_ms=5000).tasks == []  # registered idle
    handed = queue.enqueue({"x": 1})
    assert queue.get(handed).state is TaskState.RUNNING  # type: ignore[union-attr]
    assert redis_client.llen(queue.keys.demand) == 0
    # Only one hand-off per registration: the next task waits, and that is demand.
    queue.enqueue({"x": 2})
    assert redis_client.llen(queue.keys.demand) == 1


def test_purge_removes_the_demand_signal(queue: Queue, redis_client: redis.Redis) -> None:
    queue.enqueue({"x": 1})
    assert redis_client.llen(queue.keys.demand) == 1
    queue.purge()
    assert redis_client.exists(queue.keys.demand) == 0
