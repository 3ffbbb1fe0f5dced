"""The worker: claim loop, concurrency slots, heartbeats, timeouts and graceful drain.

One asyncio loop runs four activities that share ``Worker`` state:

- the claim loop fills free slots with one batched ``claim`` and, when the queue is
  empty, blocks on the broker's ``wait_for_work`` (BLPOP), where producers hand it new
  tasks they claimed for it, so an idle fleet starts a new task within a millisecond;
- each claimed task runs at once: an async handler as an asyncio task on the loop, a sync
  handler on one of ``concurrency`` handler threads (threads release the GIL every few
  ms, so the loop keeps beating even while a handler burns CPU). Threads hand their
  outcomes back in batches, with one loop wake-up for all that finish together;
- the flusher writes finished tasks' outcomes; completions gathered while the previous
  write was in flight go out in one script call, which also claims tasks for the slots
  they free (``complete_and_claim``). A task keeps its slot and its lease until its
  outcome is written, so nothing finished is ever forgotten;
- the heartbeat extends every held lease in one call, reports in-flight count and the
  draining flag, abandons tasks whose lease was lost, and sweeps the queue now and then
  so the library loses nothing even without the operator.

Redis errors never escape these loops: the first one starts an outage (logged once),
every loop waits for a single probe to reconnect with capped, jittered exponential
backoff, then carries on. Leases that expire meanwhile are taken back by sweeps; claim
tokens make any late write from this worker harmless.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import math
import os
import queue
import random
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import redis.asyncio as aioredis
from redis.exceptions import AuthenticationWrongNumberOfArgsError, NoPermissionError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from taskfleet.broker import Broker, ClaimedTask, ClaimResult, WorkerRecord, bounded
from taskfleet.config import QueueConfig
from taskfleet.errors import IdentityTaken, auth_failure
from taskfleet.handlers import (
    Handler,
    TaskContext,
    context_for,
    encode_result,
    format_error,
)
from taskfleet.identity import Whereabouts, holder_alive
from taskfleet.keys import QueueKeys, validate_queue_name
from taskfleet.runtime import (
    POLL_INTERVAL_S,
    WAITER_GRACE_S,
    RuntimeState,
    live_waiters,
    process_start,
    remove_state,
    runtime_path,
    write_state,
)

__all__ = ["Worker", "WorkerSettings", "log_event"]

log = logging.getLogger("taskfleet.worker")

#: Errors that mean "Redis is unreachable right now", not "the request was wrong"; and
#: Redis refusing our credentials or rights (redis-py's AuthenticationError is a
#: ConnectionError), which no retry mends: ``_outage`` tells them apart (``auth_failure``)
#: and stops the worker instead (exit 2).
REDIS_DOWN: tuple[type[BaseException], ...] = (
    RedisConnectionError,
    RedisTimeoutError,
    ConnectionError,
    TimeoutError,
    OSError,
    NoPermissionError,
    AuthenticationWrongNumberOfArgsError,
)
#: Exit code of a worker stopped by bad configuration found while running: Redis refused
#: its credentials, or another worker took its name.
EXIT_BAD_CONFIG = 2
DEFAULT_LEASE_TTL_S = float(QueueConfig.model_fields["lease_ttl_s"].default)
#: Least time between two rewrites of the runtime file that ``taskfleet drain`` does not wait
#: on: its in-flight count matters to ``drain --wait`` only once draining (and the start of a
#: drain is written at once); before, it is for a person's look at the file.
RUNTIME_WRITE_INTERVAL_S = 1.0
RUNTIME_WRITE_INTERVAL_DRAINING_S = 0.1
#: How much longer than its longest wait an idle worker stays registered for hand-offs. A
#: worker killed while idle may be handed a task for that long: its lease brings it back.
IDLE_MARGIN_S = 1.0
#: Prefetch (sync handlers): claimed tasks wait in the worker for a handler thread, so a
#: thread that finishes takes its next task without waiting for a round trip to Redis.
#: Only while a typical run (moving average) is shorter than this: a task never waits
#: long behind others in one worker while another worker could run it.
PREFETCH_RUN_LIMIT_S = 0.01
#: A prefetched task that waited this long for a thread (they are all busy with long
#: runs) is given back to the queue, and prefetch stops until runs are short again.
PREFETCH_MAX_WAIT_S = 1.0
#: Weight of the newest run in that moving average.
RUN_TIME_WEIGHT = 0.1
#: Upper bound of --prefetch.
MAX_PREFETCH = 10_000
T = TypeVar("T")


class _FatalStop(Exception):  # noqa: N818 - internal signal, not an error of the API
    """Stop now with ``code``: Redis refused our credentials, or our name was taken over."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


def log_event(level: int, event: str, **fields: Any) -> None:
    """One structured line per event; the CLI's formatter renders key=value or JSON."""
    log.log(level, event, extra={"fields": fields})


async def _wait_any(*events: asyncio.Event, limit: float | None = None) -> None:
    """Return when any of ``events`` is set (or after ``limit`` seconds)."""
    waiters = [asyncio.ensure_future(event.wait()) for event in events]
    try:
        await asyncio.wait(waiters, timeout=limit, return_when="FIRST_COMPLETED")
    finally:
        for waiter in waiters:
            waiter.cancel()


def _number(raw: Any, default: float) -> float:
    """A config value as the Lua scripts read it: unset or not a number -> the default."""
    try:
        value = float(raw)
    except (TypeError, ValueError):
        return default
    return value if value > 0 and math.isfinite(value) else default


@dataclass(frozen=True)
class WorkerSettings:
    """Everything ``taskfleet worker`` takes; validated by the CLI before it gets here."""

    queue: str
    redis_url: str = field(repr=False)  # may hold a password: never in a repr or a log
    pod: str
    incarnation: str
    concurrency: int = 1
    prefetch: int | None = None  # None: twice the concurrency (see prefetch_depth)
    drain_timeout: float = 30.0
    heartbeat_interval: float = 5.0
    lease_ttl: float | None = None  # None: the queue's setting (QueueConfig.lease_ttl_s)
    default_timeout: float | None = None
    sweep_every: int = 3  # heartbeats between queue sweeps
    idle_wait: float = 1.0  # longest BLPOP; also bounds how long a missed wake-up costs
    backoff_base: float = 0.1
    backoff_max: float = 5.0
    runtime_dir: str | None = None

    @property
    def prefetch_depth(self) -> int:
        """Most claimed tasks held waiting for a slot (sync handlers, short tasks only)."""
        if self.prefetch is None:
            return min(2 * self.concurrency, MAX_PREFETCH)
        return self.prefetch

    def validate(self) -> None:
        """Raise ValueError with one line saying what to fix."""
        if self.concurrency < 1:
            raise ValueError(f"concurrency must be at least 1, got {self.concurrency}")
        if self.prefetch is not None and not 0 <= self.prefetch <= MAX_PREFETCH:
            raise ValueError(f"prefetch must be within 0..{MAX_PREFETCH}, got {self.prefetch}")
        # nan passes every comparison below and inf means "never": both would be written
        # into the queue's shared config or spin the heartbeat, so refuse them first.
        for what, value in (
            ("heartbeat interval", self.heartbeat_interval),
            ("lease TTL", self.lease_ttl),
            ("drain timeout", self.drain_timeout),
            ("task timeout", self.default_timeout),
        ):
            if value is not None and not math.isfinite(value):
                raise ValueError(f"{what} must be a finite number of seconds, got {value}")
        if self.heartbeat_interval <= 0:
            raise ValueError("heartbeat interval must be positive")
        if self.lease_ttl is not None and self.lease_ttl <= 0:
            raise ValueError("lease TTL must be positive")
        if self.lease_ttl is not None and self.heartbeat_interval * 2 > self.lease_ttl:
            raise ValueError(
                f"heartbeat interval ({self.heartbeat_interval:g}s) must be at most half the "
                f"lease TTL ({self.lease_ttl:g}s), or one late beat loses every lease"
            )
        if self.drain_timeout < 0:
            raise ValueError("drain timeout must not be negative")
        if self.default_timeout is not None and self.default_timeout <= 0:
            raise ValueError("task timeout must be positive")
        validate_queue_name(self.queue)
        if not self.pod:
            raise ValueError("pod name must not be empty")


@dataclass(eq=False)
class _Running:
    """One task this worker holds: from claim until its outcome is written."""

    task: ClaimedTask
    started: float
    context: contextvars.Context | None = None  # where current_task() names this task
    job: asyncio.Task[None] | None = None  # an async handler's run on the loop
    in_thread: bool = False  # a sync handler's call is queued or running on a thread
    began: float | None = None  # when a thread began the call (None: still queued)
    ran_s: float = 0.0  # how long the thread's call took
    timer: asyncio.TimerHandle | None = None  # a sync handler's timeout
    stuck: bool = False  # given up on while its thread runs on: it keeps its slot
    finished: bool = False  # its outcome is queued or being written: never release it
    abandoned: bool = False  # lease lost or released: whatever it produces is dropped
    lease_lost: bool = False  # abandoned because another worker may run it now


def _timeout_error(limit: float | None) -> str:
    return f"TimeoutError: task exceeded its timeout of {limit:g}s"


class _HandlerThreads:
    """``size`` daemon threads that run a sync handler, one task each at a time.

    Each submitted run comes back exactly once through ``deliver``, on the loop, as
    ``(run, result JSON, error)``; outcomes of calls that end together share one
    wake-up of the loop. Daemon threads: a handler that never returns can't hold the
    process at exit (the CLI exits without joining them anyway).
    """

    def __init__(
        self,
        size: int,
        func: Callable[[dict[str, Any]], Any],
        deliver: Callable[[list[tuple[_Running, str | None, str | None]]], None],
    ) -> None:
        self._size = size
        self._func = func
        self._deliver = deliver
        self._jobs: queue.SimpleQueue[_Running | None] = queue.SimpleQueue()
        # Orders a thread's start of a queued run against withdraw(): a run is either
        # begun or withdrawn, never both.
        self._begin = threading.Lock()
        self._done: deque[tuple[_Running, str | None, str | None]] = deque()
        self._wake_armed = False
        #: Set by the loop while it will call ``collect`` soon anyway (an outcome write is
        #: in flight): outcomes then wait for it instead of waking the loop themselves.
        self.loop_will_collect = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._threads: list[threading.Thread] = []

    def submit(self, run: _Running) -> None:
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
        if not self._threads:
            for i in range(self._size):
                thread = threading.Thread(
                    target=self._serve, name=f"taskfleet-handler-{i}", daemon=True
                )
                thread.start()
                self._threads.append(thread)
        run.in_thread = True
        self._jobs.put(run)

    def close(self) -> None:
        """Let idle threads end; busy ones end when their call returns."""
        for _ in self._threads:
            self._jobs.put(None)

    def withdraw(self, runs: Iterable[_Running]) -> list[_Running]:
        """Of ``runs``, those no thread has begun: abandoned now, so none ever will."""
        withdrawn = []
        with self._begin:
            for run in runs:
                if run.in_thread and run.began is None and not run.abandoned:
                    run.abandoned = True
                    withdrawn.append(run)
        return withdrawn

    def _serve(self) -> None:
        func, jobs, done, begin = self._func, self._jobs, self._done, self._begin
        clock = time.monotonic
        while (run := jobs.get()) is not None:
            result = error = None
            with begin:
                if not run.abandoned:  # released or lost while queued: don't start it
                    run.began = clock()
            if run.began is not None:
                try:
                    assert run.context is not None
                    result = encode_result(run.context.run(func, run.task.payload))
                except BaseException as exc:  # the attempt failed; the thread serves on
                    error = format_error(exc)
                run.ran_s = clock() - run.began
            done.append((run, result, error))
            # Append first, then check: the loop clears both flags before it empties the
            # deque, so an outcome is never left behind without a collection on its way.
            if not self._wake_armed and not self.loop_will_collect:
                self._wake_armed = True
                with contextlib.suppress(RuntimeError):  # the loop is gone: exiting
                    assert self._loop is not None
                    self._loop.call_soon_threadsafe(self.collect)

    def collect(self) -> None:
        """Deliver the outcomes that are in (on the loop)."""
        self._wake_armed = False
        batch = []
        while self._done:
            batch.append(self._done.popleft())
        if batch:
            self._deliver(batch)


@dataclass
class _Outcome:
    run: _Running
    result: str | None = None  # JSON text on success
    error: str | None = None  # "Type: message" on failure


@dataclass
class _Counters:
    completed: int = 0
    failed: int = 0
    released: int = 0
    lost: int = 0
    stale: int = 0


class Worker:
    """Runs one queue's tasks with ``concurrency`` slots until drained."""

    def __init__(
        self,
        settings: WorkerSettings,
        handler: Handler,
        *,
        client: aioredis.Redis | None = None,
    ) -> None:
        settings.validate()
        self.settings = settings
        self.handler = handler
        self._client = client
        self._own_client = client is None
        self._running: dict[str, _Running] = {}
        self._outbox: list[_Outcome] = []
        self._outbox_ready = asyncio.Event()
        self._slot_freed = asyncio.Event()
        self._beat_now = asyncio.Event()
        self._drain_requested = asyncio.Event()
        self._stop_requested = asyncio.Event()
        # Ends the background loops. Not task.cancel(): a cancellation that lands while a
        # redis-py call completes can be swallowed (Python 3.11), leaving a loop running.
        self._closing = asyncio.Event()
        self._idle = asyncio.Event()  # set while nothing is in flight or waiting to be written
        self._idle.set()
        self._connected = asyncio.Event()
        self._connected.set()
        self._probe: asyncio.Task[None] | None = None
        self._stuck_threads = 0  # sync handlers given up on but still running in their threads
        self._threads = _HandlerThreads(settings.concurrency, handler.func, self._thread_outcomes)
        # An async handler's claimed tasks all run at once: prefetch is for threads only.
        self._prefetch = 0 if handler.is_async else settings.prefetch_depth
        self._typical_run_s: float | None = None  # moving average of threads' run times
        self._runtime_path = runtime_path(settings.runtime_dir)
        self._process_start = process_start(os.getpid())
        self._state = "starting"
        # The runtime file is rewritten at most every RUNTIME_WRITE_INTERVAL_S (_DRAINING_S
        # while draining), except when what ``taskfleet drain --wait`` acts on changes:
        # then within the loop turn.
        self._runtime_written: RuntimeState | None = None
        self._runtime_written_at = -RUNTIME_WRITE_INTERVAL_S
        self._runtime_write: asyncio.Handle | None = None
        self._runtime_write_soon = False
        self.counters = _Counters()
        self._broker: Broker | None = None
        # The claim loop waits for a producer's wake-up or a limit: outcome writes then
        # don't claim (a wake-up will), so an idle worker's completions stay cheap.
        self._claim_waiting = False
        # How long a claim that empties the queue registers this worker for hand-offs: a
        # little longer than it then waits, so it is never unregistered while waiting.
        self._idle_ms = int((settings.idle_wait + IDLE_MARGIN_S) * 1000)
        self._heartbeat_interval = settings.heartbeat_interval
        # Recorded with the worker: a worker starting under our name judges us by it.
        self._whereabouts = Whereabouts.local(settings.heartbeat_interval)
        self._fatal: _FatalStop | None = None
        # How long any one Redis call may go without a reply before it counts as an
        # outage: long enough for a slow script, short enough to notice a dead server.
        self._reply_timeout = max(2.0, settings.idle_wait + 2.0)

    # ---------------------------------------------------------------- public control

    @property
    def draining(self) -> bool:
        return self._drain_requested.is_set()

    def request_drain(self) -> None:
        """First SIGTERM/SIGINT (or ``taskfleet drain``): stop claiming, finish, then exit.

        A second request while draining releases everything at once and exits.
        """
        if self._drain_requested.is_set():
            if not self._stop_requested.is_set():
                log_event(logging.WARNING, "drain_forced", inflight=len(self._running))
                self._stop_requested.set()
            return
        log_event(
            logging.INFO,
            "drain_started",
            inflight=len(self._running),
            drain_timeout_s=self.settings.drain_timeout,
        )
        self._drain_requested.set()
        self._beat_now.set()
        self._slot_freed.set()  # wake the claim loop so it notices
        self._set_state("draining")

    async def run(self) -> int:
        """Serve until drained; returns the process exit code (0 after a drain)."""
        loop = asyncio.get_running_loop()
        if self._client is None:
            self._client = aioredis.Redis.from_url(
                self.settings.redis_url,
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
            reply_timeout=self._reply_timeout,
            host=self._whereabouts.encode(),
        )
        self._set_state("starting")
        try:
            try:
                await self._register()
                await self._settle_lease_ttl()
            except _FatalStop as stop:
                return stop.code
            if self.draining:
                return await self._shutdown([])
            self._set_state("running")
            log_event(
                logging.INFO,
                "worker_started",
                queue=self.settings.queue,
                pod=self.settings.pod,
                incarnation=self.settings.incarnation,
                concurrency=self.settings.concurrency,
                prefetch=self._prefetch,
                handler=self.handler.ref,
                pid=os.getpid(),
            )
            background = [
                loop.create_task(self._heartbeat_loop(), name="heartbeat"),
                loop.create_task(self._flush_loop(), name="flush"),
            ]
            if self._prefetch:
                background.append(loop.create_task(self._prefetch_guard_loop(), name="prefetch"))
            claimer = loop.create_task(self._claim_loop(), name="claim")
            drain = loop.create_task(self._drain_requested.wait())
            await asyncio.wait({drain, claimer, *background}, return_when="FIRST_COMPLETED")
            drain.cancel()
            crashed = [t for t in (claimer, *background) if t.done() and not t.cancelled()]
            failure = next((t.exception() for t in crashed if t.exception()), None)
            if failure is None:
                await claimer
                return await self._shutdown(background)
            if isinstance(failure, _FatalStop):
                return await self._stop_at_once(failure, [claimer, *background])
            # A bug, not an outage (those are handled in the loops): give everything back
            # at once and exit 1 so the container restarts rather than idling half-alive.
            log_event(logging.ERROR, "worker_failed", error=format_error(failure))
            self._drain_requested.set()
            self._stop_requested.set()
            self._slot_freed.set()  # the claim loop may be waiting for a slot
            with contextlib.suppress(Exception):
                await claimer
            await self._shutdown([t for t in background if not t.done()])
            return 1
        finally:
            self._threads.close()
            if self._own_client and self._client is not None:
                with contextlib.suppress(Exception):
                    await self._client.aclose()
            self._set_state("stopped")
            self._write_runtime()
            remove_state(self._runtime_path, os.getpid())

    # ---------------------------------------------------------------- start and stop

    async def _register(self) -> None:
        """Register, taking over from an earlier incarnation of our name unless that one
        is alive (then ``NameInUse``: the CLI refuses to start, exit 2)."""
        assert self._broker is not None
        while not self.draining:
            try:
                taken = await self._broker.register(
                    self.settings.concurrency, in_use=self._holder_in_use
                )
            except REDIS_DOWN as exc:
                await self._outage(exc, until_drain=True)
                continue
            if taken:
                log_event(logging.INFO, "earlier_incarnation_requeued", tasks=taken)
            return

    def _holder_in_use(self, holder: WorkerRecord) -> str | None:
        """How a live worker holding our name is described, or None if it is gone."""
        where = Whereabouts.parse(holder.host)
        if not holder_alive(
            where, holder.heartbeat_age_ms, self._whereabouts, self.settings.heartbeat_interval
        ):
            return None
        return f"{holder.describe()}, heartbeat {holder.heartbeat_age_ms / 1000:.1f} s ago"

    async def _settle_lease_ttl(self) -> None:
        """Agree with the queue on the lease TTL, which every worker of a queue shares.

        ``--lease-ttl`` sets the queue's ``lease_ttl_s`` (the operator gives every pod the
        same value); without it the queue's setting stands. A heartbeat too slow for that
        TTL is shortened rather than left to lose every lease.
        """
        assert self._client is not None
        ttl_field = "lease_ttl_s"
        config_key = QueueKeys(self.settings.queue).config
        while not self.draining:
            try:
                if self.settings.lease_ttl is not None:
                    ttl = self.settings.lease_ttl
                    write = self._client.hset(config_key, ttl_field, repr(ttl))
                    await bounded(write, self._reply_timeout)
                else:
                    read = self._client.hget(config_key, ttl_field)
                    raw = await bounded(read, self._reply_timeout)
                    ttl = _number(raw, DEFAULT_LEASE_TTL_S)
            except REDIS_DOWN as exc:
                await self._outage(exc, until_drain=True)
                continue
            if self._heartbeat_interval * 2 > ttl:
                self._heartbeat_interval = ttl / 3
                log_event(
                    logging.WARNING,
                    "heartbeat_shortened",
                    lease_ttl_s=ttl,
                    heartbeat_interval_s=round(self._heartbeat_interval, 3),
                )
            return

    async def _shutdown(self, background: list[asyncio.Task[None]]) -> int:
        """Wait for in-flight tasks up to the drain deadline, release the rest, deregister."""
        assert self._broker is not None
        deadline = time.monotonic() + self.settings.drain_timeout
        # Prefetched tasks no thread has begun go back now, for a worker that stays.
        await self._withdraw(list(self._running.values()))
        left = max(0.0, deadline - time.monotonic())
        await _wait_any(self._idle, self._stop_requested, limit=left)
        leftover = [run for run in self._running.values() if not run.finished]
        for run in leftover:
            run.abandoned = True
            if run.job is not None:
                run.job.cancel()
        self._closing.set()
        self._outbox_ready.set()  # the flusher waits on this alone
        if background:
            _, pending = await asyncio.wait(background, timeout=5.0)
            for task in pending:
                task.cancel()  # a write stuck on a dead server; its batch stays in the outbox
        # Outcomes already produced are written, not released: that work is done.
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._flush_all(), timeout=3.0)
        if leftover:
            await self._release(leftover)
        try:
            await asyncio.wait_for(self._broker.deregister(), timeout=2.0)
        except Exception as exc:
            # Not fatal: the operator and sweeps notice a silent pod by its heartbeat.
            log_event(logging.WARNING, "deregister_failed", error=format_error(exc))
        finally:
            await self._broker.close()
        log_event(
            logging.INFO,
            "worker_stopped",
            completed=self.counters.completed,
            failed=self.counters.failed,
            released=self.counters.released,
            lost=self.counters.lost,
        )
        self._state = "drained"
        self._write_runtime()  # now, not next loop turn: the waiters are polling for it
        await self._outlive_drain_waiters()
        return 0 if self._fatal is None else self._fatal.code

    async def _stop_at_once(self, stop: _FatalStop, tasks: list[asyncio.Task[None]]) -> int:
        """Stop without a drain: Redis refused us, or our name was taken over.

        In-flight runs are abandoned (async handlers cancelled; a thread's result is
        dropped) and nothing is written: Redis refuses us, or the newcomer took back what
        we held (a task claimed after that comes back when its lease expires). No
        deregistration either: the name's record is someone else's, or unreachable.
        """
        assert self._broker is not None
        self._fatal = stop
        self._drain_requested.set()
        self._stop_requested.set()
        self._closing.set()
        self._slot_freed.set()
        self._outbox_ready.set()
        for task in tasks:
            task.cancel()
        await asyncio.wait(tasks, timeout=5.0)
        for task in tasks:  # seen: their errors are this stop
            if task.done() and not task.cancelled():
                task.exception()
        leftover = [run for run in self._running.values() if not run.finished]
        for run in leftover:
            run.abandoned = True
            if run.job is not None:
                run.job.cancel()
        with contextlib.suppress(Exception):
            await self._broker.close()
        log_event(
            logging.INFO,
            "worker_stopped",
            completed=self.counters.completed,
            failed=self.counters.failed,
            released=self.counters.released,
            lost=self.counters.lost,
            exit_code=stop.code,
        )
        return stop.code

    async def _outlive_drain_waiters(self) -> None:
        """Let ``taskfleet drain`` processes see ``drained`` and exit before we do.

        As the init's child (or PID 1 itself) our exit ends the PID namespace and the
        kernel SIGKILLs whatever is left in it, which the kubelet reports as a failed
        preStop hook. Bounded: a waiter that hangs does not keep a drained worker alive.
        """
        directory = self._runtime_path.parent
        deadline = time.monotonic() + WAITER_GRACE_S
        while live_waiters(directory):
            if time.monotonic() >= deadline:
                log_event(logging.WARNING, "drain_waiters_left", waited_s=WAITER_GRACE_S)
                return
            await asyncio.sleep(POLL_INTERVAL_S)

    async def _release(self, runs: list[_Running]) -> None:
        """Give unfinished tasks back (not an attempt); if Redis is down, leases expire instead."""
        assert self._broker is not None
        items = [(run.task.id, run.task.token) for run in runs]
        try:
            released = await asyncio.wait_for(self._broker.release(items), timeout=3.0)
        except Exception as exc:  # whatever went wrong, exiting must go on
            log_event(
                logging.WARNING,
                "release_failed",
                tasks=len(items),
                error=format_error(exc),
                note="leases expire and the tasks are taken back",
            )
            return
        self.counters.released += int(released)
        for run in runs:
            self._running.pop(run.task.id, None)
            log_event(logging.INFO, "task_released", task=run.task.id)
        self._update_idle()

    async def _withdraw(self, runs: list[_Running], *, waited: bool = False) -> None:
        """Release the prefetched ``runs`` no thread has begun (never started here).

        ``waited``: they waited too long for a thread; prefetch stops until runs are short.
        """
        withdrawn = self._threads.withdraw(runs)
        if not withdrawn:
            return
        if waited:
            self._typical_run_s = max(self._typical_run_s or 0.0, PREFETCH_MAX_WAIT_S)
            log_event(
                logging.INFO,
                "prefetch_withdrawn",
                tasks=len(withdrawn),
                waited_s=PREFETCH_MAX_WAIT_S,
                note="every handler thread is busy with long runs",
            )
        await self._release(withdrawn)
        # Released, or (Redis down) left to their leases: either way not this worker's now.
        for run in withdrawn:
            self._running.pop(run.task.id, None)
        self._update_idle()
        self._mark_runtime_dirty()

    async def _prefetch_guard_loop(self) -> None:
        """Give back prefetched tasks that waited ``PREFETCH_MAX_WAIT_S`` for a thread."""
        while True:
            await _wait_any(self._closing, self._drain_requested, limit=PREFETCH_MAX_WAIT_S / 2)
            if self._closing.is_set() or self.draining:
                return  # the drain withdraws what is still waiting itself
            cutoff = time.monotonic() - PREFETCH_MAX_WAIT_S
            # Claimed that long ago; withdraw() keeps those no thread has begun.
            late = [run for run in self._running.values() if run.started <= cutoff]
            if late:
                await self._withdraw(late, waited=True)

    # ---------------------------------------------------------------- claiming

    def _free_slots(self) -> int:
        """Tasks to claim now: free slots, plus room for prefetch while it applies."""
        return self._free_to_run() + self._prefetch_room()

    def _free_to_run(self) -> int:
        """Slots that would start a task at once (negative: prefetched tasks wait)."""
        return self.settings.concurrency - len(self._running) - self._stuck_threads

    def _prefetch_room(self) -> int:
        typical = self._typical_run_s
        if self._prefetch and typical is not None and typical < PREFETCH_RUN_LIMIT_S:
            return self._prefetch
        return 0

    def _prefetch_part(self, n: int, free_to_run: int) -> int:
        """Of ``n`` tasks claimed, how many would wait for a slot (the claim's prefetch)."""
        return max(0, n - max(0, free_to_run))

    async def _claim_loop(self) -> None:
        assert self._broker is not None
        while not self.draining:
            free = self._free_slots()
            if free <= 0:
                self._slot_freed.clear()
                if self._free_slots() <= 0 and not self.draining:
                    await self._slot_freed.wait()
                continue
            try:
                claimed = await self._broker.claim(
                    free,
                    idle_ms=self._idle_ms,
                    prefetch=self._prefetch_part(free, self._free_to_run()),
                )
            except REDIS_DOWN as exc:
                await self._outage(exc, until_drain=True)
                continue
            if claimed.tasks:
                await self._take(claimed.tasks)
                if self.draining:
                    return
                if len(claimed.tasks) == free or claimed.more_pending:
                    # Let the new tasks' handlers start before this loop claims again.
                    await asyncio.sleep(0)
                    continue
                # The queue gave all it had: asking again would find nothing. A task
                # enqueued from now on leaves a wake-up token for the wait below.
            if self.draining:
                continue
            self._claim_waiting = True
            try:
                await self._wait_for_work(claimed)
            finally:
                self._claim_waiting = False

    async def _wait_for_work(self, claimed: ClaimResult) -> None:
        """After a claim that found nothing: wait for a producer, a due task or a limit."""
        assert self._broker is not None
        if claimed.retry_after_ms:
            # Rate or concurrency limit: nothing to gain by asking again sooner.
            await self._until_drain(asyncio.sleep(claimed.retry_after_ms / 1000))
            return
        idle_wait = self.settings.idle_wait
        if claimed.next_due_ms is not None:
            # A delayed task falls due before the next wake-up: claim it on time.
            idle_wait = min(idle_wait, max(claimed.next_due_ms, 1) / 1000)
        try:
            handed = await self._until_drain(self._broker.wait_for_work(idle_wait))
        except REDIS_DOWN as exc:
            await self._outage(exc, until_drain=True)
            return
        if handed is not None and handed.tasks:
            await self._take(handed.tasks)  # or released, if a drain began meanwhile

    async def _take(self, tasks: list[ClaimedTask]) -> None:
        """Start claimed tasks, or hand them straight back if a drain began meanwhile."""
        if self.draining:
            # The drain began while the claim was in flight: give its tasks back (not an
            # attempt) for a worker that stays, rather than start them now.
            now = time.monotonic()
            await self._release([_Running(task=task, started=now) for task in tasks])
            return
        for task in tasks:
            self._start(task)

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
                await asyncio.wait({waiter}, timeout=self.settings.idle_wait + 1.0)
        if self.draining or not waiter.done() or waiter.cancelled():
            return None  # an error of a wait cut short by the drain is no outage
        return waiter.result()

    # ---------------------------------------------------------------- running tasks

    def _start(self, task: ClaimedTask) -> None:
        run = _Running(task=task, started=time.monotonic())
        run.context = context_for(
            TaskContext(
                queue=self.settings.queue,
                task_id=task.id,
                attempt=task.attempts,
                pod=self.settings.pod,
                incarnation=self.settings.incarnation,
                redis_url=self.settings.redis_url,
            )
        )
        self._running[task.id] = run
        self._idle.clear()
        loop = asyncio.get_running_loop()
        if self.handler.is_async:
            run.job = loop.create_task(self._execute(run), name=task.id, context=run.context)
        else:
            limit = self._timeout_for(task)
            if limit is not None:
                run.timer = loop.call_later(limit, self._thread_timed_out, run, limit)
            self._threads.submit(run)
        self._mark_runtime_dirty()
        if log.isEnabledFor(logging.DEBUG):
            log_event(logging.DEBUG, "task_started", task=task.id, attempt=task.attempts)

    def _timeout_for(self, task: ClaimedTask) -> float | None:
        return task.timeout if task.timeout else self.settings.default_timeout

    async def _execute(self, run: _Running) -> None:
        """An async handler's run, in the task's context (``current_task()``)."""
        task = run.task
        limit = self._timeout_for(task)
        scope = asyncio.timeout(limit)
        outcome = _Outcome(run=run)
        try:
            async with scope:
                value = await self.handler.func(task.payload)
            outcome.result = encode_result(value)
        except asyncio.CancelledError:
            return  # drain deadline or lost lease: the task goes back, nothing is written
        except TimeoutError as exc:
            if scope.expired():
                outcome.error = _timeout_error(limit)
            else:  # the handler's own TimeoutError (an upstream call) is just a failure
                outcome.error = format_error(exc)
        except Exception as exc:  # the handler's failure is the attempt's failure
            outcome.error = format_error(exc)
        if run.abandoned:
            log_event(logging.INFO, "task_result_dropped", task=task.id, reason="lease lost")
            return
        self._queue_outcome(outcome)

    def _queue_outcome(self, outcome: _Outcome) -> None:
        outcome.run.finished = True
        self._outbox.append(outcome)
        self._outbox_ready.set()

    def _thread_timed_out(self, run: _Running, limit: float) -> None:
        """A sync handler ran past its timeout: fail the attempt now; the thread runs on.

        The timeout counts from the start of the call: a prefetched run that waited for a
        thread gets the rest of its time.
        """
        run.timer = None
        if run.finished or run.abandoned or not run.in_thread:
            return
        began = run.began
        left = limit if began is None else began + limit - time.monotonic()
        if left > 0:
            loop = asyncio.get_running_loop()
            run.timer = loop.call_later(left, self._thread_timed_out, run, limit)
            return
        self._keep_slot_until_return(run)
        self._queue_outcome(_Outcome(run=run, error=_timeout_error(limit)))

    def _thread_outcomes(self, batch: list[tuple[_Running, str | None, str | None]]) -> None:
        """Sync handlers' calls that returned (on the loop, one batch per wake-up)."""
        typical = self._typical_run_s
        for run, result, error in batch:
            run.in_thread = False
            if run.began is not None:
                ran = run.ran_s
                typical = ran if typical is None else typical + RUN_TIME_WEIGHT * (ran - typical)
            if run.timer is not None:
                run.timer.cancel()
                run.timer = None
            if run.stuck:
                run.stuck = False
                self._stuck_threads -= 1
                self._slot_freed.set()
            if run.abandoned:
                if run.lease_lost:
                    log_event(
                        logging.INFO, "task_result_dropped", task=run.task.id, reason="lease lost"
                    )
                continue
            if run.finished:
                continue  # timed out: its failure is queued or written already
            run.finished = True
            self._outbox.append(_Outcome(run=run, result=result, error=error))
        self._typical_run_s = typical
        if self._outbox:
            self._outbox_ready.set()

    def _keep_slot_until_return(self, run: _Running) -> None:
        """A thread can't be killed: its slot stays taken until the call returns.

        So a hung sync handler can't make this worker oversubscribe its CPU or its
        threads; whatever the call eventually returns is dropped.
        """
        if run.in_thread and not run.stuck:
            run.stuck = True
            self._stuck_threads += 1

    # ---------------------------------------------------------------- writing outcomes

    async def _flush_loop(self) -> None:
        while True:
            await self._outbox_ready.wait()  # also set when closing: one waiter per turn
            if self._closing.is_set():
                return  # the shutdown flushes what is left itself
            self._outbox_ready.clear()
            await asyncio.sleep(0)  # let outcomes finishing in this loop turn join the batch
            await self._flush_all()

    async def _flush_all(self) -> None:
        assert self._broker is not None
        while self._outbox:
            batch, self._outbox = self._outbox, []
            try:
                # Threads finishing meanwhile needn't wake the loop: collected right after.
                self._threads.loop_will_collect = True
                try:
                    await self._write(batch)
                finally:
                    self._threads.loop_will_collect = False
                    self._threads.collect()
            except REDIS_DOWN as exc:
                self._outbox = batch + self._outbox
                if self._stop_requested.is_set():
                    return  # forced exit: unwritten outcomes' leases expire; tasks rerun
                # At shutdown _closing is already set: waiting for it would return at once
                # and retry in a tight loop; wait for the probe's backoff instead.
                await self._outage(exc, at_shutdown=self._closing.is_set())
            except BaseException:
                # Cancelled mid-write (shutdown): keep what is unwritten for the final flush.
                self._outbox = batch + self._outbox
                raise

    async def _write(self, batch: list[_Outcome]) -> None:
        """Write ``batch``, removing each outcome once written (so a retry never repeats it)."""
        assert self._broker is not None
        try:
            done = [o for o in batch if o.error is None]
            if done:
                items = [(o.run.task.id, o.run.task.token, o.result) for o in done]
                claimed: ClaimResult | None = None
                # Refill the slots these completions free in the same round trip. Only
                # those: the claim loop claims the slots that are free already, and it is
                # woken by a producer when it waits for work.
                free_to_run = self._free_to_run() + len(done)
                refill = min(len(done), free_to_run + self._prefetch_room())
                if self.draining or self._claim_waiting or refill <= 0:
                    applied = await self._broker.complete_many(items)
                else:
                    applied, claimed = await self._broker.complete_and_claim(
                        items, refill, prefetch=self._prefetch_part(refill, free_to_run)
                    )
                for outcome, ok in zip(done, applied, strict=True):
                    batch.remove(outcome)
                    self._finish(outcome, ok, "task_done")
                if claimed is not None and claimed.tasks:
                    await self._take(claimed.tasks)
            while batch:
                outcome = batch[0]
                state = await self._broker.fail(
                    outcome.run.task.id, outcome.run.task.token, outcome.error or ""
                )
                batch.pop(0)
                ok = state is not None  # None: stale token, the task was taken back
                self._finish(outcome, ok, "task_failed")
        finally:
            # Wake the claim loop only for slots this write left free: completions that
            # claimed their own replacements need no second look.
            if self._free_slots() > 0:
                self._slot_freed.set()

    def _finish(self, outcome: _Outcome, accepted: bool, event: str) -> None:
        run = outcome.run
        self._running.pop(run.task.id, None)
        elapsed_ms = round((time.monotonic() - run.started) * 1000, 1)
        if not accepted:
            self.counters.stale += 1
            log_event(logging.WARNING, "task_write_refused", task=run.task.id, reason="stale")
        elif outcome.error is None:
            self.counters.completed += 1
            if log.isEnabledFor(logging.INFO):
                log_event(logging.INFO, event, task=run.task.id, ms=elapsed_ms)
        else:
            self.counters.failed += 1
            log_event(
                logging.WARNING,
                event,
                task=run.task.id,
                attempt=run.task.attempts,
                ms=elapsed_ms,
                error=outcome.error,
            )
        self._update_idle()
        self._mark_runtime_dirty()

    def _update_idle(self) -> None:
        if not self._running and not self._outbox:
            self._idle.set()

    # ---------------------------------------------------------------- heartbeats

    async def _heartbeat_loop(self) -> None:
        assert self._broker is not None
        beats = 0
        while not self._closing.is_set():
            self._beat_now.clear()
            tokens = self._lease_tokens()
            try:
                lost = await self._broker.heartbeat(
                    tokens, inflight=len(self._running), draining=self.draining
                )
                self._abandon(lost)
                beats += 1
                if beats % self.settings.sweep_every == 0 and not self.draining:
                    # Claims already take back expired leases; this also prunes retention.
                    await self._broker.sweep()
            except REDIS_DOWN as exc:
                if self._stop_requested.is_set():
                    return
                await self._outage(exc)
                continue
            except IdentityTaken as exc:
                # Someone registered under our name: it took back every task we held.
                # Running on would run them twice and fight over the name; stop instead.
                log_event(
                    logging.ERROR,
                    "identity_taken",
                    pod=self.settings.pod,
                    incarnation=self.settings.incarnation,
                    by=exc.holder,
                    note="another worker started under this name and took back its tasks; "
                    "give each worker its own --pod",
                )
                self._fatal = _FatalStop(EXIT_BAD_CONFIG)
                raise self._fatal from None
            await _wait_any(self._beat_now, self._closing, limit=self._heartbeat_interval)

    def _lease_tokens(self) -> dict[str, str]:
        """Leases to extend: not those of finished runs, whose outcome write ends the lease
        (a completion landing before the extension would make them look lost)."""
        return {
            run.task.id: run.task.token
            for run in self._running.values()
            if not run.abandoned and not run.finished
        }

    def _abandon(self, lost: set[str]) -> None:
        """Leases we no longer hold: someone else may run the task; drop our result.

        A run that finished after the heartbeat's snapshot is left to its outcome write,
        which settles it (written, or refused as stale): its lease ended by design.
        """
        for task_id in lost:
            run = self._running.get(task_id)
            if run is None or run.finished:
                continue
            del self._running[task_id]
            run.abandoned = run.lease_lost = True
            self.counters.lost += 1
            log_event(logging.WARNING, "lease_lost", task=task_id)
            if run.job is not None:
                run.job.cancel()
            else:
                self._keep_slot_until_return(run)
            self._slot_freed.set()
        self._update_idle()
        self._mark_runtime_dirty()

    # ---------------------------------------------------------------- Redis outages

    async def _outage(
        self, exc: BaseException, *, until_drain: bool = False, at_shutdown: bool = False
    ) -> None:
        """Wait until Redis answers again (or a stop; or a drain if ``until_drain``; or
        the close of the loops unless ``at_shutdown``, when they are closed already).

        The first caller starts the one probe; the others just wait for it. Redis refusing
        our credentials or rights is no outage: it raises ``_FatalStop`` (exit 2) at once.
        """
        self._check_auth(exc)
        if self._connected.is_set():
            self._connected.clear()
            log_event(logging.WARNING, "redis_unreachable", error=format_error(exc))
            self._probe = asyncio.get_running_loop().create_task(self._reconnect())
        stop_event = self._drain_requested if until_drain else self._stop_requested
        if at_shutdown:
            await _wait_any(self._connected, stop_event)
        else:
            await _wait_any(self._connected, stop_event, self._closing)
        if self._fatal is not None:  # the probe found the credentials refused
            raise self._fatal

    def _check_auth(self, exc: BaseException) -> None:
        """Raise ``_FatalStop`` if ``exc`` is Redis refusing our credentials or rights.

        Logged once (never the URL or password). Retrying can't help, and releasing or
        deregistering is impossible: leases bring the tasks back. A worker of a pod
        restarts with the Secret's current value.
        """
        if self._fatal is None:
            kind = auth_failure(exc)
            if kind is None:
                return
            self._fatal = _FatalStop(EXIT_BAD_CONFIG)
            log_event(
                logging.ERROR,
                "redis_auth_failed",
                kind=kind,
                error=format_error(exc),
                note="check the user and password of TASKFLEET_REDIS_URL (--redis-url) and "
                "the user's ACL; tasks held come back when their leases expire",
            )
        raise self._fatal

    async def _reconnect(self) -> None:
        assert self._client is not None
        started = time.monotonic()
        delay = self.settings.backoff_base
        attempts = 0
        while True:
            # Full jitter: a fleet that lost Redis together must not reconnect in lockstep.
            await asyncio.sleep(random.uniform(delay / 2, delay))
            attempts += 1
            try:
                # Pooled connections to the old server are dead too: drop them all, so the
                # first error is the only one this outage produces.
                await self._client.connection_pool.disconnect()
                if self._broker is not None:
                    await self._broker.close()
                await bounded(self._client.ping(), self._reply_timeout)
            except REDIS_DOWN as exc:
                if auth_failure(exc) is not None:
                    with contextlib.suppress(_FatalStop):
                        self._check_auth(exc)
                    self._connected.set()  # wakes the waiters, which raise it
                    return
                delay = min(delay * 2, self.settings.backoff_max)
                continue
            log_event(
                logging.INFO,
                "redis_reachable",
                outage_s=round(time.monotonic() - started, 2),
                attempts=attempts,
            )
            self._connected.set()
            self._beat_now.set()
            return

    # ---------------------------------------------------------------- runtime file

    def _set_state(self, state: str) -> None:
        self._state = state
        self._mark_runtime_dirty()

    def _mark_runtime_dirty(self) -> None:
        """Schedule a write of the runtime file: throttled, but never late for a drain.

        What ``taskfleet drain --wait`` acts on (``state``, ``draining``, and nothing left
        in flight while draining) is written within the loop turn; other changes of the
        count wait for the throttle window, and a write is always scheduled for its end.
        """
        if self._runtime_write_soon:
            return
        if self._runtime_write is not None and not self._runtime_urgent():
            return  # the throttled write is on its way and will carry this change
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self._write_runtime()
            return
        interval = RUNTIME_WRITE_INTERVAL_DRAINING_S if self.draining else RUNTIME_WRITE_INTERVAL_S
        due = self._runtime_written_at + interval
        if self._runtime_urgent() or loop.time() >= due:
            if self._runtime_write is not None:
                self._runtime_write.cancel()
            self._runtime_write_soon = True
            # Coalesced: one write per loop turn however many tasks started or finished.
            self._runtime_write = loop.call_soon(self._write_runtime)
        elif self._runtime_write is None:
            self._runtime_write = loop.call_at(due, self._write_runtime)

    def _runtime_urgent(self) -> bool:
        """What ``taskfleet drain --wait`` waits for: the drain seen, then nothing held."""
        written = self._runtime_written
        return (
            written is None
            or written.state != self._state
            or written.draining != self.draining
            or (self.draining and written.inflight > 0 and not self._running)
        )

    def _write_runtime(self) -> None:
        # Also called directly (drained, stopped): a scheduled write would only repeat it,
        # or recreate the file after its removal at exit.
        if self._runtime_write is not None:
            self._runtime_write.cancel()
            self._runtime_write = None
        self._runtime_write_soon = False
        state = RuntimeState(
            pid=os.getpid(),
            pod=self.settings.pod,
            queue=self.settings.queue,
            inflight=len(self._running),  # includes outcomes not yet written
            draining=self.draining,
            state=self._state,
            start=self._process_start,
        )
        with contextlib.suppress(RuntimeError):  # no loop: the final write at exit
            self._runtime_written_at = asyncio.get_running_loop().time()
        self._runtime_written = state
        try:
            write_state(state, self._runtime_path)
        except OSError as exc:
            self._runtime_written = None  # the next change is written at once
            log_event(logging.WARNING, "runtime_file_failed", error=format_error(exc))
