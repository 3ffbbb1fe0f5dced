"""Per-group spend budgets: a group's budget (its own, or every group's default from the
config) parks only that group when the next task's cost would pass it, is settled with
the reported cost, and starts again when the UTC period rolls over; on a real Redis."""

from __future__ import annotations

from taskfleet import Queue, QueueConfig
from taskfleet.protocol.control_ops import Report

from tests.fixtures_redis import MakeBroker


def _groups(queue: Queue, ids: list[str]) -> list[str | None]:
    return [t.group for t in (queue.get(i) for i in ids) if t is not None]


def test_a_group_budget_holds_back_only_that_group(queue: Queue, make_broker: MakeBroker) -> None:
    queue.set_budget(day=5, group="a")
    a = queue.enqueue_many([{"payload": {"i": i}, "group": "a", "cost": 3} for i in range(2)])
    queue.enqueue_many([{"payload": {"i": i}, "group": "b", "cost": 3} for i in range(2)])
    worker = make_broker("jobs")
    got = worker.claim(4).tasks
    assert sorted(_groups(queue, [t.id for t in got])) == ["a", "b", "b"]  # 3 + 3 > 5
    state = queue.quota(group="a")
    assert (state.day_limit, state.day_spent, state.day_left) == (5, 3, 2)
    assert not queue.quota().budget_spent  # the queue has no budget of its own
    # the real cost reported settles the group's spend: 1, 2 units back; the group's next
    # task (3) fits again
    first = next(t for t in got if t.id in a)
    assert worker.report([Report(first.id, first.token, None, 1)]) == [True]
    assert queue.quota(group="a").day_spent == 1
    [again] = worker.claim(2).tasks
    assert again.id == a[1]


def test_every_groups_default_budget_comes_from_the_config_and_rolls_over(
    queue: Queue, make_broker: MakeBroker
) -> None:
    queue.configure(QueueConfig(group_budget_day=4))
    ids = queue.enqueue_many([{"payload": {"i": i}, "group": "c", "cost": 3} for i in range(2)])
    worker = make_broker("jobs")
    assert [t.id for t in worker.claim(2).tasks] == ids[:1]
    state = queue.quota(group="c")
    assert (state.day_limit, state.day_spent, state.day_override) == (4, 3, False)
    # yesterday's spend does not count today: the period rolled over
    queue.client.hset(queue.keys.group("c"), mapping={"day": "1999-12-31"})
    queue.set_budget(day="default", group="c")  # any change looks at the group again
    assert [t.id for t in worker.claim(2).tasks] == ids[1:]
