"""Provider quotas (taskfleet.Quota): one limit shared by every queue that names it,
reserved at claim, settled by the run, paused for everyone (docs/quotas.md). The claims
here are the worker's own script calls (Broker), on a real redis-server."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis
from taskfleet import Queue, Quota
from taskfleet.protocol.errors import InvalidArgument, StaleToken
from taskfleet.protocol.keys import QueueKeys
from taskfleet.protocol.provider_quota import settle_op
from taskfleet.protocol.scripts import SyncScripts

from tests.fixtures_redis import MakeBroker
from tests.polling import wait_for

EST = {"openai": {"requests": 1, "input_tokens": 300}}


@pytest.fixture
def openai(redis_url: str) -> Iterator[Quota]:
    quota = Quota("openai", redis_url=redis_url)
    # a day-long window: no test meets its end
    quota.configure(limits={"requests": 3, "input_tokens": 1000}, period_s=86_400)
    yield quota
    quota.close()


def _queues(redis_url: str, *names: str) -> list[Queue]:
    return [Queue(n, redis_url=redis_url) for n in names]


def test_two_queues_sharing_a_quota_claim_no_more_than_its_limit_together(
    redis_url: str, openai: Quota, make_broker: MakeBroker
) -> None:
    a, b = _queues(redis_url, "qa", "qb")
    for i in range(3):
        a.enqueue({"i": i}, quotas=EST)
        b.enqueue({"i": i}, quotas=EST)
    got_a = make_broker("qa").claim(10)
    got_b = make_broker("qb").claim(10)
    assert len(got_a.tasks) + len(got_b.tasks) == 3  # requests: 3 per window
    use = openai.get()
    assert use is not None
    assert use.units["requests"].used == 3 and use.units["input_tokens"].used == 900
    # the ones left wait as delayed tasks, not at the head of pending
    left = [t for q in (a, b) for t in q.list("delayed").tasks]
    assert len(left) == 3


def test_a_task_its_quota_cannot_admit_does_not_block_the_queues_other_tasks(
    redis_url: str, openai: Quota, make_broker: MakeBroker
) -> None:
    (a,) = _queues(redis_url, "qa")
    openai.pause(600, reason="429")
    a.enqueue({"llm": 1}, quotas=EST)
    plain = a.enqueue({"plain": 1})
    got = make_broker("qa").claim(5)
    assert [t.id for t in got.tasks] == [plain]
    assert got.next_due_ms is not None and 0 < got.next_due_ms <= 5000


def test_a_resumed_quota_admits_the_tasks_that_waited_for_it(
    redis_url: str, openai: Quota, make_broker: MakeBroker, redis_client: redis.Redis
) -> None:
    (a,) = _queues(redis_url, "qa")
    openai.pause(600)
    tid = a.enqueue({"llm": 1}, quotas=EST)
    broker = make_broker("qa")
    assert broker.claim(5).tasks == []
    openai.resume()
    # the waiting task is due again within the bounded wait; make it due now
    redis_client.zadd(QueueKeys("qa").delayed, {tid: 0})
    assert [t.id for t in broker.claim(5).tasks] == [tid]


def test_settling_above_the_estimate_becomes_debt_and_below_gives_back(
    redis_url: str, openai: Quota, make_broker: MakeBroker, redis_client: redis.Redis
) -> None:
    (a,) = _queues(redis_url, "qa")
    a.enqueue({"i": 1}, quotas=EST)
    [task] = make_broker("qa").claim(1).tasks
    scripts = SyncScripts.for_client(redis_client)
    keys = QueueKeys("qa")
    scripts.run(settle_op(keys, task.id, task.token, "openai", {"input_tokens": 1400}))
    use = openai.get()
    assert use is not None and use.units["input_tokens"].used == 1400  # over the limit
    a.enqueue({"i": 2}, quotas=EST)
    assert make_broker("qa", pod="pod-b").claim(1).tasks == []  # the debt is waited out
    # settled again lower: only the difference from the last settlement goes back
    scripts.run(settle_op(keys, task.id, task.token, "openai", {"input_tokens": 200}))
    use = openai.get()
    assert use is not None and use.units["input_tokens"].used == 200
    assert use.units["requests"].used == 1  # units not settled keep the estimate


def test_a_settlement_of_a_run_that_no_longer_holds_the_task_is_refused(
    redis_url: str, openai: Quota, make_broker: MakeBroker, redis_client: redis.Redis
) -> None:
    (a,) = _queues(redis_url, "qa")
    a.enqueue({"i": 1}, quotas=EST)
    [task] = make_broker("qa").claim(1).tasks
    scripts = SyncScripts.for_client(redis_client)
    with pytest.raises(StaleToken):
        scripts.run(settle_op(QueueKeys("qa"), task.id, "other", "openai", {"input_tokens": 1}))
    with pytest.raises(InvalidArgument, match="names no quota"):
        scripts.run(settle_op(QueueKeys("qa"), task.id, task.token, "anthropic", {"requests": 1}))
    use = openai.get()
    assert use is not None and use.units["input_tokens"].used == 300


def test_a_concurrency_reservation_ends_with_its_run(
    redis_url: str, make_broker: MakeBroker
) -> None:
    quota = Quota("slots", redis_url=redis_url)
    quota.configure(limits={"requests": 1000}, period_s=60, max_concurrency=1)
    (a,) = _queues(redis_url, "qa")
    for i in range(2):
        a.enqueue({"i": i}, quotas={"slots": {"requests": 1}})
    broker = make_broker("qa")
    [first] = broker.claim(5).tasks
    assert broker.claim(5).tasks == []
    use = quota.get()
    assert use is not None and use.reserved == 1
    broker.complete(first.id, first.token)
    use = quota.get()
    assert use is not None and use.reserved == 0


def test_a_released_run_gives_back_its_estimate_and_a_settled_one_keeps_its_use(
    redis_url: str, openai: Quota, make_broker: MakeBroker, redis_client: redis.Redis
) -> None:
    (a,) = _queues(redis_url, "qa")
    a.enqueue({"i": 0}, quotas=EST)
    broker = make_broker("qa")
    # a drain gives the run back before its end, again and again: not an attempt, and
    # not a charge, or a rolling restart would spend the window on nothing
    for _ in range(5):
        [task] = broker.claim(1).tasks
        assert broker.release([(task.id, task.token)]) == 1
    use = openai.get()
    assert use is not None
    assert use.units["requests"].used == 0 and use.units["input_tokens"].used == 0
    # a run that settled did call the provider: its use stays charged when it is given back
    [task] = broker.claim(1).tasks
    settle = settle_op(QueueKeys("qa"), task.id, task.token, "openai", {"input_tokens": 120})
    SyncScripts.for_client(redis_client).run(settle)
    assert broker.release([(task.id, task.token)]) == 1
    use = openai.get()
    assert use is not None
    assert use.units["requests"].used == 1 and use.units["input_tokens"].used == 120


def test_a_queue_that_names_no_quota_stores_no_quota_field(
    redis_url: str, redis_client: redis.Redis
) -> None:
    (a,) = _queues(redis_url, "qa")
    tid = a.enqueue({"i": 1})
    assert redis_client.hget(QueueKeys("qa").task(tid), "quotas") is None


@pytest.mark.parametrize(
    ("limits", "problem"),
    [
        ({}, "non-empty"),
        ({"Requests": 1}, "invalid quota unit"),
        ({"requests": 0}, "must be 1.."),
        ({"requests": 1.5}, "must be an int"),
    ],
)
def test_bad_limits_are_refused_and_nothing_is_stored(
    redis_url: str, redis_client: redis.Redis, limits: dict[str, object], problem: str
) -> None:
    quota = Quota("bad", redis_url=redis_url)
    with pytest.raises(InvalidArgument, match=problem):
        quota.configure(limits=limits)  # type: ignore[arg-type]
    assert quota.get() is None


def test_an_enqueue_with_bad_quotas_is_refused(redis_url: str) -> None:
    (a,) = _queues(redis_url, "qa")
    with pytest.raises(InvalidArgument, match="invalid quota name"):
        a.enqueue({"i": 1}, quotas={"open ai": {"requests": 1}})
    with pytest.raises(InvalidArgument, match=r"must be 0\.\."):
        a.enqueue({"i": 1}, quotas={"openai": {"requests": -1}})
    with pytest.raises(InvalidArgument, match="at most 8"):
        a.enqueue({"i": 1}, quotas={f"q{i}": {"requests": 1} for i in range(9)})


def test_an_overrun_is_debt_that_later_windows_wait_out(
    redis_url: str, make_broker: MakeBroker, redis_client: redis.Redis
) -> None:
    quota = Quota("short", redis_url=redis_url)
    quota.configure(limits={"input_tokens": 1000}, period_s=1)
    (a,) = _queues(redis_url, "qa")
    est = {"short": {"input_tokens": 300}}
    a.enqueue({"i": 1}, quotas=est)
    [task] = make_broker("qa").claim(1).tasks
    scripts = SyncScripts.for_client(redis_client)
    scripts.run(settle_op(QueueKeys("qa"), task.id, task.token, "short", {"input_tokens": 2500}))
    tid = a.enqueue({"i": 2}, quotas=est)
    broker = make_broker("qa", pod="pod-b")
    # 2500 used: the next window starts with 1500 of debt, the one after with 500
    assert broker.claim(1).tasks == []
    delayed = QueueKeys("qa").delayed

    def claimed() -> bool:
        redis_client.zadd(delayed, {tid: 0}, xx=True)  # look again now, not in up to 5 s
        return bool(broker.claim(1).tasks)

    wait_for(claimed, timeout=10, interval=0.05, what="the claim after the debt")
    use = quota.get()
    # The settlement taught the quota its estimates fall short: scale (1 + 2500/300) / 2,
    # so the claim charged ceil(300 x 4.67) = 1401, above the whole limit: it ran alone,
    # once the debt was paid (500 left in the second window, 0 in the third).
    assert use is not None and use.units["input_tokens"].used == 1401


def test_a_quota_learns_how_far_estimates_fall_short_and_charges_claims_that_much(
    redis_url: str, make_broker: MakeBroker, redis_client: redis.Redis
) -> None:
    quota = Quota("learn", redis_url=redis_url)
    quota.configure(limits={"input_tokens": 1_000_000}, period_s=3600)
    (a,) = _queues(redis_url, "qa")
    est = {"learn": {"input_tokens": 100}}
    scripts = SyncScripts.for_client(redis_client)
    broker = make_broker("qa")
    charged = []
    for _ in range(6):  # each task really uses three times its estimate
        a.enqueue({}, quotas=est)
        before = quota.get()
        [task] = broker.claim(1).tasks
        after = quota.get()
        assert before is not None and after is not None
        charged.append(after.units["input_tokens"].used - before.units["input_tokens"].used)
        scripts.run(settle_op(QueueKeys("qa"), task.id, task.token, "learn", {"input_tokens": 300}))
    # 100 until a settlement says otherwise, then halfway to 3x at each: 2x, 2.5x, ...
    assert charged == [100, 200, 250, 275, 288, 294]
    # an estimate above the use moves it back down, never below the estimate itself
    for _ in range(8):
        a.enqueue({}, quotas=est)
        [task] = broker.claim(1).tasks
        scripts.run(settle_op(QueueKeys("qa"), task.id, task.token, "learn", {"input_tokens": 10}))
    a.enqueue({}, quotas=est)
    before = quota.get()
    broker.claim(1)
    after = quota.get()
    assert before is not None and after is not None
    assert after.units["input_tokens"].used - before.units["input_tokens"].used == 100


def test_a_run_given_back_before_it_settles_returns_what_its_scaled_claim_charged(
    redis_url: str, make_broker: MakeBroker, redis_client: redis.Redis
) -> None:
    quota = Quota("back", redis_url=redis_url)
    quota.configure(limits={"input_tokens": 1_000_000}, period_s=3600)
    (a,) = _queues(redis_url, "qa")
    est = {"back": {"input_tokens": 100}}
    scripts = SyncScripts.for_client(redis_client)
    broker = make_broker("qa")
    a.enqueue({}, quotas=est)
    [task] = broker.claim(1).tasks
    scripts.run(settle_op(QueueKeys("qa"), task.id, task.token, "back", {"input_tokens": 500}))
    a.enqueue({}, quotas=est)
    [task] = broker.claim(1).tasks  # charged ceil(100 x 3) = 300
    use = quota.get()
    assert use is not None and use.units["input_tokens"].used == 800
    broker.release([(task.id, task.token)])
    use = quota.get()
    assert use is not None and use.units["input_tokens"].used == 500
