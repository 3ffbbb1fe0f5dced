"""Children added at run time: the parent's policy for a child that fails (``on_dep_fail``
given without ``after``), and a child id adopted before never run twice, whatever the
retention. Real redis-server, the scripts as a worker calls them."""

from __future__ import annotations

import pytest
from taskfleet import Queue, QueueConfig, TaskState
from taskfleet.protocol.queue_ops import JOINING

from tests.fixtures_redis import MakeBroker

PAGES = [{"payload": {"page": i}, "task_id": f"p{i}", "max_attempts": 1} for i in range(2)]


def _state(queue: Queue, task_id: str) -> TaskState:
    task = queue.get(task_id)
    assert task is not None
    return task.state


@pytest.mark.parametrize("returned_first", [True, False])
def test_a_parent_under_ignore_ends_done_though_a_child_failed(
    queue: Queue, make_broker: MakeBroker, returned_first: bool
) -> None:
    queue.enqueue({}, task_id="doc", on_dep_fail="ignore")
    task = queue.get("doc")
    assert task is not None and (task.on_dep_fail, task.after) == ("ignore", [])
    broker = make_broker("jobs")
    [run] = broker.claim(1).tasks
    queue.add_children("doc", run.token, PAGES)
    if returned_first:  # the parent waits, then its child fails
        assert broker.complete_many([("doc", run.token, '"split"')]) == [JOINING]
    pages = {t.id: t for t in broker.claim(2).tasks}
    broker.fail("p0", pages["p0"].token, "unreadable", retryable=False)
    assert broker.complete_many([("p1", pages["p1"].token, None)]) == [1]
    if not returned_first:  # its child failed while it ran, then it returns
        assert broker.complete_many([("doc", run.token, '"split"')]) == [1]
    task = queue.get("doc")
    assert task is not None and (task.state, task.result) == (TaskState.DONE, "split")


def test_a_parent_under_cancel_is_cancelled_with_its_other_children_when_a_child_fails(
    queue: Queue, make_broker: MakeBroker
) -> None:
    queue.enqueue({}, task_id="doc", on_dep_fail="cancel")
    broker = make_broker("jobs")
    [run] = broker.claim(1).tasks
    queue.add_children("doc", run.token, [*PAGES, {"payload": {}, "task_id": "p2"}])
    assert broker.complete_many([("doc", run.token, None)]) == [JOINING]
    pages = {t.id: t for t in broker.claim(2).tasks}
    assert set(pages) == {"p0", "p1"}
    broker.fail("p0", pages["p0"].token, "unreadable", retryable=False)
    task = queue.get("doc")
    assert task is not None
    assert (task.state, task.error) == (TaskState.CANCELLED, "dependency p0 ended dead")
    assert _state(queue, "p2") is TaskState.CANCELLED  # it had not started
    running = queue.get("p1")
    assert running is not None and running.cancel_requested is not None  # asked to stop


def test_a_parent_under_cancel_that_adds_a_child_already_dead_ends_cancelled(
    queue: Queue, make_broker: MakeBroker
) -> None:
    queue.enqueue({}, task_id="p0", max_attempts=1)
    broker = make_broker("jobs")
    [first] = broker.claim(1).tasks
    broker.fail("p0", first.token, "unreadable", retryable=False)
    queue.enqueue({}, task_id="doc", on_dep_fail="cancel")
    [run] = broker.claim(1).tasks
    queue.add_children("doc", run.token, [{"payload": {}, "task_id": "p0", "max_attempts": 1}])
    assert broker.complete_many([("doc", run.token, None)]) == [3]
    assert _state(queue, "doc") is TaskState.CANCELLED


def test_children_re_added_after_their_records_were_dropped_are_not_run_again(
    queue: Queue, make_broker: MakeBroker
) -> None:
    """done_retention_s 0: a done child's record goes at its completion. The parent's run
    that added them fails; retried, its new run adds the same children: none is created,
    counted or run again, and the parent ends done."""
    queue.configure(QueueConfig(done_retention_s=0))
    queue.enqueue({}, task_id="doc", max_attempts=1)
    broker = make_broker("jobs")
    [run] = broker.claim(1).tasks
    assert queue.add_children("doc", run.token, PAGES) == ["p0", "p1"]
    pages = broker.claim(2).tasks
    assert broker.complete_many([(t.id, t.token, None) for t in pages]) == [1, 1]
    assert queue.get("p0") is None and queue.get("p1") is None  # dropped at once
    broker.fail("doc", run.token, "boom", retryable=False)
    enqueued = queue.stats()["enqueued"]
    assert queue.retry(["doc"]) == 1
    [again] = broker.claim(1).tasks
    assert again.id == "doc"
    assert queue.add_children("doc", again.token, PAGES) == ["p0", "p1"]
    assert queue.get("p0") is None and queue.get("p1") is None
    assert queue.stats()["enqueued"] == enqueued
    task = queue.get("doc")
    assert task is not None and (task.after, task.deps_left) == (["p0", "p1"], None)
    assert broker.complete_many([("doc", again.token, '"merged"')]) == [1]
    assert queue.get("doc") is None  # done (and dropped at once, as its children were)
    assert broker.claim(10).tasks == []
    assert queue.stats()["enqueued"] == enqueued
