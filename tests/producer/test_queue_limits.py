"""Global concurrency and rate limits hold across every worker of a queue."""

from __future__ import annotations

import pytest
from pydantic import ValidationError
from taskfleet import Queue, QueueConfig

from tests.fixtures_redis import MakeBroker, server_ms
from tests.polling import wait_for


def test_max_concurrency_caps_running_tasks_across_pods(
    queue: Queue, make_broker: MakeBroker
) -> None:
    queue.configure(QueueConfig(max_concurrency=3))
    queue.enqueue_many([{"payload": {"i": i}} for i in range(10)])
    a, b = make_broker("jobs", "pod-a"), make_broker("jobs", "pod-b")
    got_a = a.claim(2).tasks
    got_b = b.claim(5).tasks
    assert (len(got_a), len(got_b)) == (2, 1)
    assert b.claim(5).tasks == []
    a.complete_many([(t.id, t.token, None) for t in got_a])
    assert len(b.claim(5).tasks) == 2
    assert queue.stats()["running"] == 3


def test_prefetch_is_not_claimed_under_max_concurrency_but_is_without_it(
    queue: Queue, make_broker: MakeBroker
) -> None:
    # A task held waiting for a slot would keep a slot of the fleet-wide limit from a
    # worker that could run it: under a limit only the tasks to run at once are claimed.
    queue.enqueue_many([{"payload": {"i": i}} for i in range(20)])
    worker = make_broker("jobs", "pod-a")
    assert len(worker.claim(5, prefetch=3).tasks) == 5
    queue.configure(QueueConfig(max_concurrency=10))
    assert len(worker.claim(5, prefetch=3).tasks) == 2
    got, claimed = worker.complete_and_claim([], 4, prefetch=4)
    assert (got, claimed.tasks) == ([], [])
    assert queue.stats()["running"] == 7


def test_a_freed_slot_under_max_concurrency_wakes_an_idle_worker(
    queue: Queue, make_broker: MakeBroker
) -> None:
    queue.configure(QueueConfig(max_concurrency=1))
    queue.enqueue_many([{"payload": {"i": i}} for i in range(2)])
    busy, idle = make_broker("jobs", "pod-a"), make_broker("jobs", "pod-b")
    [task] = busy.claim(1).tasks
    assert idle.claim(1).tasks == []
    queue.client.delete(queue.keys.notify)  # the enqueue's wake-ups were consumed
    busy.complete_many([(task.id, task.token, None)])
    woken = idle.wait_for_work(5.0)
    assert woken is not None and woken.tasks == []  # signalled: it claims next
    assert len(idle.claim(1).tasks) == 1


def test_task_rate_limit_holds_tasks_back_and_says_when_to_retry(
    queue: Queue, make_broker: MakeBroker
) -> None:
    queue.configure(QueueConfig(rate_limit_tasks=2, rate_limit_period_s=60))
    queue.enqueue_many([{"payload": {"i": i}} for i in range(5)])
    worker = make_broker("jobs")
    result = worker.claim(5)
    assert len(result.tasks) == 2
    assert result.retry_after_ms > 0
    held = worker.claim(5)
    assert held.tasks == []
    # one token back takes period / limit = 30 s
    assert 0 < held.retry_after_ms <= 30_000
    assert make_broker("jobs", "pod-b").claim(5).tasks == []


def test_cost_rate_limit_makes_a_costly_task_wait_for_capacity(
    queue: Queue, make_broker: MakeBroker
) -> None:
    queue.configure(QueueConfig(rate_limit_cost=10, rate_limit_period_s=60))
    cheap = queue.enqueue({"x": 1}, cost=6)
    costly = queue.enqueue({"x": 2}, cost=6)
    worker = make_broker("jobs")
    result = worker.claim(2)
    assert [t.id for t in result.tasks] == [cheap]
    assert result.retry_after_ms > 0
    # 2 of 6 units missing at 10 units / 60 s: about 12 s
    assert result.retry_after_ms <= 12_000
    assert queue.get(costly).state == "pending"  # type: ignore[union-attr]


def test_a_task_costing_more_than_the_whole_bucket_still_runs_when_it_is_full(
    queue: Queue, make_broker: MakeBroker
) -> None:
    queue.configure(QueueConfig(rate_limit_cost=5, rate_limit_period_s=60))
    huge = queue.enqueue({"x": 1}, cost=50)
    assert [t.id for t in make_broker("jobs").claim(1).tasks] == [huge]


@pytest.mark.parametrize(
    "field", ["rate_limit_period_s", "lease_ttl_s", "backoff_max_s", "default_timeout_s"]
)
@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_queue_config_refuses_nan_and_inf(field: str, value: float) -> None:
    with pytest.raises(ValidationError, match="finite"):
        QueueConfig.model_validate({field: value})


def test_non_finite_settings_written_by_a_foreign_client_fall_back_to_the_defaults(
    queue: Queue, make_broker: MakeBroker
) -> None:
    queue.client.hset(
        queue.keys.config,
        mapping={"lease_ttl_s": "nan", "rate_limit_tasks": "1", "rate_limit_period_s": "inf"},
    )
    queue.enqueue_many([{"payload": {"i": i}} for i in range(2)])
    result = make_broker("jobs").claim(2)
    [task] = result.tasks
    # the default period (1 s) refills the one-task bucket, the default TTL (30 s) leases
    assert 0 < result.retry_after_ms <= 1000
    sec, _ = queue.client.time()
    lease = queue.client.zscore(queue.keys.running, task.id)
    assert lease is not None
    assert 29_000 <= lease - int(sec) * 1000 <= 31_000


def test_an_emptied_task_bucket_refills_at_the_limit_per_period(
    queue: Queue, make_broker: MakeBroker
) -> None:
    queue.configure(QueueConfig(rate_limit_tasks=2, rate_limit_period_s=0.4))
    queue.enqueue_many([{"payload": {"i": i}} for i in range(4)])
    worker = make_broker("jobs")
    emptied_at = server_ms(queue.client)
    assert len(worker.claim(4).tasks) == 2
    held = worker.claim(4)
    assert held.tasks == []
    assert 0 < held.retry_after_ms <= 200  # one token back takes period / limit
    claimed = 2
    while claimed < 4:  # each refilled token lets one more task start
        got = wait_for(lambda: worker.claim(4).tasks)
        claimed += len(got)
        # never more than the tokens refilled since the bucket was emptied: one per 200 ms
        refilled = (server_ms(queue.client) - emptied_at) / 200
        assert claimed - 2 <= refilled + 1e-9, (claimed, refilled)
    assert claimed == 4
