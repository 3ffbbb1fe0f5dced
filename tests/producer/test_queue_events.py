"""The queue's event stream: off by default, every lifecycle event in order, and a
consumer killed and restarted from its last id misses nothing and sees nothing twice."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import redis
from taskfleet.producer.asyncqueue import AsyncQueue
from taskfleet.producer.queue import Queue
from taskfleet.protocol.config import QueueConfig
from taskfleet.protocol.errors import InvalidArgument

from tests.polling import wait_for
from tests.workers.harness import Fleet

ROOT = Path(__file__).resolve().parents[2]
N = 2000


def lines_of(path: Path) -> list[list[str]]:
    """Whole lines only: a killed consumer may leave its last one half written."""
    if not path.exists():
        return []
    text = path.read_text()
    return [line.split(" ") for line in text.split("\n")[:-1]]


def consumer(redis_url: str, since: str, out: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.workers.events_consumer", redis_url, "jobs", since, str(out)],
        cwd=ROOT,
    )


def test_a_queue_writes_no_events_until_they_are_turned_on(redis_url: str) -> None:
    with Queue("jobs", redis_url=redis_url) as q:
        q.enqueue({})
        assert not q.client.exists(q.keys.events)
        q.configure_events(retention=1000)
        q.enqueue({})
        q.configure_events(False)
        q.enqueue({})
        assert q.client.xlen(q.keys.events) == 1
        with pytest.raises(InvalidArgument):
            q.configure_events(retention=0)
        with pytest.raises(InvalidArgument):
            next(q.events(since="yesterday"))


def test_a_consumer_killed_and_restarted_from_its_last_id_sees_every_event_once_in_order(
    fleet: Fleet, redis_url: str, tmp_path: Path
) -> None:
    with Queue("jobs", redis_url=redis_url) as q:
        q.configure(QueueConfig(backoff_base_s=0, backoff_max_s=0))
        q.configure_events(retention=100_000)
        first_out, second_out = tmp_path / "first.txt", tmp_path / "second.txt"
        first = consumer(redis_url, "0", first_out)
        ids = q.enqueue_many([{"payload": {"seconds": 0}}] * N)
        fleet.add("tests.workers.handlers:sleep", args=["--concurrency", "8"]).start()
        wait_for(lambda: len(lines_of(first_out)) >= N + 300, timeout=60, what="events seen")
        first.send_signal(signal.SIGKILL)
        first.wait()
        last = lines_of(first_out)[-1][0]
        second = consumer(redis_url, last, second_out)
        try:
            done = wait_for(
                lambda: (
                    [t for t in ids if (task := q.get(t)) and task.state == "done"] == ids or None
                ),
                timeout=90,
                what="every task done",
            )
            assert done
            wait_for(
                lambda: (
                    sum(1 for line in lines_of(second_out) if line[1] == "done")
                    + sum(1 for line in lines_of(first_out) if line[1] == "done")
                    >= N
                ),
                timeout=30,
                what="every done event read",
            )
        finally:
            second.send_signal(signal.SIGKILL)
            second.wait()
    seen = lines_of(first_out) + lines_of(second_out)
    stream_ids = [line[0] for line in seen]
    assert len(stream_ids) == len(set(stream_ids))  # nothing twice
    as_pairs = [tuple(int(p) for p in s.split("-")) for s in stream_ids]
    assert as_pairs == sorted(as_pairs)  # in stream order
    by_task: dict[str, list[str]] = defaultdict(list)
    for _, kind, task_id in seen:
        by_task[task_id].append(kind)
    assert set(by_task) == set(ids)
    assert all(kinds == ["enqueued", "started", "done"] for kinds in by_task.values())
    # the stream holds exactly what the two consumers read together
    assert len(seen) == redis.Redis.from_url(redis_url).xlen(q.keys.events)


def test_the_async_queue_yields_a_failed_tasks_events_with_their_attempts(
    redis_url: str, make_broker: Callable[..., Any]
) -> None:
    with Queue("jobs", redis_url=redis_url) as q:
        q.configure_events()
        task_id = q.enqueue({}, max_attempts=1)
    broker = make_broker("jobs")
    broker.register(1)
    [held] = broker.claim(1).tasks
    broker.fail(held.id, held.token, "boom")

    async def read() -> list[tuple[str, str, int | None]]:
        out = []
        async with AsyncQueue("jobs", redis_url=redis_url) as q:
            async for event in q.events(since="0"):
                out.append((event.event, event.task_id, event.attempt))
                if event.event == "dead":
                    break
        return out

    assert asyncio.run(read()) == [
        ("enqueued", task_id, None),
        ("started", task_id, 1),
        ("failed", task_id, 1),
        ("dead", task_id, None),
    ]
