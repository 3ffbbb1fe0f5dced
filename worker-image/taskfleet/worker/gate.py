"""The Redis outage gate: the first failing call starts one probe; every loop waits on it.

Redis errors never escape the worker's loops: a loop whose call fails hands the error to
``RedisGate.wait_out``, which logs the outage once, starts the one probe that reconnects
with capped, jittered exponential backoff, and returns when Redis answers again (or when
one of the events the caller gives up on is set).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Awaitable, Callable

from redis.exceptions import AuthenticationWrongNumberOfArgsError, NoPermissionError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from taskfleet.protocol.connect import CLUSTER_EVENTS
from taskfleet.protocol.errors import auth_failure
from taskfleet.worker.events import log_event
from taskfleet.worker.handlers import format_error

#: Errors that mean "Redis is unreachable right now", not "the request was wrong"; and
#: Redis refusing our credentials or rights (redis-py's AuthenticationError is a
#: ConnectionError), which no retry mends: the gate tells them apart (``auth_failure``)
#: and stops the worker instead (``FatalStop``, exit 2).
#: A Redis Cluster in motion (MOVED/ASK after resharding, CLUSTERDOWN and TRYAGAIN during
#: a failover, a former master answering as a replica) is an outage of the queue's slot:
#: waited out the same way, the probe following the slot to its new master.
REDIS_DOWN: tuple[type[BaseException], ...] = (
    *CLUSTER_EVENTS,
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
    (raising one of ``REDIS_DOWN`` if Redis is still away); ``reachable`` runs once it
    does (e.g. to heartbeat at once).
    """

    def __init__(
        self,
        reconnect: Callable[[], Awaitable[None]],
        reachable: Callable[[], None],
        *,
        backoff_base: float,
        backoff_max: float,
        where: Callable[[], str] | None = None,
    ) -> None:
        self.open = asyncio.Event()
        self.open.set()
        self._reconnect = reconnect
        self._reachable = reachable
        #: The node the probe reached (a cluster: the master of the queue's slot), logged.
        self._where = where
        self._backoff_base = backoff_base
        self._backoff_max = backoff_max
        self._probe: asyncio.Task[None] | None = None
        #: Set once Redis refused our credentials or rights: every waiter raises it.
        self.fatal: FatalStop | None = None
        #: Outages that ended with Redis answering, and how long those lasted (metrics).
        self.reconnects = 0
        self._outage_s = 0.0
        self._down_since: float | None = None  # monotonic start of the outage going on

    def outage_seconds(self, now: float) -> float:
        """Seconds Redis was unreachable, the outage going on (if any) included."""
        since = self._down_since
        return self._outage_s + (now - since if since is not None else 0.0)

    async def wait_out(self, exc: BaseException, *give_up: asyncio.Event) -> None:
        """Wait until Redis answers again, or until one of ``give_up`` is set.

        Redis refusing our credentials or rights is no outage: ``FatalStop`` at once.
        """
        self._check_auth(exc)
        if self.open.is_set():
            self.open.clear()
            log_event(logging.WARNING, "redis_unreachable", error=format_error(exc))
            self._probe = asyncio.get_running_loop().create_task(self._probe_until_up())
        await wait_any(self.open, *give_up)
        if self.fatal is not None:  # the probe found the credentials refused
            raise self.fatal

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
        attempts = 0
        while True:
            # Full jitter: a fleet that lost Redis together must not reconnect in lockstep.
            await asyncio.sleep(random.uniform(delay / 2, delay))
            attempts += 1
            try:
                await self._reconnect()
            except REDIS_DOWN as exc:
                if auth_failure(exc) is not None:
                    with contextlib.suppress(FatalStop):
                        self._check_auth(exc)
                    self.open.set()  # wakes the waiters, which raise it
                    return
                delay = min(delay * 2, self._backoff_max)
                continue
            outage_s = time.monotonic() - started
            self._outage_s += outage_s
            self._down_since = None
            self.reconnects += 1
            fields: dict[str, object] = {"outage_s": round(outage_s, 2), "attempts": attempts}
            if self._where is not None:
                fields["node"] = self._where()
            log_event(logging.INFO, "redis_reachable", **fields)
            self.open.set()
            self._reachable()
            return

    async def close(self) -> None:
        """Stop a probe still running (the worker is exiting)."""
        probe, self._probe = self._probe, None
        if probe is not None and not probe.done():
            probe.cancel()
            await asyncio.gather(probe, return_exceptions=True)
