"""The queue's own scripts as ``Op`` values: `Ops`, one per queue, builds the call of
enqueue, claim, extend, complete (and complete + claim), fail, release, requeue,
register, deregister, disown, watch, repair and sweep.

Each builder makes the script's arguments by their declaration in ``signatures`` and
gives the decoder that turns the reply into Python values and return codes into
exceptions; ``scripts`` runs them on a sync or an async client. A single plain enqueue's
arguments are packed once but for what differs per task (a producer's hot path).
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Literal

from taskfleet.protocol import bounds, wire
from taskfleet.protocol.errors import (
    DependencyCycle,
    InvalidArgument,
    InvalidPayload,
    OlderWorker,
    ProtocolError,
    StaleToken,
    TaskExists,
)
from taskfleet.protocol.keys import QueueKeys
from taskfleet.protocol.records import text
from taskfleet.protocol.replies import (
    SWEEP_BOUND,
    Extended,
    RawClaim,
    Registered,
    RepairResult,
    SweepResult,
    applied_codes,
    ints,
    raw_claim,
    repair_result,
)
from taskfleet.protocol.scripts import Arg, Op
from taskfleet.protocol.signatures import (
    Claim,
    Complete,
    Completion,
    Deregister,
    Disown,
    Enqueue,
    EnqueuePlain,
    EnqueueTask,
    Extend,
    Fail,
    Held,
    PlainTask,
    Register,
    Release,
    Repair,
    Requeue,
    Sweep,
    TaskId,
    TokenBase,
    Watch,
    with_records,
)

#: Housekeeping bound per claim: keeps a claim short however large the backlog.
CLAIM_HOUSEKEEPING_BOUND = 100
#: Records a repair call reads at most (a waiting task and each of its dependencies: one
#: each); a pass over a larger waiting set takes several calls, each a few milliseconds.
REPAIR_BOUND = 500
#: A dependency that ended this recently and still names the task in its set of
#: dependants is left to the normal resolve (it may sit on the flow backlog a moment).
REPAIR_SETTLE_MS = 5000


# _with_completions packs each item as these fields, in this order.
assert Completion._fields == ("task_id", "token", "result")


def _with_completions(
    head: tuple[Any, ...], items: Sequence[tuple[str, str, str | None]]
) -> list[Arg]:
    """``with_records(head, [Completion(...) for each item])`` in one pass: a completion
    batch is packed per call on the worker's hot path (the fields in ``Completion``'s
    order: task id, token, result or '')."""
    out: list[Arg] = list(head)
    for task_id, token, result in items:
        out += (task_id, token, result or "")
    return out


#: Per-task codes of a completion: refused (stale token), done, dead (result too large),
#: cancelled (asked for while it ran), dead (a child it added failed), waiting (for the
#: children it added: not done yet). 0 and 1 compare equal to False and True.
STALE, COMPLETED, RESULT_TOO_LARGE, CANCELLED, DEPENDENCY_FAILED, JOINING = 0, 1, 2, 3, 4, 5


#: One task as the enqueue script takes it (already validated and encoded).
EnqueueArgs = EnqueueTask


#: A single enqueue's ARGV (``Enqueue`` and one ``EnqueueTask``) with the task's options
#: but priority at their defaults, packed once but for token base, id, payload, priority.
_ONE = (wire.packed_args((1,)), wire.packed_args((CLAIM_HOUSEKEEPING_BOUND, "", "", "", "")))
_DEFAULTS = (0, "", "", 1, "", "", "", "", "")  # delay_ms .. quotas
_DEFAULTS_PACKED = wire.packed_args(_DEFAULTS)
_CLASSES = (str, str, int, int, str, str, int)  # 0.0 or True equal a default, pack otherwise


def _packed_one(task: EnqueueArgs, token_base: str) -> bytes | None:
    """``wire.packed_args`` of such an enqueue (no trace, parent or flow), else None."""
    if task[3:] != _DEFAULTS or not all(map(operator.is_, map(type, task), _CLASSES)):
        return None
    tb, tid, payload = token_base.encode(), task.task_id.encode(), task.payload.encode()
    return b"%b$%d\r\n%b\r\n%b$%d\r\n%b\r\n$%d\r\n%b\r\n%b%b" % (
        _ONE[0], len(tb), tb, _ONE[1], len(tid), tid, len(payload), payload,
        wire.bulk(task.priority), _DEFAULTS_PACKED)  # fmt: skip


#: enqueue_plain's ARGV of one task handed off if it can be (``EnqueuePlain(1, 1, "")``),
#: and a ``PlainTask``'s fields after priority at their defaults, packed once.
_PLAIN_ONE = wire.packed_args((1, 1, ""))
_PLAIN_DEFAULTS_PACKED = wire.packed_args(_DEFAULTS[:5])
#: How many of ``EnqueueTask``'s fields ``PlainTask`` keeps; a task with any of the others
#: (after, on_dep_fail, group, quotas) is no plain one.
_PLAIN = len(PlainTask._fields)
assert EnqueueTask._fields[:_PLAIN] == PlainTask._fields


def _packed_plain_one(task: EnqueueArgs) -> bytes | None:
    """``wire.packed_args`` of enqueue_plain's ARGV for ``task`` alone, handed off if it can
    be, with no trace, when its options are the defaults; else None."""
    if task[3:] != _DEFAULTS or not all(map(operator.is_, map(type, task), _CLASSES)):
        return None
    tid, payload = task.task_id.encode(), task.payload.encode()
    return b"%b$%d\r\n%b\r\n$%d\r\n%b\r\n%b%b" % (
        _PLAIN_ONE, len(tid), tid, len(payload), payload, wire.bulk(task.priority),
        _PLAIN_DEFAULTS_PACKED)  # fmt: skip


def _plain(tasks: Sequence[EnqueueArgs]) -> bool:
    """Whether every task is plain: no after, on_dep_fail, group or quotas (enqueue_plain)."""
    return all(
        not task[_PLAIN] and not task[_PLAIN + 1] and not task[_PLAIN + 2] and not task[_PLAIN + 3]
        for task in tasks
    )


class Ops:
    """Builds the :class:`Op` of each script for one queue."""

    def __init__(self, keys: QueueKeys) -> None:
        self.keys = keys
        self._k = keys

    def enqueue(
        self,
        tasks: Sequence[EnqueueArgs],
        token_base: str | None = None,
        trace: str = "",
        parent: tuple[str, str] | None = None,
        flow: str = "",
    ) -> Op[list[bool]]:
        """Reply: per task, True if created, False if the same task existed (unchanged).

        Raises ``TaskExists`` when an id names an existing task with another payload or
        options, ``InvalidPayload`` for a payload over the queue's limit (nothing stored
        then). With ``token_base``, new tasks go straight to idle workers (see hand_off).
        ``trace``: the producer's trace context (``protocol.tracing``), stored with every
        new task of the call. ``parent``: (task id, claim token) of a running task adding
        these as its children (docs/flows.md); ``StaleToken`` when that run no longer
        holds it. ``flow``: every new task joins that flow (a flow enqueued whole).

        Plain tasks (no parent, flow, after, on_dep_fail or group) go to enqueue_plain,
        which is given only the keys they touch; it leaves a hand-off to idle workers to
        this enqueue (the op's ``fallback``): same records, same replies."""
        parent_id, parent_token = parent if parent is not None else ("", "")
        decode = self._enqueue_decode(tasks, parent_id)
        if parent is None and not flow and _plain(tasks):
            packed = None
            if token_base is not None and not trace and len(tasks) == 1:
                packed = _packed_plain_one(tasks[0])
            head_plain = EnqueuePlain(len(tasks), 0 if token_base is None else 1, trace)
            return Op(
                "enqueue_plain",
                self._k.script("enqueue_plain"),
                with_records(head_plain, (task[:_PLAIN] for task in tasks)),
                decode,
                packed,
                lambda: self._enqueue(tasks, token_base, trace=trace, decode=decode),
            )
        return self._enqueue(
            tasks,
            token_base,
            trace=trace,
            parent=(parent_id, parent_token),
            flow=flow,
            decode=decode,
        )

    def _enqueue(
        self,
        tasks: Sequence[EnqueueArgs],
        token_base: str | None,
        *,
        trace: str,
        parent: tuple[str, str] = ("", ""),
        flow: str = "",
        decode: Callable[[Any], list[bool]],
    ) -> Op[list[bool]]:
        parent_id, parent_token = parent
        packed = None
        if not parent_id and token_base is not None and not trace and not flow and len(tasks) == 1:
            packed = _packed_one(tasks[0], token_base)
        if token_base is None:
            head = Enqueue(len(tasks), "", "", trace, parent_id, parent_token, flow)
        else:
            head = Enqueue(
                len(tasks),
                token_base,
                CLAIM_HOUSEKEEPING_BOUND,
                trace,
                parent_id,
                parent_token,
                flow,
            )
        return Op("enqueue", self._k.script("enqueue"), with_records(head, tasks), decode, packed)

    def _enqueue_decode(
        self, tasks: Sequence[EnqueueArgs], parent_id: str
    ) -> Callable[[Any], list[bool]]:
        """The reply of enqueue (and enqueue_plain) for ``tasks``, its codes raised."""

        def decode(raw: Any) -> list[bool]:
            if not isinstance(raw, list) or not raw:
                raise ProtocolError(f"enqueue: unexpected reply {raw!r}")
            code = int(raw[0])
            if code == -1:
                index, size, limit = (int(x) for x in raw[1:4])
                raise InvalidPayload(
                    f"payload of task {tasks[index - 1].task_id} is {size} bytes; "
                    f"the queue allows {limit} (max_payload_bytes)"
                )
            if code == -2:
                raise TaskExists(tasks[int(raw[1]) - 1].task_id, text(raw[2]))
            if code == -3:
                task_id = tasks[int(raw[1]) - 1].task_id
                raise InvalidArgument(f"task id {task_id!r} appears twice in one enqueue")
            if code == -5:
                raise StaleToken(parent_id)
            if code == -6:
                raise OlderWorker(self.keys.queue, text(raw[1]), text(raw[2]))
            if code == -7:
                raise DependencyCycle(tasks[int(raw[1]) - 1].task_id, parent_id)
            if code == -8:
                raise InvalidArgument(
                    f"more than {int(raw[1])} tasks wait for {parent_id!r}: too many to check "
                    "its children for a dependency cycle; add children that are new tasks "
                    "waiting for no existing one"
                )
            if code == -4:
                index, dep = int(raw[1]), text(raw[2])
                task_id = tasks[index - 1].task_id
                if any(t.task_id == dep for t in tasks[index:]):
                    # a task may wait only for earlier ones: a cycle can never be stored
                    raise DependencyCycle.later(task_id, dep)
                raise InvalidArgument(
                    f"task {task_id!r} waits for {dep!r} (after), which is no task "
                    "of this queue nor an earlier task of this enqueue"
                )
            if code != 1:
                raise ProtocolError(f"enqueue: unexpected reply {raw!r}")
            return [int(x) == 1 for x in raw[1:]]

        return decode

    def claim(
        self,
        pod: str,
        incarnation: str,
        n: int,
        token_base: str,
        bound: int,
        *,
        idle_ms: int = 0,
        prefetch: int = 0,
        registered: bool = False,
    ) -> Op[RawClaim]:
        """``idle_ms`` > 0: if the queue runs dry, register the worker as idle that long.

        ``prefetch``: how many of the ``n`` would wait in the worker for a free slot; the
        script leaves them out under a fleet-wide concurrency limit. ``registered``: the
        caller registered, so a name without a readable record refuses the claim too
        (``RawClaim.holder`` ''): it registers again first.
        """
        args = Claim(
            pod=pod,
            incarnation=incarnation,
            max_tasks=n,
            token_base=token_base,
            bound=bound,
            idle_ms=idle_ms,
            prefetch=prefetch,
            registered=1 if registered else "",
            # this library reserves provider quotas on their own slots (a Redis Cluster)
            quota_slots=1,
        )
        return Op("claim", self._k.script("claim"), args, lambda raw: raw_claim(raw, "claim"))

    def extend(
        self,
        pod: str,
        incarnation: str,
        tokens: Iterable[tuple[str, str]],
        *,
        inflight: int,
        draining: bool,
        concurrency: int,
        host: str = "",
        registered: bool = False,
        held: int = 0,
    ) -> Op[Extended]:
        """Reply: the lost ids, or (nothing extended) the record of the incarnation that
        registered under ``pod`` since; with ``registered``, '' as that record when the name
        has none readable (the caller registers again, then beats). ``held``: the worker's
        held slots, written in its record when > 0."""
        leases = [Held(task_id, token) for task_id, token in tokens]
        head = Extend(
            pod=pod,
            incarnation=incarnation,
            inflight=inflight,
            draining=1 if draining else 0,
            concurrency=concurrency,
            host=host,
            n=len(leases),
            registered=1 if registered else "",
            held=held if held else "",
        )
        args = with_records(head, leases)

        def decode(raw: Any) -> Extended:
            if not isinstance(raw, list) or not raw:
                raise ProtocolError(f"extend: unexpected reply {raw!r}")
            if isinstance(raw[0], int):  # {-1, record}: refused, nothing extended
                return Extended(set(), text(raw[1]) if len(raw) > 1 else "")
            ids = [text(x) for x in raw[1:]]
            if "" not in ids:
                return Extended(set(ids))
            cut = ids.index("")  # no task id is empty: the cancelled ones follow it
            return Extended(set(ids[:cut]), cancelled=frozenset(ids[cut + 1 :]))

        return Op("extend", self._k.script("extend"), args, decode)

    def complete(self, items: Sequence[tuple[str, str, str | None]]) -> Op[list[int]]:
        """Reply: per item, True if applied, False if its token was stale (refused)."""
        head = Complete(len(items), "", "", "", "", "", "", "")
        return Op(
            "complete", self._k.script("complete"), _with_completions(head, items), applied_codes
        )

    def complete_and_claim(
        self,
        items: Sequence[tuple[str, str, str | None]],
        *,
        pod: str,
        incarnation: str,
        n: int,
        token_base: str,
        bound: int,
        prefetch: int = 0,
        registered: bool = False,
    ) -> Op[tuple[list[int], RawClaim]]:
        """``complete`` then ``claim`` for the freed slots, in one call (one round trip)."""
        head = Complete(
            n=len(items),
            pod=pod,
            incarnation=incarnation,
            max_tasks=n,
            token_base=token_base,
            bound=bound,
            idle_ms=0,
            prefetch=prefetch,
            registered=1 if registered else "",
            quota_slots=1,
        )
        args = _with_completions(head, items)

        def decode(raw: Any) -> tuple[list[int], RawClaim]:
            if not isinstance(raw, list) or not raw:
                raise ProtocolError(f"complete: unexpected reply {raw!r}")
            return applied_codes(raw[0]), raw_claim(raw[1:], "complete")

        return Op("complete", self._k.script("complete"), args, decode)

    def fail(
        self,
        task_id: str,
        token: str,
        error: str,
        *,
        retryable: bool,
        jitter: float,
        reason: str,
        retry_after_ms: int | None = None,
        throttle: bool = False,
        throttle_group: bool = False,
        traceback: str = "",
        timed_out: bool = False,
    ) -> Op[str]:
        """``retry_after_ms``: the handler asked for a retry after that long (RetryAfter).
        ``throttle``: it met a provider's rate limit (RateLimited): the queue pauses claiming
        (``retry_after_ms``: the provider's retry-after; None: the adaptive pause);
        ``throttle_group``: only the task's group pauses (the queue if it has none)."""
        after: int | Literal[""] = ""
        deferrals: int | Literal[""] = ""
        if retry_after_ms is not None:
            if isinstance(retry_after_ms, bool) or not isinstance(retry_after_ms, int):
                raise InvalidArgument(f"retry_after_ms must be an int, not {retry_after_ms!r}")
            if not 0 <= retry_after_ms <= bounds.MAX_DELAY_S * 1000:
                raise InvalidArgument(
                    f"retry_after_ms must be within 0..{bounds.MAX_DELAY_S * 1000}, "
                    f"not {retry_after_ms}"
                )
            after, deferrals = retry_after_ms, bounds.MAX_DEFERRALS
        if throttle:
            deferrals = bounds.MAX_DEFERRALS
        args = Fail(
            task_id=task_id,
            token=token,
            error=error,
            retryable=1 if retryable else 0,
            jitter=jitter,
            reason=reason,
            retry_after_ms=after,
            max_deferrals=deferrals,
            throttle=(2 if throttle_group else 1) if throttle else "",
            traceback=traceback,
            timed_out=1 if timed_out else "",
        )
        return Op("fail", self._k.script("fail"), args, text)

    def release(
        self, pod: str, items: Iterable[tuple[str, str]], *, unstarted: bool = False
    ) -> Op[int]:
        held = [Held(task_id, token) for task_id, token in items]
        args = Release(pod, "1" if unstarted else "", len(held))
        return Op("release", self._k.script("release"), with_records(args, held), int)

    def requeue(
        self, pod: str, keep_incarnation: str | None, *, tombstone_s: int | None = None
    ) -> Op[tuple[int, int]]:
        """``tombstone_s``: the pod is gone from the Kubernetes API; none of its workers
        may register for that many seconds (``register`` answers ``gone_until``)."""

        def decode(raw: Any) -> tuple[int, int]:
            requeued, dead = ints(raw, 2, "requeue")
            return requeued, dead

        args = Requeue(
            pod=pod,
            keep_incarnation=keep_incarnation or "",
            tombstone_s="" if tombstone_s is None else str(tombstone_s),
        )
        return Op("requeue", self._k.script("requeue"), args, decode)

    def register(
        self,
        pod: str,
        incarnation: str,
        concurrency: int,
        *,
        host: str = "",
        expected: str = "*",
    ) -> Op[Registered]:
        """``expected``: the incarnation whose record the caller judged gone ('' = none
        expected, '*' = take over whatever is there). Another one answers with its record
        and changes nothing."""

        def decode(raw: Any) -> Registered:
            if isinstance(raw, list) and len(raw) == 3 and int(raw[0]) == -1:
                return Registered(0, 0, text(raw[1]), int(raw[2]))
            if isinstance(raw, list) and len(raw) == 3 and int(raw[0]) == -2:
                return Registered(0, 0, now_ms=int(raw[2]), gone_until=int(raw[1]))
            requeued, dead = ints(raw, 2, "register")
            return Registered(requeued, dead)

        args = Register(
            pod=pod, incarnation=incarnation, concurrency=concurrency, host=host, expected=expected
        )
        return Op("register", self._k.script("register"), args, decode)

    def deregister(self, pod: str, incarnation: str, *, failed: bool = False) -> Op[int]:
        args = Deregister(pod=pod, incarnation=incarnation, failed=1 if failed else 0)
        return Op("deregister", self._k.script("deregister"), args, int)

    def disown(self, pod: str, incarnation: str, token_bases: Sequence[str]) -> Op[int]:
        head = Disown(pod=pod, incarnation=incarnation, n=len(token_bases))
        args = with_records(head, [TokenBase(base) for base in token_bases])
        return Op("disown", self._k.script("disown"), args, int)

    def watch(self, waiter: str, task_ids: Sequence[str]) -> Op[str]:
        """Reply: per id, 'F' finished, 'W' watched (pushed to the waiter's list when it
        finishes), 'A' absent."""

        def decode(raw: Any) -> str:
            flags = text(raw)
            if len(flags) != len(task_ids) or flags.strip("FWA"):
                raise ProtocolError(f"watch: unexpected reply {raw!r}")
            return flags

        head = Watch(waiter=waiter, n=len(task_ids))
        args = with_records(head, [TaskId(task_id) for task_id in task_ids])
        return Op("watch", self._k.script("watch"), args, decode)

    def repair(
        self, cursor: int = 0, bound: int = REPAIR_BOUND, settle_ms: int = REPAIR_SETTLE_MS
    ) -> Op[RepairResult]:
        """Resolve waiting tasks whose dependencies all ended without waking them
        (lua/repair.lua), from rank ``cursor`` of the waiting set."""
        args = Repair(bound=bound, cursor=cursor, settle_ms=settle_ms)
        return Op("repair", self._k.script("repair"), args, repair_result)

    def sweep(self, bound: int = SWEEP_BOUND) -> Op[SweepResult]:
        args = Sweep(bound=bound)
        return Op(
            "sweep", self._k.script("sweep"), args, lambda raw: SweepResult(*ints(raw, 8, "sweep"))
        )
