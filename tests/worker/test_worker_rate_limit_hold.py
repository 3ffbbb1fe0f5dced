"""The hold after a provider's rate limit, for async handlers: a task that starts while
the pause is being written waits before its call and, given back, never calls the
provider; after the resume, tasks run again. (Handler threads hold the same way,
``HandlerThreads``; measured with a fleet in test_quota_fleet.py.)"""

from __future__ import annotations

import asyncio
from typing import Any

from taskfleet import RateLimited
from taskfleet.worker import WorkerSettings
from taskfleet.worker.broker import ClaimedTask
from taskfleet.worker.execution import Execution
from taskfleet.worker.gate import RedisGate
from taskfleet.worker.handlers import Handler
from taskfleet.worker.lifecycle import Lifecycle
from taskfleet.worker.named import HandlerSet
from taskfleet.worker.outbox import Outbox
from taskfleet.worker.runs import Outcome, RunState
from taskfleet.worker.slots import Slots


def _execution(calls: list[int]) -> tuple[Execution, Outbox]:
    settings = WorkerSettings(
        queue="q", redis_url="redis://127.0.0.1:1/0", pod="p", incarnation="i"
    )

    async def write(batch: list[Outcome]) -> None:
        raise AssertionError("nothing is written here")

    async def reconnect() -> None:
        raise AssertionError("no outage here")

    async def call_provider(payload: dict[str, Any]) -> None:
        if payload.get("limited"):
            raise RateLimited(30)
        calls.append(payload["n"])

    gate = RedisGate(reconnect, lambda: None, backoff_base=0.1, backoff_max=0.2)
    lifecycle = Lifecycle()
    outbox = Outbox(write, gate, lifecycle)
    handlers = HandlerSet(default=Handler.of("tests:call_provider", call_provider))
    slots = Slots(settings.concurrency, 0)
    execution = Execution(settings, handlers, slots, outbox, lifecycle, changed=lambda: None)
    return execution, outbox


def _task(task_id: str, payload: dict[str, Any]) -> ClaimedTask:
    return ClaimedTask(task_id, f"tok-{task_id}", payload, 1, 3, None, 0, 0, 1)


async def _settle() -> None:
    for _ in range(20):  # every ready callback of the loop runs, none of them sleeps
        await asyncio.sleep(0)


def test_an_async_task_started_during_the_hold_is_given_back_without_calling() -> None:
    async def scenario() -> None:
        calls: list[int] = []
        execution, outbox = _execution(calls)
        execution.start(_task("limited", {"limited": True}))
        await _settle()
        assert len(outbox) == 1  # the rate limit's outcome waits for its write
        execution.start(_task("next", {"n": 1}))
        await _settle()
        assert calls == []  # held before its call
        run = execution.held["next"]
        assert execution.withdraw([run]) == [run]
        await _settle()
        assert calls == [] and run.state is RunState.GONE
        assert run.job is not None and run.job.done()
        # the pause is written and the prefetched tasks given back: tasks run again
        execution.resume_threads()
        execution.start(_task("after", {"n": 2}))
        await _settle()
        assert calls == [2]
        execution.close()

    asyncio.run(scenario())


def test_a_held_async_task_not_given_back_runs_after_the_resume() -> None:
    async def scenario() -> None:
        calls: list[int] = []
        execution, _ = _execution(calls)
        execution.start(_task("limited", {"limited": True}))
        await _settle()
        execution.start(_task("next", {"n": 1}))
        await _settle()
        assert calls == []
        execution.resume_threads()
        await _settle()
        assert calls == [1]
        execution.close()

    asyncio.run(scenario())
