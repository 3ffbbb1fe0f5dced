"""Every script call does bounded work whatever the queue holds, retention keeps up with
any completion rate, and a call whose reply never came is harmless when Redis runs it late.
"""

from __future__ import annotations

import asyncio
import math
import re
import signal

import pytest
import redis
import redis.asyncio
import redis.exceptions
from taskfleet.producer.queue import Queue
from taskfleet.protocol import bounds
from taskfleet.protocol.calls import run
from taskfleet.protocol.config import QueueConfig
from taskfleet.protocol.errors import InvalidArgument
from taskfleet.protocol.keys import QueueKeys
from taskfleet.protocol.queue_ops import CLAIM_HOUSEKEEPING_BOUND, Ops
from taskfleet.protocol.records import text
from taskfleet.protocol.scripts import Op, SyncScripts
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


def _commands(client: redis.Redis) -> int:
    """Commands the server has run, a script's own included (INFO commandstats), less the
    INFO calls that read them and the script calls themselves."""
    stats = client.info("commandstats")
    skip = ("cmdstat_info", "cmdstat_evalsha", "cmdstat_eval")
    return sum(int(v["calls"]) for k, v in stats.items() if k not in skip)


#: Expired tasks a claim clears per call: its housekeeping bound.
CLAIM_EXPIRY_SLICE = CLAIM_HOUSEKEEPING_BOUND


@pytest.mark.parametrize("backlog", [1000, 6000])
def test_live_tasks_behind_any_number_of_expired_ones_are_claimed_by_the_first_claim(
    queue: Queue, make_broker: MakeBroker, redis_client: redis.Redis, backlog: int
) -> None:
    """The claim steps over the expired tasks (a run of deadlines: a task whose deadline
    is ahead joins it) to the live ones, and says a backlog is left (retry_after_ms 1:
    ask again at once); each call clears a bounded slice of it. Work is counted in commands
    Redis ran (a script's own included), not timed: it does not grow with the backlog."""
    _expired_backlog(queue, redis_client, backlog)
    in_run = queue.enqueue({"in_run": True}, deadline=3600)
    plain = queue.enqueue({"plain": True})
    worker = make_broker("jobs")
    calls, most = 0, 0
    first: list[str] | None = None
    while True:
        expired = queue.stats()["expired"]
        before = _commands(redis_client)
        got = worker.claim(2)
        most = max(most, _commands(redis_client) - before)
        calls += 1
        assert queue.stats()["expired"] - expired <= CLAIM_EXPIRY_SLICE
        if first is None:
            first = [t.id for t in got.tasks]
        else:
            assert got.tasks == []
        if got.retry_after_ms == 0:
            break
        assert got.more_pending
    assert first == [in_run, plain]
    # (more when a call stopped at its time budget: a slow or busy machine)
    assert calls >= -(-backlog // CLAIM_EXPIRY_SLICE)
    # a read and a write per expired task; the step over the run, at most 8 + 2 log2(n)
    # commands (past_expired.lua); the rest of a claim, under 50
    assert most <= 2 * CLAIM_EXPIRY_SLICE + 8 + 2 * math.ceil(math.log2(backlog)) + 50, most
    stats = queue.stats()
    assert (stats["expired"], stats["dead_total"], stats["dead"]) == (backlog, backlog, backlog)
    assert (stats["pending"], stats["running"]) == (0, 2)
    dead = run(redis_client, queue.reads.ids("dead", 0, backlog))
    assert len(dead) == backlog
    reasons = redis_client.pipeline(transaction=False)
    for task_id in dead:
        reasons.hget(queue.keys.task(task_id), "reason")
    assert set(reasons.execute()) == {b"expired"}
    assert redis_client.zcard(queue.keys.deadline_runs) == 0


def test_completions_prune_more_expired_done_tasks_than_they_add(
    queue: Queue, make_broker: MakeBroker, redis_client: redis.Redis
) -> None:
    """Retention as it goes: the done set cannot grow past its window at any rate."""
    queue.configure(QueueConfig(done_retention_s=60))
    worker = make_broker("jobs")
    queue.enqueue_many([{"payload": {"i": i}} for i in range(300)])
    old = []
    while len(old) < 300:  # a claim takes at most bounds.MAX_BATCH per call
        old += worker.claim(300 - len(old)).tasks
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


#: SLOWLOG keeps a command's first 32 arguments and counts the rest in its last one.
MORE_ARGUMENTS = re.compile(rb"\.\.\. \((\d+) more arguments\)$")


def arguments_of(entry: dict[str, object]) -> int:
    """How many arguments a SLOWLOG entry's command had, past its 32-argument cut too."""
    command = entry["command"]
    assert isinstance(command, bytes)
    more = MORE_ARGUMENTS.search(command)
    shown = command.count(b" ") + 1
    return shown - 1 + int(more.group(1)) if more else shown


def test_a_release_of_thousands_of_tasks_never_runs_one_long_script(
    queue: Queue, make_broker: MakeBroker, redis_client: redis.Redis
) -> None:
    """A drain's hand-back goes in calls of at most ``MAX_BATCH`` tasks, whatever it
    holds: 18,893 tasks in one call blocked Redis for 885 ms. Checked by what each call
    carries (SLOWLOG logging every command), not by how long it took."""
    total = 6000
    for start in range(0, total, 1000):
        queue.enqueue_many([{"payload": {"i": i}} for i in range(start, start + 1000)])
    worker = make_broker("jobs")
    held = []
    while len(held) < total:
        got = worker.claim(bounds.MAX_BATCH).tasks
        assert got, len(held)
        held += [(task.id, task.token) for task in got]
    # Redis 7 logs the commands a script runs as well: room for all of them
    redis_client.config_set("slowlog-max-len", 1_000_000)
    redis_client.config_set("slowlog-log-slower-than", 0)
    redis_client.slowlog_reset()
    try:
        assert worker.release(held) == total
        calls = [
            arguments_of(e)
            for e in redis_client.slowlog_get(1_000_000)
            if e["command"].startswith(b"EVALSHA")
        ]
    finally:
        redis_client.config_set("slowlog-log-slower-than", 10_000)
        redis_client.config_set("slowlog-max-len", 128)
        redis_client.slowlog_reset()
    # EVALSHA sha numkeys, its keys (those release uses), two arguments a task, a few more
    assert len(calls) >= total // bounds.MAX_BATCH
    keys = len(QueueKeys("jobs").script("release"))
    assert max(calls) <= 3 + keys + 2 * bounds.MAX_BATCH + 8, max(calls)
    assert queue.stats()["released"] == total


def test_a_claim_takes_at_most_one_batch_per_call_however_many_are_asked(
    queue: Queue, make_broker: MakeBroker
) -> None:
    queue.enqueue_many([{"payload": {"i": i}} for i in range(bounds.MAX_BATCH + 10)])
    worker = make_broker("jobs")
    assert len(worker.claim(200_000).tasks) == bounds.MAX_BATCH
    assert len(worker.claim(200_000).tasks) == 10


@pytest.mark.parametrize("asked", ["inf", "1e300", "nan", "-5", "3153600000001"])
def test_fail_caps_any_retry_delay_it_is_sent_at_the_longest_delay_a_task_may_have(
    queue: Queue, make_broker: MakeBroker, redis_client: redis.Redis, asked: str
) -> None:
    """A client sending any retry-after (another language's, a bug): the task's run_at
    stays an exact integer within ``MAX_DELAY_S`` of now, readable by every reader."""
    task_id = queue.enqueue({})
    [task] = make_broker("jobs").claim(1).tasks
    before = server_ms(redis_client)
    keys = QueueKeys("jobs").script("fail")
    op = Op("fail", keys, (task.id, task.token, "e", "1", "0", "", asked, 20), text)
    assert SyncScripts.for_client(redis_client).run(op) == "delayed"
    run_at = redis_client.hget(queue.keys.task(task_id), "run_at")
    assert run_at is not None and run_at.isdigit(), run_at
    assert before <= int(run_at) <= server_ms(redis_client) + bounds.MAX_DELAY_S * 1000
    stored = queue.get(task_id)
    assert stored is not None and stored.state is TaskState.DELAYED


def test_the_python_side_refuses_a_retry_delay_past_the_bound_before_sending_it() -> None:
    ops = Ops(QueueKeys("jobs"))
    for bad in (-1, bounds.MAX_DELAY_S * 1000 + 1, True):
        with pytest.raises(InvalidArgument):
            ops.fail("t", "tok", "e", retryable=True, jitter=0.0, reason="", retry_after_ms=bad)
