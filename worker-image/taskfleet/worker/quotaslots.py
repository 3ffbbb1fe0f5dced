"""Provider quotas in other slots of a Redis Cluster: a run's reservation on the quota's
own slot (docs/protocol.md 4.17, "Quotas in other slots").

On a single server the claim reserves a task's quotas itself, in one script. On a
cluster the claim cannot reach the quota's slot: it hands the task over with its
estimate (the record's ``quotas``), and this worker reserves it on each quota's slot
before the run starts (``pq_run`` ``reserve``). A quota that cannot admit it now ends
the reservations made so far (refunded) and sends the task back to delayed, not an
attempt (``pq_defer``). The heartbeat pushes the reservations' expiry on with the
leases; the run's outcome ends them. A worker that dies leaves them to expire one lease
after its last heartbeat, when whoever reads the quota drops them.

On a single server nothing here runs (``remote`` is False). A queue on a cluster whose
tasks name no quota never fills ``runs``: each hook is then one test of an empty dict.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

import redis.asyncio
import redis.exceptions

from taskfleet.protocol.calls import Call
from taskfleet.protocol.keys import QueueKeys
from taskfleet.protocol.provider_quota import QuotaSlotOps, defer_op, run_member
from taskfleet.protocol.reads import QueueReads
from taskfleet.protocol.records import DEFAULT_LEASE_TTL_S
from taskfleet.protocol.scripts import AsyncScripts, Op
from taskfleet.worker.claimed import ClaimedTask

__all__ = ["QuotaSlots"]

log = logging.getLogger("taskfleet.worker")
T = TypeVar("T")
#: How long a task waits delayed when its quota's slot did not answer (ms).
UNREACHABLE_WAIT_MS = 1000


@dataclass(frozen=True, slots=True)
class _Run:
    task_id: str
    member: str
    names: tuple[str, ...]


#: A client of the master of a quota's slot, given its routing key (a cluster); None:
#: every quota is on the queue's own server (a single server).
QuotaConnect = Callable[[str], Awaitable[redis.asyncio.Redis]] | None


class QuotaSlots:
    """This worker's runs holding reservations on quotas' own slots, by claim token.

    ``run``: a call on the queue's server, bounded (the broker's); ``connect``: a client
    for a quota's slot (``QuotaConnect``), made on first use and kept per quota, whose
    calls ``bound`` bounds in time."""

    def __init__(
        self,
        keys: QueueKeys,
        run: Callable[[Op[Any]], Awaitable[Any]],
        read: Callable[[Call[Any]], Awaitable[Any]],
        connect: QuotaConnect = None,
        bound: Callable[[Awaitable[Any]], Awaitable[Any]] | None = None,
    ) -> None:
        self.keys = keys
        self._run = run
        self._read = read
        self._connect = connect
        #: quotas may lie in other slots (a cluster): claimed tasks may carry estimates
        self.remote = connect is not None
        self._bound = bound
        self._clients: dict[str, redis.asyncio.Redis] = {}
        self.runs: dict[str, _Run] = {}
        self._lease_ms: int | None = None

    async def _on_slot(self, name: str, op: Op[T]) -> T:
        """``op`` run on quota ``name``'s slot."""
        if self._connect is None:
            result: T = await self._run(op)
            return result
        client = self._clients.get(name)
        if client is None:
            client = self._clients[name] = await self._connect(QuotaSlotOps(name).route)
        call = AsyncScripts.for_client(client).run(op)
        result = await (call if self._bound is None else self._bound(call))
        return result

    async def pause(self, op: Op[Any], name: str) -> None:
        """A quota's pause (``provider_quota``), written on its slot."""
        await self._on_slot(name, op)

    async def close(self) -> None:
        clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            await client.aclose()

    async def lease_ms(self) -> int:
        """The queue's lease TTL (ms), read once: a reservation lasts as long as a lease."""
        if self._lease_ms is None:
            found = await self._read(QueueReads(self.keys).lease_ttl())
            ttl = found if isinstance(found, float | int) and found > 0 else DEFAULT_LEASE_TTL_S
            self._lease_ms = max(1, round(ttl * 1000))
        return self._lease_ms

    async def admit(self, tasks: list[ClaimedTask]) -> list[ClaimedTask]:
        """``tasks`` less those a quota could not admit now (sent back to delayed)."""
        if not any(task.quotas is not None for task in tasks):
            return tasks
        kept: list[ClaimedTask] = []
        for task in tasks:
            if task.quotas is None or await self._reserve(task):
                kept.append(task)
        return kept

    async def _reserve(self, task: ClaimedTask) -> bool:
        try:
            want = json.loads(task.quotas or "")
        except ValueError:
            want = None
        if not isinstance(want, dict):
            return True  # unreadable: reserves nothing, as a claim on one server
        member = run_member(self.keys, task.id, task.token)
        lease = await self.lease_ms()
        done: list[str] = []
        for name, units in sorted(want.items()):
            if not isinstance(units, dict):
                continue
            ops = QuotaSlotOps(name)
            estimate = json.dumps(units, separators=(",", ":"))
            unknown = False
            try:
                wait = await self._on_slot(name, ops.reserve(member, estimate, lease))
            except (redis.exceptions.RedisError, OSError, TimeoutError) as exc:
                _unreachable(name, exc)
                # the reserve may have been applied with its reply lost: ended below too
                wait, unknown = UNREACHABLE_WAIT_MS, True
            if wait > 0:
                for earlier in [*done, name] if unknown else done:
                    try:
                        await self._on_slot(
                            earlier, QuotaSlotOps(earlier).end([member], refund=True)
                        )
                    except (redis.exceptions.RedisError, OSError, TimeoutError) as exc:
                        _unreachable(earlier, exc)  # left to expire one lease from now
                try:
                    await self._run(defer_op(self.keys, task.id, task.token, wait, name))
                except (redis.exceptions.RedisError, OSError, TimeoutError) as exc:
                    # the queue's own Redis failed: the task is not run unreserved; it
                    # comes back when its lease runs out, and the rest of the claim runs
                    log.warning(
                        "quota_defer_failed",
                        extra={"fields": {"task": task.id, "error": str(exc)[:200]}},
                    )
                return False
            if wait == 0:
                done.append(name)
        if done:
            self.runs[task.token] = _Run(task.id, member, tuple(done))
        return True

    async def extend(self, tokens: Iterable[str]) -> None:
        """Push on the expiry of the reservations of runs still held (a heartbeat). Never
        raises: a quota's slot out of reach only lets its reservations expire."""
        by_name = self._by_name(tokens)
        if not by_name:
            return
        lease = await self.lease_ms()
        for name, members in by_name.items():
            try:
                await self._on_slot(name, QuotaSlotOps(name).extend(members, lease))
            except (redis.exceptions.RedisError, OSError, TimeoutError) as exc:
                # never in the way of the heartbeat's own work (lost and cancelled runs);
                # a reservation not pushed on expires, its charge kept
                _unreachable(name, exc)

    async def end(self, tokens: Iterable[str], *, refund: bool = False) -> None:
        """The runs under ``tokens`` ended (an outcome written, lost, or given back with
        ``refund``): their reservations end. A failure here leaves them to expire."""
        by_name = self._by_name(tokens, drop=True)
        for name, members in by_name.items():
            try:
                await self._on_slot(name, QuotaSlotOps(name).end(members, refund=refund))
            except (redis.exceptions.RedisError, OSError, TimeoutError) as exc:
                _unreachable(name, exc)

    def _by_name(self, tokens: Iterable[str], *, drop: bool = False) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        if not self.runs:
            return out
        for token in tokens:
            run = self.runs.pop(token, None) if drop else self.runs.get(token)
            if run is None:
                continue
            for name in run.names:
                out.setdefault(name, []).append(run.member)
        return out


def _unreachable(name: str, exc: BaseException) -> None:
    log.warning(
        "quota_slot_unreachable", extra={"fields": {"quota": name, "error": str(exc)[:200]}}
    )
