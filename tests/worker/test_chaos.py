"""Chaos: worker processes SIGKILLed and restarted while a few hundred tasks run.

The kills follow the work, not the clock: kill i comes once i/(KILLS+2) of the tasks are
done, so every kill lands while tasks are still pending however fast the machine is, and
which worker dies is random.

At the end every task is done, none lost and none dead. A task may have run more than
once (at-least-once delivery): only when its holder died, which the queue counts in the
task's ``lost`` field, so ``1 <= executions <= lost + 1`` for every task.

The run is reproducible in its choices (not its timing): the seed is printed and in every
assertion message; ``TASKFLEET_CHAOS_SEED=<n>`` replays a seed.
"""

from __future__ import annotations

import json
import os
import random
from collections import Counter
from functools import partial
from pathlib import Path

import pytest
import redis
from taskfleet.producer.queue import Queue
from taskfleet.protocol.config import QueueConfig

from tests.polling import wait_for
from tests.workers.harness import WORKER_INTERVAL_S, Fleet

TASKS = 400
WORKERS = 4
KILLS = 8
RECORDS = "chaos:executions"
ARGS = ["--heartbeat-interval", "0.3", "--concurrency", "4", "--log-level", "warning"]


def _done_once(queue: Queue, threshold: int) -> int:
    """How many tasks are done once at least ``threshold`` are (0 until then)."""
    done = int(queue.stats()["done"])
    return done if done >= threshold else 0


@pytest.mark.slow
@pytest.mark.parametrize(
    ("tasks", "seconds"),
    [
        pytest.param(TASKS, (0.01, 0.2), id="tasks-of-10-to-200ms"),
        # Short enough for the workers to prefetch: kills also hit tasks waiting for a thread.
        pytest.param(2000, (0.0, 0.004), id="prefetched-tasks-under-4ms"),
    ],
)
def test_random_sigkills_and_restarts_lose_nothing_and_duplicate_only_lost_tasks(
    redis_url: str,
    redis_client: redis.Redis,
    tmp_path: Path,
    tasks: int,
    seconds: tuple[float, float],
) -> None:
    seed = int(os.environ.get("TASKFLEET_CHAOS_SEED") or random.randrange(2**32))
    print(f"chaos seed: {seed} (replay with TASKFLEET_CHAOS_SEED={seed})")
    rng = random.Random(seed)
    why = f"[chaos seed {seed}]"

    queue = Queue("chaos", redis_url=redis_url)
    # A short lease so a killed holder's tasks come back fast; max_lost high because a
    # task hit by several kills is this test's point, not a poison task.
    queue.configure(QueueConfig(lease_ttl_s=2, max_lost=50, backoff_base_s=0, backoff_max_s=0))
    ids = queue.enqueue_many(
        [
            {"payload": {"seconds": round(rng.uniform(*seconds), 3), "record_key": RECORDS}}
            for _ in range(tasks)
        ]
    )
    fleet = Fleet(redis_url, "chaos", tmp_path)
    try:
        workers = [
            fleet.add("taskfleet.samples:sleep_and_record", pod=f"chaos-{i}", args=ARGS).start()
            for i in range(WORKERS)
        ]
        # One pod dies for good: its tasks come back only through lease expiry.
        gone = rng.randrange(WORKERS)
        kills = 0
        done_at_kill: list[int] = []
        for i in range(1, KILLS + 1):
            # The last kill comes with KILLS+2 - KILLS = 2/(KILLS+2) of the work still left.
            threshold = tasks * i // (KILLS + 2)
            done_at_kill.append(
                wait_for(
                    partial(_done_once, queue, threshold),
                    timeout=30,
                    interval=WORKER_INTERVAL_S,
                    what=f"{threshold} tasks done {why}",
                )
            )
            victim = workers[rng.randrange(WORKERS)]
            victim.kill()
            kills += 1
            if victim is workers[gone] and kills > 3:
                continue
            victim.start()  # same pod name, new incarnation
        for worker in workers:
            if not worker.alive() and worker is not workers[gone]:
                worker.start()

        wait_for(
            lambda: queue.stats()["done"] == tasks,
            timeout=45,
            interval=WORKER_INTERVAL_S,
            what=lambda: f"all {tasks} tasks done {why}: {queue.stats()}",
        )
        stats = queue.stats()
        assert stats["dead"] == 0 and stats["pending"] == 0 and stats["delayed"] == 0, why

        runs = Counter(json.loads(r)["id"] for r in redis_client.lrange(RECORDS, 0, -1))
        assert set(runs) == set(ids), f"tasks never run {why}: {set(ids) - set(runs)}"
        duplicates = 0
        for task_id in ids:
            task = queue.get(task_id)
            assert task is not None and task.state == "done", f"{why} {task}"
            assert runs[task_id] <= task.lost + 1, f"unexplained re-run {why}: {task}"
            duplicates += runs[task_id] - 1
        print(
            f"chaos: {kills} kills at {done_at_kill} done, {stats['requeued']} requeued, "
            f"{stats['lost']} lost, "
            f"{duplicates} duplicate runs of {tasks} tasks, {stats['stale']} stale writes"
        )
        assert kills == KILLS, why
    finally:
        fleet.close()
        queue.close()
