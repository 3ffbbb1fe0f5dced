"""What each failure does to a task: backoff, bad payloads, oversized results, schedules."""

from __future__ import annotations

import threading

import pytest
from taskfleet import Queue, QueueConfig, TaskState
from taskfleet.protocol.queue_ops import RESULT_TOO_LARGE

from tests.fixtures_redis import MakeBroker, server_ms
from tests.polling import wait_for


@pytest.mark.parametrize(("attempt", "expected_s"), [(1, 10), (2, 20), (3, 40), (4, 50)])
def test_retry_backoff_doubles_per_attempt_within_jitter_and_is_capped(
    queue: Queue, make_broker: MakeBroker, attempt: int, expected_s: float
) -> None:
    queue.configure(
        QueueConfig(backoff_base_s=10, backoff_max_s=50, backoff_jitter=0.2, max_attempts=10)
    )
    task_id = queue.enqueue({"x": 1})
    queue.client.hset(queue.keys.task(task_id), "attempts", attempt - 1)
    worker = make_broker("jobs")
    [task] = worker.claim(1).tasks
    assert task.attempts == attempt
    before = server_ms(queue.client)
    assert worker.fail(task.id, task.token, "boom") is TaskState.DELAYED
    after = server_ms(queue.client)
    run_at = queue.client.zscore(queue.keys.delayed, task_id)
    assert run_at is not None
    low = min(expected_s * 0.8, 50) * 1000
    high = min(expected_s * 1.2, 50) * 1000
    assert before + low - 1 <= run_at <= after + high + 1
    stored = queue.get(task_id)
    assert stored is not None
    assert (stored.state, stored.error) == (TaskState.DELAYED, "boom")


def test_a_stored_payload_that_is_not_json_goes_dead_as_bad_payload_at_claim(
    queue: Queue, make_broker: MakeBroker
) -> None:
    good = queue.enqueue({"x": 1})
    foreign = queue.enqueue({"x": 2})
    queue.client.hset(queue.keys.task(foreign), "payload", "{not json")
    array = queue.enqueue({"x": 3})
    queue.client.hset(queue.keys.task(array), "payload", "[1, 2]")
    result = make_broker("jobs").claim(3)
    assert [t.id for t in result.tasks] == [good]
    for task_id in (foreign, array):
        task = queue.get(task_id)
        assert task is not None
        assert (task.state, task.reason) == (TaskState.DEAD, "bad payload")
        assert task.error is not None


def test_a_result_over_max_payload_bytes_makes_the_task_dead_with_a_reason_the_producer_sees(
    queue: Queue, make_broker: MakeBroker
) -> None:
    queue.configure(QueueConfig(max_payload_bytes=64))
    task_id = queue.enqueue({"x": 1}, max_attempts=5)
    worker = make_broker("jobs")
    [task] = worker.claim(1).tasks
    assert worker.complete_many([(task.id, task.token, '"' + "x" * 100 + '"')]) == [
        RESULT_TOO_LARGE
    ]
    stored = queue.get(task_id)
    assert stored is not None
    # Not done without its result, and not retried (the handler would return it again).
    assert stored.state is TaskState.DEAD and stored.reason == "result too large"
    assert stored.result is None and stored.attempts == 1
    assert "102 bytes exceeds max_payload_bytes (64)" in (stored.error or "")
    stats = queue.stats()
    assert (stats["dead"], stats["done"], stats["completed"], stats["failed"]) == (1, 0, 0, 1)


def test_max_attempts_of_the_task_overrides_the_queue_default(
    queue: Queue, make_broker: MakeBroker
) -> None:
    task_id = queue.enqueue({"x": 1}, max_attempts=1)
    worker = make_broker("jobs")
    [task] = worker.claim(1).tasks
    assert task.max_attempts == 1
    assert worker.fail(task.id, task.token, "boom") is TaskState.DEAD
    assert queue.get(task_id).reason == "failed"  # type: ignore[union-attr]


def test_task_timeout_falls_back_to_the_queue_default(
    queue: Queue, make_broker: MakeBroker
) -> None:
    queue.configure(QueueConfig(default_timeout_s=7.5))
    own = queue.enqueue({"x": 1}, timeout=2)
    default = queue.enqueue({"x": 2})
    timeouts = {t.id: t.timeout for t in make_broker("jobs").claim(2).tasks}
    assert timeouts == {own: 2.0, default: 7.5}


def test_wait_for_work_wakes_an_idle_worker_when_a_task_is_enqueued(
    queue: Queue, make_broker: MakeBroker
) -> None:
    worker = make_broker("jobs")
    assert worker.wait_for_work(0.01) is None  # timed out
    timer = threading.Timer(0.05, lambda: queue.enqueue({"x": 1}))
    timer.start()
    try:
        woken = worker.wait_for_work(10.0)
    finally:
        timer.join()
    assert woken is not None and woken.tasks == []  # signalled, not registered for hand-offs
    assert len(worker.claim(1).tasks) == 1


def test_an_enqueue_hands_its_task_straight_to_a_worker_registered_idle(
    queue: Queue, make_broker: MakeBroker
) -> None:
    worker = make_broker("jobs", "pod-a", "inc-1")
    assert worker.claim(4, idle_ms=5000).tasks == []  # nothing to do: registered idle
    task_id = queue.enqueue({"x": 1})
    task = queue.get(task_id)
    assert task is not None and task.state is TaskState.RUNNING
    assert (task.pod, task.incarnation) == ("pod-a", "inc-1")
    assert queue.client.llen(queue.keys.notify) == 0  # handed over: nobody else to wake
    handed = worker.wait_for_work(10.0)
    assert handed is not None and [t.id for t in handed.tasks] == [task_id]
    assert handed.tasks[0].token == task.token and handed.tasks[0].attempts == 1
    # One hand-off per registration: the next task waits in pending for a claim.
    second = queue.enqueue({"x": 2})
    assert queue.get(second).state is TaskState.PENDING  # type: ignore[union-attr]
    worker.complete_many([(task_id, task.token, None)])
    assert [t.id for t in worker.claim(4).tasks] == [second]


def test_a_hand_off_not_yet_popped_comes_with_the_next_claim_or_is_released_at_exit(
    queue: Queue, make_broker: MakeBroker
) -> None:
    worker = make_broker("jobs", "pod-a", "inc-1")
    worker.claim(4, idle_ms=5000)
    first = queue.enqueue({"x": 1})  # handed over while the worker is not blocked
    later = queue.enqueue({"x": 2})
    assert [t.id for t in worker.claim(4).tasks] == [first, later]  # hand-off first
    worker.claim(4, idle_ms=5000)
    third = queue.enqueue({"x": 3})
    assert queue.get(third).state is TaskState.RUNNING  # type: ignore[union-attr]
    assert worker.deregister() == 3  # everything it held, the unpopped hand-off too
    assert queue.get(third).state is TaskState.PENDING  # type: ignore[union-attr]
    assert not queue.client.exists(queue.keys.wake("pod-a"))


def test_a_draining_worker_gets_no_more_hand_offs_and_gives_back_those_not_popped(
    queue: Queue, make_broker: MakeBroker
) -> None:
    worker = make_broker("jobs", "pod-a", "inc-1")
    worker.claim(4, idle_ms=5000)
    handed = queue.enqueue({"x": 1})
    assert queue.get(handed).state is TaskState.RUNNING  # type: ignore[union-attr]
    # The drain starts before the worker popped it: the draining heartbeat gives it back.
    assert worker.heartbeat({}, inflight=0, draining=True) == set()
    task = queue.get(handed)
    assert task is not None and task.state is TaskState.PENDING
    assert (task.attempts, task.lost) == (0, 0)
    assert queue.stats()["released"] == 1
    assert not queue.client.exists(queue.keys.wake("pod-a"))
    # Registered, then draining: the next enqueue leaves its task for others.
    assert [t.id for t in worker.claim(4, idle_ms=5000).tasks] == [handed]
    worker.complete_many([(handed, queue.get(handed).token, None)])  # type: ignore[union-attr]
    worker.claim(4, idle_ms=5000)
    worker.heartbeat({}, inflight=0, draining=True)
    later = queue.enqueue({"x": 2})
    assert queue.get(later).state is TaskState.PENDING  # type: ignore[union-attr]


def test_no_hand_off_to_an_expired_registration_or_an_earlier_incarnation(
    queue: Queue, make_broker: MakeBroker
) -> None:
    old = make_broker("jobs", "pod-a", "inc-1")
    old.claim(4, idle_ms=5000)  # then the container restarts
    new = make_broker("jobs", "pod-a", "inc-2")
    new.register(4)
    task_id = queue.enqueue({"x": 1})
    assert queue.get(task_id).state is TaskState.PENDING  # type: ignore[union-attr]
    other = make_broker("jobs", "pod-b", "inc-1")
    assert [t.id for t in other.claim(4, idle_ms=50).tasks] == [task_id]
    other.claim(4, idle_ms=50)  # empty: registered for 50 ms only
    until = queue.client.zscore(queue.keys.idle, "pod-b\0inc-1")
    assert until is not None
    wait_for(lambda: server_ms(queue.client) > until, what="the registration to run out")
    late = queue.enqueue({"x": 2})
    assert queue.get(late).state is TaskState.PENDING  # type: ignore[union-attr]
    assert queue.client.llen(queue.keys.notify) >= 1  # the ordinary wake-up instead


def test_notify_list_stays_short_however_many_tasks_are_enqueued(queue: Queue) -> None:
    """One wake-up token per new task while nobody takes them, up to 16 (NOTIFY_MAX)."""
    for i in range(10):
        queue.enqueue({"i": i})
    assert queue.client.llen(queue.keys.notify) == 10
    queue.enqueue_many([{"payload": {"i": i}} for i in range(5)])
    assert queue.client.llen(queue.keys.notify) == 15
    for _ in range(5):
        queue.enqueue_many([{"payload": {"i": i}} for i in range(100)])
        assert queue.client.llen(queue.keys.notify) == 16
    queue.enqueue({"one": "more"})
    assert queue.client.llen(queue.keys.notify) == 16


def test_purge_deletes_every_key_of_the_queue_and_only_those(
    queue: Queue, make_broker: MakeBroker, redis_url: str
) -> None:
    other = Queue("other", redis_url=redis_url)
    other.enqueue({"keep": True})
    queue.configure(QueueConfig(max_attempts=5))
    queue.enqueue_many([{"payload": {"i": i}} for i in range(3)])
    make_broker("jobs").claim(1)
    queue.purge()
    everything = set(queue.client.keys("*"))
    assert everything
    assert everything == set(queue.client.keys("tf:{other}:*"))
    assert queue.stats()["pending"] == 0
    assert other.stats()["pending"] == 1
    other.close()


def test_a_replaced_incarnations_idle_registration_gets_nothing_and_the_next_idle_worker_does(
    queue: Queue, make_broker: MakeBroker
) -> None:
    """The idle registration of an incarnation replaced under its pod name is skipped: no
    task is counted as handed to it, and the next idle worker gets the task. (The state is
    written here by hand: a successor's register clears its predecessor's registration.)"""
    other = make_broker("jobs", "pod-b", "1")
    assert other.claim(4, idle_ms=5000).tasks == []  # pod-b idle, on its wake list
    make_broker("jobs", "pod-a", "2").register(4)  # pod-a's record: incarnation 2
    newest = server_ms(queue.client) + 60_000  # handed first: the newest registration
    queue.client.zadd(queue.keys.idle, {"pod-a\0" + "1": newest})
    task_id = queue.enqueue({"x": 1})
    assert queue.client.zscore(queue.keys.idle, "pod-a\0" + "1") is None
    assert queue.client.llen(queue.keys.wake("pod-a")) == 0
    assert queue.get(task_id).state is TaskState.RUNNING  # type: ignore[union-attr]
    assert queue.client.llen(queue.keys.wake("pod-b")) == 1
