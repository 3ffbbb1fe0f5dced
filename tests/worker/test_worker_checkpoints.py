"""Checkpoints: a run stores its state (``current_task().checkpoint``), the next attempt
of the task reads it (``restored``), whatever ended the attempt before; a run that lost
its task has its checkpoint refused; the state goes when the task finishes."""

from __future__ import annotations

import signal

import redis
from taskfleet.producer.queue import Queue
from taskfleet.protocol.tasks import TaskState

from tests.polling import wait_for
from tests.task_probes import state
from tests.workers.checkpoint_handlers import GATE, REFUSED, STEPS
from tests.workers.harness import FAST, WORKER_INTERVAL_S, Fleet

HANDLER = "tests.workers.checkpoint_handlers:six_steps"


def steps(client: redis.Redis) -> list[str]:
    return [s.decode() for s in client.lrange(STEPS, 0, -1)]


def checkpointed(queue: Queue, task_id: str, step: int) -> bool:
    task = queue.get(task_id)
    return task is not None and task.checkpoint == {"step": step}


def test_a_sigkilled_workers_task_starts_again_after_its_last_checkpoint(
    fleet: Fleet, queue: Queue, redis_client: redis.Redis
) -> None:
    worker = fleet.add(HANDLER, args=FAST).start()
    task_id = queue.enqueue({"hold_after": 3})
    wait_for(
        lambda: checkpointed(queue, task_id, 3),
        timeout=15,
        interval=WORKER_INTERVAL_S,
        what=lambda: f"step 3 checkpointed:\n{fleet.logs()}",
    )
    worker.kill()
    # The pod's next incarnation takes back what the killed one held.
    worker.start()
    wait_for(lambda: state(queue, task_id) == TaskState.DONE, timeout=15, interval=0.05)
    assert steps(redis_client) == ["1:1", "1:2", "1:3", "2:4", "2:5", "2:6"]
    task = queue.get(task_id)
    assert task is not None
    assert task.result == {"steps": 6, "restored": {"step": 3}}
    # Dropped with the task's end: nothing left in its hash.
    assert task.checkpoint is None
    assert not redis_client.hexists(queue.keys.task(task_id), "checkpoint")
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0


def test_a_run_that_lost_its_lease_has_its_checkpoint_refused(
    fleet: Fleet, queue: Queue, redis_client: redis.Redis
) -> None:
    args = [*FAST, "--lease-ttl", "1"]
    first = fleet.add(HANDLER, pod="pod-a", args=args).start()
    task_id = queue.enqueue({"hold_after": 2})
    wait_for(lambda: checkpointed(queue, task_id, 2), timeout=15, interval=WORKER_INTERVAL_S)
    first.signal(signal.SIGSTOP)  # its lease runs out; another pod takes the task back
    second = fleet.add(HANDLER, pod="pod-b", args=args).start()
    wait_for(lambda: state(queue, task_id) == TaskState.DONE, timeout=20, interval=0.05)
    first.signal(signal.SIGCONT)
    redis_client.rpush(GATE, "open")  # the first run goes on to step 3: refused
    wait_for(lambda: redis_client.llen(REFUSED) == 1, timeout=10, interval=WORKER_INTERVAL_S)
    assert [r.decode() for r in redis_client.lrange(REFUSED, 0, -1)] == ["1:3"]
    assert steps(redis_client) == ["1:1", "1:2", "2:3", "2:4", "2:5", "2:6", "1:3"]
    task = queue.get(task_id)
    assert task is not None
    assert (task.state, task.attempts, task.checkpoint) == (TaskState.DONE, 2, None)
    for worker in (first, second):
        worker.signal(signal.SIGTERM)
        assert worker.wait() == 0


def test_a_checkpoint_kept_on_request_stays_with_the_finished_task(
    fleet: Fleet, queue: Queue
) -> None:
    worker = fleet.add(HANDLER, args=FAST).start()
    task_id = queue.enqueue({"keep": True})
    wait_for(lambda: state(queue, task_id) == TaskState.DONE, timeout=15, interval=0.05)
    task = queue.get(task_id)
    assert task is not None
    assert (task.result, task.checkpoint) == ({"steps": 6, "restored": None}, {"step": 6})
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0


def test_the_shipped_resumable_steps_sample_starts_after_the_checkpoint_a_killed_run_left(
    fleet: Fleet, queue: Queue
) -> None:
    worker = fleet.add("taskfleet.samples:resumable_steps", args=FAST).start()
    task_id = queue.enqueue({"steps": 5, "seconds": 0.2, "record_key": "samples:steps"})

    def checkpointed_step() -> int:
        task = queue.get(task_id)
        return int((task.checkpoint or {}).get("done", 0)) if task is not None else 0

    wait_for(lambda: checkpointed_step() >= 2, timeout=15, interval=WORKER_INTERVAL_S)
    worker.kill()
    left = checkpointed_step()
    worker.start()
    wait_for(lambda: state(queue, task_id) == TaskState.DONE, timeout=15, interval=0.05)
    task = queue.get(task_id)
    assert task is not None
    assert task.result == {"resumed_after": left, "ran": list(range(left + 1, 6))}
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0
