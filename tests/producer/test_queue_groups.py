"""Groups: fair claiming between a queue's groups, priorities inside a group, per-group
caps and rate limits, filters by group."""

from __future__ import annotations

import pytest
from taskfleet import Queue, QueueConfig
from taskfleet.protocol.errors import InvalidArgument, TaskExists
from taskfleet.protocol.groups import GroupSettings

from tests.fixtures_redis import MakeBroker


def _claim_groups(queue: Queue, make_broker: MakeBroker, n: int) -> list[str | None]:
    """The groups of the next n tasks claimed, one claim of one task at a time."""
    worker = make_broker("jobs", "pod-a")
    out: list[str | None] = []
    for _ in range(n):
        [task] = worker.claim(1).tasks
        stored = queue.get(task.id)
        assert stored is not None
        out.append(stored.group)
    return out


def test_a_small_group_is_not_starved_behind_a_big_one(
    queue: Queue, make_broker: MakeBroker
) -> None:
    queue.enqueue_many([{"payload": {"i": i}, "group": "big"} for i in range(200)])
    queue.enqueue_many([{"payload": {"i": i}, "group": "small"} for i in range(3)])
    got = _claim_groups(queue, make_broker, 8)
    # served in turn: the small group's three tasks come within the first six claims
    assert got[:6].count("small") == 3
    assert queue.stats()["pending"] == 203 - 8


def test_one_claim_of_many_tasks_takes_them_in_turn(queue: Queue, make_broker: MakeBroker) -> None:
    for g in ("a", "b", "c"):
        queue.enqueue_many([{"payload": {"i": i}, "group": g} for i in range(10)])
    tasks = make_broker("jobs", "pod-a").claim(9).tasks
    groups = [t.group for t in (queue.get(task.id) for task in tasks) if t is not None]
    assert sorted(groups) == ["a"] * 3 + ["b"] * 3 + ["c"] * 3


def test_ungrouped_tasks_share_in_turn_with_groups(queue: Queue, make_broker: MakeBroker) -> None:
    queue.enqueue_many([{"payload": {"i": i}} for i in range(50)])
    queue.enqueue_many([{"payload": {"i": i}, "group": "g"} for i in range(2)])
    got = _claim_groups(queue, make_broker, 4)
    assert got.count("g") == 2


def test_weights_give_a_group_its_share(queue: Queue, make_broker: MakeBroker) -> None:
    queue.set_group("heavy", GroupSettings(weight=3))
    for g in ("heavy", "light"):
        queue.enqueue_many([{"payload": {"i": i}, "group": g} for i in range(40)])
    got = _claim_groups(queue, make_broker, 20)
    assert 14 <= got.count("heavy") <= 16


def test_priorities_order_tasks_inside_a_group(queue: Queue, make_broker: MakeBroker) -> None:
    queue.enqueue({"n": "low"}, group="g", priority=-5)
    urgent = queue.enqueue({"n": "high"}, group="g", priority=5)
    [task] = make_broker("jobs", "pod-a").claim(1).tasks
    assert task.id == urgent


def test_delayed_released_and_retried_tasks_keep_their_group(
    queue: Queue, make_broker: MakeBroker
) -> None:
    delayed = queue.enqueue({"n": 1}, group="t-1", delay=0.001)
    worker = make_broker("jobs", "pod-a")
    from tests.polling import wait_for

    got = wait_for(lambda: worker.claim(1).tasks, timeout=10, what="the delayed task")
    assert got[0].id == delayed
    assert worker.release([(got[0].id, got[0].token)]) == 1
    [again] = queue.list("pending", group="t-1").tasks
    assert again.id == delayed and again.group == "t-1"
    [task] = worker.claim(1).tasks
    worker.fail(task.id, task.token, "boom", retryable=False)
    assert queue.retry(group="t-1") == 1
    [back] = queue.list("pending", group="t-1").tasks
    assert back.group == "t-1"
    assert queue.list("pending", group="other").tasks == []


def test_a_group_at_its_concurrency_cap_waits_and_others_run(
    queue: Queue, make_broker: MakeBroker
) -> None:
    queue.configure(QueueConfig(group_max_concurrency=2))
    queue.set_group("wide", GroupSettings(max_concurrency=5))
    for g in ("a", "wide", "b"):
        queue.enqueue_many([{"payload": {"i": i}, "group": g} for i in range(10)])
    worker = make_broker("jobs", "pod-a")
    tasks = worker.claim(20).tasks
    groups = [queue.get(t.id).group for t in tasks]  # type: ignore[union-attr]
    assert (groups.count("a"), groups.count("b"), groups.count("wide")) == (2, 2, 5)
    assert worker.claim(5).tasks == []
    done = [t for t in tasks if queue.get(t.id).group == "a"][:1]  # type: ignore[union-attr]
    worker.complete_many([(t.id, t.token, None) for t in done])
    [next_task] = worker.claim(5).tasks
    assert queue.get(next_task.id).group == "a"  # type: ignore[union-attr]
    assert {c.group: c.running for c in queue.groups()} == {"a": 2, "b": 2, "wide": 5}


def test_a_group_rate_limit_holds_that_group_and_says_when(
    queue: Queue, make_broker: MakeBroker
) -> None:
    queue.configure(QueueConfig(group_rate_limit_tasks=2, rate_limit_period_s=60))
    for g in ("a", "b"):
        queue.enqueue_many([{"payload": {"i": i}, "group": g} for i in range(5)])
    worker = make_broker("jobs", "pod-a")
    claimed = worker.claim(10)
    assert len(claimed.tasks) == 4
    assert claimed.retry_after_ms > 0
    assert worker.claim(10).tasks == []


def test_cancel_group_cancels_its_pending_and_delayed_tasks_only(
    queue: Queue, make_broker: MakeBroker
) -> None:
    queue.enqueue_many([{"payload": {"i": i}, "group": "gone"} for i in range(5)])
    queue.enqueue({"late": 1}, group="gone", delay=3600)
    kept = queue.enqueue({"keep": 1}, group="kept")
    outcomes = queue.cancel_group("gone")
    assert sum(outcomes.values()) == 6
    assert queue.stats()["pending"] == 1
    [task] = make_broker("jobs", "pod-a").claim(5).tasks
    assert task.id == kept


def test_a_bad_group_is_refused_and_nothing_is_stored(queue: Queue) -> None:
    with pytest.raises(InvalidArgument, match="group must be"):
        queue.enqueue({}, group="{tag}")
    with pytest.raises(InvalidArgument, match="group must be"):
        queue.enqueue_many([{"payload": {}}, {"payload": {}, "group": ""}])
    assert queue.stats()["pending"] == 0


def test_the_same_id_in_another_group_is_a_conflict(queue: Queue) -> None:
    queue.enqueue({}, task_id="t", group="a")
    with pytest.raises(TaskExists):
        queue.enqueue({}, task_id="t", group="b")
    assert queue.enqueue_result({}, task_id="t", group="a").created is False
