"""A task's life through the protocol, against a real redis-server."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import redis.asyncio
from taskfleet import Broker, Queue, QueueConfig, StaleToken, TaskState

from tests.fixtures_redis import MakeBroker


def test_enqueued_task_is_pending_with_its_payload(queue: Queue) -> None:
    task_id = queue.enqueue({"n": 1}, priority=2)
    task = queue.get(task_id)
    assert task is not None
    assert task.state is TaskState.PENDING
    assert task.payload == {"n": 1}
    assert task.priority == 2
    assert task.attempts == 0
    assert task.max_attempts == 3
    assert queue.stats()["pending"] == 1


def test_claimed_task_runs_under_the_pod_with_a_token(
    queue: Queue, make_broker: MakeBroker
) -> None:
    task_id = queue.enqueue({"n": 1})
    broker = make_broker("jobs", "pod-a", "inc-1")
    result = broker.claim(10)
    assert [t.id for t in result.tasks] == [task_id]
    claimed = result.tasks[0]
    assert claimed.payload == {"n": 1}
    assert claimed.attempts == 1
    task = queue.get(task_id)
    assert task is not None
    assert task.state is TaskState.RUNNING
    assert task.pod == "pod-a"
    assert task.incarnation == "inc-1"
    assert task.token == claimed.token
    assert task.lease_until is not None


def test_completed_task_is_done_with_its_result(queue: Queue, make_broker: MakeBroker) -> None:
    task_id = queue.enqueue({"n": 1})
    broker = make_broker("jobs")
    [claimed] = broker.claim(1).tasks
    assert broker.complete_many([(claimed.id, claimed.token, '{"ok": true}')]) == [True]
    task = queue.get(task_id)
    assert task is not None
    assert task.state is TaskState.DONE
    assert task.result == {"ok": True}
    stats = queue.stats()
    assert (stats["running"], stats["done"], stats["completed"]) == (0, 1, 1)


def test_completion_with_a_stale_token_is_refused_and_counted(
    queue: Queue, make_broker: MakeBroker
) -> None:
    task_id = queue.enqueue({"n": 1})
    broker = make_broker("jobs")
    assert len(broker.claim(1).tasks) == 1
    assert broker.complete_many([(task_id, "not-the-token", None)]) == [False]
    assert queue.get(task_id).state is TaskState.RUNNING  # type: ignore[union-attr]
    assert queue.stats()["stale"] == 1
    assert broker.fail(task_id, "not-the-token", "boom") is None
    assert queue.stats()["stale"] == 2


def test_complete_and_claim_finishes_tasks_and_hands_out_the_next_in_one_call(
    queue: Queue, make_broker: MakeBroker
) -> None:
    first, second, third = (queue.enqueue({"n": n}, priority=3 - n) for n in range(3))
    broker = make_broker("jobs", "pod-a", "inc-1")
    result = broker.claim(1)
    [claimed] = result.tasks
    assert claimed.id == first and result.more_pending  # two more wait
    applied, more = broker.complete_and_claim([(first, claimed.token, '"r"')], 5)
    assert applied == [True]
    # Up to n, in priority order, held by the same pod with fresh tokens.
    assert [t.id for t in more.tasks] == [second, third]
    assert not more.more_pending  # the queue gave all it had
    assert len({t.token for t in more.tasks} | {claimed.token}) == 3
    done = queue.get(first)
    assert done is not None and done.state is TaskState.DONE and done.result == "r"
    for task in more.tasks:
        held = queue.get(task.id)
        assert held is not None and held.state is TaskState.RUNNING
        assert (held.pod, held.incarnation, held.token) == ("pod-a", "inc-1", task.token)
    stats = queue.stats()
    assert (stats["pending"], stats["running"], stats["done"]) == (0, 2, 1)


def test_complete_and_claim_refuses_a_stale_token_and_keeps_the_queue_limits(
    queue: Queue, make_broker: MakeBroker
) -> None:
    queue.configure(QueueConfig(max_concurrency=2))
    ids = [queue.enqueue({"n": n}) for n in range(4)]
    broker = make_broker("jobs")
    a, b = broker.claim(10).tasks  # the global limit: 2 running
    applied, more = broker.complete_and_claim(
        [(a.id, a.token, None), (b.id, "not-the-token", None)], 2
    )
    assert applied == [True, False]
    # b still runs: only the slot a freed is there to fill, whatever n asks.
    assert [t.id for t in more.tasks] == [ids[2]]
    assert queue.stats()["stale"] == 1
    assert queue.get(b.id).state is TaskState.RUNNING  # type: ignore[union-attr]
    applied, more = broker.complete_and_claim([], 3)
    assert applied == [] and more.tasks == []


def test_failed_task_is_retried_later_then_dead_after_max_attempts(
    queue: Queue, make_broker: MakeBroker
) -> None:
    queue.configure(QueueConfig(backoff_base_s=0, backoff_max_s=0, max_attempts=2))
    task_id = queue.enqueue({"n": 1})
    broker = make_broker("jobs")
    [first] = broker.claim(1).tasks
    assert broker.fail(first.id, first.token, "boom") is TaskState.DELAYED
    [second] = broker.claim(1).tasks  # backoff 0: promoted at the next claim
    assert second.attempts == 2
    assert broker.fail(second.id, second.token, "boom again") is TaskState.DEAD
    task = queue.get(task_id)
    assert task is not None
    assert (task.state, task.reason, task.error) == (TaskState.DEAD, "failed", "boom again")


def test_permanent_failure_goes_dead_at_once(queue: Queue, make_broker: MakeBroker) -> None:
    task_id = queue.enqueue({"n": 1})
    broker = make_broker("jobs")
    [claimed] = broker.claim(1).tasks
    assert broker.fail(claimed.id, claimed.token, "bad input", retryable=False) is TaskState.DEAD
    assert queue.get(task_id).reason == "failed"  # type: ignore[union-attr]


def test_heartbeat_reports_tasks_whose_token_no_longer_matches(
    queue: Queue, make_broker: MakeBroker
) -> None:
    a, b = queue.enqueue({"n": 1}), queue.enqueue({"n": 2})
    broker = make_broker("jobs")
    tasks = {t.id: t.token for t in broker.claim(2).tasks}
    assert broker.heartbeat(tasks, inflight=2, draining=False) == set()
    queue.requeue_pod("pod-a")
    assert broker.heartbeat(tasks) == {a, b}


def test_released_task_returns_to_the_front_without_counting_an_attempt(
    queue: Queue, make_broker: MakeBroker
) -> None:
    first = queue.enqueue({"n": 1})
    second = queue.enqueue({"n": 2})
    broker = make_broker("jobs")
    [claimed] = broker.claim(1).tasks
    assert claimed.id == first
    assert broker.release([(claimed.id, claimed.token)]) == 1
    task = queue.get(first)
    assert task is not None
    assert (task.state, task.attempts, task.lost) == (TaskState.PENDING, 0, 0)
    assert [t.id for t in broker.claim(2).tasks] == [first, second]


def test_requeue_pod_takes_back_every_task_it_holds_once(
    queue: Queue, make_broker: MakeBroker
) -> None:
    ids = [queue.enqueue({"n": i}) for i in range(3)]
    make_broker("jobs", "pod-a").claim(3)
    assert queue.requeue_pod("pod-a") == 3
    assert queue.requeue_pod("pod-a") == 0
    for task_id in ids:
        task = queue.get(task_id)
        assert task is not None
        assert (task.state, task.lost) == (TaskState.PENDING, 1)
    assert queue.stats()["requeued"] == 3


def test_completing_one_task_with_a_stale_token_raises_stale_token(
    queue: Queue, make_broker: MakeBroker
) -> None:
    task_id = queue.enqueue({"n": 1})
    broker = make_broker("jobs")
    [claimed] = broker.claim(1).tasks
    queue.requeue_pod("pod-a")
    with pytest.raises(StaleToken, match=task_id):
        broker.complete(claimed.id, claimed.token, None)
    assert queue.get(task_id).state is TaskState.PENDING  # type: ignore[union-attr]


class _CountingWriter:
    """A connection's stream writer that counts the writes (one per request sent)."""

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self._writer = writer

    def write(self, data: bytes) -> None:
        CountingConnection.sends += 1
        self._writer.write(data)

    def writelines(self, data: Any) -> None:
        CountingConnection.sends += 1
        self._writer.writelines(data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._writer, name)


class CountingConnection(redis.asyncio.Connection):
    """Counts requests sent (a pipeline or a script call is one), on every send path:
    redis-py's and the packed script calls' own write (protocol/wire.py)."""

    sends = 0

    async def _connect(self) -> None:
        await super()._connect()
        self._writer = _CountingWriter(self._writer)  # type: ignore[assignment]


def test_claiming_and_completing_a_batch_are_one_round_trip_each(
    queue: Queue, redis_url: str
) -> None:
    queue.enqueue_many([{"payload": {"i": i}} for i in range(50)])
    runner = asyncio.Runner()

    async def counting_client() -> redis.asyncio.Redis:
        pool = redis.asyncio.ConnectionPool.from_url(redis_url, connection_class=CountingConnection)
        return redis.asyncio.Redis.from_pool(pool)

    client = runner.run(counting_client())
    broker = Broker("jobs", client, "pod-a", "1")
    try:
        runner.run(broker.claim(1))  # loads the script and connects
        CountingConnection.sends = 0
        tasks = runner.run(broker.claim(49)).tasks
        assert (len(tasks), CountingConnection.sends) == (49, 1)
        applied = runner.run(broker.complete_many([(t.id, t.token, None) for t in tasks]))
        assert (applied, CountingConnection.sends) == ([True] * 49, 2)
        heartbeat = runner.run(broker.heartbeat({}))
        assert (heartbeat, CountingConnection.sends) == (set(), 3)
    finally:
        runner.run(client.aclose())
        runner.close()
