"""The worker's side of the protocol (asyncio): register, claim, heartbeat, finish, drain.

Built for throughput: a claim takes up to ``n`` tasks in one call, completions are
batched into one call, and tasks are parsed into slotted dataclasses (no pydantic on the
hot path). Every call is one Lua script, so a worker killed at any instant leaves the
queue consistent; what it held comes back through lease expiry or ``requeue``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import astuple
from typing import TypeVar

import redis.asyncio
import redis.exceptions

from taskfleet.protocol import bounds, store
from taskfleet.protocol.calls import Call, run_async
from taskfleet.protocol.connect import Durability
from taskfleet.protocol.control_ops import ControlOps, Report
from taskfleet.protocol.durable import run_and_wait_async
from taskfleet.protocol.errors import (
    IdentityTaken,
    InvalidArgument,
    NameInUse,
    PodGone,
    StaleToken,
    auth_failure,
)
from taskfleet.protocol.faults import Fault, classify
from taskfleet.protocol.keys import QueueKeys
from taskfleet.protocol.lists import QueueLists
from taskfleet.protocol.provider_quota import ProviderQuotaOps
from taskfleet.protocol.queue_ops import CLAIM_HOUSEKEEPING_BOUND, Ops
from taskfleet.protocol.quota import QuotaOps
from taskfleet.protocol.reads import QueueReads
from taskfleet.protocol.replies import Extended, RawClaim, RepairResult, SweepResult
from taskfleet.protocol.schedule_ops import DueBatch, Fired, ScheduleOps
from taskfleet.protocol.schedules import FirePlan
from taskfleet.protocol.scripts import AsyncScripts, Op
from taskfleet.protocol.states import TaskState
from taskfleet.worker.claimed import ClaimedTask, ClaimResult, Served, parse_claim_records
from taskfleet.worker.identity import WorkerRecord
from taskfleet.worker.quotaslots import QuotaConnect, QuotaSlots

__all__ = ["Broker", "ClaimResult", "ClaimedTask", "bounded"]

T = TypeVar("T")
log = logging.getLogger("taskfleet.worker")

#: Bound on the stored error text of a failed attempt.
MAX_ERROR_CHARS = 8192
#: Unanswered claim calls remembered for undoing (the oldest are left to their leases).
MAX_UNANSWERED = 64
#: How long past its own timeout a blocking pop may take to answer (no reply_timeout set).
BLOCKING_REPLY_MARGIN_S = 5.0


async def bounded(call: Awaitable[T], limit: float | None) -> T:
    """``call``'s result, or ``redis.exceptions.TimeoutError`` after ``limit`` seconds.

    An ACL denial that Redis reports as a plain error (a command a script runs that the
    user may not run) is raised as ``redis.exceptions.NoPermissionError``, like the others.
    """
    try:
        if limit is None:
            return await call
        async with asyncio.timeout(limit):
            return await call
    except TimeoutError as exc:  # the builtin one, raised by asyncio.timeout
        raise redis.exceptions.TimeoutError(f"no reply from Redis within {limit:g} s") from exc
    except redis.exceptions.ResponseError as exc:
        if type(exc) is redis.exceptions.ResponseError and auth_failure(exc) == "permission":
            raise redis.exceptions.NoPermissionError(str(exc)) from exc
        raise


class Broker:
    """One worker process's connection to one queue.

    ``pod`` names the worker (the pod name in Kubernetes); ``incarnation`` tells apart
    successive processes of one pod (a restarted container keeps its pod name).

    ``reply_timeout`` bounds every call (seconds; None: the client's own socket timeout
    only). A call without a reply in time raises ``redis.exceptions.TimeoutError`` and
    its connection is dropped, as a socket timeout would. Bounding calls here lets the
    client run without a socket timeout, which makes redis-py send each command from a
    task of its own (``asyncio.wait_for``): two more event-loop turns per call.

    ``host``: this process's whereabouts (``identity.Whereabouts.encode()``), recorded
    with the worker so another one starting under the same name can judge it.

    ``served``: the task names this worker runs (``claimed.Served``).

    ``quota_connect``: on a Redis Cluster, makes a client of a provider quota's slot
    (``quotaslots.QuotaConnect``); None: quotas live on this client's server.
    """

    def __init__(
        self,
        queue: str,
        client: redis.asyncio.Redis,
        pod: str,
        incarnation: str,
        *,
        reply_timeout: float | None = None,
        host: str = "",
        durability: Durability | None = None,
        served: Served | None = None,
        quota_connect: QuotaConnect = None,
    ) -> None:
        name = queue
        if not pod or not incarnation:
            raise ValueError("Broker needs a pod name and an incarnation")
        self.keys = QueueKeys(name)
        self.queue = name
        self.client = client
        self.pod = pod
        self.incarnation = incarnation
        self.concurrency = 0
        self.ops = Ops(self.keys)
        self.schedule_ops = ScheduleOps(self.keys)
        self.control_ops = ControlOps(self.keys)
        self.reads = QueueReads(self.keys)
        self.lists = QueueLists(self.keys)
        self._scripts = AsyncScripts.for_client(client)
        #: where this worker's next repair call starts in the waiting set (0: a new pass)
        self._repair_cursor = 0
        self.reply_timeout = reply_timeout
        #: Replicas a completion waits for (``WAIT``); none by default.
        self.durability = durability or Durability()
        #: This process's whereabouts (``identity.Whereabouts``), kept in the worker record
        #: so a worker starting under the same name can tell whether this one is alive.
        self.host = host
        #: read each claimed task's trace context (``protocol.tracing``) for its run's span
        #: The task names this worker has handlers for; a claimed task of another name
        #: goes dead at once (reason ``unknown task``). None: every task is returned.
        self.served = served
        self._blocking: redis.asyncio.Redis | None = None
        # Claim tokens must be unique, not secret (anyone who can reach Redis can write
        # any key): a generator seeded once from the OS, which unlike os.urandom never
        # lets go of the GIL, and so never waits behind the handler threads to get it back.
        self._tokens = random.Random(os.urandom(16))
        # Token bases of claim calls whose reply never came: they may still run on Redis
        # (a server that hung, then went on) and are undone before the next call.
        self._unanswered: list[str] = []
        #: Registered: claims and beats then need this incarnation's own record (one
        #: gone sends this worker through register again, ``_register_again``).
        self.registered = False
        #: runs holding reservations on provider quotas in other slots (a Redis Cluster)
        self.quota_slots = QuotaSlots(
            self.keys,
            self._run,
            self._read,
            quota_connect,
            lambda call: bounded(call, self.reply_timeout),
        )

    async def _read(self, call: Call[T]) -> T:
        return await bounded(run_async(self.client, call), self.reply_timeout)

    def _token_base(self) -> str:
        return f"{self._tokens.getrandbits(64):016x}"

    async def _run(self, op: Op[T]) -> T:
        if self._unanswered:
            await self._disown()
        return await bounded(self._scripts.run(op), self.reply_timeout)

    async def _run_waited(self, op: Op[T]) -> T:
        """``_run``, waiting for the replicas ``durability`` asks for. A wait that times out
        leaves the write applied on the master, not confirmed replicated: logged."""
        if not self.durability.waits:
            return await self._run(op)
        if self._unanswered:
            await self._disown()
        reply, acked = await bounded(
            run_and_wait_async(self._scripts, op, self.durability),
            None if self.reply_timeout is None else self.reply_timeout + self.durability_s,
        )
        if acked < self.durability.replicas:
            log.warning(
                "completion_not_replicated",
                extra={
                    "fields": {
                        "replicas": acked,
                        "wanted": self.durability.replicas,
                        "timeout_ms": self.durability.timeout_ms,
                    }
                },
            )
        return reply

    @property
    def durability_s(self) -> float:
        """How long a waited write may take beyond its reply (0: unbounded, taken as 60 s)."""
        return (self.durability.timeout_ms or 60_000) / 1000

    async def _claiming(self, op: Op[T], token_base: str, *, completes: bool = False) -> T:
        """Run a call that claims tasks under ``token_base``; remember it if unanswered.

        ``completes``: it completes tasks too, so it waits for replicas as completions do.
        """
        try:
            return await (self._run_waited(op) if completes else self._run(op))
        except BaseException:
            # No reply: it may have claimed nothing, or may yet claim (Redis runs what it
            # read when it can). Either way its tasks are none of this worker's.
            self._unanswered.append(token_base)
            del self._unanswered[:-MAX_UNANSWERED]
            raise

    async def _disown(self) -> None:
        """Release what the unanswered claims took (not an attempt, not lost)."""
        bases = list(self._unanswered)
        op = self.ops.disown(self.pod, self.incarnation, bases)
        released = await bounded(self._scripts.run(op), self.reply_timeout)
        self._unanswered = [b for b in self._unanswered if b not in bases]
        if released:
            log.info(
                "unanswered_claims_released",
                extra={"fields": {"tasks": released, "claims": len(bases)}},
            )

    async def register(
        self, concurrency: int, *, in_use: Callable[[WorkerRecord], str | None] | None = None
    ) -> int:
        """Record this worker; take back what earlier incarnations of the pod held.

        Returns how many tasks were taken back (requeued, or gone dead when lost more
        than max_lost times). With ``in_use``, another incarnation's record is judged
        first: ``in_use(record)`` describes it if it is a live worker, and then nothing
        is changed and ``NameInUse`` is raised; otherwise (gone) this one takes over, as
        without ``in_use``. The judgement holds atomically: a record that changed
        meanwhile is judged again. ``PodGone`` when the pod is gone from the Kubernetes
        API (tombstoned): nothing is changed.
        """
        self.concurrency = concurrency
        expected = "*" if in_use is None else ""
        while True:
            reply = await self._run(
                self.ops.register(
                    self.pod, self.incarnation, concurrency, host=self.host, expected=expected
                )
            )
            if reply.gone_until is not None:
                raise PodGone(self.pod, self.incarnation, reply.gone_until)
            if reply.holder is None:
                self.registered = True
                return reply.requeued + reply.dead
            assert in_use is not None
            record = WorkerRecord.parse(reply.holder, reply.now_ms)
            live = in_use(record)
            if live is not None:
                raise NameInUse(self.pod, live)
            expected = record.incarnation

    async def _register_again(self) -> None:
        """A claim or beat found no readable record under this worker's name (a successor
        that took the name deregistered since, the operator requeued it, a sweep dropped
        it, or Redis lost its data): register again before working on, so the name is
        judged and taken over atomically as at a start. What this incarnation still holds
        it keeps (register takes back only other incarnations' tasks); what was taken
        from it the next beat reports lost. Raises ``IdentityTaken`` when another
        incarnation registered meanwhile, ``PodGone`` when the operator found the pod gone
        from the Kubernetes API (its tasks are taken back: it must not claim them again)."""
        reply = await self._run(
            self.ops.register(
                self.pod, self.incarnation, self.concurrency, host=self.host, expected=""
            )
        )
        if reply.gone_until is not None:
            raise PodGone(self.pod, self.incarnation, reply.gone_until)
        if reply.holder is not None:
            record = WorkerRecord.parse(reply.holder, reply.now_ms)
            raise IdentityTaken(self.pod, self.incarnation, record.describe())
        log.warning(
            "registered_again",
            extra={
                "fields": {
                    "pod": self.pod,
                    "incarnation": self.incarnation,
                    "note": "no worker record under this name",
                    "requeued": reply.requeued + reply.dead,
                }
            },
        )

    async def deregister(self, *, failed: bool = False) -> int:
        """Remove this worker's record, releasing anything it still holds; returns that count.

        ``failed``: the worker exits because it failed; what it holds is taken back as
        lost (counted against ``max_lost``), not released, so a task that makes workers
        fail cannot make them fail for ever.
        """
        released = await self._run(self.ops.deregister(self.pod, self.incarnation, failed=failed))
        await self.close()
        return released

    async def claim(self, n: int, *, idle_ms: int = 0, prefetch: int = 0) -> ClaimResult:
        """Take up to ``n`` tasks (fewer under limits or when the queue is short).

        A task whose stored payload is not a JSON object (a foreign producer wrote it)
        is failed permanently here, reason ``bad payload``, and not returned. With
        ``idle_ms``, a claim that leaves the queue empty registers this worker as idle
        for that long: producers then hand it new tasks through ``wait_for_work``.
        Tasks handed over while it was not waiting come first in the result.
        ``prefetch``: how many of the ``n`` are to wait in this worker for a free slot;
        none are claimed under a fleet-wide concurrency limit.
        """
        if n <= 0:
            return ClaimResult([])
        n = min(n, bounds.MAX_BATCH)  # each call's work bounded: callers ask again for more
        prefetch = min(prefetch, n)
        for _ in range(2):  # once more after registering again
            base = self._token_base()
            raw = await self._claiming(
                self.ops.claim(
                    self.pod,
                    self.incarnation,
                    n,
                    base,
                    CLAIM_HOUSEKEEPING_BOUND,
                    idle_ms=idle_ms,
                    prefetch=prefetch,
                    registered=self.registered,
                ),
                base,
            )
            if raw.holder != "":
                break
            await self._register_again()
        return await self._claimed(raw)

    async def complete_and_claim(
        self, items: Sequence[tuple[str, str, str | None]], n: int, *, prefetch: int = 0
    ) -> tuple[list[int], ClaimResult]:
        """``complete_many(items)`` and then ``claim(n, prefetch=prefetch)``, in one round trip."""
        n = min(n, bounds.MAX_BATCH)
        prefetch = min(prefetch, n)
        base = self._token_base()
        applied, raw = await self._claiming(
            self.ops.complete_and_claim(
                items,
                pod=self.pod,
                incarnation=self.incarnation,
                n=n,
                token_base=base,
                bound=CLAIM_HOUSEKEEPING_BOUND,
                prefetch=prefetch,
                registered=self.registered,
            ),
            base,
            completes=True,
        )
        if self.quota_slots.runs:
            await self.quota_slots.end(token for _, token, _ in items)
        if raw.holder == "":  # the completions were applied; the claim needs a record
            await self._register_again()
            return applied, await self.claim(n, prefetch=prefetch)
        return applied, await self._claimed(raw)

    async def _claimed(self, raw: RawClaim) -> ClaimResult:
        """Read a claim reply; fail (permanently) the tasks that can't be run as stored
        (``claimed.parse_claim_records`` says which and why). Raises ``IdentityTaken``
        when another incarnation registered under this worker's name since: the claim
        got nothing, and this process must stop claiming. A claim refused for want of a
        record twice in a row (it vanished again just after registering) gets nothing and
        asks again soon: the next claim registers again."""
        if raw.holder == "":
            return ClaimResult([], retry_after_ms=1)
        if raw.holder is not None:
            raise IdentityTaken(
                self.pod, self.incarnation, WorkerRecord.parse(raw.holder).describe()
            )
        tasks, bad = parse_claim_records(raw.records, self.served)
        for task_id, token, error, reason in bad:
            await self.fail(task_id, token, error, retryable=False, reason=reason)
        unread = [task for task in tasks if task.unread]
        if unread:
            await self._read_groups_and_traces(unread)
        if self.quota_slots.remote:  # a cluster: quotas in other slots are reserved here
            tasks = await self.quota_slots.admit(tasks)
        return ClaimResult(tasks, raw.retry_after_ms, raw.next_due_ms, raw.more_pending)

    async def _read_groups_and_traces(self, tasks: Sequence[ClaimedTask]) -> None:
        """The group and trace context of tasks an older producer handed over in the
        positional form, in one round trip. The tasks are this worker's already: a failure
        here leaves them ungrouped and untraced, never unrun."""
        try:
            read = self.reads.groups_and_traces([task.id for task in tasks])
            found = await bounded(run_async(self.client, read), self.reply_timeout)
        except (redis.exceptions.RedisError, OSError, TimeoutError) as exc:
            log.warning("group_and_trace_unread", extra={"fields": {"error": str(exc)[:200]}})
            return
        for task, (group, trace) in zip(tasks, found, strict=True):
            task.group, task.trace, task.unread = group or None, trace, False

    async def heartbeat(
        self, tokens: Mapping[str, str], inflight: int | None = None, draining: bool = False
    ) -> set[str]:
        """Extend every lease in ``tokens`` and refresh this worker's record.

        Returns the ids whose token no longer matches: they were taken back (this worker
        was presumed dead) and the worker must abandon them without writing anything.
        Raises ``IdentityTaken`` (nothing extended or written) when another incarnation
        registered under this pod's name since: it took back everything this one held.
        """
        return (await self.beat(tokens, inflight, draining)).lost

    async def beat(
        self,
        tokens: Mapping[str, str],
        inflight: int | None = None,
        draining: bool = False,
        held: int = 0,
    ) -> Extended:
        """``heartbeat``, with the whole reply: also the held tasks whose cancellation was
        asked for (``cancelled``: the worker cancels their runs). ``held``: its held slots."""
        count = len(tokens) if inflight is None else inflight
        for _ in range(2):  # once more after registering again
            reply = await self._run(
                self.ops.extend(
                    self.pod,
                    self.incarnation,
                    tokens.items(),
                    inflight=count,
                    draining=draining,
                    concurrency=self.concurrency,
                    host=self.host,
                    registered=self.registered,
                    held=held,
                )
            )
            if reply.holder != "":
                break
            await self._register_again()
        if reply.holder == "":  # gone again at once: nothing learnt; the next beat asks
            return Extended(set())
        if reply.holder is not None:
            record = WorkerRecord.parse(reply.holder)
            raise IdentityTaken(self.pod, self.incarnation, record.describe())
        if self.quota_slots.runs:
            await self.quota_slots.end(tokens[i] for i in reply.lost if i in tokens)
            await self.quota_slots.extend(tokens.values())
        return reply

    async def complete_many(self, items: Sequence[tuple[str, str, str | None]]) -> list[int]:
        """Finish tasks in one call: ``(id, token, result JSON or None)`` each.

        Returns, per item, ``COMPLETED`` (1, equal to True) if applied, ``STALE`` (0,
        equal to False) if refused for a stale token (the task was taken back; counted in
        stats ``stale``), or ``RESULT_TOO_LARGE`` (2): the result exceeds the queue's
        ``max_payload_bytes``, so the task went dead (reason ``result too large``),
        ``CANCELLED`` (3), ``DEPENDENCY_FAILED`` (4): a child it added failed, so it went
        dead, or ``JOINING`` (5): it waits for children it added (not done yet). A
        retry of a write that was applied but whose reply was lost answers the same.
        """
        if len(items) <= bounds.MAX_BATCH:  # the worker's outbox writes batches this size
            applied = await self._run_waited(self.ops.complete(items)) if items else []
        else:
            applied = []
            for start in range(0, len(items), bounds.MAX_BATCH):
                chunk = items[start : start + bounds.MAX_BATCH]
                done: list[int] = await self._run_waited(self.ops.complete(chunk))
                applied += done
        if self.quota_slots.runs:
            await self.quota_slots.end(token for _, token, _ in items)
        return applied

    async def complete(self, task_id: str, token: str, result_json: str | None = None) -> None:
        """Finish one task; raises ``StaleToken`` if it was taken back (nothing written)."""
        [applied] = await self.complete_many([(task_id, token, result_json)])
        if not applied:
            raise StaleToken(task_id)

    async def fail(
        self,
        task_id: str,
        token: str,
        error: str,
        retryable: bool = True,
        *,
        reason: str = "",
        retry_after_ms: int | None = None,
        throttle: bool = False,
        throttle_group: bool = False,
        traceback: str = "",
        timed_out: bool = False,
    ) -> TaskState | None:
        """Record a failed attempt; returns the new state, ``delayed`` (retried after
        backoff, or after ``retry_after_ms`` as the handler asked), ``dead``, or
        ``cancelled`` (asked for while it ran), or None when refused for a stale token.
        ``traceback``: its last frames, kept in the task's history; ``timed_out``: the run
        passed its timeout."""
        jitter = random.uniform(-1.0, 1.0)  # spreads retries; not a secret
        state = await self._run(
            self.ops.fail(
                task_id,
                token,
                error[:MAX_ERROR_CHARS],
                retryable=retryable,
                jitter=jitter,
                reason=reason,
                retry_after_ms=retry_after_ms,
                throttle=throttle,
                throttle_group=throttle_group,
                traceback=traceback,
                timed_out=timed_out,
            )
        )
        if self.quota_slots.runs:
            await self.quota_slots.end([token])
        return None if state == "stale" else TaskState(state)

    async def report(self, reports: Sequence[Report]) -> list[bool]:
        """Write what handlers reported (progress, real cost), each under its run's token;
        per report, False when refused (the task was taken back, or is gone)."""
        if not reports:
            return []
        return await self._run(self.control_ops.report(reports))

    async def pause_quota(self, pause_ms: int | None, reason: str, task_id: str = "") -> int:
        """A handler reported its provider's quota spent (``report_quota``): every worker
        stops claiming the queue's tasks (with ``task_id``: that task's group's, if it has
        one) for ``pause_ms`` (None: the adaptive pause). Returns the pause's end (ms)."""
        op = QuotaOps(self.keys).pause(pause_ms, reason, task_id=task_id, reporter=self.pod)
        until, _ = await self._run(op)
        return until

    async def pause_provider_quota(self, name: str, pause_ms: int, reason: str) -> None:
        """A handler raised ``RateLimited(quota=name)``: claims of every task naming that
        provider quota stop for ``pause_ms``, in every queue. A quota never configured, or
        a name that is no quota's, pauses nothing (the task is deferred all the same)."""
        try:
            op = ProviderQuotaOps(name).pause(pause_ms, reason)
        except InvalidArgument:
            return
        await self.quota_slots.pause(op, name)

    async def groups_of(self, task_ids: Sequence[str]) -> list[str]:
        """Each task's group ('' for none), in one round trip: read only for a task whose
        group-scoped pause was written after it ended (claim records carry the others')."""
        return await bounded(
            run_async(self.client, self.reads.groups(task_ids)), self.reply_timeout
        )

    async def release(self, items: Iterable[tuple[str, str]], *, unstarted: bool = False) -> int:
        """Give back unfinished tasks while draining (not an attempt, not lost).
        ``unstarted``: no handler began them (no history record)."""
        items = list(items)
        released = 0
        for start in range(0, len(items), bounds.MAX_BATCH):  # each call's work bounded
            chunk = items[start : start + bounds.MAX_BATCH]
            released += await self._run(self.ops.release(self.pod, chunk, unstarted=unstarted))
        if self.quota_slots.runs:  # given back, not an attempt: the estimate goes back
            await self.quota_slots.end((token for _, token in items), refund=True)
        return released

    async def sweep(self, *, max_calls: int = 1) -> SweepResult:
        """The operator's housekeeping pass; workers may run it too (it is idempotent).

        Each call does bounded work; up to ``max_calls`` calls are made while one is
        saturated, so a backlog of housekeeping is worked off without one long call.
        """
        total = await self._run(self.ops.sweep())
        for _ in range(max_calls - 1):
            if not total.saturated():
                break
            more = await self._run(self.ops.sweep())
            total = SweepResult(
                *(a + b for a, b in zip(astuple(total), astuple(more), strict=True))
            )
            if not more.saturated():
                break
        return total

    async def repair(self, *, max_calls: int = 1) -> list[tuple[str, str]]:
        """Resolve waiting tasks whose dependencies all ended without waking them
        (lua/repair.lua); the tasks repaired, each with the state it left in.

        Each call reads a bounded slice of the waiting set from where this worker's last
        call stopped; up to ``max_calls`` calls are made while the pass goes on.
        """
        repaired: list[tuple[str, str]] = []
        for _ in range(max_calls):
            result: RepairResult = await self._run(self.ops.repair(self._repair_cursor))
            self._repair_cursor = result.cursor
            repaired.extend(result.repaired)
            if not result.more:
                break
        return repaired

    async def schedules_due(self, limit: int, lease_ms: int) -> DueBatch:
        """Claim up to ``limit`` due schedules for ``lease_ms`` (see ``firing``)."""
        return await self._run(self.schedule_ops.due(limit, lease_ms))

    async def fire_schedules(self, plans: Sequence[FirePlan]) -> Fired:
        """Fire planned slots; each applies only if its schedule is still as read."""
        return await self._run(self.schedule_ops.fire(plans))

    async def wait_for_work(self, timeout_s: float) -> ClaimResult | None:
        """Block until a producer hands over a task or signals new work, or ``timeout_s``.

        Uses BLPOP on this pod's wake list (where producers push tasks they claimed for
        a worker registered idle by ``claim(idle_ms=...)``) and the queue's ``notify``
        list, on a connection of its own (with no socket timeout shorter than the wait),
        so an idle worker gets a new task within a fraction of a millisecond of its
        enqueue. Returns None on timeout, else the handed-over task (an empty result
        when only signalled: claim then).
        """
        if self._blocking is None:
            pool = self.client.connection_pool
            kwargs = dict(pool.connection_kwargs)
            kwargs["socket_timeout"] = None
            # from_pool: the client owns the pool, so close() disconnects it too
            self._blocking = redis.asyncio.Redis.from_pool(
                redis.asyncio.ConnectionPool(
                    connection_class=pool.connection_class, max_connections=2, **kwargs
                )
            )
        timeout = max(0.001, timeout_s)
        # Bounded on the client side too: a server that hangs or a connection that died
        # without a reset would otherwise keep the worker waiting here for good.
        woken = await bounded(
            run_async(self._blocking, self.lists.wait_for_work(self.pod, timeout)),
            timeout + (self.reply_timeout or BLOCKING_REPLY_MARGIN_S),
        )
        if woken is None:
            return None
        if woken.record is None:
            return ClaimResult([])
        return await self._claimed(RawClaim(0, None, False, [woken.record]))

    async def writable(self) -> None:
        """Return if Redis takes writes now; raise its refusal (OOM, MISCONF...) if not.
        Changes nothing (``faults.WRITABLE_PROBE``)."""
        try:
            await bounded(run_async(self.client, store.writable(self.keys)), self.reply_timeout)
        except redis.exceptions.ResponseError as exc:
            found = classify(exc)
            if found is not None and found.fault is Fault.REFUSED:
                return  # a server without script flags (before 7.0): no way to ask, go on
            raise

    async def close(self) -> None:
        """Close the wake-up connection and those of quotas' slots (the caller owns
        ``client``)."""
        await self.quota_slots.close()
        if self._blocking is not None:
            blocking, self._blocking = self._blocking, None
            await blocking.aclose()
