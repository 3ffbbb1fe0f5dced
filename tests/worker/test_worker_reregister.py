"""A registered worker whose record is gone registers again before it works on.

A record goes when a successor that took the name deregisters, the operator requeues a
pod it judged gone, a sweep drops a silent one, or Redis loses its data. A claim or beat
of a worker that registered then answers "no record" and changes nothing, and the worker
goes through register (judged and taken over atomically, as at a start) instead of
claiming invisibly or recreating its record from a heartbeat. Real worker processes,
frozen and resumed with SIGSTOP/SIGCONT, and real redis-servers.
"""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest
import redis
from taskfleet.producer.queue import Queue
from taskfleet.protocol.errors import NameInUse
from taskfleet.protocol.tasks import TaskState

from tests.fixtures_redis import MakeBroker, RedisServerFactory
from tests.polling import wait_for
from tests.workers.harness import FAST, WORKER_INTERVAL_S, WORKER_TIMEOUT_S, Fleet

GATE = "tests.workers.handlers:gate"
SLEEP = "tests.workers.handlers:sleep"
WORKERS = "tf:{jobs}:workers"
#: Beats often, a lease far longer than any test step: whatever is taken back is taken
#: back by a registration, never by lease expiry.
FAST_BEATS = ["--heartbeat-interval", "0.2", "--lease-ttl", "30"]


def incarnation_of(client: redis.Redis, pod: str) -> str | None:
    raw = client.hget(WORKERS, pod)
    return None if raw is None else str(json.loads(raw)["incarnation"])


def done(queue: Queue, task_id: str) -> bool:
    task = queue.get(task_id)
    return task is not None and task.state is TaskState.DONE


def test_a_resumed_worker_whose_successor_left_registers_again_and_writes_nothing_taken(
    fleet: Fleet, queue: Queue, redis_client: redis.Redis, make_broker: MakeBroker
) -> None:
    held = queue.enqueue({})
    worker = fleet.add(GATE, pod="pod-a", args=FAST_BEATS).start()
    worker.wait_event("worker_started")
    wait_for(
        lambda: redis_client.lrange("test:events", 0, -1),
        timeout=WORKER_TIMEOUT_S,
        interval=WORKER_INTERVAL_S,
        what=fleet.logs,
    )
    first = incarnation_of(redis_client, "pod-a")
    worker.signal(signal.SIGSTOP)
    try:
        # A successor takes the name (and the task) over, finishes it and exits cleanly:
        # the name has no record when the frozen worker resumes.
        successor = make_broker("jobs", pod="pod-a", incarnation="successor")
        assert successor.register(1) == 1
        [task] = successor.claim(1).tasks
        assert task.id == held
        successor.complete(task.id, task.token, '"by the successor"')
        assert successor.deregister() == 0
        assert redis_client.hget(WORKERS, "pod-a") is None
    finally:
        worker.signal(signal.SIGCONT)

    worker.wait_event("registered_again", pod="pod-a")
    assert incarnation_of(redis_client, "pod-a") == first
    worker.wait_event("lease_lost", task=held)  # its run was taken: abandoned, not written
    redis_client.rpush("test:gate", "open")
    nxt = queue.enqueue({})
    redis_client.rpush("test:gate", "open")
    wait_for(
        lambda: done(queue, nxt),
        timeout=WORKER_TIMEOUT_S,
        interval=WORKER_INTERVAL_S,
        what=fleet.logs,
    )
    after = queue.get(nxt)
    assert after is not None and (after.pod, after.incarnation) == ("pod-a", first)
    task_now = queue.get(held)
    assert task_now is not None and task_now.state is TaskState.DONE
    assert task_now.result == "by the successor"
    assert worker.alive() and not worker.has_event("identity_taken")

    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0
    assert redis_client.hget(WORKERS, "pod-a") is None


def test_a_fleet_rides_out_a_redis_restart_that_lost_every_record(
    redis_server_factory: RedisServerFactory, tmp_path: Path
) -> None:
    server = redis_server_factory(persistent=False)
    fleet = Fleet(server.url, "jobs", tmp_path)
    try:
        workers = [fleet.add(SLEEP, pod=f"pod-{i}", args=FAST).start() for i in range(2)]
        for worker in workers:
            worker.wait_event("worker_started")
        server.restart()  # no persistence: every record, task and config field is gone

        for worker in workers:
            worker.wait_event("registered_again", pod=worker.pod)
        with Queue("jobs", redis_url=server.url) as queue:
            ids = queue.enqueue_many([{"payload": {"seconds": 0.01}} for _ in range(20)])
            wait_for(
                lambda: all(done(queue, i) for i in ids),
                timeout=WORKER_TIMEOUT_S,
                interval=WORKER_INTERVAL_S,
                what=fleet.logs,
            )
            assert {w.pod for w in queue.workers()} == {"pod-0", "pod-1"}
        for worker in workers:
            assert worker.alive() and not worker.has_event("identity_taken")
    finally:
        fleet.close()


def test_a_registered_incarnation_without_its_record_registers_before_it_claims(
    queue: Queue, redis_client: redis.Redis, make_broker: MakeBroker
) -> None:
    """Nothing it claims is held under a name with no record (invisible to the workers
    list and the operator, and free for a third incarnation to take without judging)."""
    resumed = make_broker("jobs", pod="pod-a", incarnation="resumed")
    assert resumed.register(1) == 0
    successor = make_broker("jobs", pod="pod-a", incarnation="successor")
    assert successor.register(1) == 0
    assert successor.deregister() == 0
    held = queue.enqueue({})

    [task] = resumed.claim(1).tasks
    assert task.id == held
    assert incarnation_of(redis_client, "pod-a") == "resumed"
    # a third incarnation starting now finds that record to judge, and is refused
    third = make_broker("jobs", pod="pod-a", incarnation="third")
    with pytest.raises(NameInUse):
        third.register(1, in_use=lambda record: f"incarnation {record.incarnation}")
    assert incarnation_of(redis_client, "pod-a") == "resumed"
    assert queue.get(held).state is TaskState.RUNNING  # type: ignore[union-attr]


def test_a_worker_whose_pod_is_gone_from_the_api_exits_instead_of_registering_again(
    fleet: Fleet, queue: Queue, redis_client: redis.Redis
) -> None:
    from taskfleet_operator.sweeper import requeue_pod_workers

    held = queue.enqueue({})
    zombie = fleet.add(GATE, pod="pod-a", args=FAST_BEATS).start()
    wait_for(
        lambda: redis_client.lrange("test:events", 0, -1),
        timeout=WORKER_TIMEOUT_S,
        interval=WORKER_INTERVAL_S,
        what=fleet.logs,
    )
    # As the operator does for a force-deleted pod whose container still runs: the fast
    # path on the DELETED event and the sweep after it both take the pod's tasks back.
    assert requeue_pod_workers(queue, "pod-a") == 1
    assert requeue_pod_workers(queue, "pod-a") == 0
    assert zombie.wait() == 2
    assert zombie.has_event("pod_gone", pod="pod-a")
    assert not zombie.has_event("registered_again")
    assert redis_client.hget(WORKERS, "pod-a") is None
    task = queue.get(held)
    assert task is not None and task.state is TaskState.PENDING
    assert (task.lost, task.attempts) == (1, 1)  # one loss, counted once
    # The task runs once more elsewhere, its loss still counted once.
    redis_client.rpush("test:gate", "open")
    fleet.add(SLEEP, pod="pod-b", args=FAST_BEATS).start()
    wait_for(lambda: done(queue, held), timeout=WORKER_TIMEOUT_S, what=fleet.logs)
    task = queue.get(held)
    assert task is not None and (task.lost, task.attempts) == (1, 2)
    # Any process of the gone pod is refused at its start: one line, exit 2.
    late = fleet.add(SLEEP, pod="pod-a", args=FAST_BEATS).start()
    assert late.wait() == 2
    assert "its pod is gone from the Kubernetes API" in late.log_text()
    assert redis_client.hget(WORKERS, "pod-a") is None


def test_a_container_restarted_in_its_pod_after_a_clean_exit_registers_and_works(
    fleet: Fleet, queue: Queue, redis_client: redis.Redis
) -> None:
    first = fleet.add(SLEEP, pod="pod-r", args=FAST_BEATS).start()
    first.wait_event("worker_started")
    first.signal(signal.SIGTERM)
    assert first.wait() == 0
    # The restarted container keeps the pod's name; only a pod gone from the API is
    # tombstoned, and a requeue keeping an incarnation (an in-place restart) leaves none.
    queue.requeue_pod("pod-r", except_incarnation="other")
    again = fleet.add(SLEEP, pod="pod-r", args=FAST_BEATS).start()
    again.wait_event("worker_started")
    task_id = queue.enqueue({})
    wait_for(lambda: done(queue, task_id), timeout=WORKER_TIMEOUT_S, what=fleet.logs)
    assert not again.has_event("pod_gone")
    assert redis_client.zcard("tf:{jobs}:tombstones") == 0
