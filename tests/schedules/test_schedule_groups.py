"""Schedules with a group: each slot's task belongs to the schedule's group (claimed
fairly with the other groups, filtered by group), through the API and the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from taskfleet import InvalidArgument, Queue
from taskfleet.protocol.cron import parse_cron
from taskfleet.protocol.slots import latest_slots, zone

from tests.workers.harness import env_for, taskfleet

YEARLY = "0 0 1 1 *"


def _make_due(queue: Queue, name: str) -> int:
    now = int(queue.client.time()[0])
    [slot] = latest_slots(parse_cron(YEARLY), zone("UTC"), now, 0, 1)
    queue.client.hset(queue.keys.schedule(name), "next_slot", slot)
    queue.client.zadd(queue.keys.schedule_due, {name: 0})
    return slot


def test_a_scheduled_task_belongs_to_its_schedules_group(queue: Queue) -> None:
    stored = queue.schedule("nightly", YEARLY, {"v": 1}, group="tenant-42")
    assert stored.group == "tenant-42"
    slot = _make_due(queue, "nightly")
    assert queue.fire_due_schedules() == 1
    task = queue.get(f"sched:nightly:{slot}")
    assert task is not None and task.group == "tenant-42"
    assert [g.group for g in queue.groups()] == ["tenant-42"]
    # the group dropped: the next slots' tasks have none
    assert queue.schedule("nightly", YEARLY, {"v": 1}).group is None
    with pytest.raises(InvalidArgument):
        queue.schedule("bad", YEARLY, {}, group="no spaces")


def test_the_cli_schedules_with_a_group(redis_url: str, tmp_path: Path) -> None:
    env = env_for(redis_url, tmp_path)
    added = taskfleet(
        "schedule",
        "add",
        "q",
        "s",
        YEARLY,
        "--payload",
        "{}",
        "--group",
        "acme",
        "--json",
        env=env,
    )
    assert added.returncode == 0, added.stderr
    assert json.loads(added.stdout)["group"] == "acme"
    bad = taskfleet("schedule", "add", "q", "t", YEARLY, "--group", "a b", env=env)
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1, bad.stderr
    with Queue("q", redis_url=redis_url) as queue:
        assert queue.get_schedule("t") is None
