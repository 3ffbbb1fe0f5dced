"""``taskfleet enqueue --group``, ``ls / cancel / retry --group`` and ``taskfleet group``
against a real Redis: a bad group is one line, exit 2, nothing stored."""

from __future__ import annotations

import json
from pathlib import Path

from taskfleet.producer.queue import Queue

from tests.workers.harness import env_for, taskfleet


def test_enqueue_with_a_group_then_list_show_and_cancel_that_group(
    redis_url: str, tmp_path: Path
) -> None:
    env = env_for(redis_url, tmp_path)
    made = taskfleet("enqueue", "q", "--group", "tenant-42", "--count", "3", env=env)
    assert made.returncode == 0, made.stderr
    other = taskfleet("enqueue", "q", env=env).stdout.strip()
    listed = json.loads(
        taskfleet("ls", "q", "pending", "--group", "tenant-42", "--json", env=env).stdout
    )
    assert sorted(t["id"] for t in listed["tasks"]) == sorted(made.stdout.split())
    assert {t["group"] for t in listed["tasks"]} == {"tenant-42"}
    shown = json.loads(taskfleet("group", "q", "--json", env=env).stdout)
    assert shown == [{"group": "tenant-42", "pending": 3, "running": 0, "paused_until_ms": 0}]
    stats = json.loads(taskfleet("stats", "q", "--json", env=env).stdout)
    assert (stats["pending"], stats["groups"], stats["top_groups"]) == (4, 1, shown)
    text = taskfleet("stats", "q", env=env).stdout
    assert "tenant-42  pending=3  running=0" in text
    cancelled = taskfleet("cancel", "q", "--group", "tenant-42", "--json", env=env)
    assert json.loads(cancelled.stdout) == {"cancelled": 3}
    with Queue("q", redis_url=redis_url) as queue:
        assert [t.id for t in queue.list("pending").tasks] == [other]


def test_group_settings_are_set_and_returned_to_the_default(redis_url: str, tmp_path: Path) -> None:
    env = env_for(redis_url, tmp_path)
    taskfleet("enqueue", "q", env=env)
    out = taskfleet(
        "group", "q", "t1", "--set", "weight=2", "--set", "max_concurrency=3", "--json", env=env
    )
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["weight"] == 2 and json.loads(out.stdout)["max_concurrency"] == 3
    back = taskfleet("group", "q", "t1", "--set", "weight=", "--json", env=env)
    assert json.loads(back.stdout)["weight"] is None


def test_a_bad_group_is_one_line_exit_2_and_nothing_stored(redis_url: str, tmp_path: Path) -> None:
    env = env_for(redis_url, tmp_path)
    for argv in (
        ("enqueue", "q", "--group", "{tag}"),
        ("enqueue", "q", "--group", ""),
        ("group", "q", "t1", "--set", "weight=0"),
        ("group", "q", "bad group"),
    ):
        out = taskfleet(*argv, env=env)
        assert out.returncode == 2, (argv, out.stderr)
        assert len(out.stderr.strip().splitlines()) == 1, out.stderr
    with Queue("q", redis_url=redis_url) as queue:
        assert queue.stats()["pending"] == 0
        assert queue.groups() == []


def test_a_setting_that_is_not_a_number_is_refused_naming_the_field(
    redis_url: str, tmp_path: Path
) -> None:
    env = env_for(redis_url, tmp_path)
    for value, said in (
        ("max_concurrency=abc", "max_concurrency must be an integer, not 'abc'"),
        ("weight=heavy", "weight must be a number, not 'heavy'"),
    ):
        out = taskfleet("group", "q", "t1", "--set", value, env=env)
        assert out.returncode == 2, out.stderr
        assert out.stderr.strip().splitlines() == [f"taskfleet: error: --set: {said}"]
    with Queue("q", redis_url=redis_url) as queue:
        assert queue.group_settings("t1").max_concurrency is None


def test_ls_pending_of_a_queue_with_three_groups_lists_every_task_as_queue_list_does(
    redis_url: str, tmp_path: Path
) -> None:
    env = env_for(redis_url, tmp_path)
    for group, count in (("t1", 3), ("t2", 2), ("t3", 4)):
        made = taskfleet("enqueue", "q", "--group", group, "--count", str(count), env=env)
        assert made.returncode == 0, made.stderr
    taskfleet("enqueue", "q", env=env)
    first = json.loads(taskfleet("ls", "q", "pending", "--limit", "6", "--json", env=env).stdout)
    rest = json.loads(
        taskfleet("ls", "q", "pending", "--cursor", first["cursor"], "--json", env=env).stdout
    )
    listed = [t["id"] for t in first["tasks"] + rest["tasks"]]
    assert rest["cursor"] is None and len(listed) == 10
    assert {t["group"] for t in first["tasks"] + rest["tasks"]} == {"t1", "t2", "t3", None}
    with Queue("q", redis_url=redis_url) as queue:
        assert [t.id for t in queue.list("pending").tasks] == listed
    text = taskfleet("ls", "q", "pending", env=env).stdout.splitlines()
    assert [line.split()[0] for line in text] == listed


def test_group_fair_by_sets_the_unit_and_claims_returns_to_fair_by_claims(
    redis_url: str, tmp_path: Path
) -> None:
    env = env_for(redis_url, tmp_path)
    made = taskfleet("group", "q", "--fair-by", "output_tokens", env=env)
    assert (made.returncode, made.stdout) == (0, "fair_by: output_tokens\n"), made.stderr
    with Queue("q", redis_url=redis_url) as queue:
        assert queue.fair_by() == "output_tokens"
    back = taskfleet("group", "q", "--fair-by", "claims", "--json", env=env)
    assert json.loads(back.stdout) == {"fair_by": "claims"}
    with Queue("q", redis_url=redis_url) as queue:
        assert queue.fair_by() is None


def test_group_fair_by_a_bad_unit_or_with_a_group_is_one_line_exit_2_and_nothing_stored(
    redis_url: str, tmp_path: Path
) -> None:
    env = env_for(redis_url, tmp_path)
    for args in (("--fair-by", "Output Tokens"), ("tenant", "--fair-by", "output_tokens")):
        bad = taskfleet("group", "q", *args, env=env)
        assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1, bad.stderr
        with Queue("q", redis_url=redis_url) as queue:
            assert queue.fair_by() is None
