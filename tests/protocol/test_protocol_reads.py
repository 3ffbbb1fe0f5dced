"""Reads as values (``protocol.calls``, ``protocol.reads``): one description that gives the
same typed values on a sync client, an asyncio client and inside a pipeline, decoders that
take the plain RESP forms too, and callers that keep the round trips they had."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
import redis.asyncio
import redis.client
from taskfleet.producer import overview
from taskfleet.producer.queue import Queue
from taskfleet.protocol import records, store
from taskfleet.protocol.calls import call, run, run_all, run_all_async, run_async, scan
from taskfleet.protocol.config import QueueConfig
from taskfleet.protocol.keys import QueueKeys
from taskfleet.protocol.lists import QueueLists, Wakeup
from taskfleet.protocol.reads import QueueReads
from taskfleet.protocol.records import WORKER_LEVEL, WorkerRecord
from taskfleet_operator.scaler import read_queue

KEYS = QueueKeys("jobs")
READS = QueueReads(KEYS)


class CountingPipeline(redis.client.Pipeline):
    def execute(self, raise_on_error: bool = True) -> list[Any]:
        self.counter.append("pipeline")  # type: ignore[attr-defined]
        return super().execute(raise_on_error)


class Counting(redis.Redis):
    """A client that counts its round trips: each command sent alone, each pipeline."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.trips: list[str] = []

    def execute_command(self, *args: Any, **options: Any) -> Any:
        self.trips.append(str(args[0]))
        return super().execute_command(*args, **options)

    def pipeline(self, transaction: bool = True, shard_hint: Any = None) -> Any:
        pipe = CountingPipeline(self.connection_pool, self.response_callbacks, transaction, None)
        pipe.counter = self.trips  # type: ignore[attr-defined]
        return pipe


@pytest.fixture
def counting(redis_url: str) -> Iterator[Counting]:
    client = Counting.from_url(redis_url)
    yield client
    client.close()


def _queue_with_some_of_everything(queue: Queue, client: redis.Redis) -> list[str]:
    ids = [queue.enqueue({"n": i}, priority=i) for i in range(3)]
    queue.enqueue({"later": True}, delay=60)
    queue.configure(QueueConfig(lease_ttl_s=12))
    queue.schedule("nightly", "0 3 * * *", {"x": 1})
    now = client.time()[0] * 1000
    record = {"incarnation": "i1", "heartbeat_ms": now, "inflight": 1, "concurrency": 2}
    client.hset(KEYS.workers, mapping={"pod-a": json.dumps(record), "pod-b": "not json"})
    client.sadd(KEYS.pod("pod-a"), ids[0])
    return ids


def test_a_read_gives_the_same_values_on_a_sync_client_an_asyncio_client_and_in_a_pipeline(
    queue: Queue, redis_client: redis.Redis, redis_url: str
) -> None:
    ids = _queue_with_some_of_everything(queue, redis_client)
    reads = [
        READS.task(ids[0]),
        READS.tasks([*ids, "absent"]),
        READS.rows(ids),
        READS.ready_at(ids),
        READS.progress_marks(ids[1]),
        READS.sizes(),
        READS.ids("pending", 0, 10),
        READS.ids("delayed", 0, 10),
        READS.counters(),
        READS.stats(),
        READS.config(),
        READS.lease_ttl(),
        READS.workers(),
        READS.holdings(["pod-a", "pod-b"]),
        READS.held_counts(["pod-a"]),
        READS.held_sample(["pod-a"], 10),
        READS.schedule("nightly"),
        READS.schedule_names(),
        READS.active_schedules(),
        READS.activity(),
        READS.exists(),
    ]

    alone = [run(redis_client, r) for r in reads]
    together = run_all(redis_client, reads)

    async def on_asyncio() -> tuple[list[Any], list[Any]]:
        client = redis.asyncio.Redis.from_url(redis_url)
        try:
            each = [await run_async(client, r) for r in reads]
            return each, await run_all_async(client, reads)
        finally:
            await client.aclose()

    each, pipelined = asyncio.run(on_asyncio())

    assert alone == together == each == pipelined
    task, tasks, rows, ready = alone[:4]
    assert task is not None and task.payload == {"n": 0} and tasks[:3] == [task, *tasks[1:3]]
    assert tasks[3] is None and [r.id for r in rows] == ids and all(ready)
    assert alone[6] == [ids[2], ids[1], ids[0]]  # pending: the highest priority first
    assert alone[11] == 12.0
    assert alone[13] == {"pod-a": [ids[0]], "pod-b": []}
    workers = alone[12]
    assert [pod for pod, _ in workers.readable()] == ["pod-a"]
    assert workers.records["pod-b"] is None


def test_the_decoders_read_the_plain_resp_forms_as_well_as_redis_pys() -> None:
    as_dict = READS.counters().decode([{b"enqueued": b"3", b"failed": b"x"}])
    as_list = READS.counters().decode([[b"enqueued", b"3", b"failed", b"x"]])
    assert as_dict == as_list == {"enqueued": 3, "failed": 0}

    wait = QueueLists(KEYS).wait_for_work("pod-a", 1.0)
    wake = KEYS.wake("pod-a").encode()
    assert wait.decode([(wake, b"record")]) == wait.decode([[wake, b"record"]])
    assert wait.decode([[wake, b"record"]]) == Wakeup(b"record")
    assert wait.decode([[KEYS.notify.encode(), b"1"]]) == Wakeup(None)
    assert wait.decode([None]) is None
    assert READS.held_sample(["p"], 5).decode([[b"0", [b"b", b"a"]]]) == {"p": ["a", "b"]}


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ('{"incarnation": "i", "heartbeat_ms": 5, "concurrency": 2}', (5, 2, True)),
        ('{"incarnation": "i", "heartbeat_ms": "5"}', (5, 0, True)),  # digits as text
        ('{"incarnation": "i"}', (None, 0, False)),  # no heartbeat
        ('{"heartbeat_ms": 5, "inflight": "many"}', (5, 0, False)),  # a garbled count
        ('{"heartbeat_ms": 5e400}', (None, 0, False)),  # JSON's infinity
    ],
)
def test_a_worker_record_no_script_wrote_is_read_as_far_as_it_can_be(
    raw: str, expected: tuple[int | None, int, bool]
) -> None:
    record = WorkerRecord.parse(raw)
    assert record is not None
    assert (record.heartbeat_ms, record.concurrency, record.readable) == expected


@pytest.mark.parametrize("raw", ["not json", "[1, 2]", "7", b"\xff"])
def test_a_value_that_is_no_json_object_is_no_worker_record(raw: str | bytes) -> None:
    assert WorkerRecord.parse(raw) is None


def test_calls_and_script_ops_in_one_run_all_take_one_round_trip_and_nothing_takes_none(
    queue: Queue, counting: Counting
) -> None:
    queue.enqueue({})
    counting.script_flush()
    counting.trips.clear()
    # A server that lost the sweep script answers NOSCRIPT: loaded, run again.
    sweep, stats = run_all(counting, [queue.ops.sweep(), READS.stats()])
    assert counting.trips == ["pipeline", "SCRIPT LOAD"]
    assert stats["pending"] == 1 and sweep.requeued == 0
    counting.trips.clear()

    sweep, stats = run_all(counting, [queue.ops.sweep(), READS.stats()])

    assert counting.trips == ["pipeline"]
    assert stats["pending"] == 1 and sweep.requeued == 0
    assert run_all(counting, [READS.rows([]), READS.held_counts([])]) == [[], {}]
    assert run(counting, call([], lambda replies: "nothing sent")) == "nothing sent"
    assert counting.trips == ["pipeline"]


def test_configure_replaces_the_settings_whole_in_one_transaction(
    queue: Queue, redis_client: redis.Redis
) -> None:
    redis_client.hset(KEYS.config, mapping={"rate_limit_tasks": "5", "left_over": "1"})
    configure = store.configure(KEYS, QueueConfig(max_concurrency=4))

    run(redis_client, configure)

    assert configure.transaction
    stored = redis_client.hgetall(KEYS.config)
    assert b"left_over" not in stored and b"rate_limit_tasks" not in stored
    assert run(redis_client, READS.config()) == QueueConfig(max_concurrency=4)


def test_discovery_finds_each_queue_by_its_counters_and_skips_keys_no_queue_can_have(
    redis_client: redis.Redis,
) -> None:
    for key in ("tf:{a}:stats", "tf:{b.1}:stats", "tf:{no good}:stats", "tf:{c}:config"):
        redis_client.hset(key, "enqueued", 1)

    assert sorted(scan(redis_client, store.queues())) == ["a", "b.1"]


def test_the_overview_and_the_autoscaler_keep_to_their_round_trips(
    queue: Queue, redis_client: redis.Redis, redis_url: str, counting: Counting
) -> None:
    _queue_with_some_of_everything(queue, redis_client)
    queue.enqueue({}, task_id="dead-one")
    redis_client.zadd(KEYS.dead, {"dead-one": 1})

    view = overview.read(counting, "jobs")
    assert counting.trips == ["TIME", "pipeline", "pipeline"]
    assert [w.pod for w in view.workers] == ["pod-a"] and view.workers[0].holds == 1

    counting.trips.clear()
    with Queue("jobs", client=counting) as on_counting:
        reading = read_queue(on_counting, due_horizon_s=120)
    assert counting.trips == ["TIME", "pipeline", "pipeline"]
    assert reading.load.pending == 4 and reading.load.due == 1
    assert reading.inflight == {"pod-a": 1}


@pytest.mark.parametrize(
    ("raw", "level"),
    [
        ('{"incarnation": "i", "heartbeat_ms": 5}', 1),  # as 0.1.x workers write it
        ('{"incarnation": "i", "heartbeat_ms": 5, "level": 2}', 2),
        ('{"incarnation": "i", "heartbeat_ms": 5, "level": "x"}', 1),  # garbled: the lowest
    ],
)
def test_a_worker_records_level_is_what_it_says_and_1_without_one(raw: str, level: int) -> None:
    record = WorkerRecord.parse(raw)
    assert record is not None and record.level == level


def test_the_scripts_write_the_level_this_release_declares() -> None:
    lua = (Path(records.__file__).parent / "lua/includes/worker_record.lua").read_text()
    assert f"level = {WORKER_LEVEL}," in lua
