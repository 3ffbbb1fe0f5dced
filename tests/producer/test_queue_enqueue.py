"""Producing: validation, idempotency, batching, delays, deadlines, priorities, waiting."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

import pytest
import redis
from taskfleet import (
    EnqueueSpec,
    InvalidArgument,
    InvalidPayload,
    Queue,
    QueueConfig,
    TaskExists,
    TaskState,
    WaitTimeout,
)

from tests.fixtures_redis import MakeBroker, server_ms
from tests.polling import wait_for


def test_enqueue_with_the_same_task_id_and_payload_returns_it_and_changes_nothing(
    queue: Queue,
) -> None:
    first = queue.enqueue({"v": 1}, task_id="order-42", priority=5)
    again = queue.enqueue({"v": 1}, task_id="order-42", priority=5)
    assert first == again == "order-42"
    with pytest.raises(TaskExists):  # another payload under its id (test_queue_idempotency)
        queue.enqueue({"v": 2}, task_id="order-42", priority=5)
    task = queue.get("order-42")
    assert task is not None
    assert (task.payload, task.priority) == ({"v": 1}, 5)
    stats = queue.stats()
    assert (stats["pending"], stats["enqueued"]) == (1, 1)


class CountingConnection(redis.Connection):
    """Counts what goes over the wire: each send is one request (a pipeline is one)."""

    sends = 0

    def send_packed_command(self, command: object, check_health: bool = True) -> None:
        type(self).sends += 1
        super().send_packed_command(command, check_health)  # type: ignore[no-untyped-call]


def test_enqueue_many_is_one_round_trip_and_returns_ids_in_order(redis_url: str) -> None:
    pool = redis.ConnectionPool.from_url(redis_url, connection_class=CountingConnection)
    queue = Queue("jobs", client=redis.Redis(connection_pool=pool))
    queue.enqueue({"warm": True})  # loads the script, so the count below is the batch alone
    CountingConnection.sends = 0
    items: list[dict[str, object] | EnqueueSpec] = [{"payload": {"i": i}} for i in range(50)]
    items.append(EnqueueSpec(payload={"i": 50}, priority=1, task_id="last"))
    ids = queue.enqueue_many(items)
    assert CountingConnection.sends == 1
    assert len(ids) == 51
    assert ids[-1] == "last"
    assert queue.get(ids[7]).payload == {"i": 7}  # type: ignore[union-attr]
    assert queue.stats()["pending"] == 52
    pool.disconnect()


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        ([1, 2], "must be a JSON object"),
        ("text", "must be a JSON object"),
        ({"x": float("nan")}, "payload.x: NaN is not a finite number"),
        ({"x": {1, 2}}, "not JSON-serialisable"),
        ({"x": "\ud800"}, "not JSON-serialisable"),
    ],
)
def test_payload_that_is_not_a_json_object_is_refused_and_nothing_stored(
    queue: Queue, redis_client: redis.Redis, payload: object, message: str
) -> None:
    with pytest.raises(InvalidPayload, match=message):
        queue.enqueue(payload)  # type: ignore[arg-type]
    assert redis_client.dbsize() == 0


def test_payload_over_max_payload_bytes_is_refused_and_no_task_of_the_batch_stored(
    queue: Queue,
) -> None:
    queue.configure(QueueConfig(max_payload_bytes=100))
    with pytest.raises(InvalidPayload, match=r"is \d+ bytes; the queue allows 100"):
        queue.enqueue_many([{"payload": {"ok": 1}}, {"payload": {"big": "x" * 200}}])
    stats = queue.stats()
    assert (stats["pending"], stats["enqueued"]) == (0, 0)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"priority": 1001}, "priority must be between"),
        ({"priority": 1.5}, "priority must be an integer"),
        ({"delay": -1}, "delay must be >= 0"),
        ({"delay": math.inf}, "delay must be seconds"),
        ({"deadline": 0}, "deadline must be > 0"),
        ({"deadline": datetime(2030, 1, 1)}, "timezone-aware"),
        ({"cost": -1}, "cost must be between 0 and 1000000000"),
        ({"max_attempts": 0}, "max_attempts must be between 1 and 10000"),
        ({"timeout": 0}, "timeout must be > 0"),
        ({"task_id": ""}, "task_id must be a non-empty printable string"),
        ({"task_id": "a\x00b"}, "task_id must be a non-empty printable string"),
    ],
)
def test_out_of_range_arguments_get_one_clear_error(
    queue: Queue, kwargs: dict[str, object], message: str
) -> None:
    with pytest.raises(InvalidArgument, match=message):
        queue.enqueue({"x": 1}, **kwargs)  # type: ignore[arg-type]


def test_unknown_enqueue_many_field_is_refused(queue: Queue) -> None:
    with pytest.raises(InvalidArgument, match="unknown enqueue field"):
        queue.enqueue_many([{"payload": {}, "prio": 3}])


def test_higher_priority_runs_first_and_fifo_within_a_priority(
    queue: Queue, make_broker: MakeBroker
) -> None:
    low = [queue.enqueue({"i": i}, priority=-1) for i in range(3)]
    normal = [queue.enqueue({"i": i}) for i in range(3)]
    high = [queue.enqueue({"i": i}, priority=1000) for i in range(3)]
    claimed = [t.id for t in make_broker("jobs").claim(9).tasks]
    assert claimed == high + normal + low


def test_delayed_task_waits_in_delayed_until_its_run_at(
    queue: Queue, redis_client: redis.Redis, make_broker: MakeBroker
) -> None:
    before = server_ms(redis_client)
    task_id = queue.enqueue({"x": 1}, delay=timedelta(seconds=60))
    task = queue.get(task_id)
    assert task is not None
    assert task.state is TaskState.DELAYED
    assert task.run_at is not None
    assert task.run_at.timestamp() * 1000 >= before + 60_000
    result = make_broker("jobs").claim(1)
    assert result.tasks == []
    assert result.next_due_ms is not None
    assert 0 < result.next_due_ms <= 60_000


def test_short_delay_is_promoted_by_a_claim_once_due(queue: Queue, make_broker: MakeBroker) -> None:
    task_id = queue.enqueue({"x": 1}, delay=0.05)
    broker = make_broker("jobs")
    tasks = wait_for(lambda: broker.claim(1).tasks)
    assert [t.id for t in tasks] == [task_id]


def test_task_not_started_by_its_deadline_goes_dead_as_expired(
    queue: Queue, make_broker: MakeBroker
) -> None:
    expires = queue.enqueue({"x": 1}, deadline=0.02)
    later = queue.enqueue({"x": 2}, deadline=datetime.now(UTC) + timedelta(hours=1))

    def expired() -> bool:
        queue.sweep()
        task = queue.get(expires)
        return task is not None and task.state is TaskState.DEAD

    wait_for(expired)
    task = queue.get(expires)
    assert task is not None
    assert task.reason == "expired"
    assert [t.id for t in make_broker("jobs").claim(5).tasks] == [later]
    assert queue.stats()["expired"] == 1


def test_deadline_does_not_apply_once_the_task_started(
    queue: Queue, make_broker: MakeBroker
) -> None:
    task_id = queue.enqueue({"x": 1}, deadline=0.5)
    broker = make_broker("jobs")
    [claimed] = broker.claim(1).tasks
    wait_for(lambda: queue.get(task_id).deadline < datetime.now(UTC))  # type: ignore[union-attr,operator]
    queue.sweep()
    assert broker.complete_many([(claimed.id, claimed.token, None)]) == [True]
    assert queue.get(task_id).state is TaskState.DONE  # type: ignore[union-attr]


@pytest.mark.parametrize("give_back", ["release", "retry", "lost"])
def test_a_task_that_started_still_runs_after_its_deadline_when_it_comes_back(
    queue: Queue, make_broker: MakeBroker, give_back: str
) -> None:
    queue.configure(QueueConfig(backoff_base_s=0, backoff_max_s=0))
    task_id = queue.enqueue({"x": 1}, deadline=0.3)
    broker = make_broker("jobs")
    [claimed] = broker.claim(1).tasks
    wait_for(lambda: queue.get(task_id).deadline < datetime.now(UTC))  # type: ignore[union-attr,operator]
    if give_back == "release":  # a drain gives it back
        assert broker.release([(claimed.id, claimed.token)]) == 1
    elif give_back == "retry":
        assert broker.fail(claimed.id, claimed.token, "boom") is TaskState.DELAYED
    else:
        assert queue.requeue_pod("pod-a") == 1
    [again] = wait_for(lambda: broker.claim(1).tasks)
    assert again.id == task_id
    assert broker.complete_many([(again.id, again.token, None)]) == [True]
    assert queue.stats()["expired"] == 0


def test_wait_returns_every_task_once_finished(queue: Queue, make_broker: MakeBroker) -> None:
    ids = [queue.enqueue({"i": i}) for i in range(3)]
    broker = make_broker("jobs")
    items = [(t.id, t.token, '{"i": 1}') for t in broker.claim(3).tasks]
    broker.complete_many(items)
    finished = queue.wait(ids, timeout=5)
    assert set(finished) == set(ids)
    assert all(t.state is TaskState.DONE for t in finished.values())


def test_wait_raises_a_timeout_naming_the_unfinished_tasks(queue: Queue) -> None:
    task_id = queue.enqueue({"x": 1})
    with pytest.raises(WaitTimeout) as info:
        queue.wait([task_id], timeout=0.05)
    assert info.value.unfinished == [task_id]
    assert isinstance(info.value, TimeoutError)


def test_stats_reports_every_state_workers_and_counters(queue: Queue) -> None:
    stats = queue.stats()
    for name in ("pending", "delayed", "running", "done", "dead", "workers", "stale", "lost"):
        assert stats[name] == 0
