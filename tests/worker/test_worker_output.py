"""Streamed output: a run's chunks (``current_task().emit``) reach a reader of
``Queue.stream`` in another process as they are written, every attempt's in order, and
the same list is read again once the task has finished."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys

import redis
from taskfleet.producer.asyncqueue import AsyncQueue
from taskfleet.producer.queue import Queue
from taskfleet.protocol.tasks import TaskState

from tests.polling import wait_for
from tests.task_probes import state
from tests.workers.harness import FAST, REPO, WORKER_INTERVAL_S, Fleet, env_for
from tests.workers.output_handlers import GATE

HANDLER = "tests.workers.output_handlers:two_attempts"
EXPECTED = [
    [1, "attempt 1 begins"],
    [1, {"attempt": 1, "step": 1}],
    [2, "attempt 2 begins"],
    [2, {"attempt": 2, "step": 1}],
    [2, "done é"],
]
READER = """
import json, sys
from taskfleet import Queue
with Queue("jobs", sys.argv[1]) as q:
    for chunk in q.stream(sys.argv[2]):
        print(json.dumps([chunk.attempt, chunk.data]), flush=True)
print("END", flush=True)
"""


def test_a_reader_in_another_process_gets_every_chunk_of_every_attempt_live_then_again(
    fleet: Fleet, queue: Queue, redis_client: redis.Redis, redis_url: str, tmp_path: object
) -> None:
    redis_client.hset(queue.keys.config, "backoff_base_s", "0")
    task_id = queue.enqueue({}, task_id="t1")
    out = tmp_path / "reader.out"  # type: ignore[operator]
    with out.open("w") as sink:
        reader = subprocess.Popen(
            [sys.executable, "-c", READER, redis_url, task_id],
            env=env_for(redis_url, tmp_path / "rt"),  # type: ignore[operator]
            cwd=REPO,
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
    try:
        worker = fleet.add(HANDLER, args=FAST).start()

        def lines() -> list[str]:
            return out.read_text().splitlines()

        # Live: the second attempt's first chunks arrive while it waits at its gate.
        wait_for(
            lambda: len(lines()) >= 4,
            timeout=20,
            interval=WORKER_INTERVAL_S,
            what=lambda: f"four chunks read:\n{out.read_text()}\n{fleet.logs()}",
        )
        assert state(queue, task_id) == TaskState.RUNNING
        redis_client.rpush(GATE, "open")
        assert reader.wait(timeout=20) == 0, out.read_text()
    finally:
        if reader.poll() is None:
            reader.kill()
    assert [json.loads(line) for line in lines()[:-1]] == EXPECTED
    assert lines()[-1] == "END"
    assert state(queue, task_id) == TaskState.DONE
    # After the end: the same list, from the start, and ended.
    again = [[c.attempt, c.data] for c in queue.stream(task_id)]
    assert again == EXPECTED

    async def read_async() -> list[list[object]]:
        async with AsyncQueue("jobs", redis_url) as aq:
            return [[c.attempt, c.data] async for c in aq.stream(task_id)]

    assert asyncio.run(read_async()) == EXPECTED
    # Resuming after a chunk's id yields only what follows it.
    chunks = list(queue.stream(task_id))
    assert [c.data for c in queue.stream(task_id, since=chunks[2].id)] == [
        {"attempt": 2, "step": 1},
        "done é",
    ]
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0


def test_a_finished_tasks_output_is_kept_for_its_retention_then_expires(
    fleet: Fleet, queue: Queue, redis_client: redis.Redis
) -> None:
    redis_client.hset(queue.keys.config, "backoff_base_s", "0")
    redis_client.rpush(GATE, "open")
    worker = fleet.add(HANDLER, args=FAST).start()
    task_id = queue.enqueue({})
    wait_for(lambda: state(queue, task_id) == TaskState.DONE, timeout=20, interval=0.05)
    key = queue.keys.output(task_id)
    ttl_ms = redis_client.pttl(key)
    assert 3_500_000 < ttl_ms <= 3_600_000  # done_retention_s: an hour by default
    assert len(list(queue.stream(task_id))) == 5
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0


def test_a_parent_done_when_its_child_is_ends_its_output_and_lets_it_expire(
    fleet: Fleet, queue: Queue, redis_client: redis.Redis
) -> None:
    worker = fleet.add("tests.workers.output_handlers:parent_of_one", args=FAST).start()
    parent = queue.enqueue({})
    wait_for(lambda: state(queue, parent) == TaskState.DONE, timeout=20, interval=0.05)
    assert state(queue, "child-of-parent") == TaskState.DONE
    key = queue.keys.output(parent)
    assert redis_client.pttl(key) > 0  # kept as long as the task, not for ever
    assert [c.data for c in queue.stream(parent)] == ["before the child"]
    entries = redis_client.xrange(key)
    assert entries[-1][1] == {b"end": b"done"}
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0
