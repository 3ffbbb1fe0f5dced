"""Cancel and retry a whole flow or a branch (``Queue.cancel_flow`` / ``retry_flow``), and
the re-enqueue of an existing id with other dependencies. Real redis-server."""

from __future__ import annotations

import asyncio
import threading

import pytest
from taskfleet import AsyncQueue, Queue, StaleToken, TaskExists, TaskNotFound, TaskState
from taskfleet.producer import flowcontrol
from taskfleet.producer.flows import chain, chord, group
from taskfleet.protocol.calls import Call
from taskfleet.protocol.calls import run as run_call
from taskfleet.protocol.control_ops import CancelOutcome
from taskfleet.protocol.scripts import SyncScripts

from tests.fixtures_redis import BlockingBroker, MakeBroker

C = CancelOutcome


def _states(queue: Queue, *ids: str) -> list[TaskState]:
    tasks = [queue.get(i) for i in ids]
    assert all(t is not None for t in tasks)
    return [t.state for t in tasks if t is not None]


def _run(broker: BlockingBroker) -> list[str]:
    claimed = broker.claim(100).tasks
    broker.complete_many([(t.id, t.token, None) for t in claimed])
    return [t.id for t in claimed]


def _document(queue: Queue) -> None:
    """fetch, then 3 pages side by side, then merge once they are all done."""
    pages = group(*({"payload": {"page": i}, "task_id": f"p{i}"} for i in range(3)))
    queue.enqueue_flow(
        chain(
            {"payload": {}, "task_id": "fetch"},
            chord(pages, {"payload": {}, "task_id": "merge"}),
        )
    )


def test_cancel_flow_from_a_done_root_cancels_what_it_released_and_the_rest(
    queue: Queue, make_broker: MakeBroker
) -> None:
    _document(queue)
    broker = make_broker("jobs")
    assert _run(broker) == ["fetch"]  # the pages are pending now: fetch has no set left
    outcomes = queue.cancel_flow("fetch")
    assert outcomes == {
        "fetch": C.DONE,
        "p0": C.CANCELLED,
        "p1": C.CANCELLED,
        "p2": C.CANCELLED,
        "merge": C.CANCELLED,
    }
    # dependants first: merge is cancelled, not ended dead by its policy
    assert _states(queue, "fetch", "merge") == [TaskState.DONE, TaskState.CANCELLED]
    merge = queue.get("merge")
    assert merge is not None and merge.reason == "cancelled"
    assert broker.claim(10).tasks == []


def test_a_branch_is_the_task_and_what_waits_for_it_only(queue: Queue) -> None:
    queue.enqueue_many(
        [
            {"payload": {}, "task_id": "a"},
            {"payload": {}, "task_id": "x"},
            {"payload": {}, "task_id": "b", "after": ["a"]},
            {"payload": {}, "task_id": "d", "after": ["a"]},
            {"payload": {}, "task_id": "c", "after": ["b", "x"]},
        ]
    )
    outcomes = queue.cancel_flow("b", branch=True)
    assert outcomes == {"b": C.CANCELLED, "c": C.CANCELLED}
    assert _states(queue, "a", "x", "d") == [
        TaskState.PENDING,
        TaskState.PENDING,
        TaskState.WAITING,
    ]
    assert set(queue.cancel_flow("d")) == {"a", "b", "c", "d", "x"}
    assert _states(queue, "a", "x", "d") == [TaskState.CANCELLED] * 3


def test_a_task_that_fails_at_enqueue_is_linked_to_every_dependency_it_names(
    queue: Queue,
) -> None:
    """A task whose first dependency is cancelled ends dead at once; it is still in the
    branch of each later one (it was linked to the first only)."""
    queue.enqueue_many(
        [
            {"payload": {}, "task_id": "gone"},
            {"payload": {}, "task_id": "later"},
            {"payload": {}, "task_id": "late2", "after": ["later"]},
        ]
    )
    queue.cancel("gone")
    queue.enqueue_many(
        [
            {"payload": {}, "task_id": "t", "after": ["gone", "later", "late2"]},
            {"payload": {}, "task_id": "t2", "after": ["t"]},
        ]
    )
    assert _states(queue, "t", "t2") == [TaskState.DEAD, TaskState.DEAD]
    for dep in ("later", "late2"):
        outcomes = queue.cancel_flow(dep, branch=True)
        assert {"t", "t2"} <= set(outcomes), dep
        assert outcomes["t"] is C.DEAD


def test_unknown_ids_are_refused(queue: Queue) -> None:
    with pytest.raises(TaskNotFound):
        queue.cancel_flow("nope")
    with pytest.raises(TaskNotFound):
        queue.retry_flow("nope", branch=True)


def test_a_running_member_is_asked_to_stop_and_adds_no_children_after(
    queue: Queue, make_broker: MakeBroker
) -> None:
    parent = queue.enqueue({}, task_id="split")
    queue.enqueue({}, task_id="report", after=[parent])
    broker = make_broker("jobs")
    [run] = broker.claim(1).tasks
    kids = queue.add_children(parent, run.token, [{"payload": {"page": i}} for i in range(2)])
    outcomes = queue.cancel_flow("report")
    assert outcomes == {
        "report": C.CANCELLED,
        "split": C.REQUESTED,
        kids[0]: C.CANCELLED,
        kids[1]: C.CANCELLED,
    }
    # the run goes on until its next heartbeat: it can add no more children meanwhile
    with pytest.raises(StaleToken):
        queue.add_children(parent, run.token, [{"payload": {"late": True}}])
    broker.complete_many([(parent, run.token, None)])
    assert _states(queue, parent) == [TaskState.CANCELLED]
    assert queue.stats()["pending"] == 0


def test_children_added_between_the_walk_and_the_cancel_are_cancelled_too(
    queue: Queue, make_broker: MakeBroker
) -> None:
    """The cancel is driven by hand: after its walk, before its first script call, the
    running member adds a child; the next walk finds it, and it is cancelled."""
    parent = queue.enqueue({}, task_id="split")
    queue.enqueue({}, task_id="report", after=[parent])
    broker = make_broker("jobs")
    [run] = broker.claim(1).tasks
    steps = flowcontrol.cancel_steps(queue.control_ops, "report", False)
    step = next(steps)
    while isinstance(step, Call):
        step = steps.send(run_call(queue.client, step))
    [late] = queue.add_children(parent, run.token, [{"payload": {}, "task_id": "late"}])
    scripts = SyncScripts.for_client(queue.client)
    while True:  # the rest of the cancel, from the step it stopped at
        reply = run_call(queue.client, step) if isinstance(step, Call) else scripts.run(step)
        try:
            step = steps.send(reply)
        except StopIteration as stop:
            outcomes = stop.value
            break
    assert outcomes == {"report": C.CANCELLED, "split": C.REQUESTED, late: C.CANCELLED}
    assert _states(queue, late) == [TaskState.CANCELLED]


def test_a_large_flow_is_walked_and_cancelled_in_bounded_calls(
    queue: Queue, make_broker: MakeBroker, monkeypatch: pytest.MonkeyPatch
) -> None:
    """3,000 tasks after one root (its links back pass several HSCAN steps), one fan-in
    after them all: each script call changes at most CHANGE_BATCH tasks."""
    n = 3000
    queue.enqueue({}, task_id="root")
    queue.enqueue_many([{"payload": {}, "task_id": f"t{i}", "after": ["root"]} for i in range(n)])
    queue.enqueue({}, task_id="end", after=[f"t{i}" for i in range(n)])
    _run(make_broker("jobs"))  # root done: 200 of its dependants resolved, the rest later
    sizes: list[int] = []
    original = queue.control_ops.cancel

    def counted(task_ids: list[str]) -> object:
        sizes.append(len(task_ids))
        return original(task_ids)

    monkeypatch.setattr(queue.control_ops, "cancel", counted)
    outcomes = queue.cancel_flow("root")
    assert len(outcomes) == n + 2
    assert max(sizes) <= flowcontrol.CHANGE_BATCH and sum(sizes) == n + 1
    stats = queue.stats()
    assert (stats["pending"], stats["waiting"]) == (0, 0)
    assert _states(queue, "root", "end") == [TaskState.DONE, TaskState.CANCELLED]


def test_retry_flow_sends_dead_and_cancelled_members_back_dependencies_first(
    queue: Queue, make_broker: MakeBroker
) -> None:
    queue.enqueue_many(
        [
            {"payload": {}, "task_id": "a", "max_attempts": 1},
            {"payload": {}, "task_id": "ok"},
            {"payload": {}, "task_id": "b", "after": ["a", "ok"]},
            {"payload": {}, "task_id": "c", "after": ["b"], "on_dep_fail": "cancel"},
        ]
    )
    broker = make_broker("jobs")
    claimed = {t.id: t for t in broker.claim(10).tasks}
    broker.complete_many([("ok", claimed["ok"].token, None)])
    broker.fail("a", claimed["a"].token, "boom", retryable=False)
    assert _states(queue, "a", "b", "c") == [TaskState.DEAD, TaskState.DEAD, TaskState.CANCELLED]
    assert queue.retry_flow("c") == 3  # from the last task: the flow is found upwards too
    assert _states(queue, "a", "ok", "b", "c") == [
        TaskState.PENDING,
        TaskState.DONE,
        TaskState.WAITING,
        TaskState.WAITING,
    ]
    assert _run(broker) == ["a"]
    assert _run(broker) == ["b"]
    assert _run(broker) == ["c"]
    assert queue.retry_flow("a") == 0  # all done: nothing to send back


def test_retry_flow_after_cancel_flow_runs_the_flow_again(
    queue: Queue, make_broker: MakeBroker
) -> None:
    _document(queue)
    broker = make_broker("jobs")
    assert _run(broker) == ["fetch"]
    queue.cancel_flow("merge")
    assert queue.retry_flow("p1", branch=True) == 2  # p1 and merge
    # merge waits for p0 too, still cancelled: it ends again by its policy
    assert _states(queue, "p1", "merge", "p0") == [
        TaskState.PENDING,
        TaskState.DEAD,
        TaskState.CANCELLED,
    ]
    merge = queue.get("merge")
    assert merge is not None and merge.error == "dependency p0 ended cancelled"
    assert queue.retry_flow("fetch") == 3  # p0, p2 and merge (p1 is pending already)
    assert _states(queue, "merge") == [TaskState.WAITING]
    assert sorted(_run(broker)) == ["p0", "p1", "p2"]
    assert _run(broker) == ["merge"]


def test_async_queue_cancels_and_retries_a_flow(queue: Queue, redis_url: str) -> None:
    _document(queue)

    async def main() -> tuple[dict[str, CancelOutcome], int]:
        async with AsyncQueue(queue.name, redis_url) as aq:
            cancelled = await aq.cancel_flow("p0", branch=True)
            return cancelled, await aq.retry_flow("merge")

    cancelled, retried = asyncio.run(main())
    assert cancelled == {"p0": C.CANCELLED, "merge": C.CANCELLED}
    assert retried == 2
    assert _states(queue, "p0", "merge") == [TaskState.WAITING] * 2  # fetch has not run


def test_cancel_flow_while_workers_complete_members(queue: Queue, redis_url: str) -> None:
    """Two workers claim and complete members while the flow is cancelled: every member
    ends done, dead or cancelled, and none ran before its dependencies were done."""
    pages = group(*({"payload": {}, "task_id": f"p{i}"} for i in range(400)))
    flow = queue.enqueue_flow(
        chain(
            {"payload": {}, "task_id": "fetch"},
            chord(pages, {"payload": {}, "task_id": "merge"}),
            {"payload": {}, "task_id": "publish"},
        )
    )
    after = {t.id: t.after for t in (queue.get(i) for i in flow.ids) if t is not None}
    stop = threading.Event()
    early: list[str] = []
    errors: list[BaseException] = []

    def work(pod: str) -> None:
        runner = asyncio.Runner()
        broker = BlockingBroker(runner, redis_url, "jobs", pod, "1")
        reader = Queue("jobs", redis_url=redis_url)
        try:
            while not stop.is_set():
                claimed = broker.claim(20).tasks
                for t in claimed:
                    for dep in after[t.id]:
                        got = reader.get(dep)
                        if got is None or got.state is not TaskState.DONE:
                            early.append(t.id)
                broker.complete_many([(t.id, t.token, None) for t in claimed])
        except BaseException as exc:  # reported by the test below
            errors.append(exc)
        finally:
            reader.close()
            broker.close()
            runner.close()

    threads = [threading.Thread(target=work, args=(f"pod-{n}",)) for n in range(2)]
    for t in threads:
        t.start()
    try:
        queue.cancel_flow("fetch")
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert errors == [] and early == []
    states = {i: s for i, s in zip(flow.ids, _states(queue, *flow.ids), strict=True)}
    finished = {TaskState.DONE, TaskState.DEAD, TaskState.CANCELLED}
    assert set(states.values()) <= finished


def test_re_enqueue_with_other_dependencies_is_a_conflict(
    queue: Queue, make_broker: MakeBroker
) -> None:
    queue.enqueue({}, task_id="a")
    queue.enqueue({}, task_id="b")
    queue.enqueue({}, task_id="c", after=["a"])
    assert queue.enqueue_result({}, task_id="c", after=["a"]).created is False
    assert queue.enqueue_result({}, task_id="c", after=["a"], on_dep_fail="fail").created is False
    with pytest.raises(TaskExists) as other:
        queue.enqueue({}, task_id="c", after=["a", "b"])
    assert other.value.field == "after"
    with pytest.raises(TaskExists) as policy:
        queue.enqueue({}, task_id="c", after=["a"], on_dep_fail="ignore")
    assert policy.value.field == "on_dep_fail"
    with pytest.raises(TaskExists) as none:
        queue.enqueue({}, task_id="c")
    assert none.value.field == "after"
    with pytest.raises(TaskExists):
        queue.enqueue({}, task_id="a", after=["b"])
    # a task that added children: its own after is compared, not the children appended
    broker = make_broker("jobs")
    run = next(t for t in broker.claim(10).tasks if t.id == "a")
    queue.add_children("a", run.token, [{"payload": {}, "task_id": "kid"}])
    assert queue.enqueue_result({}, task_id="a").created is False
