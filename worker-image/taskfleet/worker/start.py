"""A worker's start: check the server's eviction policy, register under its name, and
read the queue's lease TTL.

Both wait out Redis outages through the gate and give up when the worker is asked to
drain before it ever ran.
"""

from __future__ import annotations

import logging

import redis.asyncio as aioredis
import redis.exceptions

from taskfleet.protocol import bounds
from taskfleet.protocol.calls import run_async
from taskfleet.protocol.errors import RedisEvicts, auth_failure
from taskfleet.protocol.faults import Policy, classify
from taskfleet.protocol.keys import QueueKeys
from taskfleet.protocol.reads import QueueReads
from taskfleet.protocol.records import DEFAULT_LEASE_TTL_S
from taskfleet.protocol.serverprobe import SAFE_EVICTION_POLICY, probe_async
from taskfleet.worker.broker import Broker, bounded
from taskfleet.worker.events import log_event
from taskfleet.worker.gate import REDIS_DOWN, RedisGate
from taskfleet.worker.identity import Whereabouts, WorkerRecord, holder_alive
from taskfleet.worker.lifecycle import Lifecycle
from taskfleet.worker.settings import WorkerSettings


async def register(
    broker: Broker,
    settings: WorkerSettings,
    whereabouts: Whereabouts,
    gate: RedisGate,
    lifecycle: Lifecycle,
) -> None:
    """Register, taking over from an earlier incarnation of our name unless that one is
    alive (then ``NameInUse``: the CLI refuses to start, exit 2)."""

    def in_use(holder: WorkerRecord) -> str | None:
        """How a live worker holding our name is described, or None if it is gone."""
        where = Whereabouts.parse(holder.host)
        age_ms = holder.heartbeat_age_ms
        if not holder_alive(where, age_ms, whereabouts, settings.heartbeat_interval):
            return None
        return f"{holder.describe()}, heartbeat {age_ms / 1000:.1f} s ago"

    while not lifecycle.draining:
        try:
            taken = await broker.register(settings.concurrency, in_use=in_use)
        except REDIS_DOWN as exc:
            await gate.wait_out(exc, lifecycle.drain_requested)
            continue
        if taken:
            log_event(logging.INFO, "earlier_incarnation_requeued", tasks=taken)
        return


#: Why ``--lease-ttl`` does nothing (the Node worker says the same).
LEASE_TTL_IGNORED = (
    "--lease-ttl is deprecated and ignored: the queue's config sets the lease TTL for all its "
    "workers (taskfleet configure QUEUE --lease-ttl S, or the TaskQueue's heartbeat.ttlSeconds)"
)


async def heartbeat_interval(
    client: aioredis.Redis,
    settings: WorkerSettings,
    gate: RedisGate,
    lifecycle: Lifecycle,
) -> float:
    """The heartbeat interval that fits the queue's lease TTL (read, never written).

    The queue's config has one writer (the operator, or ``taskfleet configure`` /
    ``Queue.configure`` outside Kubernetes), and the scripts and sweeps use its lease TTL.
    The deprecated ``--lease-ttl`` changes nothing: a warning names the queue's TTL, which
    holds. A heartbeat too slow for that TTL is shortened to a third of it rather than left
    to lose every lease.
    """
    read = QueueReads(QueueKeys(settings.queue)).lease_ttl()
    interval = settings.heartbeat_interval
    while not lifecycle.draining:
        try:
            found = await bounded(run_async(client, read), settings.reply_timeout)
        except REDIS_DOWN as exc:
            await gate.wait_out(exc, lifecycle.drain_requested)
            continue
        # as the scripts read it; one that is no positive number: the default
        ttl = found if found is not None and found > 0 else DEFAULT_LEASE_TTL_S
        if settings.lease_ttl is not None:
            log_event(
                logging.WARNING,
                "lease_ttl_option_ignored",
                lease_ttl_s=ttl,
                given_s=settings.lease_ttl,
                note=LEASE_TTL_IGNORED,
            )
        if interval * 2 > ttl:
            # a TTL below the floor (a config written by hand): beat at the floor, not faster
            interval = max(ttl / 3, bounds.MIN_HEARTBEAT_S)
            log_event(
                logging.WARNING,
                "heartbeat_shortened",
                lease_ttl_s=ttl,
                heartbeat_interval_s=round(interval, 3),
            )
        break
    return interval


async def check_eviction(
    client: aioredis.Redis,
    settings: WorkerSettings,
    gate: RedisGate,
    lifecycle: Lifecycle,
) -> str | None:
    """The server's ``maxmemory-policy``; ``RedisEvicts`` if it may delete keys and
    ``settings.allow_eviction`` is off (the CLI: one line, exit 2).

    Read by the server probe (``protocol.serverprobe``: ``CONFIG GET``, which managed
    Redis services often refuse, then ``INFO``); if neither answers, logged once and the
    worker goes on (it can't tell).
    """
    while not lifecycle.draining:
        try:
            found = await bounded(
                probe_async(client, refused=_refused_reply), settings.reply_timeout
            )
        except REDIS_DOWN as exc:
            await gate.wait_out(exc, lifecycle.drain_requested)
            continue
        policy = found.eviction_policy
        if policy is None:
            log_event(
                logging.WARNING,
                "redis_eviction_policy_unknown",
                note="neither CONFIG GET nor INFO memory answered: make sure the server's "
                "maxmemory-policy is noeviction, or a full Redis may delete tasks",
            )
        elif policy != SAFE_EVICTION_POLICY:
            if not settings.allow_eviction:
                raise RedisEvicts(policy)
            log_event(
                logging.WARNING,
                "redis_evicts",
                maxmemory_policy=policy,
                note="started with --allow-eviction: a full Redis deletes keys, and tasks "
                "it acknowledged can vanish without running; set maxmemory-policy noeviction",
            )
        return policy
    return None


def _refused_reply(exc: redis.exceptions.RedisError) -> bool:
    """A probe's command refused (``_refused``); any other error is raised."""
    return isinstance(exc, redis.exceptions.ResponseError) and _refused(exc)


def _refused(exc: redis.exceptions.ResponseError) -> bool:
    """A command refused to this user or by a managed service (renamed, disabled, NOPERM):
    the worker can run without its answer. Credentials refused are not that: the worker
    can run nothing, and the gate says so (``redis_auth_failed``, exit 2)."""
    if auth_failure(exc) == "authentication":
        return False
    found = classify(exc)
    return found is not None and found.policy is not Policy.WAIT
