"""Pending across groups, listed in the order the claim serves it: ``Queue.list`` without
a group walks every group's own zset and the ungrouped tasks by the fair ring's turns
(weights and parked groups included), pages by cursor, and agrees with the claims that
follow; ``fair_order`` alone, pure. On a real Redis."""

from __future__ import annotations

from taskfleet import Queue
from taskfleet.protocol.groups import GroupSettings, Lane, fair_order

from tests.fixtures_redis import MakeBroker


def _three_groups(queue: Queue) -> None:
    queue.set_group("c", GroupSettings(weight=2))
    queue.enqueue_many([{"payload": {"g": "a", "i": i}, "group": "a"} for i in range(4)])
    queue.enqueue_many([{"payload": {"g": "b", "i": i}, "group": "b"} for i in range(2)])
    queue.enqueue_many([{"payload": {"g": "c", "i": i}, "group": "c"} for i in range(5)])
    queue.enqueue_many([{"payload": {"g": "", "i": i}} for i in range(2)])


def _all_pending(queue: Queue, limit: int) -> list[str]:
    ids: list[str] = []
    cursor = None
    while True:
        page = queue.list("pending", limit=limit, cursor=cursor)
        ids += [t.id for t in page.tasks]
        cursor = page.cursor
        if cursor is None:
            return ids


def test_pending_of_three_groups_is_listed_whole_in_the_order_the_claims_then_take(
    queue: Queue, make_broker: MakeBroker
) -> None:
    _three_groups(queue)
    listed = _all_pending(queue, limit=3)
    assert len(listed) == 13 and len(set(listed)) == 13
    assert queue.stats()["pending"] == 13
    worker = make_broker("jobs")
    claimed = [t.id for _ in range(13) for t in worker.claim(1).tasks]
    assert claimed == listed


def test_a_group_listed_alone_keeps_its_own_order_and_the_whole_list_names_each_group(
    queue: Queue,
) -> None:
    _three_groups(queue)
    page = queue.list("pending", limit=100)
    groups = [t.group or "" for t in page.tasks]
    assert sorted(set(groups)) == ["", "a", "b", "c"]
    own = [t.id for t in queue.list("pending", group="c", limit=100).tasks]
    assert [t.id for t in page.tasks if t.group == "c"] == own


def test_a_group_held_back_by_its_cap_is_listed_after_the_claimable_ones(
    queue: Queue, make_broker: MakeBroker
) -> None:
    queue.set_group("a", GroupSettings(max_concurrency=1))
    queue.enqueue_many([{"payload": {"i": i}, "group": "a"} for i in range(3)])
    queue.enqueue_many([{"payload": {"i": i}, "group": "b"} for i in range(3)])
    worker = make_broker("jobs")
    taken = worker.claim(2).tasks  # one of a (its cap), one of b; a is parked
    assert len(taken) == 2
    listed = [t.group for t in queue.list("pending", limit=100).tasks]
    assert listed == ["b", "b", "a", "a"]


def test_fair_order_serves_lanes_by_turn_and_weight_and_pages_exactly() -> None:
    lanes = [Lane("a", 0.0, 1.0, 3), Lane("b", 0.0, 2.0, 3), Lane("x", 0.0, 1.0, 2, held=True)]
    whole = fair_order(lanes, 0, 100)
    assert whole == [
        ("a", 0), ("b", 0), ("b", 1), ("a", 1), ("b", 2), ("a", 2), ("x", 0), ("x", 1)
    ]  # fmt: skip
    assert fair_order(lanes, 2, 3) == whole[2:5]
    assert fair_order(lanes, 8, 5) == []
