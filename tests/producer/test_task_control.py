"""Cancel, promote, retry (replay), list and purge of tasks, and handlers' reports and verdicts,
through the protocol against a real redis-server."""

from __future__ import annotations

from datetime import timedelta

import pytest
from taskfleet import CancelOutcome, InvalidArgument, Queue, QueueConfig, TaskState
from taskfleet.protocol.bounds import MAX_DEFERRALS
from taskfleet.protocol.control_ops import Report

from tests.fixtures_redis import MakeBroker


def _state(queue: Queue, task_id: str) -> TaskState:
    task = queue.get(task_id)
    assert task is not None
    return task.state


def test_a_cancelled_pending_task_ends_cancelled_and_is_never_claimed(
    queue: Queue, make_broker: MakeBroker
) -> None:
    task_id = queue.enqueue({"n": 1})
    later = queue.enqueue({"n": 2}, delay=60)
    assert queue.cancel(task_id) is CancelOutcome.CANCELLED
    assert queue.cancel(later) is CancelOutcome.CANCELLED
    assert make_broker("jobs").claim(10).tasks == []
    assert _state(queue, task_id) is TaskState.CANCELLED
    stats = queue.stats()
    assert (stats["pending"], stats["delayed"], stats["cancelled"]) == (0, 0, 2)
    assert stats["cancelled_total"] == 2


def test_cancelling_a_finished_or_unknown_task_changes_nothing(
    queue: Queue, make_broker: MakeBroker
) -> None:
    task_id = queue.enqueue({"n": 1})
    broker = make_broker("jobs")
    [claimed] = broker.claim(1).tasks
    broker.complete_many([(claimed.id, claimed.token, None)])
    assert queue.cancel(task_id) is CancelOutcome.DONE
    assert queue.cancel("nope") is CancelOutcome.NOT_FOUND
    assert _state(queue, task_id) is TaskState.DONE


def test_a_running_task_learns_its_cancellation_from_the_heartbeat_and_ends_cancelled(
    queue: Queue, make_broker: MakeBroker
) -> None:
    task_id = queue.enqueue({"n": 1})
    broker = make_broker("jobs")
    [claimed] = broker.claim(1).tasks
    assert broker.beat({claimed.id: claimed.token}).cancelled == frozenset()
    assert queue.cancel(task_id) is CancelOutcome.REQUESTED
    assert _state(queue, task_id) is TaskState.RUNNING
    reply = broker.beat({claimed.id: claimed.token})
    assert (reply.lost, reply.cancelled) == (set(), frozenset({task_id}))
    # whatever the run returns, the task ends cancelled
    assert broker.complete_many([(claimed.id, claimed.token, '"late"')]) == [3]
    task = queue.get(task_id)
    assert task is not None
    assert (task.state, task.result) == (TaskState.CANCELLED, None)
    # a retry of that write is answered alike
    assert broker.complete_many([(claimed.id, claimed.token, '"late"')]) == [3]


def test_a_running_cancelled_task_that_fails_or_is_taken_back_does_not_run_again(
    queue: Queue, make_broker: MakeBroker
) -> None:
    first, second = queue.enqueue({"n": 1}), queue.enqueue({"n": 2})
    broker = make_broker("jobs")
    a, b = broker.claim(2).tasks
    queue.cancel_many([first, second])
    assert broker.fail(a.id, a.token, "boom") is TaskState.CANCELLED
    assert queue.requeue_pod("pod-a") == 0  # taken back: cancelled, not requeued
    assert _state(queue, b.id) is TaskState.CANCELLED
    assert make_broker("jobs", "pod-b").claim(5).tasks == []


def test_a_draining_worker_release_of_a_cancelled_task_ends_it_cancelled(
    queue: Queue, make_broker: MakeBroker
) -> None:
    task_id = queue.enqueue({"n": 1})
    broker = make_broker("jobs")
    [claimed] = broker.claim(1).tasks
    queue.cancel(task_id)
    assert broker.release([(claimed.id, claimed.token)]) == 0
    assert _state(queue, task_id) is TaskState.CANCELLED


def test_a_promoted_delayed_task_is_claimed_now_and_other_states_are_left_alone(
    queue: Queue, make_broker: MakeBroker
) -> None:
    later = queue.enqueue({"n": 1}, delay=3600, priority=5)
    grouped = queue.enqueue({"n": 2}, delay=3600, group="tenant-a")
    ready = queue.enqueue({"n": 3})
    broker = make_broker("jobs")
    assert [t.id for t in broker.claim(10).tasks] == [ready]
    assert queue.promote_many([later, grouped, ready, "nope"]) == {
        later: True,
        grouped: True,
        ready: False,
        "nope": False,
    }
    assert queue.promote(later) is False  # pending now: a second promote changes nothing
    task = queue.get(later)
    assert task is not None and task.state is TaskState.PENDING
    assert task.run_at is not None and task.created_at is not None
    assert task.run_at < task.created_at + timedelta(seconds=60)
    assert sorted(t.id for t in broker.claim(10).tasks) == sorted([later, grouped])
    assert queue.stats()["delayed"] == 0


def test_retry_sends_dead_tasks_back_with_a_new_attempt_budget(
    queue: Queue, make_broker: MakeBroker
) -> None:
    ids = [queue.enqueue({"n": i}, max_attempts=1) for i in range(3)]
    broker = make_broker("jobs")
    for task in broker.claim(3).tasks:
        assert broker.fail(task.id, task.token, "ValueError: x") is TaskState.DEAD
    assert queue.retry([ids[0]], max_attempts=2) == 1
    task = queue.get(ids[0])
    assert task is not None
    assert (task.state, task.attempts, task.max_attempts, task.error) == (
        TaskState.PENDING,
        0,
        2,
        None,
    )
    assert queue.retry([ids[0]]) == 0  # not dead any more: skipped
    assert queue.retry() == 2  # all the others
    assert queue.stats()["replayed"] == 3
    assert sorted(t.id for t in broker.claim(5).tasks) == sorted(ids)


def test_retry_and_purge_by_reason_leave_other_dead_tasks_alone(
    queue: Queue, make_broker: MakeBroker
) -> None:
    failed, permanent = queue.enqueue({"n": 1}), queue.enqueue({"n": 2})
    broker = make_broker("jobs")
    a, b = broker.claim(2).tasks
    broker.fail(a.id, a.token, "x", retryable=False)
    broker.fail(b.id, b.token, "y", retryable=False, reason="permanent")
    assert [t.id for t in queue.list("dead", reason="permanent").tasks] == [permanent]
    assert queue.retry(reason="failed") == 1
    assert _state(queue, failed) is TaskState.PENDING
    assert queue.purge_tasks("dead", reason="failed") == 0
    assert queue.purge_tasks("dead") == 1
    assert queue.get(permanent) is None
    with pytest.raises(InvalidArgument):
        queue.purge_tasks("pending")


def test_list_pages_through_a_state_with_a_cursor(queue: Queue) -> None:
    ids = [queue.enqueue({"n": i}) for i in range(7)]
    seen: list[str] = []
    cursor = None
    while True:
        page = queue.list("pending", limit=3, cursor=cursor)
        seen += [t.id for t in page.tasks]
        if page.cursor is None:
            break
        cursor = page.cursor
    assert seen == ids
    assert queue.list("done").tasks == []
    assert queue.list("pending", older_than=3600).tasks == []
    with pytest.raises(InvalidArgument):
        queue.list("asleep")


def test_a_retry_after_gives_the_attempt_back_until_the_bound_then_counts(
    queue: Queue, make_broker: MakeBroker
) -> None:
    task_id = queue.enqueue({"n": 1}, max_attempts=1)
    broker = make_broker("jobs")
    for _ in range(MAX_DEFERRALS):
        queue.client.hset(queue.keys.task(task_id), "run_at", 0)  # due now
        queue.client.zadd(queue.keys.delayed, {task_id: 0})
        [claimed] = broker.claim(1).tasks
        state = broker.fail(claimed.id, claimed.token, "RetryAfter: 429", retry_after_ms=20_000)
        assert state is TaskState.DELAYED
        task = queue.get(task_id)
        assert task is not None and task.attempts == 0
    queue.client.zadd(queue.keys.delayed, {task_id: 0})
    [claimed] = broker.claim(1).tasks
    assert broker.fail(claimed.id, claimed.token, "x", retry_after_ms=1000) is TaskState.DEAD
    assert queue.stats()["deferred"] == MAX_DEFERRALS


def test_reports_store_progress_and_settle_cost_only_under_the_runs_token(
    queue: Queue, make_broker: MakeBroker
) -> None:
    queue.configure(QueueConfig(rate_limit_cost=100, rate_limit_period_s=3600))
    task_id = queue.enqueue({"n": 1}, cost=50)
    broker = make_broker("jobs")
    [claimed] = broker.claim(1).tasks
    assert float(queue.client.hget(queue.keys.bucket_cost, "tokens")) == pytest.approx(50, abs=1)
    ok = broker.report([Report(task_id, claimed.token, '{"fraction":0.5}', 10)])
    assert ok == [True]
    assert broker.report([Report(task_id, "stale:1", '{"fraction":0.9}', None)]) == [False]
    task = queue.get(task_id)
    assert task is not None
    assert (task.progress, task.cost_used) == ({"fraction": 0.5}, 10)
    # the 40 units not used went back into the bucket
    assert float(queue.client.hget(queue.keys.bucket_cost, "tokens")) == pytest.approx(90, abs=1)
