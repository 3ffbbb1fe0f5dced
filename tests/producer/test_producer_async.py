"""AsyncQueue against Queue: every public call, with the same parameters (both run the
plans ``facade.CALLS`` lists), and the same answers on a real Redis."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import AsyncIterator
from dataclasses import replace

import pytest
from taskfleet import AsyncQueue, InvalidArgument, Queue, ScheduleNotFound
from taskfleet.producer.encoding import EnqueueSpec, encode_task
from taskfleet.producer.facade import CALLS, runs_every_call
from taskfleet.producer.flows import chain, group
from taskfleet.producer.scheduling import schedule_def
from taskfleet.protocol.control_ops import CancelOutcome
from taskfleet.protocol.groups import GroupSettings
from taskfleet.protocol.tasks import Task


def public(cls: type) -> set[str]:
    return {name for name in dir(cls) if not name.startswith("_")}


def test_async_queue_has_every_public_call_of_queue_with_the_same_parameters() -> None:
    assert public(Queue) - public(AsyncQueue) == set()
    assert public(AsyncQueue) - public(Queue) == {"aclose"}
    calls = sorted(name for name in public(Queue) if callable(getattr(Queue, name)))
    assert len(calls) >= 43 and set(CALLS) <= set(calls)
    for name in calls:
        sync_call, async_call = getattr(Queue, name), getattr(AsyncQueue, name)
        if inspect.isgeneratorfunction(sync_call):  # a stream: an async iterator
            assert inspect.isasyncgenfunction(async_call), f"AsyncQueue.{name} does not stream"
        else:
            assert inspect.iscoroutinefunction(async_call), f"AsyncQueue.{name} is not awaited"
        sync_params = inspect.signature(sync_call).parameters
        assert inspect.signature(async_call).parameters == sync_params, name


def test_a_runner_that_misses_a_call_of_the_facade_is_refused_when_defined() -> None:
    namespace = {name: getattr(AsyncQueue, name) for name in CALLS if name != "quota"}
    with pytest.raises(TypeError, match="quota"):
        runs_every_call(type("Partial", (), namespace))
    namespace["quota"] = AsyncQueue.stats  # another plan under the name
    with pytest.raises(TypeError, match="quota"):
        runs_every_call(type("Wrong", (), namespace))


def test_queue_shows_the_arguments_of_enqueue_and_schedule_written_once() -> None:
    spec = list(EnqueueSpec.model_fields)
    assert list(inspect.signature(encode_task).parameters) == spec
    for call in (Queue.enqueue, Queue.enqueue_result, AsyncQueue.enqueue):
        assert list(inspect.signature(call).parameters) == ["self", *spec]
    assert list(inspect.signature(Queue.schedule).parameters) == [
        "self",
        *inspect.signature(schedule_def).parameters,
    ]
    assert inspect.signature(Queue.enqueue).return_annotation == "str"
    assert "Add a task" in (Queue.enqueue.__doc__ or "")


def test_the_calls_added_for_parity_answer_as_the_sync_queue_does(
    queue: Queue, redis_url: str
) -> None:
    async def scenario() -> None:
        async with AsyncQueue(queue.name, redis_url) as aq:
            flow = await aq.enqueue_flow(chain({"payload": {"n": 1}}, group({"payload": {}})))
            assert len(flow.ids) == 2 and flow.last == flow.ids[1:]
            await aq.enqueue({}, group="tenant-a")
            assert await aq.exists()
            assert await aq.config() == queue.config()
            assert await aq.groups() == queue.groups()
            await aq.set_group("tenant-a", GroupSettings(weight=3))
            assert await aq.group_settings("tenant-a") == queue.group_settings("tenant-a")
            assert (await aq.group_settings("tenant-a")).weight == 3
            until = await aq.pause_claims(60, reason="provider 429")
            state = await aq.quota()
            assert replace(state, now_ms=0) == replace(queue.quota(), now_ms=0)
            assert state.paused_until_ms == until and state.reason == "provider 429"
            await aq.set_budget(day=100)
            await aq.resume_claims()
            state = await aq.quota()
            assert not state.paused and state.day_limit == queue.quota().day_limit == 100
            assert await aq.held_by(["nobody"]) == queue.held_by(["nobody"])
            assert await aq.holdings(["nobody"]) == queue.holdings(["nobody"])
            with pytest.raises(InvalidArgument):
                await aq.pause_claims(-1)
            with pytest.raises(InvalidArgument):
                await aq.group_settings("{bad}")

    asyncio.run(scenario())


def test_async_queue_cancels_retries_lists_follows_and_purges_tasks(
    queue: Queue, redis_url: str
) -> None:
    async def scenario() -> None:
        async with AsyncQueue(queue.name, redis_url) as aq:
            a = await aq.enqueue({"n": 1}, task_id="a", group="tenant-a")
            b = await aq.enqueue({"n": 2}, task_id="b", delay=60)
            assert await aq.cancel(a) is CancelOutcome.CANCELLED
            assert await aq.cancel_many([b, "nobody"]) == {
                b: CancelOutcome.CANCELLED,
                "nobody": CancelOutcome.NOT_FOUND,
            }
            page = await aq.list("cancelled", limit=10)
            assert sorted(t.id for t in page.tasks) == [a, b] and page.cursor is None
            assert [t.id for t in await collect(aq.follow(a, interval=0.01))] == [a]
            await aq.enqueue({}, task_id="c", group="tenant-a")
            assert await aq.cancel_group("tenant-a") == {CancelOutcome.CANCELLED: 1}
            assert await aq.purge_tasks("cancelled", [a]) == 1
            assert await aq.get(a) is None
            assert await aq.retry() == 0
            assert (await aq.stats())["cancelled"] == queue.stats()["cancelled"] == 2
            with pytest.raises(InvalidArgument):
                await aq.list("nonsense")

    asyncio.run(scenario())


async def collect(stream: AsyncIterator[Task]) -> list[Task]:
    return [task async for task in stream]


def test_async_queue_runs_a_flow_as_one_flow_and_cancels_and_retries_it(
    queue: Queue, redis_url: str
) -> None:
    async def scenario() -> None:
        async with AsyncQueue(queue.name, redis_url) as aq:
            ids = await aq.enqueue_flow(chain({"payload": {}}, {"payload": {}}))
            first, second = ids.ids
            task = await aq.get(second)
            assert task is not None and task.flow == first  # the tasks are one flow
            record = await aq.flow(first)
            assert record is not None and record == queue.flow(first)
            outcomes = await aq.cancel_flow(first)
            assert set(outcomes.values()) == {CancelOutcome.CANCELLED}
            assert await aq.retry_flow(first) == 2
            assert sorted(queue.stats()[s] for s in ("pending", "waiting")) == [1, 1]

    asyncio.run(scenario())


def test_async_queue_schedules_fires_and_unschedules(queue: Queue, redis_url: str) -> None:
    async def scenario() -> None:
        async with AsyncQueue(queue.name, redis_url) as aq:
            made = await aq.schedule("nightly", "0 3 * * *", {"n": 1}, group="tenant-a")
            assert made == queue.get_schedule("nightly") and made.group == "tenant-a"
            assert [s.name for s in await aq.schedules()] == ["nightly"]
            assert await aq.pause_schedule("nightly")
            assert (await aq.get_schedule("nightly")).paused  # type: ignore[union-attr]
            assert await aq.resume_schedule("nightly")
            assert await aq.fire_due_schedules() == 0  # nothing due before 03:00
            assert await aq.unschedule("nightly")
            assert await aq.get_schedule("nightly") is None
            with pytest.raises(ScheduleNotFound):
                await aq.resume_schedule("nightly")
            with pytest.raises(InvalidArgument):
                await aq.schedule("bad", "not a cron", {})

    asyncio.run(scenario())


def test_async_queue_operates_the_queue_as_queue_does(queue: Queue, redis_url: str) -> None:
    async def scenario() -> None:
        async with AsyncQueue(queue.name, redis_url) as aq:
            config = await aq.config()
            await aq.configure(config.model_copy(update={"max_attempts": 7}))
            assert queue.config().max_attempts == 7
            await aq.enqueue({})
            assert (await aq.sweep()) == queue.sweep()
            assert await aq.requeue_pod("nobody") == 0
            assert (await aq.repair()).cursor == 0
            await aq.purge()
            assert not await aq.exists() and not queue.exists()

    asyncio.run(scenario())
