"""AsyncQueue against Queue: the same public methods (but those ``SYNC_ONLY`` names, each
with its reason), and the same answers from the calls added for parity."""

from __future__ import annotations

import asyncio
import inspect
from dataclasses import replace

import pytest
from taskfleet import AsyncQueue, InvalidArgument, Queue
from taskfleet.producer.asyncqueue import SYNC_ONLY
from taskfleet.producer.flows import chain, group
from taskfleet.protocol.groups import GroupSettings


def public(cls: type) -> set[str]:
    return {name for name in dir(cls) if not name.startswith("_")}


def test_async_queue_has_every_public_method_of_queue_but_the_sync_only_ones() -> None:
    missing = public(Queue) - public(AsyncQueue)
    assert missing - set(SYNC_ONLY) == set(), "add these to AsyncQueue, or to SYNC_ONLY with why"
    assert set(SYNC_ONLY) - missing == set(), "AsyncQueue has these now: drop them from SYNC_ONLY"
    assert all(reason.strip() for reason in SYNC_ONLY.values())
    assert public(AsyncQueue) - public(Queue) == {"aclose"}
    for name in public(Queue) & public(AsyncQueue):
        method = getattr(AsyncQueue, name)
        if callable(method):
            assert inspect.iscoroutinefunction(method), f"AsyncQueue.{name} is not awaited"
            sync_params = list(inspect.signature(getattr(Queue, name)).parameters)
            assert list(inspect.signature(method).parameters) == sync_params, name


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
