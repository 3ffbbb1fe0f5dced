"""The schedule store through the API and the CLI: what a change keeps, pause and resume,
ownership, and bad input refused at the door with one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from taskfleet import InvalidArgument, Queue, ScheduleNotFound
from taskfleet.protocol.config import QueueConfig
from taskfleet.protocol.cron import parse_cron
from taskfleet.protocol.slots import latest_slots, zone

from tests.workers.harness import env_for, taskfleet

YEARLY = "0 0 1 1 *"


def make_due(queue: Queue, name: str, slot: int) -> None:
    queue.client.hset(queue.keys.schedule(name), "next_slot", slot)
    queue.client.zadd(queue.keys.schedule_due, {name: 0})


def last_new_year(queue: Queue) -> int:
    """The yearly slot before now: due, and the slot after it is months away."""
    now = int(queue.client.time()[0])
    [slot] = latest_slots(parse_cron(YEARLY), zone("UTC"), now, 0, 1)
    return slot


def test_a_schedule_is_stored_with_its_first_slot_after_now(queue: Queue) -> None:
    now = int(queue.client.time()[0])
    stored = queue.schedule("hourly", "0 * * * *", {"job": "sync"}, tz="Asia/Tokyo", priority=3)
    assert stored.next_slot is not None and now < stored.next_slot <= now + 3600
    assert stored.next_slot % 3600 == 0
    assert (stored.payload, stored.priority, stored.paused, stored.owner) == (
        {"job": "sync"},
        3,
        False,
        "",
    )
    assert [s.name for s in queue.schedules()] == ["hourly"]


def test_changing_the_payload_keeps_the_next_slot_and_changing_the_cron_starts_again(
    queue: Queue,
) -> None:
    queue.schedule("s", "0 3 * * *", {"v": 1})
    make_due(queue, "s", 1000)  # as if the next slot were an old one
    kept = queue.schedule("s", "0 3 * * *", {"v": 2})
    assert (kept.next_slot, kept.payload) == (1000, {"v": 2})
    moved = queue.schedule("s", "0 4 * * *", {"v": 2})
    assert moved.next_slot is not None and moved.next_slot > 1000


def test_the_slot_fires_with_the_stored_options_and_exactly_once(queue: Queue) -> None:
    stored = queue.schedule("s", YEARLY, {"v": 1}, priority=7, max_attempts=2, timeout=9)
    assert stored.next_slot is not None
    slot = last_new_year(queue)
    make_due(queue, "s", slot)

    assert queue.fire_due_schedules() == 1
    assert queue.fire_due_schedules() == 0

    task = queue.get(f"sched:s:{slot}")
    assert task is not None
    assert (task.payload, task.priority, task.max_attempts) == ({"v": 1}, 7, 2)
    after = queue.get_schedule("s")
    assert after is not None and (after.last_slot, after.fired) == (slot, 1)


def test_a_paused_schedule_fires_nothing_and_resumes_from_the_next_slot(queue: Queue) -> None:
    stored = queue.schedule("s", YEARLY, {})
    assert stored.next_slot is not None
    make_due(queue, "s", last_new_year(queue))
    assert queue.pause_schedule("s") is True
    assert queue.pause_schedule("s") is False
    queue.client.zadd(queue.keys.schedule_due, {"s": 0})  # even if due by hand

    assert queue.fire_due_schedules() == 0
    assert queue.resume_schedule("s") is True
    resumed = queue.get_schedule("s")
    assert resumed is not None and resumed.next_slot == stored.next_slot
    with pytest.raises(ScheduleNotFound):
        queue.resume_schedule("nope")


def test_a_payload_over_a_bound_lowered_later_fires_nothing_and_says_why(queue: Queue) -> None:
    stored = queue.schedule("s", YEARLY, {"blob": "x" * 200})
    assert stored.next_slot is not None
    queue.configure(QueueConfig(max_payload_bytes=100))
    make_due(queue, "s", last_new_year(queue))

    assert queue.fire_due_schedules() == 0

    after = queue.get_schedule("s")
    assert after is not None
    assert (after.skipped, after.next_slot) == (1, stored.next_slot)
    assert "the queue allows 100" in after.error


def test_unschedule_deletes_it_and_keeps_what_it_fired(queue: Queue) -> None:
    stored = queue.schedule("s", YEARLY, {})
    assert stored.next_slot is not None
    make_due(queue, "s", last_new_year(queue))
    queue.fire_due_schedules()

    assert queue.unschedule("s") is True
    assert queue.unschedule("s") is False
    assert queue.schedules() == []
    assert queue.stats()["pending"] == 1


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"cron": "0 25 * * *"}, "hour field: '25' is outside 0-23"),
        ({"tz": "Moon/Base"}, "unknown time zone 'Moon/Base'"),
        ({"name": "has space"}, "invalid schedule name"),
        ({"catchup": "some"}, "catchup must be one of latest, all"),
        ({"jitter": -1}, "jitter must not be negative"),
        ({"priority": 5000}, "priority must be between"),
    ],
)
def test_bad_input_is_refused_at_the_door_and_nothing_is_stored(
    queue: Queue, kwargs: dict[str, object], message: str
) -> None:
    args: dict[str, object] = {"name": "s", "cron": "0 3 * * *", "payload": {}, **kwargs}
    with pytest.raises(InvalidArgument, match=message):
        queue.schedule(**args)  # type: ignore[arg-type]
    assert queue.schedules() == []


def test_the_cli_adds_lists_pauses_and_removes_schedules_with_json(
    redis_url: str, tmp_path: Path
) -> None:
    env = env_for(redis_url, tmp_path)
    added = taskfleet(
        "schedule",
        "add",
        "jobs",
        "nightly",
        "0 3 * * *",
        "--tz",
        "Europe/Paris",
        "--payload",
        '{"job": "export"}',
        "--json",
        env=env,
    )
    assert added.returncode == 0, added.stderr
    assert json.loads(added.stdout)["tz"] == "Europe/Paris"
    listed = taskfleet("schedule", "ls", "jobs", "--json", env=env)
    [row] = json.loads(listed.stdout)
    assert (row["name"], row["paused"], row["owner"]) == ("nightly", False, "api")
    paused = taskfleet("schedule", "pause", "jobs", "nightly", "--json", env=env)
    assert json.loads(paused.stdout) == {"nightly": True}
    removed = taskfleet("schedule", "rm", "jobs", "nightly", "--json", env=env)
    assert json.loads(removed.stdout) == {"nightly": True}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["0 3 * *"], "taskfleet: error: cron '0 3 * *' has 4 fields"),
        (["0 3 * * *", "--tz", "Nowhere/Else"], "taskfleet: error: unknown time zone"),
    ],
)
def test_the_cli_refuses_a_bad_cron_or_zone_with_one_line_and_exit_2(
    redis_url: str, tmp_path: Path, args: list[str], message: str
) -> None:
    result = taskfleet("schedule", "add", "jobs", "s", *args, env=env_for(redis_url, tmp_path))
    assert result.returncode == 2
    assert result.stderr.startswith(message) and result.stderr.count("\n") == 1
