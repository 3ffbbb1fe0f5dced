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
from taskfleet.worker.runs import Outcome


class Outbox:
    """``write(batch)`` writes a batch, removing each outcome from it once written."""

    def __init__(
        self,
        write: Callable[[list[Outcome]], Awaitable[None]],
        gate: RedisGate,
        *,
        give_up: asyncio.Event,
    ) -> None:
        self.ready = asyncio.Event()  # set when outcomes are added (and to stop the loop)
        self._items: list[Outcome] = []
        self._write = write
        self._gate = gate
        self._give_up = give_up  # a forced stop: unwritten outcomes are left to their leases

    def __len__(self) -> int:
        return len(self._items)

    def add(self, outcome: Outcome) -> None:
        self._items.append(outcome)
        self.ready.set()

    def add_many(self, outcomes: list[Outcome]) -> None:
        if outcomes:
            self._items.extend(outcomes)
            self.ready.set()

    async def serve(self, *, until: asyncio.Event) -> None:
        """The flush loop: write what gathers until ``until`` is set (the shutdown then
        flushes what is left itself)."""
        ready = self.ready
        while True:
            await ready.wait()  # also set when closing: one waiter per turn
            if until.is_set():
                return
            ready.clear()
            await asyncio.sleep(0)  # let outcomes finishing in this loop turn join the batch
            await self.flush(until=until)

    async def flush(self, *, until: asyncio.Event | None = None) -> None:
        """Write everything, waiting out outages; return early on a forced stop.

        ``until``: also stop waiting for Redis when it is set (the loops closing; at
        shutdown it is set already, so the gate alone paces the retries).
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
                events = (
                    [self._give_up] if until is None or until.is_set() else [self._give_up, until]
                )
                await self._gate.wait_out(exc, *events)
            except BaseException:
                # Cancelled mid-write (shutdown): keep what is unwritten for the final flush.
                self._items = batch + self._items
                raise
