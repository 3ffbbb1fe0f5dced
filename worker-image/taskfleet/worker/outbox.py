"""Outcomes waiting to be written: one writer flushes them in batches, never twice.

Handlers' outcomes go in as they come; the flush loop writes whatever has gathered while
the previous write was in flight in one script call. A batch that fails on an outage goes
back to the front and waits for the gate; a write removes each outcome from its batch as
it is written, so a retry never repeats one.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from taskfleet.protocol.bounds import MAX_BATCH
from taskfleet.worker.gate import REDIS_DOWN, RedisGate
from taskfleet.worker.lifecycle import Lifecycle
from taskfleet.worker.runs import Outcome


class Outbox:
    """``write(batch)`` writes a batch, removing each outcome from it once written."""

    def __init__(
        self,
        write: Callable[[list[Outcome]], Awaitable[None]],
        gate: RedisGate,
        lifecycle: Lifecycle,
    ) -> None:
        self.ready = asyncio.Event()  # set when outcomes are added (and to stop the loop)
        self._items: list[Outcome] = []
        self._write = write
        self._gate = gate
        # a stop: unwritten outcomes are left to their leases
        self._give_up = lifecycle.stop_requested
        self._closing = lifecycle.closing

    def __len__(self) -> int:
        return len(self._items)

    def add(self, outcome: Outcome) -> None:
        self._items.append(outcome)
        self.ready.set()

    def add_many(self, outcomes: list[Outcome]) -> None:
        if outcomes:
            self._items.extend(outcomes)
            self.ready.set()

    async def serve(self) -> None:
        """The flush loop: write what gathers until the worker closes (the shutdown then
        flushes what is left itself)."""
        ready, closing = self.ready, self._closing
        while True:
            await ready.wait()  # also set when closing: one waiter per turn
            if closing.is_set():
                return
            ready.clear()
            await asyncio.sleep(0)  # let outcomes finishing in this loop turn join the batch
            await self.flush()

    async def flush(self) -> None:
        """Write everything, waiting out outages; return early on a stop.

        Until the worker closes, a wait for Redis also ends when it closes; at shutdown
        it is closed already, so the gate alone paces the retries.
        """
        while self._items:
            # bounded per script call: a backlog of outcomes goes in several
            batch, self._items = self._items[:MAX_BATCH], self._items[MAX_BATCH:]
            try:
                await self._write(batch)
            except REDIS_DOWN as exc:
                self._items = batch + self._items
                if self._give_up.is_set():
                    return  # forced exit: unwritten outcomes' leases expire; tasks rerun
                if self._closing.is_set():
                    await self._gate.wait_out(exc, self._give_up)
                else:
                    await self._gate.wait_out(exc, self._give_up, self._closing)
            except BaseException:
                # Cancelled mid-write (shutdown): keep what is unwritten for the final flush.
                self._items = batch + self._items
                raise
