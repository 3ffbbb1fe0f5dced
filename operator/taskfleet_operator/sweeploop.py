"""One sweep loop for every TaskQueue: when each is swept, and that one sweep of a queue
runs at a time.

Each TaskQueue the operator sees (`track`, from its watch events) gets an entry: a few
fields of its last body (what a sweep reads: spec, status, generation, the reference
for events) and kopf's memo of the object. Due times sit in a heap; the loop sleeps
until the next one or until something wakes a queue (`wakeups.Wakers`, from any
thread), and runs each due sweep in the operator's thread pool: every sweep interval
while the queue has work, every idle interval times `wakeups.IDLE_FULL_SWEEP_FACTOR`
while it has none or its Redis is parked. A new TaskQueue (no ``observedGeneration``)
waits for its create handler's wake (or an idle interval), then for the end of a burst
of creations (`wakeups.FirstSweeps`).

A TaskQueue being deleted leaves the loop at its first event with a deletion timestamp
(or its DELETED event): no sweep of it starts after that; one running then finishes, and
the loop forgets the queue's connection again after it (`Hooks.gone`). `stopped` tells
a caller (the Purge handler) when that sweep has ended.

While kopf pauses this replica for a peer (`pause`), nothing is swept and every queue's
connection is dropped, so a standby exports no queue series; `resume` sweeps every
queue at once, as kopf's daemons did when they started again.

An entry costs a dict of a few references and a heap slot; kopf keeps no last body and
runs no task per TaskQueue for it.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import heapq
import itertools
import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from taskfleet_operator.wakeups import (
    IDLE_FULL_SWEEP_FACTOR,
    Blocking,
    FirstSweeps,
    Key,
    Quiet,
    Stopping,
    Wakers,
)

_log = logging.getLogger(__name__)


def slim(body: Mapping[str, Any]) -> dict[str, Any]:
    """What a sweep reads of a TaskQueue: not its managed fields nor annotations."""
    meta = body["metadata"]
    return {
        "apiVersion": body.get("apiVersion"),
        "kind": body.get("kind"),
        "metadata": {
            "name": meta["name"],
            "namespace": meta.get("namespace"),
            "uid": meta.get("uid"),
            "generation": meta.get("generation"),
        },
        "spec": body.get("spec") or {},
        "status": body.get("status") or {},
    }


class Gone(Exception):  # noqa: N818 - a state, not a failure
    """Raised by a sweep that found its TaskQueue gone from the API (a 404): the loop
    lets the queue go, as at its deletion (a watch that missed the DELETED event)."""


@dataclass(eq=False, slots=True)
class Tracked:
    """One TaskQueue in the loop. ``body`` is replaced at each of its events."""

    body: dict[str, Any]
    memo: Any  # kopf's memo of the object (its `memos.TaskQueueMemory`)
    epoch: int
    due: float = 0.0
    # Never handled yet: waits for a wake (its create handler) or ``due``, then its turn.
    first: bool = False
    held_since: float | None = None  # waiting for a burst's end (`FirstSweeps`)
    woken: bool = False  # woken while its sweep ran: sweep again at once
    running: threading.Event | None = None  # set when the running sweep ends
    idle: bool = False


@dataclass(frozen=True)
class Hooks:
    """What the loop calls. ``sweep`` and ``gone`` run in the operator's threads."""

    sweep: Callable[[Key, Tracked], Quiet | None]
    gone: Callable[[Key], None]  # forget a queue's connection (after its last sweep)
    failed: Callable[[Key], None]  # count a sweep that raised
    forget_all: Callable[[list[Key]], None]  # paused: drop every queue's connection


@dataclass
class SweepLoop:
    """The sweeps of all TaskQueues, on the event loop (`track`, `wake` and the rest
    are called there; `Wakers.wake` hands a wake over from other threads)."""

    hooks: Hooks
    run_blocking: Blocking
    wakers: Wakers
    first_sweeps: FirstSweeps
    sweep_interval_s: float
    idle_interval_s: float
    active: bool = True
    # kopf's indexes as last handed to a TaskQueue handler (`track_taskqueue`): live views.
    indexes: dict[str, Any] = field(default_factory=dict)
    # The context of the last `track` (a kopf handler's): sweeps run in it, as kopf's
    # `event` and its object loggers' events need what kopf sets for its handlers.
    _context: contextvars.Context | None = None
    _queues: dict[Key, Tracked] = field(default_factory=dict)
    _heap: list[tuple[float, int, Key]] = field(default_factory=list)
    _held: set[Key] = field(default_factory=set)
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)
    _seq: itertools.count[int] = field(default_factory=itertools.count)
    _epoch: int = 0
    _nudge: asyncio.Event | None = None
    _ending: dict[Key, threading.Event] = field(default_factory=dict)

    # ------------------------------------------------------------------ entries

    def track(self, key: Key, body: Mapping[str, Any], memo: Any) -> None:
        """A watch event of a TaskQueue: keep what its sweeps read, or stop its sweeps
        if it is being deleted."""
        self._context = contextvars.copy_context()
        if body.get("metadata", {}).get("deletionTimestamp"):
            self.stop(key)
            return
        entry = self._queues.get(key)
        uid = body["metadata"].get("uid")
        if entry is not None and entry.body["metadata"]["uid"] == uid:
            entry.body, entry.memo, entry.epoch = slim(body), memo, self._epoch
            return
        now = self._now()
        first = not (body.get("status") or {}).get("observedGeneration")
        entry = Tracked(slim(body), memo, self._epoch, first=first)
        self._queues[key] = entry
        self.wakers.register(key)
        self._schedule(key, entry, now + (self.idle_interval_s if first else 0.0))

    def stop(self, key: Key) -> None:
        """No sweep of ``key`` starts from now on (a running one finishes)."""
        if self._queues.pop(key, None) is not None:
            self.wakers.unregister(key)
            self._held.discard(key)

    def stopped(self, key: Key) -> threading.Event | None:
        """Set when the sweep of ``key`` running now ends; None if none runs."""
        return self._ending.get(key)

    def tracked(self, key: Key, entry: Tracked) -> bool:
        """Whether ``entry`` is still ``key``'s (not stopped, not replaced): any thread."""
        return self._queues.get(key) is entry

    def keys(self) -> list[Key]:
        return list(self._queues)

    def wake(self, key: Key) -> None:
        entry = self._queues.get(key)
        if entry is None:
            return
        if entry.running is not None:
            entry.woken = True
            return
        self._schedule(key, entry, self._now())

    # ------------------------------------------------------------------ pausing

    def resume(self) -> None:
        """kopf runs this replica's handlers again: every queue due at once."""
        self.active = True
        now = self._now()
        for key, entry in self._queues.items():
            self.wakers.register(key)
            if not entry.first and entry.held_since is None:
                self._schedule(key, entry, now)
        self._poke()

    async def pause(self) -> None:
        """kopf paused this replica for a peer: no sweep from now on; once those running
        have ended, drop every queue's connection and every entry not seen since (kopf
        lists the TaskQueues again when it resumes). The idle loops, which read the
        queues `Wakers` lists, touch none of them until `resume`."""
        self.active = False
        self._epoch += 1
        mark = self._epoch
        if self._tasks:
            await asyncio.wait(set(self._tasks))
        keys = list(self._queues)
        with contextlib.suppress(Stopping):
            await self.run_blocking(self.hooks.forget_all, keys)
        for key in keys:
            entry = self._queues.get(key)
            if entry is not None and entry.epoch < mark:
                self.stop(key)
            elif entry is not None:  # the idle loops (demand poll, housekeeping) skip it
                self.wakers.unregister(key)

    # ------------------------------------------------------------------ the loop

    async def serve(self) -> None:
        """Forever: start the due sweeps, sleep until the next is due or a queue is woken."""
        self._nudge = asyncio.Event()
        self.wakers.attach(self.wake)
        while True:
            self._nudge.clear()
            next_due = self._start_due() if self.active else None
            timeout = None if next_due is None else max(0.0, next_due - self._now())
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._nudge.wait(), timeout)

    def _start_due(self) -> float | None:
        """Start every due sweep; return when the next one is due (None: none planned)."""
        now = self._now()
        for key in list(self._held):
            entry = self._queues.get(key)
            if entry is None or entry.held_since is None:
                self._held.discard(key)
            elif self.first_sweeps.released(now, entry.held_since):
                self._held.discard(key)
                entry.held_since = None
                self._start(key, entry)
        while self._heap and self._heap[0][0] <= now:
            due, _, key = heapq.heappop(self._heap)
            entry = self._queues.get(key)
            if entry is None or entry.due != due or entry.running is not None:
                continue  # stale: stopped, rescheduled, or running (it reschedules itself)
            if entry.held_since is not None:
                continue
            if entry.first:
                entry.first = False
                if self.first_sweeps.hold(now):
                    entry.held_since = now
                    self._held.add(key)
                    continue
            self._start(key, entry)
        nexts = [self._heap[0][0]] if self._heap else []
        nexts += [
            self.first_sweeps.release_at(entry.held_since)
            for key in self._held
            if (entry := self._queues.get(key)) is not None and entry.held_since is not None
        ]
        return min(nexts, default=None)

    def _start(self, key: Key, entry: Tracked) -> None:
        entry.woken = False
        entry.running = self._ending[key] = threading.Event()
        task = asyncio.create_task(self._sweep(key, entry), context=self._context)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _sweep(self, key: Key, entry: Tracked) -> None:
        ends = entry.running
        try:
            quiet = await self.run_blocking(self.hooks.sweep, key, entry)
        except Stopping:
            return
        except Gone:
            if self.tracked(key, entry):
                self.stop(key)
            quiet = None
        except Exception:  # a failed sweep must not end the sweeping (the hook logs it)
            _log.debug("sweep of %s/%s failed", *key, exc_info=True)
            self.hooks.failed(key)
            quiet = None
        finally:
            entry.running = None
            if ends is not None:
                ends.set()
                if self._ending.get(key) is ends:
                    del self._ending[key]
        if not self.tracked(key, entry):
            if key not in self._queues:  # deleted while it ran: its connection goes again
                with contextlib.suppress(Stopping):
                    await self.run_blocking(self.hooks.gone, key)
            return
        self._after(key, entry, quiet)

    def _after(self, key: Key, entry: Tracked, quiet: Quiet | None) -> None:
        idle = quiet is not None and quiet.idle
        if quiet is not None and idle != entry.idle:
            state = "idle, until woken" if idle else "busy"
            _log.debug("sweeps of %s/%s %s: %s", *key, state, quiet.why)
        entry.idle = idle
        # An autoscaled queue's demand is read by its autoscaler, which wakes it.
        autoscaled = bool(entry.body["spec"].get("autoscale"))
        self.wakers.set_idle(key, idle, poll_demand=not autoscaled)
        # A parked server's queues wait for its probe, which wakes them.
        parked = quiet is not None and quiet.parked
        interval = (
            self.idle_interval_s * IDLE_FULL_SWEEP_FACTOR
            if idle or parked
            else self.sweep_interval_s
        )
        self._schedule(key, entry, self._now() + (0.0 if entry.woken else interval))

    # ------------------------------------------------------------------ helpers

    def _schedule(self, key: Key, entry: Tracked, due: float) -> None:
        entry.due = due
        heapq.heappush(self._heap, (due, next(self._seq), key))
        if len(self._heap) > 4 * len(self._queues) + 64:  # stale slots: rebuild
            self._heap = [
                (e.due, next(self._seq), k) for k, e in self._queues.items() if e.running is None
            ]
            heapq.heapify(self._heap)
        self._poke()

    def _poke(self) -> None:
        if self._nudge is not None:
            self._nudge.set()

    @staticmethod
    def _now() -> float:
        return asyncio.get_running_loop().time()
