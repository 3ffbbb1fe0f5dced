"""Retrying a parent that added children at run time runs its handler again.

A parent's run that added children and then failed (or was ended by a failed child)
leaves children that may still be unfinished. Retried, the parent waits until those have
ended (as it waits for any dependency), then its handler runs again: never a `done`
made of the children's ends alone, with no run of the retried task.
"""

from __future__ import annotations

import redis
from taskfleet.producer.queue import Queue
from taskfleet.protocol.queue_ops import COMPLETED, JOINING
from taskfleet.protocol.tasks import TaskState

from tests.fixtures_redis import MakeBroker
from tests.polling import wait_for
from tests.workers.harness import WORKER_INTERVAL_S, WORKER_TIMEOUT_S, Fleet

PAGES = [{"payload": {"page": i}, "task_id": f"p{i}"} for i in range(2)]


def _state(queue: Queue, task_id: str) -> TaskState:
    task = queue.get(task_id)
    assert task is not None
    return task.state


def test_a_retried_parent_whose_children_are_unfinished_waits_for_them_then_runs_again(
    queue: Queue, make_broker: MakeBroker
) -> None:
    parent = queue.enqueue({}, task_id="doc", max_attempts=1)
    broker = make_broker("jobs")
    [run] = broker.claim(1).tasks
    assert queue.add_children(parent, run.token, PAGES) == ["p0", "p1"]
    broker.fail(parent, run.token, "boom", retryable=False)
    assert _state(queue, parent) is TaskState.DEAD

    assert queue.retry([parent]) == 1
    assert _state(queue, parent) is TaskState.WAITING  # its children are still out
    pages = {t.id: t for t in broker.claim(2).tasks}
    assert set(pages) == {"p0", "p1"}
    assert broker.complete_many([(i, t.token, f'"page {i}"') for i, t in pages.items()]) == [1, 1]

    task = queue.get(parent)
    assert task is not None and task.state is TaskState.PENDING, task
    [again] = broker.claim(1).tasks
    assert (again.id, again.attempts) == (parent, 1)
    # the new run adds the same children (ended: nothing to wait for) and returns
    assert queue.add_children(parent, again.token, PAGES) == ["p0", "p1"]
    assert broker.complete_many([(parent, again.token, '"merged"')]) == [1]
    task = queue.get(parent)
    assert task is not None and (task.state, task.result) == (TaskState.DONE, "merged")
    assert task.after == ["p0", "p1"]


def test_a_parent_ended_by_a_failed_child_runs_again_after_its_flow_is_retried(
    queue: Queue, make_broker: MakeBroker
) -> None:
    parent = queue.enqueue({}, task_id="doc")
    broker = make_broker("jobs")
    [run] = broker.claim(1).tasks
    items = [{**item, "max_attempts": 1} for item in PAGES]
    queue.add_children(parent, run.token, items)
    assert broker.complete_many([(parent, run.token, '"first"')]) == [JOINING]
    assert _state(queue, parent) is TaskState.WAITING
    pages = {t.id: t for t in broker.claim(2).tasks}
    broker.fail("p0", pages["p0"].token, "boom", retryable=False)
    assert _state(queue, parent) is TaskState.DEAD  # p1 still runs

    assert queue.retry_flow(parent) == 2  # p0, then the parent
    assert _state(queue, parent) is TaskState.WAITING
    assert broker.complete_many([("p1", pages["p1"].token, '"page 1"')]) == [1]
    [p0] = broker.claim(1).tasks
    assert p0.id == "p0"
    assert broker.complete_many([("p0", p0.token, '"page 0"')]) == [1]

    assert _state(queue, parent) is TaskState.PENDING
    [again] = broker.claim(1).tasks
    assert again.id == parent
    assert broker.complete_many([(parent, again.token, '"second"')]) == [1]
    task = queue.get(parent)
    assert task is not None and (task.state, task.result) == (TaskState.DONE, "second")


def test_a_retried_parent_whose_children_all_ended_runs_at_once(
    queue: Queue, make_broker: MakeBroker
) -> None:
    parent = queue.enqueue({}, task_id="doc", max_attempts=1)
    broker = make_broker("jobs")
    [run] = broker.claim(1).tasks
    queue.add_children(parent, run.token, PAGES)
    pages = broker.claim(2).tasks
    broker.complete_many([(t.id, t.token, None) for t in pages])
    broker.fail(parent, run.token, "boom", retryable=False)

    assert queue.retry([parent]) == 1
    assert _state(queue, parent) is TaskState.PENDING


def test_a_worker_runs_a_retried_splitting_parent_again_once_its_pages_ended(
    fleet: Fleet, queue: Queue, redis_client: redis.Redis
) -> None:
    """Real worker processes: the split adds its pages and fails its first run; retried
    while the pages are held back, it runs again after them and ends with its result."""
    parent = queue.enqueue({"pages": 2}, task_id="doc", max_attempts=1)
    worker = fleet.add("tests.workers.handlers:split_once", pod="pod-a").start()
    wait_for(
        lambda: _state(queue, parent) is TaskState.DEAD,
        timeout=WORKER_TIMEOUT_S,
        interval=WORKER_INTERVAL_S,
        what=fleet.logs,
    )
    # the pages wait on the gate: unfinished while the parent is retried
    assert queue.retry([parent]) == 1
    assert _state(queue, parent) is TaskState.WAITING
    redis_client.rpush("test:gate", "open", "open")
    [task] = queue.wait([parent], timeout=WORKER_TIMEOUT_S).values()
    assert (task.state, task.result) == (TaskState.DONE, {"pages": 2, "run": 2}), fleet.logs()
    assert worker.alive()


def test_a_task_that_ends_done_shows_no_error_of_an_earlier_attempt(
    queue: Queue, make_broker: MakeBroker
) -> None:
    """A plain task (completed done) and a parent (done once its children are): each
    first attempt failed with an error, the next one ended done."""
    queue.enqueue({}, task_id="plain")
    queue.enqueue({}, task_id="doc")
    broker = make_broker("jobs")
    for run in broker.claim(2).tasks:
        assert broker.fail(run.id, run.token, "boom", retry_after_ms=0) is TaskState.DELAYED
    for task_id in ("plain", "doc"):
        task = queue.get(task_id)
        assert task is not None and task.error == "boom"
    runs = {t.id: t for t in broker.claim(2).tasks}
    assert set(runs) == {"plain", "doc"}
    assert queue.add_children("doc", runs["doc"].token, PAGES) == ["p0", "p1"]
    applied = broker.complete_many([(i, t.token, None) for i, t in runs.items()])
    assert dict(zip(runs, applied, strict=True)) == {"plain": COMPLETED, "doc": JOINING}
    assert _state(queue, "doc") is TaskState.WAITING
    pages = broker.claim(2).tasks
    assert broker.complete_many([(t.id, t.token, None) for t in pages]) == [1, 1]
    for task_id in ("plain", "doc"):
        task = queue.get(task_id)
        assert task is not None and (task.state, task.error) == (TaskState.DONE, None), task


def test_a_worker_counts_a_parent_its_cancelled_child_ended_dead_as_failed_not_completed(
    fleet: Fleet, queue: Queue
) -> None:
    """Real worker process: the split's child is cancelled before the split returns; its
    complete ends it dead, and the worker counts a failure, never a completion."""
    parent = queue.enqueue({}, task_id="doc")
    worker = fleet.add("tests.workers.handlers:split_cancelled", pod="pod-a").start()
    wait_for(
        lambda: _state(queue, parent) is TaskState.DEAD,
        timeout=WORKER_TIMEOUT_S,
        interval=WORKER_INTERVAL_S,
        what=fleet.logs,
    )
    task = queue.get(parent)
    assert task is not None and task.reason == "dependency failed"
    worker.signal()
    assert worker.wait() == 0
    assert worker.has_event("worker_stopped", completed=0, failed=1), worker.log_text()
