"""Per-group claim pauses: a rate limit met by one group's task pauses only that group
(``RateLimited(scope="group")``), an operator pauses or resumes one group, and a paused
group is stepped over by the fair ring without work that grows with the number of
groups; on a real Redis."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from taskfleet import Queue, RateLimited, TaskState
from taskfleet.protocol.errors import InvalidArgument
from taskfleet.protocol.groups import GroupSettings
from taskfleet.worker.context import verdict_of

from tests.fixtures_redis import MakeBroker
from tests.workers.harness import env_for, taskfleet


def _groups_of(queue: Queue, ids: list[str]) -> list[str | None]:
    out = []
    for task_id in ids:
        task = queue.get(task_id)
        assert task is not None
        out.append(task.group)
    return out


def test_rate_limited_scope_is_queue_unless_asked_and_checked() -> None:
    assert RateLimited(1).scope == "queue"
    verdict = verdict_of(RateLimited(1, scope="group"))
    assert verdict is not None and verdict.throttle and verdict.group_scope
    assert verdict.retry_after_ms == 1000
    queue_wide = verdict_of(RateLimited())
    assert queue_wide is not None and not queue_wide.group_scope
    with pytest.raises(ValueError):
        RateLimited(1, scope="tenant")  # type: ignore[arg-type]


def test_a_group_rate_limit_pauses_only_that_group(queue: Queue, make_broker: MakeBroker) -> None:
    queue.enqueue_many([{"payload": {"i": i}, "group": "a"} for i in range(3)])
    queue.enqueue_many([{"payload": {"i": i}, "group": "b"} for i in range(3)])
    worker = make_broker("jobs")
    first = worker.claim(1).tasks[0]
    limited = _groups_of(queue, [first.id])[0]
    state = worker.fail(
        first.id, first.token, "429", retry_after_ms=60_000, throttle=True, throttle_group=True
    )
    assert state is TaskState.DELAYED
    task = queue.get(first.id)
    assert task is not None and task.attempts == 0
    # the queue is not paused; the other group's tasks are claimed, none of the paused one's
    assert not queue.quota().paused
    got = worker.claim(5).tasks
    other = "b" if limited == "a" else "a"
    assert _groups_of(queue, [t.id for t in got]) == [other] * 3
    paused = queue.quota(group=limited)
    assert paused.paused and paused.reason == "429" and paused.pause_left_ms > 50_000
    listed = {c.group: c for c in queue.groups()}
    assert listed[limited].paused_until_ms > 0 and listed[other].paused_until_ms == 0
    # resumed: its tasks are claimed again
    queue.resume_claims(group=limited)
    again = worker.claim(5).tasks
    assert _groups_of(queue, [t.id for t in again]) == [limited] * 2
    assert not queue.quota(group=limited).paused


def test_a_group_scoped_limit_of_an_ungrouped_task_pauses_the_queue(
    queue: Queue, make_broker: MakeBroker
) -> None:
    queue.enqueue({"n": 1})
    worker = make_broker("jobs")
    [task] = worker.claim(1).tasks
    worker.fail(
        task.id, task.token, "429", retry_after_ms=30_000, throttle=True, throttle_group=True
    )
    assert queue.quota().paused


def test_pausing_a_group_by_hand_keeps_its_settings_and_survives_set_group(
    queue: Queue, make_broker: MakeBroker
) -> None:
    queue.set_group("t1", GroupSettings(weight=2))
    queue.enqueue_many([{"payload": {"i": i}, "group": "t1"} for i in range(2)])
    until = queue.pause_claims(120, reason="maintenance", group="t1")
    assert until > 0
    # a settings change looks at the group again, and the claim parks it again
    queue.set_group("t1", GroupSettings(weight=3))
    worker = make_broker("jobs")
    result = worker.claim(2)
    assert result.tasks == []
    assert queue.group_settings("t1").weight == 3
    assert queue.quota(group="t1").paused
    queue.resume_claims(group="t1")
    assert len(worker.claim(2).tasks) == 2
    with pytest.raises(InvalidArgument):
        queue.pause_claims(1, group="no spaces")


def test_a_thousand_paused_groups_cost_a_claim_no_walk(
    queue: Queue, make_broker: MakeBroker
) -> None:
    items = [{"payload": {"i": i}, "group": f"g{i}"} for i in range(1000)]
    queue.enqueue_many(items)
    for i in range(999):
        queue.pause_claims(600, group=f"g{i}")
    worker = make_broker("jobs")
    # the one group not paused is claimed at once, whatever the number paused
    [task] = worker.claim(1).tasks
    assert _groups_of(queue, [task.id]) == ["g999"]
    result = worker.claim(1)
    assert result.tasks == []
    assert queue.client.zcard(queue.keys.groups) == 0  # the ring holds none of them


def test_quota_pause_and_resume_with_group_from_the_command_line(
    redis_url: str, tmp_path: Path
) -> None:
    env = env_for(redis_url, tmp_path)
    with Queue("q", redis_url=redis_url) as queue:
        queue.enqueue({"n": 1}, group="acme")
    paused = taskfleet("quota", "pause", "q", "--group", "acme", "--for", "60", env=env)
    assert paused.returncode == 0, paused.stderr
    assert paused.stdout.startswith("group acme: claims paused until ")
    shown = json.loads(taskfleet("quota", "show", "q", "--group", "acme", "--json", env=env).stdout)
    assert (
        shown["paused"]
        and not json.loads(taskfleet("quota", "show", "q", "--json", env=env).stdout)["paused"]
    )
    listing = taskfleet("group", "q", env=env)
    assert "paused_until=" in listing.stdout
    whole = taskfleet("quota", "show", "q", env=env)
    assert "group acme: claims paused until" in whole.stdout
    assert taskfleet("quota", "resume", "q", "--group", "acme", env=env).returncode == 0
    bad = taskfleet("quota", "pause", "q", "--group", "a b", env=env)
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1
    with Queue("q", redis_url=redis_url) as queue:
        assert not queue.quota(group="acme").paused
