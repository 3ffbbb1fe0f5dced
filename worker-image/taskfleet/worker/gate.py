"""The Redis outage gate: the first failing call starts one probe; every loop waits on it.

Redis errors never escape the worker's loops silently: a loop whose call fails hands the
error to ``RedisGate.wait_out``, which classifies it (``taskfleet.protocol.faults``):

- a fault to wait out (unreachable, BUSY, LOADING, OOM, READONLY, a cluster in motion...)
  logs the outage once, starts the one probe that reconnects with capped, jittered
  exponential backoff, and returns when Redis answers again (and, after a refused
  write, accepts writes again), or when one of the events the caller gives up on is set;
- credentials or rights refused raise ``FatalStop`` (exit 2);
- anything else (a request Redis refuses for what it is) goes back up to the loop, which
  dies and takes the worker down loudly (``worker_failed``, exit 1).

The probe never dies quietly either: an error it can't classify as an outage is raised
in every waiter, so no loop is left waiting on a gate nobody will open.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import random
import time
from collections.abc import Awaitable, Callable

from taskfleet.protocol.errors import auth_failure
from taskfleet.protocol.faults import REDIS_ERRORS, WHAT_TO_DO, Policy, RedisFault, classify
from taskfleet.worker.events import log_event
from taskfleet.worker.handlers import format_error

#: What the worker's loops catch around a Redis call: every Redis error. Which of them
#: are outages, configuration errors or a refused request is ``wait_out``'s to say.
REDIS_DOWN: tuple[type[BaseException], ...] = REDIS_ERRORS
#: Exit code of a worker stopped by bad configuration found while running: Redis refused
#: its credentials, or another worker took its name.
EXIT_BAD_CONFIG = 2


class ProbeFailed(Exception):  # noqa: N818 - says what happened, raised in every waiter
    """The outage probe met an error that is no outage: the worker must stop (exit 1)."""


class FatalStop(Exception):  # noqa: N818 - internal signal, not an error of the API
    """Stop now with ``code``: Redis refused our credentials, or our name was taken over."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


async def wait_any(*events: asyncio.Event, limit: float | None = None) -> None:
    """Return when any of ``events`` is set (or after ``limit`` seconds)."""
    waiters = [asyncio.ensure_future(event.wait()) for event in events]
    try:
        await asyncio.wait(waiters, timeout=limit, return_when="FIRST_COMPLETED")
    finally:
        for waiter in waiters:
            waiter.cancel()


class RedisGate:
    """Open while Redis answers; closed from a failed call until the probe gets a reply.

    ``reconnect`` drops the dead connections and makes one call that must succeed
    (raising a Redis error if Redis is still away); ``writable`` makes a write Redis
    refuses while it refuses writes (full), without changing anything, and is tried
    after a refused write; ``reachable`` runs once the probe succeeds (e.g. to heartbeat
    at once).
    """

    def __init__(
        self,
        reconnect: Callable[[], Awaitable[None]],
        reachable: Callable[[], None],
        *,
        backoff_base: float,
        backoff_max: float,
        where: Callable[[], str] | None = None,
        writable: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self.open = asyncio.Event()
        self.open.set()
        self._reconnect = reconnect
        self._reachable = reachable
        self._writable = writable
        #: The node the probe reached (a cluster: the master of the queue's slot), logged.
        self._where = where
        self._backoff_base = backoff_base
        self._backoff_max = backoff_max
        self._probe: asyncio.Task[None] | None = None
        #: Set once Redis refused our credentials or rights: every waiter raises it.
        self.fatal: FatalStop | None = None
        #: Set once the probe met an error that is no outage: every waiter raises it.
        self.failed: ProbeFailed | None = None
        #: The fault of the outage going on (None while open).
        self.fault: RedisFault | None = None
        #: Calls Redis refused as writes (OOM, MISCONF, NOREPLICAS, READONLY), for the metrics.
        self.refused_writes = 0
        #: Outages that ended with Redis answering, and how long those lasted (metrics).
        self.reconnects = 0
        self._outage_s = 0.0
        self._down_since: float | None = None  # monotonic start of the outage going on
        self._reopened_at = -math.inf  # when the last outage ended, and its last backoff
        self._last_delay = backoff_base

    def outage_seconds(self, now: float) -> float:
        """Seconds Redis was unreachable, the outage going on (if any) included."""
        since = self._down_since
        return self._outage_s + (now - since if since is not None else 0.0)

    async def wait_out(self, exc: BaseException, *give_up: asyncio.Event) -> None:
        """Wait until Redis answers again, or until one of ``give_up`` is set.

        Redis refusing our credentials or rights is no outage: ``FatalStop`` at once. A
        request Redis refuses for what it is, and anything that is no Redis error, is
        raised again (called from an ``except`` block: the loop's own error).
        """
        fault = classify(exc)
        if fault is None or fault.policy is Policy.FAIL_TASK:
            raise exc
        if fault.policy is Policy.STOP:
            self._check_auth(exc)
        if fault.writes_refused:
            self.refused_writes += 1
        if self.open.is_set():
            self.open.clear()
            self.fault = fault
            self._log_outage(fault, exc)
            self._probe = asyncio.get_running_loop().create_task(self._probe_until_up())
        elif fault.writes_refused and self.fault is not None and not self.fault.writes_refused:
            self.fault = fault  # the probe must also see writes accepted before it opens
        await wait_any(self.open, *give_up)
        if self.fatal is not None:  # the probe found the credentials refused
            raise self.fatal
        if self.failed is not None:
            raise self.failed

    @property
    def refusing_writes(self) -> bool:
        """Whether the outage going on is Redis refusing writes (full)."""
        fault = self.fault
        return fault is not None and fault.writes_refused and not self.open.is_set()

    @staticmethod
    def _log_outage(fault: RedisFault, exc: BaseException) -> None:
        if fault.writes_refused:
            log_event(
                logging.WARNING,
                "redis_refusing_writes",
                fault=fault.fault.value,
                error=format_error(exc),
                note=f"{WHAT_TO_DO[fault.fault]}; tasks held are kept and claiming resumes "
                "when Redis takes writes again",
            )
        else:
            log_event(
                logging.WARNING,
                "redis_unreachable",
                fault=fault.fault.value,
                error=format_error(exc),
            )

    def _check_auth(self, exc: BaseException) -> None:
        """Raise ``FatalStop`` if ``exc`` is Redis refusing our credentials or rights.

        Logged once (never the URL or password). Retrying can't help, and releasing or
        deregistering is impossible: leases bring the tasks back. A worker of a pod
        restarts with the Secret's current value.
        """
        if self.fatal is None:
            kind = auth_failure(exc)
            if kind is None:
                return
            self.fatal = FatalStop(EXIT_BAD_CONFIG)
            log_event(
                logging.ERROR,
                "redis_auth_failed",
                kind=kind,
                error=format_error(exc),
                note="check the user and password of TASKFLEET_REDIS_URL (--redis-url) and "
                "the user's ACL; tasks held come back when their leases expire",
            )
        raise self.fatal

    async def _probe_until_up(self) -> None:
        started = self._down_since = time.monotonic()
        delay = self._backoff_base
        if started - self._reopened_at < 2 * self._backoff_max:
            # A relapse (a Redis at the edge of full lets one write through, then refuses
            # the next): go on from the last backoff, not from the start.
            delay = min(self._last_delay * 2, self._backoff_max)
        attempts = 0
        while True:
            # Full jitter: a fleet that lost Redis together must not reconnect in lockstep.
            await asyncio.sleep(random.uniform(delay / 2, delay))
            attempts += 1
            try:
                await self._reconnect()
                fault = self.fault
                if fault is not None and fault.writes_refused and self._writable is not None:
                    await self._writable()
            except Exception as exc:
                # Whatever the probe meets, it ends only with the gate open: an outage goes
                # on with backoff; anything else wakes the waiters, which raise it.
                found = classify(exc)
                if found is not None and found.policy is Policy.WAIT:
                    if found.writes_refused:
                        self.refused_writes += 1
                    delay = min(delay * 2, self._backoff_max)
                    continue
                if found is not None and found.policy is Policy.STOP:
                    with contextlib.suppress(FatalStop):
                        self._check_auth(exc)
                else:
                    log_event(logging.ERROR, "redis_probe_failed", error=format_error(exc))
                    self.failed = ProbeFailed(f"the Redis probe failed: {format_error(exc)}")
                self.open.set()  # wakes the waiters, which raise it
                return
            outage_s = time.monotonic() - started
            self._outage_s += outage_s
            self._down_since = None
            self._reopened_at, self._last_delay = time.monotonic(), delay
            self.reconnects += 1
            fields: dict[str, object] = {"outage_s": round(outage_s, 2), "attempts": attempts}
            if self.fault is not None:
                fields["fault"] = self.fault.fault.value
            if self._where is not None:
                fields["node"] = self._where()
            log_event(logging.INFO, "redis_reachable", **fields)
            self.fault = None
            self.open.set()
            self._reachable()
            return

    async def close(self) -> None:
        """Stop a probe still running (the worker is exiting)."""
        probe, self._probe = self._probe, None
        if probe is not None and not probe.done():
            probe.cancel()
            await asyncio.gather(probe, return_exceptions=True)
