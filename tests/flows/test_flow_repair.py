"""The repair of waiting tasks nobody will wake (lua/repair.lua): a dependency that ended
without resolving its dependants (a worker of a release before flows, a lost write, a hand
edit) leaves them ``waiting`` for ever; the repair resolves each as the normal path would
have, once, and leaves alone a task with a dependency still open. Real redis-server.

A dependency "finished without waking" is made here as a 0.1.x worker makes it: the
task's field ``dependants`` (which that release does not know) is gone when it completes,
so its completion resolves nobody and its dependants stay in its set ``dependants:<id>``.
"""

from __future__ import annotations

import signal
import threading

import pytest
import redis
from taskfleet.producer.queue import Queue
from taskfleet.protocol.config import QueueConfig
from taskfleet.protocol.queue_ops import JOINING
from taskfleet.protocol.tasks import TaskState

from tests.fixtures_redis import BlockingBroker, MakeBroker, free_port
from tests.polling import wait_for
from tests.scrape import scrape, value
from tests.workers.harness import FAST, WORKER_INTERVAL_S, Fleet


def _state(queue: Queue, task_id: str) -> TaskState:
    task = queue.get(task_id)
    assert task is not None
    return task.state


def _finish_unheard(
    queue: Queue, client: redis.Redis, broker: BlockingBroker, task_id: str, *, fail: bool = False
) -> None:
    """Claim ``task_id`` and end it (done, or dead) the way a worker that knows nothing of
    dependants does: nobody waiting on it is resolved."""
    [run] = broker.claim(1).tasks
    assert run.id == task_id
    client.hdel(queue.keys.task(task_id), "dependants")
    if fail:
        broker.fail(task_id, run.token, "boom", retryable=False)
    else:
        assert broker.complete_many([(task_id, run.token, '{"n": 7}')]) == [1]


def _repair_all(queue: Queue, settle_ms: int = 0) -> list[tuple[str, str]]:
    repaired: list[tuple[str, str]] = []
    more, cursor = True, 0
    while more:
        result = queue.repair(cursor, settle_ms=settle_ms)
        repaired.extend(result.repaired)
        more, cursor = result.more, result.cursor
    return repaired


def test_a_task_whose_dependency_ended_without_waking_it_goes_pending_with_its_input(
    queue: Queue, make_broker: MakeBroker, redis_client: redis.Redis
) -> None:
    a = queue.enqueue({}, task_id="a")
    b = queue.enqueue({}, task_id="b", after=[a])
    broker = make_broker("jobs")
    _finish_unheard(queue, redis_client, broker, a)
    assert _state(queue, b) is TaskState.WAITING  # stranded: nothing will wake it
    assert _repair_all(queue) == [(b, "pending")]
    task = queue.get(b)
    assert task is not None
    assert (task.state, task.deps_left) == (TaskState.PENDING, None)
    assert redis_client.hget(queue.keys.task(b), f"in:{a}") == b'{"n": 7}'
    # no resolve owed any more: a late one finds b in no set, and counts nothing
    assert redis_client.exists(queue.keys.dependants(a)) == 0
    assert queue.stats()["flow_repairs"] == 1
    assert queue.stats()["waiting"] == 0
    assert [t.id for t in broker.claim(10).tasks] == [b]
    assert _repair_all(queue) == []  # idempotent: nothing more to do
    assert queue.stats()["flow_repairs"] == 1


def test_a_task_whose_dependency_is_still_running_is_left_waiting(
    queue: Queue, make_broker: MakeBroker, redis_client: redis.Redis
) -> None:
    a = queue.enqueue({}, task_id="a")
    x = queue.enqueue({}, task_id="x")
    c = queue.enqueue({}, task_id="c", after=[a, x])
    broker = make_broker("jobs")
    _finish_unheard(queue, redis_client, broker, a)
    [running] = broker.claim(1).tasks
    assert running.id == x
    assert _repair_all(queue) == []
    task = queue.get(c)
    assert task is not None
    assert (task.state, task.deps_left) == (TaskState.WAITING, 2)
    # x ends the normal way: its resolve counts c down once, and c still waits for a,
    # whose wake-up never came; the repair frees it now that every dependency has ended
    assert broker.complete_many([(x, running.token, None)]) == [1]
    assert _state(queue, c) is TaskState.WAITING
    assert _repair_all(queue) == [(c, "pending")]
    assert queue.stats()["flow_repairs"] == 1


def test_a_dependency_that_just_ended_is_left_to_the_normal_resolve_for_the_settle_time(
    queue: Queue, make_broker: MakeBroker, redis_client: redis.Redis
) -> None:
    a = queue.enqueue({}, task_id="a")
    b = queue.enqueue({}, task_id="b", after=[a])
    _finish_unheard(queue, redis_client, make_broker("jobs"), a)
    assert _repair_all(queue, settle_ms=60_000) == []
    assert _state(queue, b) is TaskState.WAITING
    assert _repair_all(queue, settle_ms=0) == [(b, "pending")]


@pytest.mark.parametrize(
    ("policy", "ends"),
    [("fail", TaskState.DEAD), ("cancel", TaskState.CANCELLED), ("ignore", TaskState.PENDING)],
)
def test_a_dead_dependency_that_never_woke_its_dependant_applies_the_dependants_policy(
    queue: Queue,
    make_broker: MakeBroker,
    redis_client: redis.Redis,
    policy: str,
    ends: TaskState,
) -> None:
    a = queue.enqueue({}, task_id="a", max_attempts=1)
    b = queue.enqueue({}, task_id="b", after=[a], on_dep_fail=policy)
    c = queue.enqueue({}, task_id="c", after=[b])  # downstream of b: resolved with it
    _finish_unheard(queue, redis_client, make_broker("jobs"), a, fail=True)
    assert _state(queue, a) is TaskState.DEAD
    assert _state(queue, b) is TaskState.WAITING
    assert _repair_all(queue) == [(b, ends.value)]
    task = queue.get(b)
    assert task is not None
    assert task.state is ends
    if ends is not TaskState.PENDING:
        assert task.error == "dependency a ended dead"
        # b's own end resolved c in the same call (c's default policy: fail)
        assert _state(queue, c) is TaskState.DEAD
    else:
        assert _state(queue, c) is TaskState.WAITING
    assert queue.stats()["flow_repairs"] == 1


def test_a_missing_dependency_applies_the_policy_and_a_handed_result_counts_as_done(
    queue: Queue, make_broker: MakeBroker, redis_client: redis.Redis
) -> None:
    a = queue.enqueue({}, task_id="a")
    b = queue.enqueue({}, task_id="b")
    c = queue.enqueue({}, task_id="c", after=[a, b])
    d = queue.enqueue({}, task_id="d", after=[b])
    broker = make_broker("jobs")
    [run] = broker.claim(1).tasks
    assert broker.complete_many([(a, run.token, '"A"')]) == [1]  # c got A's result
    _finish_unheard(queue, redis_client, broker, b)
    # retention dropped both records by hand
    redis_client.delete(queue.keys.task(a), queue.keys.task(b))
    assert sorted(_repair_all(queue)) == [(c, "dead"), (d, "dead")]
    task = queue.get(c)
    assert task is not None
    assert task.error == "dependency b ended missing"  # not a: its result was handed in


def test_a_parent_whose_children_ended_without_waking_it_ends_done(
    queue: Queue, make_broker: MakeBroker, redis_client: redis.Redis
) -> None:
    parent = queue.enqueue({}, task_id="doc")
    broker = make_broker("jobs")
    [run] = broker.claim(1).tasks
    assert queue.add_children(parent, run.token, [{"payload": {}, "task_id": "p0"}]) == ["p0"]
    _finish_unheard(queue, redis_client, broker, "p0")
    assert broker.complete_many([(parent, run.token, '"merged"')]) == [JOINING]
    assert _state(queue, parent) is TaskState.WAITING  # its child's wake-up never came
    assert _repair_all(queue) == [(parent, "done")]
    task = queue.get(parent)
    assert task is not None
    assert (task.state, task.result) == (TaskState.DONE, "merged")


def test_a_repair_and_the_deferred_normal_resolve_count_each_task_once(
    queue: Queue, make_broker: MakeBroker, redis_client: redis.Redis
) -> None:
    """The normal resolve of a finished task may wait on the flow backlog (its budget was
    spent): a repair and that resolve, in either order or racing, count each dependant
    down once, and each goes pending once."""
    n = 50  # a claim takes at most 100
    queue.enqueue_many([{"payload": {}, "task_id": f"a{i}"} for i in range(n)])
    queue.enqueue_many([{"payload": {}, "task_id": f"x{i}"} for i in range(n)])
    queue.enqueue_many(
        [{"payload": {}, "task_id": f"c{i}", "after": [f"a{i}", f"x{i}"]} for i in range(n)]
    )
    broker = make_broker("jobs")
    runs = broker.claim(2 * n).tasks
    assert len(runs) == 2 * n
    assert broker.complete_many([(t.id, t.token, None) for t in runs if t.id[0] == "x"]) == [1] * n
    for t in runs:
        if t.id[0] == "a":
            redis_client.hdel(queue.keys.task(t.id), "dependants")
    assert broker.complete_many([(t.id, t.token, None) for t in runs if t.id[0] == "a"]) == [1] * n
    # each a's resolve deferred, as flow_resolve's budget defers it
    redis_client.rpush(queue.keys.flow_backlog, *[f"da{i}" for i in range(n)])

    def sweeps() -> None:
        while redis_client.llen(queue.keys.flow_backlog):
            queue.sweep()

    racer = threading.Thread(target=sweeps)
    racer.start()
    repaired = _repair_all(queue)
    racer.join(timeout=30)
    assert not racer.is_alive()
    stats = queue.stats()
    assert (stats["waiting"], stats["pending"]) == (0, n)
    assert stats["flow_repairs"] == len(repaired) <= n
    assert redis_client.zcard(queue.keys.pending) == n
    for i in range(n):
        fields = redis_client.hmget(queue.keys.task(f"c{i}"), "state", "deps_left")
        assert fields == [b"pending", None]
    assert sorted(t.id for t in broker.claim(2 * n).tasks) == sorted(f"c{i}" for i in range(n))


def test_a_pass_over_a_large_waiting_set_takes_several_bounded_calls(
    queue: Queue, make_broker: MakeBroker, redis_client: redis.Redis
) -> None:
    n = 400  # each waiting task costs two reads: more than one call's bound of 500
    queue.enqueue_many([{"payload": {}, "task_id": f"a{i}"} for i in range(n)])
    queue.enqueue_many([{"payload": {}, "task_id": f"b{i}", "after": [f"a{i}"]} for i in range(n)])
    broker = make_broker("jobs")
    runs = [t for _ in range(n // 100) for t in broker.claim(100).tasks]
    for t in runs:
        redis_client.hdel(queue.keys.task(t.id), "dependants")
    assert broker.complete_many([(t.id, t.token, None) for t in runs]) == [1] * n
    first = queue.repair(0, settle_ms=0)
    assert first.more and 0 < len(first.repaired) < n
    assert len(first.repaired) + len(_repair_all(queue)) == n
    assert queue.stats()["waiting"] == 0


def test_a_workers_housekeeping_repairs_a_stranded_task_counts_and_logs_it(
    fleet: Fleet, queue: Queue, make_broker: MakeBroker, redis_client: redis.Redis
) -> None:
    """No operator: the library alone frees it, a sweep's time after the settle time."""
    a = queue.enqueue({}, task_id="a")
    b = queue.enqueue({}, task_id="b", after=[a])
    _finish_unheard(queue, redis_client, make_broker("jobs"), a)
    redis_client.hset(queue.keys.task(a), "finished_at", 1)  # it ended long ago
    port = free_port()
    worker = fleet.add(
        "tests.workers.handlers:by_payload", args=[*FAST, "--metrics-port", str(port)]
    ).start()
    wait_for(
        lambda: _state(queue, b) is TaskState.DONE,
        timeout=20,
        interval=WORKER_INTERVAL_S,
        what=lambda: f"{b} repaired and run:\n{worker.log_text()}",
    )
    assert worker.has_event("flow_repaired", task=b, state="pending")
    samples = scrape(f"http://127.0.0.1:{port}/metrics")
    assert value(samples, "taskfleet_worker_flow_repairs_total", queue="jobs") == 1
    assert queue.stats()["flow_repairs"] == 1
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0


def test_a_dependency_dropped_at_once_whose_resolve_waits_on_the_backlog_is_left_to_it(
    queue: Queue, make_broker: MakeBroker, redis_client: redis.Redis
) -> None:
    """Under ``done_retention_s`` 0 a done task's record goes at its complete; a fan-out
    past the resolve's budget leaves the rest of its dependants to ``flows:backlog``. A
    repair meanwhile must not take the record's absence for a missing dependency (that
    would end them by their policy): the backlog's resolve sends every one pending."""
    queue.configure(QueueConfig(done_retention_s=0))
    n = 250  # past one call's resolve budget (200)
    a = queue.enqueue({}, task_id="a")
    queue.enqueue_many([{"payload": {}, "task_id": f"b{i}", "after": [a]} for i in range(n)])
    broker = make_broker("jobs")
    [run] = broker.claim(1).tasks
    assert broker.complete_many([(a, run.token, None)]) == [1]
    assert redis_client.exists(queue.keys.task(a)) == 0
    assert redis_client.llen(queue.keys.flow_backlog) == 1
    assert _repair_all(queue) == []
    assert queue.stats()["dead"] == 0
    while redis_client.llen(queue.keys.flow_backlog):
        queue.sweep()
    stats = queue.stats()
    assert (stats["waiting"], stats["pending"], stats["dead"]) == (0, n, 0)
