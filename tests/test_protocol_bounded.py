"""Every script call does bounded work whatever the queue holds, retention keeps up with
any completion rate, and a call whose reply never came is harmless when Redis runs it late.
"""

from __future__ import annotations

import asyncio
import signal

import redis
import redis.asyncio
import redis.exceptions
from taskfleet.producer.queue import Queue
from taskfleet.protocol.config import QueueConfig
from taskfleet.protocol.scripts import CLAIM_HOUSEKEEPING_BOUND
from taskfleet.protocol.tasks import TaskState
from taskfleet.worker.broker import Broker

from tests.fixtures_redis import MakeBroker, RedisServerFactory, server_ms
from tests.polling import wait_for


def _expired_backlog(queue: Queue, client: redis.Redis, n: int) -> None:
    """``n`` pending tasks whose deadline (1 ms after enqueue) has passed."""
    for start in range(0, n, 1000):
        items = [
            {"payload": {"i": i}, "deadline": 0.001} for i in range(start, min(n, start + 1000))
        ]
        queue.enqueue_many(items)
    now = server_ms(client)
    wait_for(lambda: server_ms(client) > now + 5, what="the deadlines to pass")


def test_a_claim_behind_any_number_of_expired_tasks_does_bounded_work_per_call(
    queue: Queue, make_broker: MakeBroker, redis_client: redis.Redis
) -> None:
    _expired_backlog(queue, redis_client, 5000)
    fresh = queue.enqueue({"fresh": True})
    worker = make_broker("jobs")
    calls = 0
    while True:
        before = queue.stats()["expired"]
        got = worker.claim(1)
        calls += 1
        # expiry through the deadline index, then the entries the claim itself skips
        assert queue.stats()["expired"] - before <= 2 * CLAIM_HOUSEKEEPING_BOUND + 1
        if got.tasks:
            break
        assert got.more_pending  # told to ask again at once, not to wait
    assert [t.id for t in got.tasks] == [fresh]
    assert calls >= 5000 // (2 * CLAIM_HOUSEKEEPING_BOUND + 1)
    assert queue.stats()["expired"] == 5000


def test_completions_prune_more_expired_done_tasks_than_they_add(
    queue: Queue, make_broker: MakeBroker, redis_client: redis.Redis
) -> None:
    """Retention as it goes: the done set cannot grow past its window at any rate."""
    queue.configure(QueueConfig(done_retention_s=60))
    worker = make_broker("jobs")
    queue.enqueue_many([{"payload": {"i": i}} for i in range(300)])
    old = worker.claim(300).tasks
    assert worker.complete_many([(t.id, t.token, None) for t in old]) == [True] * 300
    # Finished two minutes ago as far as retention can tell (it reads the zset score).
    aged = server_ms(redis_client) - 120_000
    redis_client.zadd(queue.keys.done, {t.id: aged for t in old}, xx=True)
    for _ in range(5):
        queue.enqueue_many([{"payload": {"new": i}} for i in range(10)])
        batch = worker.claim(10).tasks
        before = redis_client.zcard(queue.keys.done)
        worker.complete_many([(t.id, t.token, None) for t in batch])
        # 10 added, at least 10 more than that pruned
        assert redis_client.zcard(queue.keys.done) <= before + 10 - 20
    left = redis_client.zcount(queue.keys.done, "-inf", aged)
    assert left <= 300 - 5 * 20
    pruned = [t for t in old if queue.get(t.id) is None]
    assert len(pruned) == 300 - left  # the hashes went with their index entries


def test_a_retried_outcome_write_whose_reply_was_lost_is_applied_once_not_refused(
    queue: Queue, make_broker: MakeBroker
) -> None:
    queue.configure(QueueConfig(max_attempts=3))
    worker = make_broker("jobs")
    done_id, failed_id = queue.enqueue({"a": 1}), queue.enqueue({"b": 2})
    done, failed = worker.claim(2).tasks
    for _ in range(2):  # the second call is the retry of a write that landed
        assert worker.complete_many([(done.id, done.token, '"r"')]) == [True]
        assert worker.fail(failed.id, failed.token, "boom") is TaskState.DELAYED
    stats = queue.stats()
    assert (stats["completed"], stats["failed"], stats["retried"], stats["stale"]) == (1, 1, 1, 0)
    assert queue.get(failed_id).attempts == 1  # type: ignore[union-attr]
    # A token that never held the task is still refused.
    assert worker.complete_many([(done_id, "other", None)]) == [False]
    assert queue.stats()["stale"] == 1


def test_a_claim_that_redis_runs_after_the_worker_gave_up_on_it_is_undone_uncounted(
    redis_server_factory: RedisServerFactory,
) -> None:
    """SIGSTOP Redis, claim (no reply in time), SIGCONT: Redis then runs the claim it had
    read. Before its next call the worker releases what that claim took: front of
    pending, no attempt and no loss counted, and it claims them afresh."""
    server = redis_server_factory()
    queue = Queue("q", redis_url=server.url)
    ids: list[str] = []

    async def scenario() -> list[str]:
        client = redis.asyncio.Redis.from_url(server.url)
        broker = Broker("q", client, "p", "i", reply_timeout=0.5)
        try:
            await broker.register(3)
            assert (await broker.claim(3)).tasks == []  # the claim script is loaded now
            ids.extend(queue.enqueue({"i": i}) for i in range(3))
            assert server.process is not None
            server.process.send_signal(signal.SIGSTOP)
            try:
                try:
                    await asyncio.wait_for(broker.claim(3), timeout=10.0)
                except redis.exceptions.TimeoutError:
                    pass
                else:
                    raise AssertionError("a claim to a stopped server returned")
            finally:
                server.process.send_signal(signal.SIGCONT)
            # Redis ran the late claim: the tasks are running under tokens nobody knows.
            wait_for(lambda: queue.stats()["running"] == 3, what="the late claim to run")
            got = await broker.claim(3)
            return [t.id for t in got.tasks]
        finally:
            await broker.close()
            await client.aclose()

    claimed = asyncio.run(scenario())
    assert sorted(claimed) == sorted(ids)
    stats = queue.stats()
    assert (stats["released"], stats["lost"]) == (3, 0)
    for task_id in ids:
        task = queue.get(task_id)
        assert task is not None and (task.attempts, task.lost) == (1, 0), task
    queue.client.close()
