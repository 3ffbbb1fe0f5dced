"""Many firers against one real Redis: every slot fires exactly once, none is skipped.

Firer processes (and, in the last test, worker processes) race for the same schedules,
each due every second; the store's compare-and-set is all that keeps them apart.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from taskfleet import Queue
from taskfleet.protocol.schedules import Schedule

from tests.polling import wait_for
from tests.workers.harness import REPO, Fleet

SCHEDULES = 60


def make_schedules(queue: Queue, n: int) -> dict[str, Schedule]:
    made = {}
    for i in range(n):
        made[f"s{i}"] = queue.schedule(f"s{i}", "* * * * * *", {"i": i}, catchup="all")
    return made


def assert_every_slot_fired_once(queue: Queue, made: dict[str, Schedule]) -> int:
    """Each schedule fired each slot from its first to its last: one task per slot."""
    total = 0
    for name, first in made.items():
        now = queue.get_schedule(name)
        assert now is not None and first.next_slot is not None
        if now.last_slot is None:
            continue
        expected = now.last_slot - first.next_slot + 1
        assert (now.fired, now.skipped) == (expected, 0), name
        assert now.next_slot == now.last_slot + 1
        pipe = queue.client.pipeline(transaction=False)
        for slot in range(first.next_slot, now.last_slot + 1):
            pipe.exists(queue.keys.task(f"sched:{name}:{slot}"))
        assert all(pipe.execute()), f"{name}: a slot has no task"
        total += expected
    assert queue.stats()["enqueued"] == total
    return total


def test_many_firer_processes_fire_each_slot_exactly_once(
    queue: Queue, redis_url: str, tmp_path: Path
) -> None:
    made = make_schedules(queue, SCHEDULES)
    stop = tmp_path / "stop"
    firers = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.workers.firer",
                redis_url,
                queue.name,
                str(stop),
                str(tmp_path / f"report-{i}"),
                str(batch),
            ],
            cwd=REPO,
        )
        for i, batch in enumerate([1, 7, 50, 100, 100, 3])
    ]
    try:
        # Three seconds' slots for every schedule, fired by whoever is first.
        wait_for(
            lambda: queue.stats()["enqueued"] >= 3 * SCHEDULES,
            timeout=30,
            what="three slots of every schedule fired",
        )
    finally:
        stop.touch()
        for firer in firers:
            assert firer.wait(timeout=30) == 0
    reports = [json.loads((tmp_path / f"report-{i}").read_text()) for i in range(len(firers))]

    total = assert_every_slot_fired_once(queue, made)

    # The accepted plans' slots, over every firer, are the tasks: no slot accepted twice.
    assert sum(r["applied_slots"] for r in reports) == total
    assert sum(r["created"] for r in reports) == total


def test_a_change_of_cron_between_read_and_fire_makes_the_firers_plan_stale(
    queue: Queue,
) -> None:
    queue.schedule("s", "* * * * * *", {})
    queue.client.zadd(queue.keys.schedule_due, {"s": 0})
    from taskfleet.protocol.schedule_ops import ScheduleOps
    from taskfleet.protocol.schedules import plan
    from taskfleet.protocol.scripts import SyncScripts

    scripts, ops = SyncScripts.for_client(queue.client), ScheduleOps(queue.keys)
    claimed = scripts.run(ops.due(10, 10_000))
    [read] = claimed.due
    queue.schedule("s", "*/2 * * * * *", {})  # a new revision meanwhile

    fired = scripts.run(ops.fire([plan(read, claimed.now_ms + 5_000)]))

    assert (fired.created, fired.applied) == (0, [False])
    assert queue.stats()["enqueued"] == 0


@pytest.mark.parametrize("workers", [2])
def test_worker_processes_fire_the_queues_schedules_exactly_once_without_an_operator(
    queue: Queue, fleet: Fleet, workers: int
) -> None:
    made = make_schedules(queue, 20)
    for i in range(workers):
        fleet.add("tests.workers.handlers:sleep", pod=f"pod-{i}").start()
    wait_for(
        lambda: all((queue.get_schedule(n) or made[n]).fired >= 3 for n in made),
        timeout=30,
        what=lambda: f"three slots of every schedule fired; logs:\n{fleet.logs()}",
    )
    for worker in fleet.workers:
        worker.signal()
    for worker in fleet.workers:
        assert worker.wait() == 0

    assert_every_slot_fired_once(queue, made)
