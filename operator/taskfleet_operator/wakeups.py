"""When each TaskQueue is swept: often while it has work, rarely while it is idle, and at
once when something happens to it.

The sweep loop (`sweeploop`, one for all TaskQueues) registers each queue here and
plans its sweeps. Anything that learns of a change wakes a queue, from any thread: a
worker pod's or Deployment's event, a spec change, the autoscaler's demand wait, and
the demand poll, which reads every idle queue's `demand` list in one pipelined round
trip per Redis (an enqueue that woke workers pushes it). So an idle queue costs one
sweep per idle interval and one pipelined command per poll, not a sweep every 2 s.
And that idle sweep is batched too: `housekeep_idle` runs the sweep script of every
idle queue on a Redis in a few pipelines, and wakes for a full sweep only the queues
where it found something to do.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import logging
import math
import threading
from collections.abc import Awaitable, Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from taskfleet_operator.connections import Connections
from taskfleet_operator.models import TaskQueueSpec
from taskfleet_operator.status import Outage, deployment_status, wanted_replicas

Key = tuple[str, str]  # (namespace, name)
#: Runs a blocking call in the operator's threads: ``await run(fn, *args, **kwargs)``.
Blocking = Callable[..., Awaitable[Any]]

_log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Quiet:
    """What a sweep saw that decides its next one: whether the queue is idle."""

    idle: bool
    why: str
    # The queue's Redis server is parked (`outages`): nothing to sweep until its probe
    # succeeds, which wakes the queue.
    parked: bool = False


def after_sweep(
    spec: TaskQueueSpec,
    outcome: Any,
    deployment: Any,
    live_pods: int,
) -> Quiet:
    """Idle means nothing for a sweep to do until something wakes it: no task pending,
    delayed or running (leases to watch, tasks coming due), no active schedule in the spec
    or the queue's store (slots to fire, also while the fleet is at zero),
    Redis reachable, and the fleet as asked (no pods coming or going whose status the
    TaskQueue should show)."""
    if isinstance(outcome, Outage):
        return Quiet(False, outcome.reason, parked=outcome.parked)
    stats = outcome.stats
    for state in ("pending", "delayed", "running"):
        if stats.get(state):
            return Quiet(False, f"{stats[state]} {state}")
    if outcome.requeued or outcome.suspects or outcome.schedule_errors:
        return Quiet(False, "pods gone or suspected")
    if spec.schedules or outcome.active_schedules:
        return Quiet(False, "schedules")
    asked = wanted_replicas(spec, deployment)
    replicas, ready = deployment_status(deployment)
    if not (asked == replicas == ready == live_pods):
        return Quiet(False, f"fleet moving: {ready}/{replicas} ready of {asked}, {live_pods} pods")
    return Quiet(True, "idle")


class Wakers:
    """Which TaskQueues the sweep loop (`sweeploop`) serves, whether each is idle, and
    their wake-ups: `wake` is safe from any thread and hands the key to the loop."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # The queues the sweep loop serves, each with whether it is idle and whether the
        # demand poll reads its demand list (not for an autoscaled queue, whose
        # autoscaler waits on that list itself).
        self._idle: dict[Key, tuple[bool, bool]] = {}
        self._sink: tuple[asyncio.AbstractEventLoop, Callable[[Key], None]] | None = None
        # Each autoscaler's wake-up for when its parked Redis server answers again.
        self._resumed: dict[Key, tuple[asyncio.AbstractEventLoop, asyncio.Event]] = {}
        # The idle loops waiting, with no queue idle, for one to be (`until_idle`).
        self._idle_waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = []

    def attach(self, sink: Callable[[Key], None]) -> None:
        """Where wakes go: ``sink(key)``, called on this (the running) event loop."""
        self._sink = (asyncio.get_running_loop(), sink)

    def register(self, key: Key) -> None:
        with self._lock:
            self._idle[key] = (False, False)

    def unregister(self, key: Key) -> None:
        with self._lock:
            self._idle.pop(key, None)

    def resumed_event(self, key: Key) -> asyncio.Event:
        """The event `resume` sets for ``key``'s autoscaler (on the event loop; kept for
        the key's life: an autoscaler started again finds the same one)."""
        with self._lock:
            entry = self._resumed.get(key)
            if entry is None or entry[0] is not asyncio.get_running_loop():
                entry = self._resumed[key] = (asyncio.get_running_loop(), asyncio.Event())
        return entry[1]

    def resume(self, keys: Iterable[Key]) -> None:
        """The probe found the Redis server of ``keys`` again: wake their sweeps and
        their parked autoscalers now, not at the end of their parked waits."""
        for key in keys:
            self.wake(key)
            with self._lock:
                entry = self._resumed.get(key)
            if entry is not None:
                _set_from_anywhere(*entry)

    def wake(self, key: Key) -> None:
        with self._lock:
            known, sink = key in self._idle, self._sink
        if not known or sink is None:
            return
        loop, wake = sink
        if _running_loop() is loop:  # an async handler: no hand-over through the loop's pipe
            wake(key)
            return
        with contextlib.suppress(RuntimeError):  # the loop closed: the operator is stopping
            loop.call_soon_threadsafe(wake, key)

    def forget_resumed(self, key: Key, event: asyncio.Event) -> None:
        """Drop ``key``'s autoscaler wake-up if ``event`` is still it (the autoscaler ended)."""
        with self._lock:
            entry = self._resumed.get(key)
            if entry is not None and entry[1] is event:
                del self._resumed[key]

    def set_idle(self, key: Key, idle: bool, *, poll_demand: bool = True) -> None:
        waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = []
        with self._lock:
            if key in self._idle:
                self._idle[key] = (idle, poll_demand)
                if idle:
                    waiters, self._idle_waiters = self._idle_waiters, []
        for waiter in waiters:
            _set_from_anywhere(*waiter)

    async def until_idle(self) -> None:
        """Return once some queue is idle (at once if one is): the idle loops wait here
        instead of waking every interval for nothing (a standby serves no queue)."""
        event = asyncio.Event()
        with self._lock:
            if any(idle for idle, _ in self._idle.values()):
                return
            self._idle_waiters.append((asyncio.get_running_loop(), event))
        try:
            await event.wait()
        finally:
            with self._lock, contextlib.suppress(ValueError):
                self._idle_waiters.remove((asyncio.get_running_loop(), event))

    def idle(self, *, demand_polled: bool = False) -> list[Key]:
        """The idle queues; with ``demand_polled``, only those whose demand list the
        demand poll reads."""
        with self._lock:
            return [
                key
                for key, (idle, polled) in self._idle.items()
                if idle and (polled or not demand_polled)
            ]

    def wake_all(self, keys: Iterable[Key]) -> None:
        for key in keys:
            self.wake(key)


def _set_from_anywhere(loop: asyncio.AbstractEventLoop, event: asyncio.Event) -> None:
    if _running_loop() is loop:  # an async handler: no hand-over through the loop's pipe
        event.set()
        return
    with contextlib.suppress(RuntimeError):  # the loop closed: the operator is stopping
        loop.call_soon_threadsafe(event.set)


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:  # a thread of a pool
        return None


class FirstSweeps:
    """New TaskQueues' first sweeps, held back while a burst of them is being created.

    A new TaskQueue's first sweep waits for its create handler, then asks `hold` (the
    sweep loop; `turn` is the same gate for a coroutine that waits on it). A lone
    creation sweeps at once; during a burst (another create handler finished less than
    ``quiet_s`` before) the first sweeps wait until no creation has finished for
    ``quiet_s``, or ``most_s`` at most. The Deployments need no sweep; what a first sweep
    adds (the status's Redis conditions, counts and readiness) comes once the burst is
    over, in one sweep that also sees the Deployment controller's writes, instead of a
    sweep, a status patch and its watch event per queue competing with the creations for
    the event loop. Used on the event loop only.

    ``most_s`` is a cap for creations that never stop. It is above the 27-41 s that 1,000
    creations take on a 2-core machine: released while a burst still runs, a thousand first
    sweeps and their status patches compete with its last creations, which then take
    seconds longer (bench/README.md)."""

    def __init__(self, quiet_s: float = 2.0, most_s: float = 60.0) -> None:
        self.quiet_s, self.most_s = quiet_s, most_s
        self._last = float("-inf")
        self._calm = asyncio.Event()
        self._timer: asyncio.TimerHandle | None = None

    async def turn(self, stopped: Any) -> None:
        """Until this queue's first sweep may run (at once unless a burst goes on)."""
        loop = asyncio.get_running_loop()
        now = loop.time()
        burst, self._last = now - self._last < self.quiet_s, now
        if not burst:
            return
        self._calm.clear()
        if self._timer is None:
            self._timer = loop.call_later(self.quiet_s, self._check, loop)
        await wait(self._calm, stopped, self.most_s)

    def hold(self, now: float) -> bool:
        """The sweep loop's `turn`: a first sweep arrives at ``now`` (loop time); True
        when it must wait (`released`) because a burst goes on."""
        burst, self._last = now - self._last < self.quiet_s, now
        return burst

    def released(self, now: float, since: float) -> bool:
        """Whether a first sweep held since ``since`` may run at ``now``."""
        return now - self._last >= self.quiet_s or now - since >= self.most_s

    def release_at(self, since: float) -> float:
        return min(self._last + self.quiet_s, since + self.most_s)

    def _check(self, loop: asyncio.AbstractEventLoop) -> None:
        left = self._last + self.quiet_s - loop.time()
        if left > 0:
            self._timer = loop.call_later(left, self._check, loop)
            return
        self._timer = None
        self._calm.set()


class Stopping(Exception):  # noqa: N818 - a state, not a failure
    """The operator is stopping: its thread pool takes no more work; loops end quietly."""


def in_threads(executor: ThreadPoolExecutor, closing: threading.Event) -> Blocking:
    """Blocking calls of the sweeps and the autoscaler, in the operator's own pool (not
    kopf's handler threads, not asyncio's default pool of cpu+4), with the caller's
    context (kopf.event needs it). Once ``closing`` is set (the cleanup handler, before it
    shuts the pool down) every call raises `Stopping`."""

    async def run(fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        if closing.is_set():
            raise Stopping
        call = functools.partial(contextvars.copy_context().run, fn, *args, **kwargs)
        return await asyncio.get_running_loop().run_in_executor(executor, call)

    return run


async def wait(event: asyncio.Event, stopped: Any, within_s: float) -> None:
    """Until ``event`` is set, kopf's ``stopped`` flag is raised, or ``within_s`` passed."""
    woken = asyncio.ensure_future(event.wait())
    halted = asyncio.ensure_future(stopped.wait())
    try:
        await asyncio.wait({woken, halted}, timeout=within_s, return_when=asyncio.FIRST_COMPLETED)
    finally:
        woken.cancel()
        halted.cancel()


async def poll_demand(
    wakers: Wakers, connections: Connections, every_s: float, run: Blocking
) -> None:
    """Forever: every ``every_s``, wake the idle queues whose `demand` list was pushed
    (read for all of them in one round trip per Redis). Runs for the operator's life."""
    await _wake_from(
        "demand poll",
        every_s,
        lambda: wakers.idle(demand_polled=True),
        connections.pop_demand,
        wakers,
        run,
    )


async def housekeep_idle(
    wakers: Wakers, connections: Connections, every_s: float, run: Blocking
) -> None:
    """Forever: every ``every_s``, the idle queues' housekeeping in a few pipelines per
    Redis (`Connections.housekeep`), waking those a full sweep must look at. An idle
    queue's own full sweep runs only when woken, or every `IDLE_FULL_SWEEP_FACTOR` times
    ``every_s`` as a safety net. Runs for the operator's life."""
    await _wake_from("idle housekeeping", every_s, wakers.idle, connections.housekeep, wakers, run)


async def _wake_from(  # noqa: PLR0917 - the one loop both passes share
    what: str,
    every_s: float,
    select: Callable[[], list[Key]],
    check: Callable[[list[Key]], list[Key]],
    wakers: Wakers,
    run: Blocking,
) -> None:
    """Every ``every_s``: ``check`` the ``select``ed idle queues (in a thread) and wake
    those it returns. A failed pass is logged and the next one runs as planned. While no
    queue is idle it sleeps until one is (`Wakers.until_idle`)."""
    while True:
        await asyncio.sleep(every_s)
        idle = select()
        if not idle:
            await wakers.until_idle()
            continue
        try:
            woken = await run(check, idle)
        except Exception:  # never let one bad pass end the loop
            _log.exception("%s failed", what)
            continue
        if woken:
            named = ", ".join(f"{namespace}/{name}" for namespace, name in woken)
            _log.debug("%s of %d queues woke %s", what, len(idle), named)
        wakers.wake_all(woken)


async def probe_servers(
    wakers: Wakers,
    connections: Connections,
    run: Blocking,
    *,
    policy_every_s: float = 30.0,
) -> None:
    """Forever: probe each parked Redis server when its backoff says so, each probe in
    a task of its own (a server that hangs holds one thread, and no other server's
    probe), waking the queues a probe resumes; and every ``policy_every_s`` read each
    server's maxmemory-policy (`Connections.check_policies`). Between those it sleeps:
    until the next probe is due, a server is newly parked (`Outages.on_park`) or a probe
    ends. Polled every 0.2 s, it woke five times a second on every replica, which was
    a third of a standby's CPU at rest. Runs for the operator's life."""
    loop = asyncio.get_running_loop()
    changed = asyncio.Event()
    probing: set[asyncio.Task[None]] = set()

    async def probe(target: str) -> None:
        try:
            resumed = await run(connections.probe, target)
        except Stopping:
            return
        except Exception:  # never let one probe end the probing; it is retried
            _log.exception("probe of a parked Redis failed")
            connections.outages.probed(target, connections.outages.fault(target))
            return
        finally:
            changed.set()  # its next probe, if any, has its time now
        if resumed:
            _log.info("Redis answers again: %d queues resume", len(resumed))
        wakers.resume(resumed)

    # from whichever thread parks a server
    connections.outages.on_park(functools.partial(_set_from_anywhere, loop, changed))
    checked = -math.inf
    try:
        while True:
            changed.clear()  # before the reads below: a park after them wakes the wait
            for target in connections.probe_due():
                task = asyncio.create_task(probe(target))
                probing.add(task)
                task.add_done_callback(probing.discard)
            if loop.time() - checked >= policy_every_s:
                checked = loop.time()
                try:
                    await run(connections.check_policies)
                except Stopping:
                    return
                except Exception:
                    _log.exception("maxmemory-policy check failed")
            wait = checked + policy_every_s - loop.time()
            due = connections.outages.next_probe_in()
            if due is not None:
                wait = min(wait, due)
            if wait > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(changed.wait(), wait)
    finally:
        connections.outages.on_park(None)


#: An idle queue's full sweep (settings written, workers checked, status) runs this many
#: idle intervals apart when nothing wakes it; `housekeep_idle` covers it in between.
IDLE_FULL_SWEEP_FACTOR = 10
