"""``Worker``: the loops that tie the worker's parts together, and its start and stop.

One asyncio loop runs six activities:

- the claim loop fills free slots with one batched ``claim`` and, when the queue is
  empty, blocks on the broker's ``wait_for_work`` (BLPOP), where producers hand it new
  tasks they claimed for it, so an idle fleet starts a new task within a millisecond;
- each claimed task runs at once (``Execution``): an async handler on the loop, a sync
  handler on a handler thread (``--isolation process``: any handler in that thread's
  child process, ``isolation.py``);
- the flusher writes finished tasks' outcomes (``Outbox.serve``, ``OutcomeWriter``);
  completions gathered while the previous write was in flight go out in one script
  call, which also claims tasks for the slots they free (``complete_and_claim``). A
  task keeps its slot and its lease until its outcome is written, so nothing finished
  is ever forgotten;
- the heartbeat (``heartbeat_loop``) extends every held lease in one call, reports
  in-flight count and the draining flag, abandons tasks whose lease was lost, and
  sweeps the queue now and then so the library loses nothing even without the operator;
- the report loop (``report_loop``) writes what handlers report (progress, real cost)
  in one call per interval at most;
- the schedule loop (``schedule_loop``) fires the queue's due schedules, off the claim
  path, so schedules fire with or without the operator.

What is given back without an attempt (a drain's unfinished runs, prefetched tasks no
thread has begun) goes through ``HandBack``.

Start, drain and stop are the phases of one ``Lifecycle`` (``lifecycle.py``), which every
loop is given and waits on; a held task's state is its run's ``RunState`` (``runs.py``).

Redis errors never escape these loops: they wait on the ``RedisGate`` instead. Leases
that expire meanwhile are taken back by sweeps; claim tokens make any late write from
this worker harmless.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time

import redis.asyncio as aioredis

from taskfleet.protocol import tracing
from taskfleet.protocol.calls import run_async
from taskfleet.protocol.connect import (
    connect_queue_async,
    durability,
    follow_slot,
    is_cluster,
    pinned,
)
from taskfleet.protocol.errors import IdentityTaken
from taskfleet.protocol.keys import QueueKeys
from taskfleet.protocol.reads import QueueReads
from taskfleet.protocol.store import slot_key
from taskfleet.worker import start
from taskfleet.worker.broker import Broker, bounded
from taskfleet.worker.claiming import ClaimLoop, ClaimLoopState
from taskfleet.worker.events import log_event
from taskfleet.worker.execution import Execution
from taskfleet.worker.firing import schedule_loop
from taskfleet.worker.gate import FatalStop, RedisGate, wait_any
from taskfleet.worker.handback import HandBack
from taskfleet.worker.handlers import Handler, format_error
from taskfleet.worker.heartbeat import heartbeat_loop, taken_over
from taskfleet.worker.held import EXIT_SLOTS_STUCK, held_loop
from taskfleet.worker.identity import Whereabouts
from taskfleet.worker.isolation import check_sendable
from taskfleet.worker.lifecycle import Lifecycle, Phase
from taskfleet.worker.named import HandlerSet
from taskfleet.worker.outbox import Outbox
from taskfleet.worker.quotaslots import QuotaConnect
from taskfleet.worker.reporting import Reports, report_loop
from taskfleet.worker.runs import Counters, Outcome
from taskfleet.worker.runtime import (
    POLL_INTERVAL_S,
    WAITER_GRACE_S,
    live_waiters,
    process_start,
    remove_state,
    runtime_path,
)
from taskfleet.worker.runtime_file import RuntimeFile
from taskfleet.worker.settings import WorkerSettings
from taskfleet.worker.slots import Slots
from taskfleet.worker.summary import Summary, summary_loop
from taskfleet.worker.timings import Timings
from taskfleet.worker.tracing import traced
from taskfleet.worker.writing import OutcomeWriter

__all__ = ["Worker"]


class Worker:
    """Runs one queue's tasks with ``concurrency`` slots until drained."""

    def __init__(
        self,
        settings: WorkerSettings,
        handler: Handler | HandlerSet,
        *,
        client: aioredis.Redis | None = None,
    ) -> None:
        settings.validate()
        self.settings = settings
        # one handler, or several by task name (``named``)
        handlers = HandlerSet.of(handler)
        if settings.isolated:
            check_sendable(handlers)  # ValueError: one line, before anything starts
        # A traced handler is a closure, which can't travel to a child process.
        self.traced = tracing.configured_now() and not settings.isolated
        if self.traced:
            handlers = traced(handlers, settings.queue)
        self.handler = handlers
        self._client = client
        self._own_client = client is None
        self._broker: Broker | None = None
        # Its phases end the background loops, not task.cancel(): a cancellation that
        # lands while a redis-py call completes can be swallowed (Python 3.11).
        self.lifecycle = lifecycle = Lifecycle(self._phase_changed)
        self.gate = RedisGate(
            self._reconnect,
            lifecycle.beat_now.set,
            backoff_base=settings.backoff_base,
            backoff_max=settings.backoff_max,
            where=self._node,
            writable=self._writable,
        )
        self.outbox = Outbox(self._write, self.gate, lifecycle)
        self.reports = Reports()  # handlers' progress and costs, written in batches
        # An async handler's claimed tasks all run at once: prefetch is for threads only
        # (in process isolation every handler runs on a slot's thread and child).
        on_loop = self.handler.any_async and not settings.isolated
        prefetch = 0 if on_loop else settings.prefetch_depth
        self.slots = Slots(settings.concurrency, prefetch)
        self.execution = Execution(
            settings,
            self.handler,
            self.slots,
            self.outbox,
            lifecycle,
            changed=self._held_changed,
            report=self.reports.add,
            report_quota=self.reports.add_quota,
        )
        self.summary = Summary(self.execution)  # the periodic tasks_summary line
        self.handback = HandBack(self.execution, self.slots, lifecycle)
        self.writer = OutcomeWriter(
            self.execution,
            self.slots,
            lifecycle,
            take=self.handback.take,
            may_claim=self._may_claim_with_completions,
            reports=self.reports,
            paused=self.handback.paused,
        )
        self.runtime_file = RuntimeFile(
            runtime_path(settings.runtime_dir),
            self._runtime_status,
            pid=os.getpid(),
            start=process_start(os.getpid()),
            pod=settings.pod,
            queue=settings.queue,
        )
        self.claims: ClaimLoop | None = None  # once registered
        self._heartbeat_interval = settings.heartbeat_interval
        # Recorded with the worker: a worker starting under our name judges us by it.
        self._whereabouts = Whereabouts.local(settings.heartbeat_interval)
        self._fatal: FatalStop | None = None
        #: The server's maxmemory-policy read at start (None: not known).
        self.eviction_policy: str | None = None

    # ---------------------------------------------------------------- public control

    @property
    def draining(self) -> bool:
        return self.lifecycle.draining

    @property
    def held_slots(self) -> int:
        """Slots held by calls the worker gave up on (their task ended) that still run."""
        return len(self.execution.held_slots)

    @property
    def inflight(self) -> int:
        """Tasks held, outcomes not yet written included."""
        return len(self.execution.held)

    @property
    def counters(self) -> Counters:
        return self.execution.counters

    @property
    def timings(self) -> Timings:
        return self.execution.timings

    def request_drain(self) -> None:
        """First SIGTERM/SIGINT (or ``taskfleet drain``): stop claiming, finish, then exit.

        A second request while draining releases everything at once and exits.
        """
        lifecycle = self.lifecycle
        held = len(self.execution.held)
        if lifecycle.draining:
            if not lifecycle.forced:
                log_event(logging.WARNING, "drain_forced", inflight=held)
                lifecycle.request_stop()
            return
        if lifecycle.phase is Phase.STOPPED:
            return  # a signal after the end
        log_event(
            logging.INFO,
            "drain_started",
            inflight=held,
            drain_timeout_s=self.settings.drain_timeout,
        )
        lifecycle.request_drain()

    def _quota_connect(self) -> QuotaConnect:
        """On a Redis Cluster: how to reach a provider quota's slot (a client pinned to
        its master, as the queue's is); None on a single server."""
        url = self.settings.redis_url
        if not is_cluster(url):
            return None

        async def connect(key: str) -> aioredis.Redis:
            return await connect_queue_async(
                url, key, socket_connect_timeout=2.0, socket_timeout=None, health_check_interval=0
            )

        return connect

    async def run(self) -> int:
        """Serve until drained; returns the process exit code (0 after a drain)."""
        loop = asyncio.get_running_loop()
        if self._client is None:
            # On a Redis Cluster: a client of the master of the queue's slot (connect.py).
            self._client = await connect_queue_async(
                self.settings.redis_url,
                slot_key(self.settings.queue),
                socket_connect_timeout=2.0,
                # No socket timeout: the broker bounds each call itself (reply_timeout),
                # which saves redis-py's per-command send task (see Broker).
                socket_timeout=None,
                health_check_interval=0,
            )
        self._broker = Broker(
            self.settings.queue,
            self._client,
            self.settings.pod,
            self.settings.incarnation,
            reply_timeout=self.settings.reply_timeout,
            host=self._whereabouts.encode(),
            durability=durability(self.settings.redis_url),
            served=self.handler.served,
            quota_connect=self._quota_connect(),
        )
        self.writer.broker = self.handback.broker = self._broker
        self.reports.bind()
        self.execution.bind()
        lifecycle = self.lifecycle
        self.runtime_file.changed()
        try:
            try:
                self.eviction_policy = await start.check_eviction(
                    self._client, self.settings, self.gate, lifecycle
                )
                await start.register(
                    self._broker, self.settings, self._whereabouts, self.gate, lifecycle
                )
                self._heartbeat_interval = await start.heartbeat_interval(
                    self._client, self.settings, self.gate, lifecycle
                )
            except FatalStop as stop:
                return stop.code
            if lifecycle.draining:
                return await self._shutdown([])
            lifecycle.started()
            log_event(
                logging.INFO,
                "worker_started",
                queue=self.settings.queue,
                pod=self.settings.pod,
                incarnation=self.settings.incarnation,
                concurrency=self.settings.concurrency,
                prefetch=self.slots.prefetch,
                handler=self.handler.ref,
                pid=os.getpid(),
            )
            background = [
                loop.create_task(
                    heartbeat_loop(
                        self._broker,
                        self.execution,
                        self.settings,
                        self.gate,
                        lifecycle,
                        interval=self._heartbeat_interval,
                    ),
                    name="heartbeat",
                ),
                loop.create_task(self.outbox.serve(), name="flush"),
                loop.create_task(
                    report_loop(
                        self._broker, self.reports, self.gate, lifecycle, self.handback.paused
                    ),
                    name="reports",
                ),
                loop.create_task(
                    summary_loop(self.summary, lifecycle, self.settings.summary_interval),
                    name="summary",
                ),
            ]
            background.append(
                loop.create_task(
                    held_loop(
                        self.execution,
                        lifecycle,
                        concurrency=self.settings.concurrency,
                        grace=self.settings.held_grace,
                        interval=min(self._heartbeat_interval, self.settings.held_grace),
                        stuck=self._slots_stuck,
                    ),
                    name="held",
                )
            )
            if self.settings.fire_schedules:
                background.append(
                    loop.create_task(
                        schedule_loop(self._broker, self.gate, lifecycle), name="schedules"
                    )
                )
            if self.slots.prefetch:
                background.append(loop.create_task(self.handback.prefetch_guard(), name="prefetch"))
            self.claims = ClaimLoop(
                self.settings,
                self._broker,
                self.execution,
                self.slots,
                self.gate,
                lifecycle=lifecycle,
                take=self.handback.take,
            )
            claimer = loop.create_task(self.claims.run(), name="claim")
            drain = loop.create_task(lifecycle.drain_requested.wait())
            await asyncio.wait({drain, claimer, *background}, return_when="FIRST_COMPLETED")
            drain.cancel()
            crashed = [t for t in (claimer, *background) if t.done() and not t.cancelled()]
            failure = next((t.exception() for t in crashed if t.exception()), None)
            if failure is None:
                await claimer
                return await self._shutdown(background)
            if isinstance(failure, IdentityTaken):  # a claim found this process replaced
                failure = taken_over(self.settings, failure)
            if isinstance(failure, FatalStop):
                return await self._stop_at_once(failure, [claimer, *background])
            # A bug, not an outage (those are handled in the loops): give everything back
            # at once and exit 1 so the container restarts rather than idling half-alive.
            # Given back as lost, not released: if a task caused it, the next worker that
            # claims it fails too, and only a counted loss ends that (max_lost).
            log_event(logging.ERROR, "worker_failed", error=format_error(failure))
            lifecycle.request_stop()  # and the claim loop, maybe waiting for a slot, ends
            with contextlib.suppress(Exception):
                await claimer
            await self._shutdown([t for t in background if not t.done()], failed=True)
            return 1
        finally:
            self.execution.close()
            await self.gate.close()
            if self._own_client and self._client is not None:
                with contextlib.suppress(Exception):
                    await self._client.aclose()
            lifecycle.stopped()
            self.runtime_file.write()
            remove_state(self.runtime_file.path, os.getpid())

    # ---------------------------------------------------------------- start and stop

    async def _reconnect(self) -> None:
        """The gate's probe: drop every connection to the old server, then ask once."""
        assert self._client is not None
        client = self._client
        # On a cluster: ask the cluster where the queue's slot lives now (a failover or
        # resharding moved it) and point the client there.
        await bounded(follow_slot(client), self.settings.reply_timeout)
        # Pooled connections to the old server are dead too: drop them all, so the first
        # error is the only one this outage produces.
        await client.connection_pool.disconnect()
        if self._broker is not None:
            await self._broker.close()
        if pinned(client):
            # A keyed read: only the slot's master answers it (another node: MOVED).
            read = QueueReads(QueueKeys(self.settings.queue)).lease_ttl()
            await bounded(run_async(client, read), self.settings.reply_timeout)
        else:
            await bounded(client.ping(), self.settings.reply_timeout)

    async def _writable(self) -> None:
        """The gate's probe after a refused write: does Redis take writes again?"""
        if self._broker is not None:
            await self._broker.writable()

    def _node(self) -> str:
        """host:port (or socket path) of the server this worker's queue lives on now."""
        if self._client is None:
            return ""
        kwargs = self._client.connection_pool.connection_kwargs
        return str(kwargs.get("path") or f"{kwargs.get('host')}:{kwargs.get('port')}")

    async def _shutdown(self, background: list[asyncio.Task[None]], *, failed: bool = False) -> int:
        """Wait for in-flight tasks up to the drain deadline, release the rest, deregister.

        ``failed``: the worker is stopping on an error; what it still holds is given back
        as lost by the deregistration (see ``Broker.deregister``), not released.
        """
        assert self._broker is not None
        execution = self.execution
        deadline = time.monotonic() + self.settings.drain_timeout
        # Prefetched tasks no thread has begun go back now, for a worker that stays.
        await self.handback.withdraw(list(execution.held.values()))
        left = max(0.0, deadline - time.monotonic())
        await wait_any(execution.idle, self.lifecycle.stop_requested, limit=left)
        leftover = execution.abandon_unfinished()
        # Isolated runs: their children are stopped, and the tasks given back only once
        # the children are gone, so no task runs here and elsewhere at once.
        stopping = execution.stop_children(leftover, "drain")
        if stopping and not await execution.children_gone(stopping):
            log_event(logging.WARNING, "children_not_gone", tasks=len(stopping))
        self.lifecycle.close()
        self.outbox.ready.set()  # the flusher waits on this alone
        if background:
            _, pending = await asyncio.wait(background, timeout=5.0)
            for task in pending:
                task.cancel()  # a write stuck on a dead server; its batch stays in the outbox
        # Outcomes already produced are written, not released: that work is done.
        try:
            await asyncio.wait_for(self.outbox.flush(), timeout=3.0)
        except (TimeoutError, FatalStop):
            pass
        except Exception as exc:  # refused for what it is: those tasks' leases bring them back
            log_event(logging.WARNING, "final_flush_failed", error=format_error(exc))
        if leftover and not failed:
            await self.handback.release(leftover)
        try:
            given_back = await asyncio.wait_for(self._broker.deregister(failed=failed), timeout=2.0)
            if failed:
                self.counters.lost += given_back
        except Exception as exc:
            # Not fatal: the operator and sweeps notice a silent pod by its heartbeat.
            log_event(logging.WARNING, "deregister_failed", error=format_error(exc))
        finally:
            await self._broker.close()
        self.summary.emit()  # the last window's, before the totals
        counters = self.counters
        log_event(
            logging.INFO,
            "worker_stopped",
            completed=counters.completed,
            failed=counters.failed,
            released=counters.released,
            lost=counters.lost,
        )
        self.lifecycle.drained()
        self.runtime_file.write()  # now, not next loop turn: the waiters are polling for it
        await self._outlive_drain_waiters()
        fatal = self._fatal or self.gate.fatal
        return 0 if fatal is None else fatal.code

    async def _stop_at_once(self, stop: FatalStop, tasks: list[asyncio.Task[None]]) -> int:
        """Stop without a drain: Redis refused us, or our name was taken over.

        In-flight runs are abandoned (async handlers cancelled; a thread's result is
        dropped) and nothing is written: Redis refuses us, or the newcomer took back what
        we held (a task claimed after that comes back when its lease expires). No
        deregistration either: the name's record is someone else's, or unreachable.
        """
        assert self._broker is not None
        self._fatal = stop
        self.lifecycle.request_stop()
        self.lifecycle.close()
        self.outbox.ready.set()
        for task in tasks:
            task.cancel()
        await asyncio.wait(tasks, timeout=5.0)
        for task in tasks:  # seen: their errors are this stop
            if task.done() and not task.cancelled():
                task.exception()
        self.execution.abandon_unfinished()
        self.execution.stop_children(self.execution.held.values(), "worker stopped")
        with contextlib.suppress(Exception):
            await self._broker.close()
        self.summary.emit()  # the last window's, before the totals
        counters = self.counters
        log_event(
            logging.INFO,
            "worker_stopped",
            completed=counters.completed,
            failed=counters.failed,
            released=counters.released,
            lost=counters.lost,
            exit_code=stop.code,
        )
        return stop.code

    async def _outlive_drain_waiters(self) -> None:
        """Let ``taskfleet drain`` processes see ``drained`` and exit before we do.

        As the init's child (or PID 1 itself) our exit ends the PID namespace and the
        kernel SIGKILLs whatever is left in it, which the kubelet reports as a failed
        preStop hook. Bounded: a waiter that hangs does not keep a drained worker alive.
        """
        directory = self.runtime_file.path.parent
        deadline = time.monotonic() + WAITER_GRACE_S
        while live_waiters(directory):
            if time.monotonic() >= deadline:
                log_event(logging.WARNING, "drain_waiters_left", waited_s=WAITER_GRACE_S)
                return
            await asyncio.sleep(POLL_INTERVAL_S)

    # ---------------------------------------------------------------- wiring

    async def _write(self, batch: list[Outcome]) -> None:
        await self.writer.write(batch)

    def _slots_stuck(self, stuck: int) -> None:
        """Every slot is stuck (``held.py``): drain what is left, then exit for a restart."""
        self._fatal = self._fatal or FatalStop(EXIT_SLOTS_STUCK)
        self.lifecycle.request_drain()

    def _may_claim_with_completions(self) -> bool:
        """Completions claim replacements unless draining or the claim loop will (it waits
        for a producer's wake-up)."""
        if self.lifecycle.drain_requested.is_set():
            return False
        return self.claims is None or self.claims.state is not ClaimLoopState.WAITING_FOR_WORK

    # ---------------------------------------------------------------- runtime file

    def _phase_changed(self) -> None:
        self.runtime_file.changed()

    def _held_changed(self) -> None:
        self.runtime_file.changed()

    def _runtime_status(self) -> tuple[str, bool, int]:
        # held includes outcomes not yet written
        lifecycle = self.lifecycle
        return lifecycle.reported, lifecycle.drain_requested.is_set(), len(self.execution.held)
