"""Dependencies between tasks (``after``): a task waits, never claimable, until the tasks it
names are done, then becomes pending in the script that completed the last one; a
dependency that dies or is cancelled resolves it by its policy. Real redis-server."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest
import redis
from taskfleet import AsyncQueue, InvalidArgument, Queue, QueueConfig, StaleToken, TaskState
from taskfleet.producer.flows import build, chain, chord, from_json, group
from taskfleet.protocol.flows import dependency_results
from taskfleet.protocol.queue_ops import DEPENDENCY_FAILED, JOINING
from taskfleet.worker.context import TaskContext

from tests.fixtures_redis import BlockingBroker, MakeBroker
from tests.polling import wait_for


def _state(queue: Queue, task_id: str) -> TaskState:
    task = queue.get(task_id)
    assert task is not None
    return task.state


def _run(broker: BlockingBroker, result: str | None = None) -> list[str]:
    """Claim what is pending and complete it; the ids run."""
    claimed = broker.claim(100).tasks
    broker.complete_many([(t.id, t.token, result) for t in claimed])
    return [t.id for t in claimed]


def test_a_dependant_waits_until_its_last_dependency_is_done(
    queue: Queue, make_broker: MakeBroker
) -> None:
    a = queue.enqueue({"n": "a"})
    b = queue.enqueue({"n": "b"})
    c = queue.enqueue({"n": "c"}, after=[a, b])
    assert _state(queue, c) is TaskState.WAITING
    assert queue.stats()["waiting"] == 1
    broker = make_broker("jobs")
    [first] = broker.claim(1).tasks
    assert first.id == a
    broker.complete_many([(a, first.token, None)])
    assert _state(queue, c) is TaskState.WAITING  # b is not done yet
    assert _run(broker) == [b]
    assert _state(queue, c) is TaskState.PENDING  # in the script that completed b
    assert _run(broker) == [c]
    task = queue.get(c)
    assert task is not None
    assert (task.state, task.after, task.on_dep_fail) == (TaskState.DONE, [a, b], "fail")
    assert queue.stats()["waiting"] == 0


def test_a_chain_in_one_enqueue_runs_in_order(queue: Queue, make_broker: MakeBroker) -> None:
    ids = queue.enqueue_many(
        [
            {"payload": {"step": 1}, "task_id": "s1"},
            {"payload": {"step": 2}, "task_id": "s2", "after": ["s1"]},
            {"payload": {"step": 3}, "task_id": "s3", "after": ["s2"]},
        ]
    )
    assert ids == ["s1", "s2", "s3"]
    broker = make_broker("jobs")
    order = [_run(broker) for _ in range(4)]
    assert order == [["s1"], ["s2"], ["s3"], []]


def test_done_dependencies_are_satisfied_at_once(queue: Queue, make_broker: MakeBroker) -> None:
    a = queue.enqueue({"n": "a"})
    _run(make_broker("jobs"))
    b = queue.enqueue({"n": "b"}, after=[a])
    assert _state(queue, b) is TaskState.PENDING


def test_an_unknown_dependency_is_refused_and_nothing_is_stored(queue: Queue) -> None:
    with pytest.raises(InvalidArgument, match="waits for 'nope'"):
        queue.enqueue_many(
            [{"payload": {}, "task_id": "x"}, {"payload": {}, "task_id": "y", "after": ["nope"]}]
        )
    assert queue.get("x") is None
    # a later task of the same call is not a dependency it can name (no cycles)
    with pytest.raises(InvalidArgument, match="waits for 'later'"):
        queue.enqueue_many(
            [{"payload": {}, "after": ["later"]}, {"payload": {}, "task_id": "later"}]
        )
    assert queue.stats()["enqueued"] == 0


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"after": "a"}, "after must be a list"),
        ({"after": []}, "after must name 1 to"),
        ({"after": ["a", "a"]}, "twice"),
        ({"after": ["me"], "task_id": "me"}, "cannot wait for itself"),
        ({"after": ["a"], "on_dep_fail": "explode"}, "on_dep_fail must be one of"),
        ({"on_dep_fail": "explode"}, "on_dep_fail must be one of"),
        ({"after": ["a"], "delay": 5}, "cannot be combined"),
    ],
)
def test_bad_dependencies_are_refused_before_anything_is_sent(
    queue: Queue, kwargs: dict[str, object], message: str
) -> None:
    with pytest.raises(InvalidArgument, match=message):
        queue.enqueue({}, **kwargs)  # type: ignore[arg-type]


def test_a_dead_dependency_fails_its_dependants_and_theirs(
    queue: Queue, make_broker: MakeBroker
) -> None:
    a = queue.enqueue({"n": "a"}, max_attempts=1)
    b = queue.enqueue({"n": "b"}, after=[a])
    c = queue.enqueue({"n": "c"}, after=[b])
    broker = make_broker("jobs")
    [claimed] = broker.claim(10).tasks
    assert broker.fail(a, claimed.token, "boom", retryable=False) is TaskState.DEAD
    for dependant, failed in ((b, a), (c, b)):
        task = queue.get(dependant)
        assert task is not None
        assert (task.state, task.reason) == (TaskState.DEAD, "dependency failed")
        assert task.error == f"dependency {failed} ended dead"
    assert broker.claim(10).tasks == []


def test_policy_ignore_counts_a_failed_dependency_as_done(
    queue: Queue, make_broker: MakeBroker
) -> None:
    a = queue.enqueue({"n": "a"})
    b = queue.enqueue({"n": "b"}, after=[a], on_dep_fail="ignore")
    assert queue.cancel(a).value == "cancelled"
    assert _state(queue, b) is TaskState.PENDING
    assert _run(make_broker("jobs")) == [b]


def test_policy_cancel_cancels_the_dependant_and_its_other_dependencies(
    queue: Queue, make_broker: MakeBroker
) -> None:
    a = queue.enqueue({"n": "a"})
    b = queue.enqueue({"n": "b"})
    c = queue.enqueue({"n": "c"}, after=[a, b], on_dep_fail="cancel")
    assert queue.cancel(a).value == "cancelled"
    assert _state(queue, c) is TaskState.CANCELLED
    assert _state(queue, b) is TaskState.CANCELLED
    task = queue.get(c)
    assert task is not None and task.error == f"dependency {a} ended cancelled"
    assert make_broker("jobs").claim(10).tasks == []


def test_an_already_dead_dependency_applies_the_policy_at_enqueue(queue: Queue) -> None:
    a = queue.enqueue({"n": "a"})
    queue.cancel(a)
    failed = queue.enqueue({}, after=[a])
    ignored = queue.enqueue({}, after=[a], on_dep_fail="ignore")
    cancelled = queue.enqueue({}, after=[a], on_dep_fail="cancel")
    assert _state(queue, failed) is TaskState.DEAD
    assert _state(queue, ignored) is TaskState.PENDING
    assert _state(queue, cancelled) is TaskState.CANCELLED


def test_an_expired_dependency_fails_its_dependant(queue: Queue, make_broker: MakeBroker) -> None:
    a = queue.enqueue({"n": "a"}, deadline=datetime.now(UTC) + timedelta(milliseconds=1))
    b = queue.enqueue({"n": "b"}, after=[a])
    # the deadline passes; a claim expires it (the server clock decides)
    broker = make_broker("jobs")
    wait_for(lambda: broker.claim(10).tasks == [] and _state(queue, a) is TaskState.DEAD)
    task = queue.get(b)
    assert task is not None
    assert (task.state, task.error) == (TaskState.DEAD, f"dependency {a} ended dead")


def test_a_waiting_task_can_be_cancelled_and_its_dependency_runs_on(
    queue: Queue, make_broker: MakeBroker
) -> None:
    a = queue.enqueue({"n": "a"})
    b = queue.enqueue({"n": "b"}, after=[a])
    assert queue.cancel(b).value == "cancelled"
    assert queue.stats()["waiting"] == 0
    assert _run(make_broker("jobs")) == [a]
    assert _state(queue, b) is TaskState.CANCELLED


def test_retrying_a_failed_dependant_waits_again_for_its_retried_dependency(
    queue: Queue, make_broker: MakeBroker
) -> None:
    a = queue.enqueue({"n": "a"}, max_attempts=1)
    b = queue.enqueue({"n": "b"}, after=[a])
    broker = make_broker("jobs")
    [claimed] = broker.claim(10).tasks
    broker.fail(a, claimed.token, "boom", retryable=False)
    assert _state(queue, b) is TaskState.DEAD
    queue.retry([a])
    queue.retry([b])
    assert _state(queue, b) is TaskState.WAITING
    assert _run(broker) == [a]
    assert _run(broker) == [b]


def test_many_dependants_resolve_in_bounded_calls(queue: Queue, make_broker: MakeBroker) -> None:
    """2,500 tasks after one: its completion readies the first 200 (the budget of one
    call); later completions and sweeps take up the rest, 200 a call."""
    root = queue.enqueue({"n": "root"})
    for start in range(0, 2500, 500):
        batch = [{"payload": {"i": i}, "after": [root]} for i in range(start, start + 500)]
        queue.enqueue_many(batch)
    broker = make_broker("jobs")
    assert _run(broker) == [root]
    assert queue.stats()["pending"] == 200
    assert len(_run(broker)) == 100  # a complete takes up the backlog ...
    assert queue.stats()["pending"] == 300  # ... 100 claimed and done, 200 more ready
    queue.sweep()  # and each sweep, up to its bound (1,000 a call by default)
    queue.sweep()
    queue.sweep()
    stats = queue.stats()
    assert (stats["pending"], stats["waiting"], stats["done"]) == (2400, 0, 101)


def test_a_dependant_reads_its_dependencies_results_from_its_context(
    queue: Queue, make_broker: MakeBroker, redis_url: str
) -> None:
    a = queue.enqueue({"n": "a"})
    b = queue.enqueue({"n": "b"})
    broker = make_broker("jobs")
    _run(broker, '{"pages":3}')  # a and b
    c = queue.enqueue({"n": "c"}, after=[a, b])  # both done: handed at enqueue
    d = queue.enqueue({"n": "d"})
    e = queue.enqueue({"n": "e"}, after=[d, c])
    [claimed_d, claimed_c] = sorted(broker.claim(10).tasks, key=lambda t: t.id != d)
    broker.complete_many([(d, claimed_d.token, None), (c, claimed_c.token, '["merged"]')])
    context = TaskContext("jobs", e, 1, "pod-a", "1", redis_url)
    assert context.dependency_results() == {d: None, c: ["merged"]}
    assert TaskContext("jobs", c, 1, "pod-a", "1", redis_url).dependency_results() == {
        a: {"pages": 3},
        b: {"pages": 3},
    }
    assert TaskContext("jobs", a, 1, "pod-a", "1", redis_url).dependency_results() == {}


def test_inputs_are_bounded_by_max_payload_bytes(queue: Queue, make_broker: MakeBroker) -> None:
    queue.configure(QueueConfig(max_payload_bytes=100))
    a = queue.enqueue({"n": "a"})
    b = queue.enqueue({"n": "b"})
    c = queue.enqueue({"n": "c"}, after=[a, b])
    broker = make_broker("jobs")
    [ta, tb] = sorted(broker.claim(10).tasks, key=lambda t: t.id != a)
    broker.complete_many([(a, ta.token, '"' + "x" * 60 + '"')])
    broker.complete_many([(b, tb.token, '"' + "y" * 60 + '"')])  # would pass 100 bytes
    assert _state(queue, c) is TaskState.PENDING
    assert dependency_results(queue.client, queue.keys, c) == {a: "x" * 60}


def test_a_chord_is_enqueued_at_once_and_its_callback_gets_the_groups_results(
    queue: Queue, make_broker: MakeBroker
) -> None:
    pages = group(*({"payload": {"page": i}, "task_id": f"p{i}"} for i in range(3)))
    flow = queue.enqueue_flow(chord(pages, {"payload": {}, "task_id": "merge"}))
    assert (flow.ids, flow.last) == (["p0", "p1", "p2", "merge"], ["merge"])
    assert _state(queue, "merge") is TaskState.WAITING
    broker = make_broker("jobs")
    claimed = broker.claim(10).tasks
    assert sorted(t.id for t in claimed) == ["p0", "p1", "p2"]
    broker.complete_many([(t.id, t.token, f'"{t.id} done"') for t in claimed])
    assert _run(broker) == ["merge"]
    assert dependency_results(queue.client, queue.keys, "merge") == {
        f"p{i}": f"p{i} done" for i in range(3)
    }


def test_nested_flows_wait_for_what_ends_the_part_before(queue: Queue) -> None:
    flow = chain(
        {"payload": {}, "task_id": "x"},
        group(
            {"payload": {}, "task_id": "y"},
            chain({"payload": {}, "task_id": "z1"}, {"payload": {}, "task_id": "z2"}),
        ),
        {"payload": {}, "task_id": "w"},
    )
    items, last = build(flow)
    assert {i["task_id"]: i.get("after") for i in items} == {
        "x": None,
        "y": ["x"],
        "z1": ["x"],
        "z2": ["z1"],
        "w": ["y", "z2"],
    }
    assert last == ["w"]
    assert (
        from_json(
            {
                "chain": [
                    {"payload": {}, "task_id": "x"},
                    {
                        "group": [
                            {"payload": {}, "task_id": "y"},
                            {
                                "chain": [
                                    {"payload": {}, "task_id": "z1"},
                                    {"payload": {}, "task_id": "z2"},
                                ]
                            },
                        ]
                    },
                    {"payload": {}, "task_id": "w"},
                ]
            }
        )
        == flow
    )
    with pytest.raises(InvalidArgument, match="one key"):
        from_json({"chain": [], "group": []})


def test_a_handler_adds_children_and_its_task_is_done_when_they_are(
    queue: Queue, make_broker: MakeBroker
) -> None:
    parent = queue.enqueue({"doc": "d"}, task_id="doc")
    after_doc = queue.enqueue({}, after=[parent], task_id="report")
    broker = make_broker("jobs")
    [run] = broker.claim(1).tasks
    kids = queue.add_children(parent, run.token, [{"payload": {"page": i}} for i in range(3)])
    # idempotent: the same ids again change nothing
    queue.add_children(parent, run.token, [{"payload": {"page": 0}, "task_id": kids[0]}])
    assert broker.complete_many([(parent, run.token, '"split"')]) == [JOINING]
    task = queue.get(parent)
    assert task is not None
    assert (task.state, task.after, task.deps_left) == (TaskState.WAITING, kids, 3)
    assert sorted(_run(broker)) == sorted(kids)
    task = queue.get(parent)
    assert task is not None and (task.state, task.result) == (TaskState.DONE, "split")
    assert _run(broker) == [after_doc]
    with pytest.raises(StaleToken):
        queue.add_children(parent, run.token, [{"payload": {}}])


def test_children_added_again_after_they_ended_are_listed_once_and_handed_once(
    queue: Queue, make_broker: MakeBroker, redis_client: redis.Redis
) -> None:
    """A run that adds the same children again (a split started over after its worker
    was lost adds the pages it found before) finds some of them finished: each stays
    one entry of the parent's ``after`` and one input, whatever its state."""
    parent = queue.enqueue({}, task_id="doc")
    broker = make_broker("jobs")
    [run] = broker.claim(1).tasks
    items = [{"payload": {"page": i}, "task_id": f"p{i}", "max_attempts": 1} for i in range(3)]
    queue.add_children(parent, run.token, items)
    claimed = {t.id: t for t in broker.claim(3).tasks}
    assert set(claimed) == {"p0", "p1", "p2"}
    broker.complete_many([("p0", claimed["p0"].token, '"page 0"')])
    broker.fail("p1", claimed["p1"].token, "boom", retryable=False)
    for _ in range(2):
        assert queue.add_children(parent, run.token, items) == ["p0", "p1", "p2"]
    task = queue.get(parent)
    assert task is not None and task.after == ["p0", "p1", "p2"]
    handed = redis_client.hget(queue.keys.task(parent), "in_bytes")
    assert handed is not None and int(handed) == len('"page 0"')


def test_a_failed_child_fails_its_parent_when_its_run_ends(
    queue: Queue, make_broker: MakeBroker
) -> None:
    parent = queue.enqueue({}, task_id="doc")
    broker = make_broker("jobs")
    [run] = broker.claim(1).tasks
    [kid] = queue.add_children(parent, run.token, [{"payload": {}, "max_attempts": 1}])
    [child] = broker.claim(1).tasks
    broker.fail(kid, child.token, "boom", retryable=False)
    assert _state(queue, parent) is TaskState.RUNNING
    # dead, not completed: a worker must not count (or report) the parent done
    assert broker.complete_many([(parent, run.token, None)]) == [DEPENDENCY_FAILED]
    task = queue.get(parent)
    assert task is not None
    assert (task.state, task.reason) == (TaskState.DEAD, "dependency failed")


def test_a_parent_whose_children_are_still_out_replies_waiting_not_completed(
    queue: Queue, make_broker: MakeBroker
) -> None:
    """Its run returned but it is neither done nor dead: a child may yet fail it."""
    parent = queue.enqueue({}, task_id="doc")
    broker = make_broker("jobs")
    [run] = broker.claim(1).tasks
    [kid] = queue.add_children(parent, run.token, [{"payload": {}, "max_attempts": 1}])
    assert broker.complete_many([(parent, run.token, '"split"')]) == [JOINING]
    assert _state(queue, parent) is TaskState.WAITING
    [child] = broker.claim(1).tasks
    broker.fail(kid, child.token, "boom", retryable=False)
    task = queue.get(parent)
    assert task is not None
    assert (task.state, task.reason) == (TaskState.DEAD, "dependency failed")


def test_async_queue_enqueues_with_after_as_the_sync_queue_does(
    queue: Queue, redis_url: str
) -> None:
    first = queue.enqueue({})

    async def main() -> str:
        async with AsyncQueue(queue.name, redis_url) as aq:
            return await aq.enqueue({}, after=[first], on_dep_fail="ignore")

    later = asyncio.run(main())
    task = queue.get(later)
    assert task is not None
    assert (task.state, task.after, task.on_dep_fail) == (TaskState.WAITING, [first], "ignore")
