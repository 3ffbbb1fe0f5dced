"""The claim loop: fill free slots with one batched claim, or wait for work.

When the queue is empty it blocks on the broker's ``wait_for_work`` (BLPOP), where
producers hand it new tasks they claimed for it, so an idle fleet starts a new task
within a millisecond. Its state is named (``ClaimLoopState``): outcome writes read it to
know whether a producer's wake-up will claim for them.
"""

from __future__ import annotations

import asyncio
import enum
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from taskfleet.protocol import bounds
from taskfleet.worker.broker import Broker
from taskfleet.worker.claimed import ClaimedTask, ClaimResult
from taskfleet.worker.execution import Execution
from taskfleet.worker.gate import REDIS_DOWN, RedisGate
from taskfleet.worker.lifecycle import Lifecycle
from taskfleet.worker.settings import WorkerSettings
from taskfleet.worker.slots import Slots

T = TypeVar("T")
#: How much longer than its longest wait an idle worker stays registered for hand-offs. A
#: worker killed while idle may be handed a task for that long: its lease brings it back.
IDLE_MARGIN_S = 1.0


class ClaimLoopState(enum.Enum):
    CLAIMING = "claiming"
    WAITING_FOR_SLOT = "waiting for a slot"
    #: For a producer's wake-up or a limit: outcome writes then don't claim (the wake-up
    #: will), so an idle worker's completions stay cheap.
    WAITING_FOR_WORK = "waiting for work"
    STOPPED = "stopped"


class ClaimLoop:
    """``take(tasks)`` starts claimed tasks (or gives them back if a drain began)."""

    def __init__(
        self,
        settings: WorkerSettings,
        broker: Broker,
        execution: Execution,
        slots: Slots,
        gate: RedisGate,
        *,
        lifecycle: Lifecycle,
        take: Callable[[list[ClaimedTask]], Awaitable[None]],
    ) -> None:
        self.state = ClaimLoopState.CLAIMING
        self._settings = settings
        self._broker = broker
        self._execution = execution
        self._slots = slots
        self._gate = gate
        self._take = take
        self._slot_freed = lifecycle.slot_freed
        # closing comes after it (``Lifecycle``): a wait that ends on a drain ends on both
        self._drain_requested = lifecycle.drain_requested
        # How long a claim that empties the queue registers this worker for hand-offs: a
        # little longer than it then waits, so it is never unregistered while waiting.
        self._idle_ms = int((settings.idle_wait + IDLE_MARGIN_S) * 1000)

    def room(self) -> int:
        execution = self._execution
        return self._slots.room(len(execution.held), len(execution.held_slots))

    async def run(self) -> None:
        execution, slots, draining = self._execution, self._slots, self._drain_requested
        while not draining.is_set():
            self.state = ClaimLoopState.CLAIMING
            room = min(self.room(), bounds.MAX_BATCH)  # more: the next turn claims again
            if room <= 0:
                self.state = ClaimLoopState.WAITING_FOR_SLOT
                self._slot_freed.clear()
                if self.room() <= 0 and not draining.is_set():
                    await self._slot_freed.wait()
                continue
            free = slots.free(len(execution.held), len(execution.held_slots))
            asked = time.monotonic()
            try:
                claimed = await self._broker.claim(
                    room, idle_ms=self._idle_ms, prefetch=slots.prefetch_part(room, free)
                )
            except REDIS_DOWN as exc:
                await self._gate.wait_out(exc, draining)
                continue
            if execution.timings.enabled:
                execution.timings.claim.observe(time.monotonic() - asked)
            if claimed.tasks:
                await self._take(claimed.tasks)
                if draining.is_set():
                    break
                if len(claimed.tasks) == room or claimed.more_pending:
                    # Let the new tasks' handlers start before this loop claims again.
                    await asyncio.sleep(0)
                    continue
                # The queue gave all it had: asking again would find nothing. A task
                # enqueued from now on leaves a wake-up token for the wait below.
            if draining.is_set():
                continue
            self.state = ClaimLoopState.WAITING_FOR_WORK
            await self._wait_for_work(claimed)
        self.state = ClaimLoopState.STOPPED

    async def _wait_for_work(self, claimed: ClaimResult) -> None:
        """After a claim that found nothing: wait for a producer, a due task or a limit."""
        if claimed.retry_after_ms:
            # Rate or concurrency limit: nothing to gain by asking again sooner.
            await self._until_drain(asyncio.sleep(claimed.retry_after_ms / 1000))
            return
        idle_wait = self._settings.idle_wait
        if claimed.next_due_ms is not None:
            # A delayed task falls due before the next wake-up: claim it on time.
            idle_wait = min(idle_wait, max(claimed.next_due_ms, 1) / 1000)
        try:
            handed = await self._until_drain(self._broker.wait_for_work(idle_wait))
        except REDIS_DOWN as exc:
            await self._gate.wait_out(exc, self._drain_requested)
            return
        if handed is not None and handed.tasks:
            await self._take(handed.tasks)  # or released, if a drain began meanwhile

    async def _until_drain(self, awaitable: Awaitable[T]) -> T | None:
        """Await ``awaitable`` but give up (cancelling it) as soon as a drain starts.

        Returns its result, or None when the drain cut it short. (A task handed over in
        a wait cut short stays held by this pod until the exit releases it.)
        """
        waiter = asyncio.ensure_future(awaitable)
        drain = asyncio.ensure_future(self._drain_requested.wait())
        try:
            await asyncio.wait({waiter, drain}, return_when="FIRST_COMPLETED")
        finally:
            drain.cancel()
            if not waiter.done():
                waiter.cancel()
                # Bounded: the wait being cancelled is at most one idle wait long anyway.
                await asyncio.wait({waiter}, timeout=self._settings.idle_wait + 1.0)
        if self._drain_requested.is_set() or not waiter.done() or waiter.cancelled():
            return None  # an error of a wait cut short by the drain is no outage
        return waiter.result()
