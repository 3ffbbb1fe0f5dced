"""Waiting for tasks without polling: the scripts that finish a task wake whoever waits on
it (``Queue.wait``, ``AsyncQueue.wait``), and a task nobody waits on pays nothing."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import pytest
import redis
from taskfleet import AsyncQueue, InvalidArgument, Queue, TaskState, WaitTimeout
from taskfleet.producer.waiting import RECHECK_S
from taskfleet.protocol.keys import QueueKeys

from tests.fixtures_redis import MakeBroker
from tests.polling import wait_for
from tests.workers.harness import Fleet

H = "tests.workers.handlers"
KEYS = QueueKeys("jobs")
WAIT_S = 20.0


@pytest.fixture
def in_thread() -> Iterator[Callable[..., Future[Any]]]:
    with ThreadPoolExecutor(max_workers=2) as pool:
        yield pool.submit


def waiter_queue(redis_url: str) -> Queue:
    """A queue whose connections carry a name, to find them in CLIENT LIST."""
    return Queue("jobs", client=redis.Redis.from_url(redis_url, client_name="waiter"))


def blocked_waiters(client: redis.Redis) -> int:
    return sum(
        1
        for c in client.client_list()
        if c.get("name") == "waiter" and c.get("cmd") == "blpop" and "b" in c.get("flags", "")
    )


def test_a_wait_blocks_until_a_real_worker_completes_the_task_then_leaves_nothing_behind(
    redis_url: str,
    redis_client: redis.Redis,
    fleet: Fleet,
    in_thread: Callable[..., Future[Any]],
) -> None:
    queue = waiter_queue(redis_url)
    task_id = queue.enqueue({"gate": True})
    fleet.add(f"{H}:gate").start()
    wait_for(lambda: redis_client.hget(KEYS.task(task_id), "state") == b"running", timeout=10)
    waited = in_thread(queue.wait, [task_id], WAIT_S)
    # blocked on its list (not polling), and listed on the task
    wait_for(lambda: blocked_waiters(redis_client) == 1)
    [waiter] = redis_client.hget(KEYS.task(task_id), "waiters").split()
    redis_client.rpush("test:gate", "open")
    finished = waited.result(timeout=WAIT_S)
    assert finished[task_id].state is TaskState.DONE
    assert finished[task_id].result == "opened"
    assert redis_client.hget(KEYS.task(task_id), "waiters") is None
    # what the completion pushed was taken; a list left over would expire within a minute
    assert redis_client.exists(KEYS.waiter(waiter.decode())) == 0
    queue.client.close()


def test_a_task_nobody_waits_on_completes_without_writing_any_waiter_key(
    queue: Queue, redis_client: redis.Redis, make_broker: MakeBroker
) -> None:
    task_id = queue.enqueue({"n": 1})
    broker = make_broker("jobs")
    [task] = broker.claim(1).tasks
    assert broker.complete_many([(task.id, task.token, None)]) == [True]
    assert redis_client.hget(KEYS.task(task_id), "waiters") is None
    assert list(redis_client.scan_iter(match=KEYS.waiter("*"))) == []


def test_a_task_that_goes_dead_wakes_its_waiter(
    queue: Queue, make_broker: MakeBroker, in_thread: Callable[..., Future[Any]]
) -> None:
    task_id = queue.enqueue({"n": 1}, max_attempts=1)
    broker = make_broker("jobs")
    [task] = broker.claim(1).tasks
    waited = in_thread(queue.wait, [task_id], WAIT_S)
    wait_for(lambda: queue.client.hget(KEYS.task(task_id), "waiters"))
    broker.fail(task.id, task.token, "boom")
    finished = waited.result(timeout=WAIT_S)
    assert finished[task_id].state is TaskState.DEAD
    assert finished[task_id].error == "boom"


def test_a_wait_finds_finished_tasks_at_once_and_waits_only_for_the_others(
    queue: Queue, make_broker: MakeBroker, in_thread: Callable[..., Future[Any]]
) -> None:
    first, second = queue.enqueue({"n": 1}), queue.enqueue({"n": 2})
    broker = make_broker("jobs")
    a, b = broker.claim(2).tasks
    broker.complete_many([(a.id, a.token, '"a"')])
    waited = in_thread(queue.wait, [first, second, first], WAIT_S)
    wait_for(lambda: queue.client.hget(KEYS.task(b.id), "waiters"))
    assert queue.client.hget(KEYS.task(a.id), "waiters") is None  # finished: not watched
    broker.complete_many([(b.id, b.token, '"b"')])
    finished = waited.result(timeout=WAIT_S)
    assert {i: t.result for i, t in finished.items()} == {a.id: "a", b.id: "b"}


def test_a_task_enqueued_after_the_wait_began_is_found_at_the_next_look(
    queue: Queue, make_broker: MakeBroker, in_thread: Callable[..., Future[Any]]
) -> None:
    waited = in_thread(queue.wait, ["later"], WAIT_S)
    queue.enqueue({"n": 1}, task_id="later")
    broker = make_broker("jobs")
    [task] = wait_for(lambda: broker.claim(1).tasks)
    broker.complete_many([(task.id, task.token, None)])
    # registered within RECHECK_S of its enqueue, or found finished then
    assert waited.result(timeout=WAIT_S)["later"].state is TaskState.DONE


def test_a_wait_that_times_out_names_the_unfinished_and_its_leftovers_expire(
    queue: Queue, redis_client: redis.Redis, make_broker: MakeBroker
) -> None:
    task_id = queue.enqueue({"n": 1})
    with pytest.raises(WaitTimeout) as info:
        queue.wait([task_id, "never"], timeout=0.05)
    assert info.value.unfinished == [task_id, "never"]
    [waiter] = redis_client.hget(KEYS.task(task_id), "waiters").split()
    broker = make_broker("jobs")
    [task] = broker.claim(1).tasks
    broker.complete_many([(task.id, task.token, None)])
    # nobody reads that list any more: it goes within a minute
    assert 0 < redis_client.pttl(KEYS.waiter(waiter.decode())) <= 60_000


def test_a_task_keeps_only_its_newest_waiters(queue: Queue, redis_client: redis.Redis) -> None:
    task_id = queue.enqueue({"n": 1})
    for _ in range(40):
        with pytest.raises(WaitTimeout):
            queue.wait([task_id], timeout=0)
    assert len(redis_client.hget(KEYS.task(task_id), "waiters").split()) == 32


def test_a_wait_blocks_no_longer_than_the_client_allows_a_socket_to_be_silent(
    redis_url: str,
) -> None:
    queue = Queue("jobs", client=redis.Redis.from_url(redis_url, socket_timeout=0.5))
    task_id = queue.enqueue({"n": 1})
    with pytest.raises(WaitTimeout):  # not redis.TimeoutError: each BLPOP asks for 0.35 s at most
        queue.wait([task_id], timeout=2 * RECHECK_S)
    queue.client.close()


@pytest.mark.parametrize("bad", ["one-id", [1], None])
def test_wait_refuses_what_is_not_a_list_of_ids(queue: Queue, bad: Any) -> None:
    with pytest.raises(InvalidArgument, match="wait needs a list of task ids"):
        queue.wait(bad, timeout=1)


def test_async_queue_enqueues_reads_and_waits_as_the_sync_queue_does(
    redis_url: str, fleet: Fleet
) -> None:
    fleet.add(f"{H}:sleep").start()

    async def main() -> None:
        async with AsyncQueue("jobs", redis_url) as queue:
            first = await queue.enqueue({"seconds": 0}, priority=3)
            created = await queue.enqueue_result({"seconds": 0}, task_id="fixed")
            again = await queue.enqueue_result({"seconds": 0}, task_id="fixed")
            more = await queue.enqueue_many([{"payload": {"seconds": 0}} for _ in range(3)])
            assert (created.created, again.created) == (True, False)
            finished = await queue.wait([first, "fixed", *more], timeout=WAIT_S)
            assert {t.state for t in finished.values()} == {TaskState.DONE}
            assert finished[first].result == {"slept": 0}
            assert finished[first].priority == 3
            got = await queue.get(first)
            assert got == finished[first]
            assert await queue.get("nope") is None
            stats = await queue.stats()
            assert (stats["done"], stats["enqueued"], stats["completed"]) == (5, 5, 5)
            [worker] = await queue.workers()
            assert worker.alive
            with pytest.raises(WaitTimeout):
                await queue.wait(["nope"], timeout=0.01)

    asyncio.run(main())
    with Queue("jobs", redis_url) as sync:
        assert sync.stats()["done"] == 5
        assert sync.workers()[0].pod == "pod-a"


def test_async_queue_refuses_what_the_sync_queue_refuses(redis_url: str) -> None:
    async def main() -> list[str]:
        errors = []
        async with AsyncQueue("jobs", redis_url) as queue:
            for call in (
                queue.enqueue([]),  # type: ignore[arg-type]
                queue.enqueue({}, priority=5000),
                queue.enqueue_many([{"payload": {}, "task_id": "a"}] * 2),
            ):
                try:
                    await call
                except Exception as exc:
                    errors.append(f"{type(exc).__name__}: {exc}")
        return errors

    with Queue("jobs", redis_url) as sync:
        expected = []
        for call in (
            lambda: sync.enqueue([]),  # type: ignore[arg-type]
            lambda: sync.enqueue({}, priority=5000),
            lambda: sync.enqueue_many([{"payload": {}, "task_id": "a"}] * 2),
        ):
            try:
                call()
            except Exception as exc:
                expected.append(f"{type(exc).__name__}: {exc}")
    assert asyncio.run(main()) == expected
    assert len(expected) == 3
