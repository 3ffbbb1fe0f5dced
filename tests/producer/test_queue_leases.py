"""Leases, lost workers, incarnations and the sweeper: how nothing is lost."""

from __future__ import annotations

import threading

import redis
from taskfleet import Queue, QueueConfig, SweepResult, TaskState
from taskfleet.protocol.queue_ops import CLAIM_HOUSEKEEPING_BOUND

from tests.fixtures_redis import MakeBroker
from tests.polling import wait_for

#: Below the model's floor (``MIN_LEASE_TTL_S``), as a hand-written config may be: the
#: scripts still honour it, and these tests need leases that expire at once.
SHORT_LEASE = QueueConfig.model_construct(lease_ttl_s=0.05)


def lease_expired(queue: Queue, task_id: str) -> bool:
    """The task's lease is in the past by server time."""
    sec, usec = queue.client.time()
    score = queue.client.zscore(queue.keys.running, task_id)
    return score is not None and score < int(sec) * 1000 + int(usec) // 1000


def test_a_worker_takes_back_an_expired_lease_without_the_operator(
    queue: Queue, make_broker: MakeBroker
) -> None:
    queue.configure(SHORT_LEASE)
    task_id = queue.enqueue({"x": 1})
    dead_worker = make_broker("jobs", "pod-a")
    [first] = dead_worker.claim(1).tasks
    wait_for(lambda: lease_expired(queue, task_id))
    [again] = make_broker("jobs", "pod-b").claim(1).tasks
    assert again.id == task_id
    assert again.token != first.token
    assert again.lost == 1
    task = queue.get(task_id)
    assert task is not None
    assert (task.pod, task.lost) == ("pod-b", 1)
    # the late worker's writes are fenced off
    assert dead_worker.complete_many([(first.id, first.token, None)]) == [False]
    assert queue.client.sismember(queue.keys.pod("pod-a"), task_id) == 0


def test_heartbeat_moves_the_lease_forward(queue: Queue, make_broker: MakeBroker) -> None:
    queue.configure(QueueConfig(lease_ttl_s=30))
    task_id = queue.enqueue({"x": 1})
    worker = make_broker("jobs", "pod-a")
    [task] = worker.claim(1).tasks
    first_lease = queue.client.zscore(queue.keys.running, task_id)
    assert first_lease is not None
    wait_for(
        lambda: (
            worker.heartbeat({task.id: task.token}) == set()
            and ((queue.client.zscore(queue.keys.running, task_id) or 0) > first_lease)
        )
    )
    assert make_broker("jobs", "pod-b").claim(1).tasks == []


def test_a_task_whose_worker_is_lost_more_than_max_lost_times_goes_dead(
    queue: Queue, make_broker: MakeBroker
) -> None:
    queue.configure(QueueConfig(max_lost=2))
    task_id = queue.enqueue({"x": 1})
    for loss, pod in enumerate(("pod-a", "pod-b", "pod-c"), start=1):
        assert [t.id for t in make_broker("jobs", pod).claim(1).tasks] == [task_id]
        assert queue.requeue_pod(pod) == 1
        task = queue.get(task_id)
        assert task is not None
        expected = TaskState.DEAD if loss > 2 else TaskState.PENDING
        assert (task.state, task.lost) == (expected, loss)
    assert task.reason == "worker lost"
    stats = queue.stats()
    assert (stats["pending"], stats["dead"], stats["lost"], stats["requeued"]) == (0, 1, 3, 2)


def test_requeue_pod_keeps_the_tasks_of_the_current_incarnation(
    queue: Queue, make_broker: MakeBroker
) -> None:
    old, new = queue.enqueue({"x": 1}), queue.enqueue({"x": 2})
    make_broker("jobs", "pod-a", "1").claim(1)
    make_broker("jobs", "pod-a", "2").claim(1)
    assert queue.requeue_pod("pod-a", except_incarnation="2") == 1
    assert queue.get(old).state is TaskState.PENDING  # type: ignore[union-attr]
    assert queue.get(new).state is TaskState.RUNNING  # type: ignore[union-attr]


def test_register_takes_back_what_an_earlier_incarnation_of_the_pod_held(
    queue: Queue, make_broker: MakeBroker
) -> None:
    ids = [queue.enqueue({"i": i}) for i in range(2)]
    before = make_broker("jobs", "pod-a", "boot-1")
    before.register(4)
    before.claim(2)
    after = make_broker("jobs", "pod-a", "boot-2")
    assert after.register(4) == 2
    assert all(queue.get(i).state is TaskState.PENDING for i in ids)  # type: ignore[union-attr]
    [worker] = queue.workers()
    assert (worker.pod, worker.incarnation, worker.concurrency, worker.alive) == (
        "pod-a",
        "boot-2",
        4,
        True,
    )


def test_two_concurrent_requeues_of_one_pod_take_each_task_back_once(
    queue: Queue, make_broker: MakeBroker, redis_url: str
) -> None:
    ids = [queue.enqueue({"i": i}) for i in range(50)]
    make_broker("jobs", "pod-a").claim(50)
    counts: list[int] = []
    barrier = threading.Barrier(2)

    def operator() -> None:
        q = Queue("jobs", redis_url=redis_url)
        barrier.wait()
        counts.append(q.requeue_pod("pod-a"))
        q.close()

    threads = [threading.Thread(target=operator) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(counts) == [0, 50]
    assert all(queue.get(i).lost == 1 for i in ids)  # type: ignore[union-attr]
    assert queue.stats()["pending"] == 50


def test_deregister_releases_what_the_worker_still_holds_and_removes_it(
    queue: Queue, make_broker: MakeBroker
) -> None:
    task_id = queue.enqueue({"x": 1})
    worker = make_broker("jobs", "pod-a")
    worker.register(1)
    worker.claim(1)
    assert worker.deregister() == 1
    task = queue.get(task_id)
    assert task is not None
    assert (task.state, task.attempts, task.lost) == (TaskState.PENDING, 0, 0)
    assert queue.workers() == []


def test_sweep_takes_back_expired_leases_and_drops_silent_workers(
    queue: Queue, make_broker: MakeBroker
) -> None:
    queue.configure(SHORT_LEASE)
    task_id = queue.enqueue({"x": 1})
    worker = make_broker("jobs", "pod-a")
    worker.register(1)
    worker.claim(1)

    wait_for(lambda: lease_expired(queue, task_id))
    result = queue.sweep()
    assert (result.requeued, result.lost_dead) == (1, 0)
    assert queue.get(task_id).state is TaskState.PENDING  # type: ignore[union-attr]
    wait_for(lambda: queue.sweep().workers_dropped == 1)
    assert queue.workers() == []


def test_a_done_retention_of_zero_keeps_no_done_task_at_all(
    queue: Queue, make_broker: MakeBroker, redis_client: redis.Redis
) -> None:
    queue.configure(QueueConfig(done_retention_s=0, dead_retention_s=3600))
    done_id, dead_id = queue.enqueue({"x": 1}), queue.enqueue({"x": 2})
    worker = make_broker("jobs")
    done, dead = worker.claim(2).tasks
    assert worker.complete_many([(done.id, done.token, '"r"')]) == [True]
    worker.fail(dead.id, dead.token, "no", retryable=False)
    # Deleted by the completion itself, not left for a sweep.
    assert queue.get(done_id) is None
    assert redis_client.zscore(queue.keys.done, done_id) is None
    assert queue.get(dead_id) is not None
    stats = queue.stats()
    assert (stats["done"], stats["dead"], stats["completed"]) == (0, 1, 1)


def test_retention_defaults_keep_done_tasks_one_hour_and_dead_ones_three_days(
    queue: Queue, make_broker: MakeBroker, redis_client: redis.Redis
) -> None:
    assert (QueueConfig().done_retention_s, QueueConfig().dead_retention_s) == (3600, 259200)
    ids = [queue.enqueue({"i": i}) for i in range(4)]
    worker = make_broker("jobs")
    done_old, done_new, dead_old, dead_new = worker.claim(4).tasks
    worker.complete_many([(t.id, t.token, None) for t in (done_old, done_new)])
    for t in (dead_old, dead_new):
        worker.fail(t.id, t.token, "no", retryable=False)
    sec, _ = redis_client.time()
    now_ms = int(sec) * 1000
    # Age the finish times (the zset score is what retention reads), a minute each side
    # of the default, with no config written: the scripts' own defaults apply.
    aged = {
        (queue.keys.done, done_old.id): now_ms - 3660_000,
        (queue.keys.done, done_new.id): now_ms - 3540_000,
        (queue.keys.dead, dead_old.id): now_ms - 259260_000,
        (queue.keys.dead, dead_new.id): now_ms - 259140_000,
    }
    for (zset, task_id), score in aged.items():
        redis_client.zadd(zset, {task_id: score}, xx=True)
    result = queue.sweep()
    assert (result.pruned_done, result.pruned_dead) == (1, 1)
    assert [queue.get(i) is not None for i in ids] == [False, True, False, True]


def test_workers_lists_heartbeats_inflight_and_draining(
    queue: Queue, make_broker: MakeBroker
) -> None:
    worker = make_broker("jobs", "pod-a", "7")
    worker.register(8)
    worker.heartbeat({}, inflight=3, draining=True)
    [info] = queue.workers()
    assert (info.pod, info.incarnation, info.inflight, info.draining, info.alive) == (
        "pod-a",
        "7",
        3,
        True,
        True,
    )


def test_sweep_promotes_due_tasks_and_expires_missed_deadlines(queue: Queue) -> None:
    due = queue.enqueue({"x": 1}, delay=0.01)
    missed = queue.enqueue({"x": 2}, deadline=0.01)

    def swept_both() -> bool:
        queue.sweep()
        states = (queue.get(due).state, queue.get(missed).state)  # type: ignore[union-attr]
        return states == (TaskState.PENDING, TaskState.DEAD)

    wait_for(swept_both)
    assert queue.get(missed).reason == "expired"  # type: ignore[union-attr]
    assert queue.sweep() == SweepResult(0, 0, 0, 0, 0, 0, 0)


def test_a_claim_promotes_a_bounded_number_of_due_tasks_so_it_stays_short(
    queue: Queue, make_broker: MakeBroker
) -> None:
    queue.enqueue_many([{"payload": {"i": i}, "delay": 0.01} for i in range(250)])
    wait_for(lambda: _all_due(queue))
    assert len(make_broker("jobs").claim(1).tasks) == 1
    stats = queue.stats()
    assert (stats["pending"] + stats["running"], stats["delayed"]) == (
        CLAIM_HOUSEKEEPING_BOUND,
        250 - CLAIM_HOUSEKEEPING_BOUND,
    )


def _all_due(queue: Queue) -> bool:
    sec, usec = queue.client.time()
    now = int(sec) * 1000 + int(usec) // 1000
    return queue.client.zcount(queue.keys.delayed, now + 1, "+inf") == 0


def test_held_by_counts_what_each_pod_holds_from_the_queues_records(
    queue: Queue, make_broker: MakeBroker
) -> None:
    for i in range(3):
        queue.enqueue({"i": i})
    broker = make_broker(queue.name, "pod-a", "inc-1")
    broker.register(4)
    assert len(broker.claim(2).tasks) == 2

    assert queue.held_by(["pod-a", "pod-b"]) == {"pod-a": 2, "pod-b": 0}
    assert queue.held_by([]) == {}
