"""A flow's identity, outcome and retention: the tasks of one flow (``enqueue_flow``, a
task with ``after``, children added at run time) share a flow id; when the last of them
ends the flow ends, counted by outcome; and retention keeps its finished members until a
retention after the flow's end. Real redis-server."""

from __future__ import annotations

import asyncio

from taskfleet import AsyncQueue, Queue, QueueConfig, TaskState
from taskfleet.producer.flows import chain, group

from tests.fixtures_redis import BlockingBroker, MakeBroker
from tests.polling import wait_for

FLOW_STATS = ("flows_done", "flows_failed", "flows_cancelled")


def _run(broker: BlockingBroker, result: str | None = None) -> list[str]:
    claimed = broker.claim(100).tasks
    broker.complete_many([(t.id, t.token, result) for t in claimed])
    return [t.id for t in claimed]


def _flow_stats(queue: Queue) -> tuple[int, ...]:
    stats = queue.stats()
    return tuple(stats[name] for name in FLOW_STATS)


def _now(queue: Queue) -> int:
    """The server's clock in ms (scores and retention use it)."""
    sec, usec = queue.client.time()
    return int(sec) * 1000 + int(usec) // 1000


def _flow_of(queue: Queue, task_id: str) -> str | None:
    task = queue.get(task_id)
    assert task is not None
    return task.flow


def test_a_flow_enqueued_whole_is_one_flow_and_ends_done(
    queue: Queue, make_broker: MakeBroker
) -> None:
    flow = queue.enqueue_flow(
        chain(
            group({"payload": {}, "task_id": "a1"}, {"payload": {}, "task_id": "a2"}),
            {"payload": {}, "task_id": "b"},
        )
    )
    assert [_flow_of(queue, t) for t in flow.ids] == ["a1"] * 3
    record = queue.flow("a1")
    assert record is not None
    assert (record.open, record.done, record.ended, record.outcome) == (3, 0, False, None)
    plain = queue.enqueue({"n": "plain"})
    assert _flow_of(queue, plain) is None
    broker = make_broker("jobs")
    assert sorted(_run(broker)) == sorted(["a1", "a2", plain])
    assert _flow_stats(queue) == (0, 0, 0)
    assert _run(broker) == ["b"]
    record = queue.flow("a1")
    assert record is not None
    assert (record.open, record.done, record.ended, record.outcome) == (0, 3, True, "done")
    assert _flow_stats(queue) == (1, 0, 0)


def test_the_async_queue_reads_a_flow_and_its_members(queue: Queue, redis_url: str) -> None:
    a = queue.enqueue({"n": "a"})

    async def main() -> tuple[str | None, int | None, bool]:
        async with AsyncQueue(queue.name, redis_url) as aq:
            b = await aq.enqueue({"n": "b"}, after=[a])
            task = await aq.get(b)
            record = await aq.flow(a)
            return (
                task.flow if task else None,
                record.open if record else None,
                await aq.flow("none") is None,
            )

    assert asyncio.run(main()) == (a, 2, True)


def test_a_dependant_joins_its_dependencys_flow_and_a_dead_member_fails_it(
    queue: Queue, make_broker: MakeBroker
) -> None:
    a = queue.enqueue({"n": "a"})
    b = queue.enqueue({"n": "b"}, after=[a])
    c = queue.enqueue({"n": "c"}, after=[b])
    assert [_flow_of(queue, t) for t in (a, b, c)] == [a, a, a]  # named by its first task
    broker = make_broker("jobs")
    [claimed] = broker.claim(1).tasks
    assert broker.fail(a, claimed.token, "boom", retryable=False) is TaskState.DEAD
    # b and c end dead by their policy in the same script: the flow ends failed
    record = queue.flow(a)
    assert record is not None
    assert (record.dead, record.open, record.outcome) == (3, 0, "failed")
    assert _flow_stats(queue) == (0, 1, 0)


def test_a_cancelled_member_without_a_dead_one_ends_the_flow_cancelled(
    queue: Queue, make_broker: MakeBroker
) -> None:
    a = queue.enqueue({"n": "a"})
    b = queue.enqueue({"n": "b"}, after=[a], on_dep_fail="ignore")
    queue.cancel(a)
    broker = make_broker("jobs")
    assert _run(broker) == [b]
    record = queue.flow(a)
    assert record is not None
    assert (record.done, record.cancelled, record.outcome) == (1, 1, "cancelled")
    assert _flow_stats(queue) == (0, 0, 1)


def test_a_retried_member_reopens_its_flow_which_counts_again_when_it_ends(
    queue: Queue, make_broker: MakeBroker
) -> None:
    a = queue.enqueue({"n": "a"})
    b = queue.enqueue({"n": "b"}, after=[a])
    broker = make_broker("jobs")
    [claimed] = broker.claim(1).tasks
    broker.fail(a, claimed.token, "boom", retryable=False)
    assert _flow_stats(queue) == (0, 1, 0)
    queue.retry([a])
    queue.retry([b])  # waits for a again
    record = queue.flow(a)
    assert record is not None
    assert (record.open, record.dead, record.ended) == (2, 0, False)
    assert _run(broker) == [a]
    assert _run(broker) == [b]
    assert _flow_stats(queue) == (1, 1, 0)


def test_children_join_their_parents_flow_and_a_take_back_keeps_it_open(
    queue: Queue, make_broker: MakeBroker
) -> None:
    parent = queue.enqueue({"n": "parent"})
    broker = make_broker("jobs")
    [claimed] = broker.claim(1).tasks
    queue.add_children(parent, claimed.token, [{"payload": {"i": i}} for i in range(3)])
    broker.complete_many([(parent, claimed.token, None)])  # waits for its children
    children = [t.id for t in broker.claim(10).tasks]
    assert [_flow_of(queue, t) for t in [parent, *children]] == [parent] * 4
    assert queue.requeue_pod("pod-a") == 3  # its worker lost: the children go back
    record = queue.flow(parent)
    assert record is not None
    assert (record.open, record.ended) == (4, False)
    assert sorted(_run(broker)) == sorted(children)
    assert _state(queue, parent) is TaskState.DONE
    assert _flow_stats(queue) == (1, 0, 0)


def _state(queue: Queue, task_id: str) -> TaskState:
    task = queue.get(task_id)
    assert task is not None
    return task.state


def test_a_member_lost_too_often_fails_the_flow(queue: Queue, make_broker: MakeBroker) -> None:
    queue.configure(QueueConfig(max_lost=1))
    a = queue.enqueue({"n": "a"})
    queue.enqueue({"n": "b"}, after=[a])
    broker = make_broker("jobs")
    for _ in range(2):  # lost twice: more than max_lost
        assert [t.id for t in broker.claim(1).tasks] == [a]
        queue.requeue_pod("pod-a")
    assert _state(queue, a) is TaskState.DEAD
    assert _flow_stats(queue) == (0, 1, 0)


def test_retention_keeps_a_flows_members_until_a_retention_after_it_ends(
    queue: Queue, make_broker: MakeBroker
) -> None:
    retention_s = 1.0
    queue.configure(QueueConfig(done_retention_s=retention_s, dead_retention_s=retention_s))
    a = queue.enqueue({"n": "a"})
    b = queue.enqueue({"n": "b"}, after=[a])
    plain = queue.enqueue({"n": "plain"})
    broker = make_broker("jobs")
    assert sorted(_run(broker)) == sorted([a, plain])  # in one call: one finished_at

    # plain's retention passes and a sweep deletes it; a's passed too, but its flow is open
    wait_for(lambda: queue.sweep() and queue.get(plain) is None, what="plain pruned")
    assert _state(queue, a) is TaskState.DONE
    assert _run(broker) == [b]
    record = queue.flow(a)
    assert record is not None and record.ended_at is not None
    ended_ms = int(record.ended_at.timestamp() * 1000)
    # from now on a and b go a retention after the flow's end, not before
    queue.sweep()
    for task_id in (a, b):
        assert queue.get(task_id) is not None or _now(queue) >= ended_ms + 1000
    wait_for(
        lambda: queue.sweep() and queue.get(a) is None and queue.get(b) is None,
        what="members pruned after the flow's retention",
    )
    assert _now(queue) >= ended_ms + 1000


def test_completes_own_pruning_keeps_a_member_of_an_open_flow(
    queue: Queue, make_broker: MakeBroker
) -> None:
    """complete prunes expired done tasks as it goes: a member of an open flow stays."""
    queue.configure(QueueConfig(done_retention_s=0.05))
    a = queue.enqueue({"n": "a"})
    hold = queue.enqueue({"n": "hold"})
    queue.enqueue({"n": "b"}, after=[a, hold])
    old = queue.enqueue({"n": "old"})
    broker = make_broker("jobs")
    claimed = {t.id: t.token for t in broker.claim(3).tasks}
    broker.complete_many([(a, claimed[a], None), (old, claimed[old], None)])
    finished_ms = _now(queue)
    wait_for(lambda: _now(queue) > finished_ms + 100, what="retention passed")
    c = queue.enqueue({"n": "c"})
    assert _run(broker) == [c]  # its complete prunes what is past retention
    assert queue.get(old) is None
    assert _state(queue, a) is TaskState.DONE  # its flow is open (hold still runs)
