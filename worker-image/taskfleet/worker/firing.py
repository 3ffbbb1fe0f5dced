"""The schedule loop: every worker fires its queue's due schedules in the background.

Off the claim path (its own task on the loop, its own script calls): a worker with no
schedule due makes one small call a second. Each turn claims up to ``FIRE_BATCH`` due
schedules for a lease, plans their slots in Python and fires them in one script call
(``taskfleet.protocol.schedules``), then waits until the next one is due (at most a
second, so a schedule created meanwhile is seen). Any number of workers and operators
fire at once; each slot fires exactly once. A draining worker stops firing.
"""

from __future__ import annotations

import asyncio

from taskfleet.protocol.schedules import FIRE_BATCH, FIRE_LEASE_MS, plan
from taskfleet.worker.broker import Broker
from taskfleet.worker.gate import REDIS_DOWN, RedisGate, wait_any
from taskfleet.worker.lifecycle import Lifecycle

__all__ = ["MAX_WAIT_S", "fire_once", "schedule_loop"]

#: Longest wait between looks at the due set.
MAX_WAIT_S = 1.0


async def fire_once(broker: Broker, batch: int = FIRE_BATCH) -> tuple[int, int, float]:
    """One turn: (schedules claimed, tasks enqueued, seconds until the next is due)."""
    claimed = await broker.schedules_due(batch, FIRE_LEASE_MS)
    created = 0
    next_due = claimed.next_due_ms
    if claimed.due:
        plans = [plan(due, claimed.now_ms) for due in claimed.due]
        created = (await broker.fire_schedules(plans)).created
        for p in plans:
            if p.next_slot is not None and (next_due is None or p.next_due_ms < next_due):
                next_due = p.next_due_ms
    wait = MAX_WAIT_S if next_due is None else (next_due - claimed.now_ms) / 1000
    return len(claimed.due), created, min(max(wait, 0.0), MAX_WAIT_S)


async def schedule_loop(
    broker: Broker,
    gate: RedisGate,
    lifecycle: Lifecycle,
    *,
    batch: int = FIRE_BATCH,
) -> None:
    """Fire due schedules until a drain begins (the worker closes after that)."""
    closing, stop_requested = lifecycle.closing, lifecycle.stop_requested
    drain_requested = lifecycle.drain_requested
    while not drain_requested.is_set():
        try:
            claimed, _, wait = await fire_once(broker, batch)
        except REDIS_DOWN as exc:
            if stop_requested.is_set():
                return
            await gate.wait_out(exc, stop_requested, closing)
            continue
        if claimed >= batch:
            await asyncio.sleep(0)  # more are due: go on, letting the other loops run
            continue
        await wait_any(drain_requested, limit=wait)
