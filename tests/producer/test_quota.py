"""The queue's claim pause (RateLimited) and spend budgets, on a real Redis.

What is checked: a rate limit met by one worker stops every worker's claims until the
pause ends (retry_after_ms says how long), the task waits it out without spending an
attempt; the adaptive pause doubles per rate limit in a row and relaxes on success; a
budget stops claims when spent, is settled with the reported cost, and rolls over at the
UTC period boundary.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from taskfleet import Queue, QueueConfig, RateLimited, TaskState
from taskfleet.protocol.control_ops import Report
from taskfleet.protocol.quota import period_of
from taskfleet.worker.context import verdict_of

from tests.fixtures_redis import MakeBroker, server_ms


def _due_now(queue: Queue, task_id: str) -> None:
    queue.client.hset(queue.keys.task(task_id), "run_at", 0)
    queue.client.zadd(queue.keys.delayed, {task_id: 0})


def test_rate_limited_carries_its_verdict() -> None:
    assert verdict_of(RateLimited(2.5)) is not None
    verdict = verdict_of(RateLimited(2.5))
    assert verdict is not None and verdict.throttle and verdict.retry_after_ms == 2500
    verdict = verdict_of(RateLimited())
    assert verdict is not None and verdict.throttle and verdict.retry_after_ms is None
    with pytest.raises(ValueError):
        RateLimited(-1)
    with pytest.raises(TypeError):
        RateLimited("soon")  # type: ignore[arg-type]


def test_a_rate_limit_pauses_every_workers_claims_without_an_attempt(
    queue: Queue, make_broker: MakeBroker
) -> None:
    first, second = queue.enqueue({"n": 1}), queue.enqueue({"n": 2})
    a, b = make_broker("jobs", pod="pod-a"), make_broker("jobs", pod="pod-b")
    [claimed] = a.claim(1).tasks
    assert claimed.id == first
    state = a.fail(
        claimed.id, claimed.token, "429 Too Many Requests", retry_after_ms=60_000, throttle=True
    )
    assert state is TaskState.DELAYED
    task = queue.get(first)
    assert task is not None and task.attempts == 0 and task.state is TaskState.DELAYED
    # the other worker may not claim the other task: the whole queue waits
    result = b.claim(1)
    assert result.tasks == []
    assert 0 < result.retry_after_ms <= 60_000
    state_now = queue.quota()
    assert state_now.paused and state_now.pause_left_ms > 50_000
    assert state_now.reason == "429 Too Many Requests"
    assert queue.stats()["throttled"] == 1
    # an operator lifts it: claims go on
    queue.resume_claims()
    [got] = b.claim(1).tasks
    assert got.id == second


def test_the_adaptive_pause_doubles_per_limit_in_a_row_and_relaxes_on_success(
    queue: Queue, make_broker: MakeBroker
) -> None:
    queue.configure(QueueConfig(throttle_base_s=10, throttle_max_s=35))
    ids = [queue.enqueue({"n": i}) for i in range(4)]
    broker = make_broker("jobs")
    lengths = []
    for _ in range(3):
        queue.client.hset(queue.keys.quota, "until", 0)  # the pause is over
        for task_id in ids:
            if queue.get(task_id).state is TaskState.DELAYED:  # type: ignore[union-attr]
                _due_now(queue, task_id)
        [claimed] = broker.claim(1).tasks
        broker.fail(claimed.id, claimed.token, "429", throttle=True)
        lengths.append(queue.quota().pause_ms)
    assert [round(ms / 1000) for ms in lengths] == [10, 20, 35]  # doubled, capped
    # a rate limit met while the pause holds (a request already in flight) adds no doubling
    queue.client.hset(queue.keys.quota, "until", server_ms(queue.client) + 60_000)
    other = queue.enqueue({"n": 9})
    queue.client.hset(queue.keys.quota, "until", 0)
    [claimed] = broker.claim(1).tasks
    queue.client.hset(queue.keys.quota, "until", server_ms(queue.client) + 60_000)
    broker.fail(claimed.id, claimed.token, "429", throttle=True)
    assert queue.quota().streak == 3
    # a success after the pause: one doubling less
    queue.client.hset(queue.keys.quota, "until", 0)
    [claimed] = broker.claim(1).tasks
    # (a completion that claims in the same call: the worker's usual one)
    broker.complete_and_claim([(claimed.id, claimed.token, None)], 1)
    assert queue.quota().streak == 2
    assert other


def test_a_handler_without_a_budget_pays_no_budget_write(
    queue: Queue, make_broker: MakeBroker
) -> None:
    queue.enqueue({"n": 1}, cost=5)
    [claimed] = make_broker("jobs").claim(1).tasks
    assert claimed.cost == 5
    assert queue.client.exists(queue.keys.quota) == 0


def test_a_daily_budget_stops_claims_until_the_next_utc_day(
    queue: Queue, make_broker: MakeBroker
) -> None:
    queue.configure(QueueConfig(budget_day=10))
    ids = [queue.enqueue({"n": i}, cost=4) for i in range(4)]
    broker = make_broker("jobs")
    got = broker.claim(4)
    assert [t.id for t in got.tasks] == ids[:2]  # 8 of 10: a third (12) would overrun
    assert got.retry_after_ms > 0
    state = queue.quota()
    assert (state.day_limit, state.day_spent, state.day_left) == (10, 8, 2)
    # the real cost reported settles the spend: 1 each, 6 units back
    for task in got.tasks:
        assert broker.report([Report(task.id, task.token, None, 1)]) == [True]
    assert queue.quota().day_spent == 2
    assert [t.id for t in broker.claim(4).tasks] == ids[2:]
    # yesterday's spend does not count today: the period rolled over
    queue.client.hset(queue.keys.quota, mapping={"day": "1999-12-31", "day_spent": 10})
    assert queue.quota().day_spent == 0


def test_a_run_time_budget_overrides_the_config(queue: Queue, make_broker: MakeBroker) -> None:
    queue.configure(QueueConfig(budget_day=1000))
    queue.set_budget(day=3)
    ids = [queue.enqueue({"n": i}, cost=2) for i in range(3)]
    broker = make_broker("jobs")
    assert [t.id for t in broker.claim(3).tasks] == ids[:1]
    queue.set_budget(day=0)  # none, whatever the config says
    assert [t.id for t in broker.claim(3).tasks] == ids[1:]
    queue.set_budget(day="default")
    assert queue.quota().day_limit == 1000


def test_periods_are_utc_days_and_calendar_months() -> None:
    ms = int(datetime(2024, 2, 29, 23, 59, tzinfo=UTC).timestamp() * 1000)
    day, day_end, month, month_end = period_of(ms)
    assert (day, month) == ("2024-02-29", "2024-02")
    assert day_end == month_end == int(datetime(2024, 3, 1, tzinfo=UTC).timestamp() * 1000)
    ms = int(datetime(2025, 12, 31, 12, tzinfo=UTC).timestamp() * 1000)
    assert period_of(ms)[3] == int(datetime(2026, 1, 1, tzinfo=UTC).timestamp() * 1000)
