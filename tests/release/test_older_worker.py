"""A live worker of an older release on the queue (a record without level >= 2, as
taskfleet 0.1.x writes it): flows, groups, claim pauses, spend budgets and grouped
schedules are refused with ``OlderWorker``, one line saying what to upgrade, nothing
stored; plain tasks still go in, and a stale older record refuses nothing."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path

import pytest
import redis
from taskfleet.producer.asyncqueue import AsyncQueue
from taskfleet.producer.flows import chain
from taskfleet.producer.queue import Queue
from taskfleet.producer.reading import older_note, older_workers
from taskfleet.protocol.errors import OlderWorker, TaskfleetError

from tests.fixtures_redis import MakeBroker, server_ms
from tests.workers.harness import env_for, taskfleet


def _older(client: redis.Redis, queue: Queue, *, age_ms: int = 0, pod: str = "old-pod") -> None:
    """A record as a 0.1.x worker's register writes it: no level."""
    record = {
        "incarnation": "i0",
        "heartbeat_ms": server_ms(client) - age_ms,
        "inflight": 0,
        "concurrency": 4,
        "draining": False,
    }
    client.hset(queue.keys.workers, pod, json.dumps(record))


def _message(feature: str) -> str:
    return (
        "worker 'old-pod' serves queue 'jobs' at level 1 (taskfleet 0.1.x): "
        f"{feature} need every worker of the queue at 0.2; upgrade the queue's workers "
        "first (docs/upgrade.md)"
    )


def _refused(feature: str, call: Callable[[], object]) -> None:
    with pytest.raises(OlderWorker) as caught:
        call()
    assert str(caught.value) == _message(feature)
    assert (caught.value.pod, caught.value.feature) == ("old-pod", feature)
    assert isinstance(caught.value, TaskfleetError)


def test_features_are_refused_and_nothing_is_stored(
    queue: Queue, redis_client: redis.Redis
) -> None:
    first = queue.enqueue({"plain": True})
    _older(redis_client, queue)
    before = sorted(redis_client.keys("*"))
    _refused("groups", lambda: queue.enqueue({}, group="tenant-1"))
    _refused("flows", lambda: queue.enqueue({}, after=[first]))
    _refused("flows", lambda: queue.enqueue_flow(chain({"payload": {}}, {"payload": {}})))
    _refused("claim pauses", lambda: queue.pause_claims(60))
    _refused("claim pauses", lambda: queue.pause_claims(60, group="tenant-1"))
    _refused("spend budgets", lambda: queue.set_budget(day=100))
    _refused("groups", lambda: queue.schedule("nightly", "0 3 * * *", {}, group="g"))
    assert sorted(redis_client.keys("*")) == before
    # what a queue without the features does goes on
    queue.resume_claims()
    queue.set_budget(day="default", month=0)
    queue.enqueue_many([{"payload": {"i": i}} for i in range(3)])
    queue.schedule("hourly", "0 * * * *", {})
    assert queue.stats()["pending"] == 4


def test_children_are_refused_for_a_running_parent(
    queue: Queue, redis_client: redis.Redis, make_broker: MakeBroker
) -> None:
    parent = queue.enqueue({})
    [run] = make_broker("jobs").claim(1).tasks  # a worker of this release (level 2)
    _older(redis_client, queue)
    _refused("flows", lambda: queue.add_children(parent, run.token, [{"payload": {}}]))
    assert queue.stats()["pending"] == 0
    assert redis_client.hget(queue.keys.task(parent), "flow") is None


def test_the_async_producer_raises_the_same(
    queue: Queue, redis_client: redis.Redis, redis_url: str
) -> None:
    _older(redis_client, queue)

    async def main() -> None:
        async with AsyncQueue(queue.name, redis_url) as aq:
            with pytest.raises(OlderWorker, match="groups need every worker"):
                await aq.enqueue({}, group="g")
            with pytest.raises(OlderWorker, match="claim pauses need every worker"):
                await aq.pause_claims(30)
            with pytest.raises(OlderWorker, match="spend budgets need every worker"):
                await aq.set_budget(month=10)
            await aq.enqueue({})

    asyncio.run(main())
    assert queue.stats()["pending"] == 1
    assert redis_client.exists(queue.keys.quota) == 0


@pytest.mark.parametrize("level", [2, 3, 12])
def test_a_live_worker_of_level_2_or_above_refuses_nothing_and_is_not_named_older(
    queue: Queue, redis_client: redis.Redis, level: int
) -> None:
    """A 0.2 worker (level 2) beside this release's during a rolling upgrade: 0.2's features
    go in, and no reader names it older; so does a level this release does not know."""
    record = {"incarnation": "i0", "heartbeat_ms": server_ms(redis_client), "level": level}
    redis_client.hset(queue.keys.workers, "pod-0.2", json.dumps(record))
    queue.enqueue({}, group="g")
    queue.pause_claims(60)
    queue.set_budget(day=5)
    [worker] = queue.workers()
    assert (worker.pod, worker.level, worker.alive) == ("pod-0.2", level, True)
    assert older_workers([worker]) == [] and older_note([worker]) == ""


def test_a_stale_older_worker_refuses_nothing(queue: Queue, redis_client: redis.Redis) -> None:
    _older(redis_client, queue, age_ms=31_000)  # beyond one lease TTL (30 s)
    queue.enqueue({}, group="g")
    queue.pause_claims(60)
    queue.set_budget(day=5)
    assert queue.quota().paused


def test_the_cli_says_so_in_one_line_and_exits_2(
    queue: Queue, redis_client: redis.Redis, redis_url: str, tmp_path: Path
) -> None:
    _older(redis_client, queue)
    env = env_for(redis_url, tmp_path)
    for argv, feature in (
        (("enqueue", "jobs", "--group", "g"), "groups"),
        (("quota", "pause", "jobs", "--for", "60"), "claim pauses"),
        (("quota", "budget", "jobs", "--day", "100"), "spend budgets"),
        (("schedule", "add", "jobs", "nightly", "0 3 * * *", "--group", "g"), "groups"),
    ):
        result = taskfleet(*argv, env=env)
        assert result.returncode == 2, result.stderr
        assert result.stderr.strip() == f"taskfleet: error: {_message(feature)}"
    source = tmp_path / "flow.json"
    source.write_text('{"chain": [{"payload": {}}, {"payload": {}}]}')
    flow = taskfleet("flow", "jobs", str(source), env=env)
    assert flow.returncode == 2 and "flows need every worker" in flow.stderr
    assert taskfleet("enqueue", "jobs", env=env).returncode == 0
    assert queue.stats()["pending"] == 1


def test_a_handlers_quota_report_is_not_refused(
    queue: Queue, redis_client: redis.Redis, make_broker: MakeBroker
) -> None:
    """A worker of this release reporting its provider's quota spent (``report_quota``)
    pauses the queue even while an older worker serves it: the caller is level 2 itself."""
    broker = make_broker("jobs")
    broker.register(1)
    _older(redis_client, queue)
    assert broker.pause_quota(60_000, "provider quota spent") > 0
    assert queue.quota().paused
