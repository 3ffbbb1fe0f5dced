"""Every script's ARGV, declared once: names, wire types, optional ones, the repeated group.

Each script's named arguments are a ``NamedTuple`` (its fields in ARGV order, each
annotated with its wire type and a line of doc); a script that takes a variable number
of records declares one more ``NamedTuple`` for a record and the name of the int argument
that counts them. The records come last in ARGV, after every named argument, so no
argument's position depends on their number. An optional argument is sent as the empty
string when absent.

From this one declaration:

- the Python binding packs by name: an op builder makes the tuple (``Claim(pod=...,
  ...)``) and sends it as is, its records flattened after it (``with_records``);
- ``python -m taskfleet.protocol.bundle`` generates each script's Lua locals for its
  arguments (``ARG_<NAME>``, and ``RECORD(i)`` returning record ``i``'s fields), the
  manifest (bundle/manifest.json) and docs/protocol-scripts.md.

Wire types: ``int`` (decimal digits, optional '-'), ``number`` (a decimal or ``inf`` /
``-inf`` as Lua's ``tonumber`` and Redis' ranges read them), ``string`` (UTF-8 text),
``bytes`` (any bytes, kept as sent) and ``json`` (UTF-8 JSON text). A flag is an ``int``,
1 or 0.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Annotated, Any, Literal, NamedTuple

__all__ = ["PROTOCOL", "SCRIPTS", "Script", "Wire", "with_records"]

#: The protocol's version: the manifest's ``protocol``. Raised when a change would make a
#: client of the previous version misread what this one stores or replies.
PROTOCOL = 1


@dataclass(frozen=True, slots=True)
class Wire:
    """An argument's wire type and whether it may be sent as '' (absent)."""

    type: Literal["int", "number", "string", "bytes", "json"]
    optional: bool = False


Empty = Literal[""]
Int = Annotated[int, Wire("int")]
Number = Annotated[float, Wire("number")]
Str = Annotated[str, Wire("string")]
Bytes = Annotated[str | bytes, Wire("bytes")]
Json = Annotated[str, Wire("json")]
OptInt = Annotated[int | Empty, Wire("int", optional=True)]
OptNumber = Annotated[float | Empty, Wire("number", optional=True)]
OptStr = Annotated[str, Wire("string", optional=True)]
OptJson = Annotated[str, Wire("json", optional=True)]

Arg = str | int | float | bytes


def with_records(head: tuple[Any, ...], records: Iterable[tuple[Any, ...]]) -> list[Arg]:
    """A call's ARGV: its named arguments, then each record's fields."""
    out: list[Arg] = list(head)
    for record in records:
        out.extend(record)
    return out


# -- task records --------------------------------------------------------------------------


class Enqueue(NamedTuple):
    n: Annotated[Int, "how many task records follow"]
    token_base: Annotated[
        OptStr,
        "hand new tasks straight to idle workers, their claim tokens made from this (random) "
        "base; '' hands nothing over",
    ]
    bound: Annotated[
        OptInt, "with token_base: the housekeeping bound of the claims made for idle workers"
    ]
    trace: Annotated[
        OptStr, "the producer's trace context, stored with every new task (field 'trace')"
    ]
    parent: Annotated[
        OptStr,
        "a running task adding these as its children: it is done only once they all are; '' = none",
    ] = ""
    parent_token: Annotated[OptStr, "with parent: the claim token its run holds"] = ""
    flow: Annotated[
        OptStr,
        "every new task of the call joins this flow (a flow enqueued whole: its first task's "
        "id); '' = by parent or after",
    ] = ""


class EnqueueTask(NamedTuple):
    """One task as the enqueue script takes it (already validated and encoded)."""

    task_id: Annotated[Str, "the task's id"]
    payload: Annotated[Str, "JSON text; a named task's is '\\1' NAME '\\1' then the JSON"]
    priority: Annotated[Int, "-1000..1000, higher first"]
    delay_ms: Annotated[Int, "ms from now until it may run (0: now)"]
    deadline: Annotated[
        OptStr, "not started by then, it ends dead: '<ms from now>' or '@<epoch ms>'"
    ]
    max_attempts: Annotated[OptInt, "'' = the queue's max_attempts"]
    cost: Annotated[Int, "units it takes of the cost rate limit"]
    timeout_s: Annotated[OptNumber, "seconds a run may take; '' = the queue's default_timeout_s"]
    after: Annotated[
        OptJson,
        "ids it waits for, a JSON array (tasks, or earlier tasks of the call); '' = none",
    ] = ""
    on_dep_fail: Annotated[
        OptStr, "with after: 'fail' ('' too), 'ignore' or 'cancel' when one ends dead or cancelled"
    ] = ""
    group: Annotated[
        OptStr, "the group it belongs to, claimed fairly among the queue's groups; '' = none"
    ] = ""
    quotas: Annotated[
        OptJson,
        "the provider quotas its run reserves at claim, a JSON object name -> {unit: amount} "
        "(field 'quotas'); '' = none",
    ] = ""


class EnqueuePlain(NamedTuple):
    n: Annotated[Int, "how many task records follow"]
    hand_off: Annotated[
        Int,
        "1: the caller would hand new tasks to idle workers (enqueue's token_base); with a live "
        "idle worker and a new task due now, nothing is stored and the reply is [0]: send "
        "enqueue",
    ]
    trace: Annotated[
        OptStr, "the producer's trace context, stored with every new task (field 'trace')"
    ]


class PlainTask(NamedTuple):
    """A task of no flow or group: ``EnqueueTask``'s first fields, as enqueue_plain takes it."""

    task_id: Annotated[Str, "the task's id"]
    payload: Annotated[Str, "JSON text; a named task's is '\\1' NAME '\\1' then the JSON"]
    priority: Annotated[Int, "-1000..1000, higher first"]
    delay_ms: Annotated[Int, "ms from now until it may run (0: now)"]
    deadline: Annotated[
        OptStr, "not started by then, it ends dead: '<ms from now>' or '@<epoch ms>'"
    ]
    max_attempts: Annotated[OptInt, "'' = the queue's max_attempts"]
    cost: Annotated[Int, "units it takes of the cost rate limit"]
    timeout_s: Annotated[OptNumber, "seconds a run may take; '' = the queue's default_timeout_s"]


class Claim(NamedTuple):
    pod: Annotated[Str, "the worker's pod name"]
    incarnation: Annotated[Str, "the worker's incarnation (one per process start)"]
    max_tasks: Annotated[Int, "most tasks to claim"]
    token_base: Annotated[Str, "random; task i claimed gets the token '<token_base>:<i>'"]
    bound: Annotated[
        Int,
        "most tasks promoted, expired or taken back per housekeeping step, and pending entries "
        "dropped or runs of expired tasks stepped over",
    ]
    idle_ms: Annotated[
        OptInt,
        "> 0: if the queue runs dry, register the worker as idle that long (producers then hand "
        "it tasks on its wake list)",
    ]
    prefetch: Annotated[
        OptInt,
        "how many of max_tasks would wait in the worker for a free slot: not claimed under "
        "max_concurrency",
    ]
    registered: Annotated[
        OptInt,
        "1: the caller registered, so only its own record lets it claim (none, or an "
        "unreadable one, refuses it too: it registers again); '' = none or its own",
    ] = ""
    quota_slots: Annotated[
        OptInt,
        "1: the caller reserves provider quotas that lie in other slots (a Redis Cluster) "
        "itself (pq_run): such a task is claimed, its record carrying 'quotas'; '' = it "
        "waits delayed for a worker that does",
    ] = ""


class Complete(NamedTuple):
    n: Annotated[Int, "how many completion records follow"]
    pod: Annotated[
        OptStr,
        "claim for the freed slots in the same call: the worker's pod ('' = no claim); the six "
        "below as claim takes them",
    ]
    incarnation: Annotated[OptStr, "the worker's incarnation (with pod)"]
    max_tasks: Annotated[OptInt, "most tasks to claim (with pod)"]
    token_base: Annotated[OptStr, "the claim's token base (with pod)"]
    bound: Annotated[OptInt, "the claim's housekeeping bound (with pod)"]
    idle_ms: Annotated[OptInt, "as claim's idle_ms"]
    prefetch: Annotated[OptInt, "as claim's prefetch"]
    registered: Annotated[OptInt, "as claim's registered"] = ""
    quota_slots: Annotated[OptInt, "as claim's quota_slots"] = ""


class Completion(NamedTuple):
    task_id: Annotated[Str, "the task"]
    token: Annotated[Str, "the claim token it runs under"]
    result: Annotated[OptJson, "its result; '' = none"]


class Extend(NamedTuple):
    pod: Annotated[Str, "the worker's pod name"]
    incarnation: Annotated[Str, "the worker's incarnation"]
    inflight: Annotated[Int, "tasks it runs now"]
    draining: Annotated[Int, "1 when it drains (no more hand-offs; those not popped go back)"]
    concurrency: Annotated[Int, "its slots"]
    host: Annotated[OptStr, "where it runs (opaque to the scripts)"]
    n: Annotated[Int, "how many held tasks follow"]
    registered: Annotated[
        OptInt,
        "1: the caller registered: no record, or an unreadable one, refuses it as another "
        "incarnation's does (it registers again); '' = only another incarnation's refuses",
    ] = ""
    held: Annotated[
        OptInt,
        "its held slots: calls it gave up on (their task ended) that still run; '' = 0",
    ] = ""


class Held(NamedTuple):
    task_id: Annotated[Str, "a task the worker holds"]
    token: Annotated[Str, "its claim token"]


class Fail(NamedTuple):
    task_id: Annotated[Str, "the task"]
    token: Annotated[Str, "the claim token it runs under"]
    error: Annotated[Str, "the error text stored with it"]
    retryable: Annotated[Int, "1 retry while attempts are left, 0 dead at once"]
    jitter: Annotated[Number, "a random draw in [-1, 1] for the backoff's jitter"]
    reason: Annotated[OptStr, "the dead reason; '' = 'failed'"]
    retry_after_ms: Annotated[
        OptInt,
        "the handler asked for a retry after this long (RetryAfter): the attempt is given back, "
        "up to max_deferrals times per task",
    ]
    max_deferrals: Annotated[
        OptInt, "with retry_after_ms: how many times an attempt may be given back"
    ]
    throttle: Annotated[
        OptInt,
        "1: a provider's rate limit was met (RateLimited): the queue pauses claiming, "
        "retry_after_ms being the provider's retry-after ('' = the adaptive pause), and the "
        "task waits the pause out as a deferral; 2: the same for the task's group alone "
        "(the queue when it has none)",
    ]
    traceback: Annotated[
        OptStr, "the failure's last frames, kept in the attempt's history (its last 4096 bytes)"
    ] = ""
    timed_out: Annotated[
        OptInt, "1: the run passed its timeout (the history says 'timed out'); '' = 0"
    ] = ""


class Quota(NamedTuple):
    op: Annotated[Str, "'pause' | 'resume' | 'budget'"]
    pause_ms: Annotated[OptInt, "pause: how long ('' = the adaptive pause)"]
    reason: Annotated[OptStr, "pause: why, shown with the pause"]
    day_limit: Annotated[
        OptStr, "budget: cost units per UTC day; '' unchanged, 'default' the config's"
    ]
    month_limit: Annotated[
        OptStr, "budget: cost units per UTC month; '' unchanged, 'default' the config's"
    ]
    group: Annotated[OptStr, "the group whose own pause or budget this is ('' = the queue's)"]
    task_id: Annotated[
        OptStr, "pause without a group: pause that task's group ('' or no group = the queue)"
    ]
    reporter: Annotated[
        OptStr,
        "pause: the worker whose handler reported its provider's quota spent (a worker of "
        "this release: no older worker is looked for); '' = a producer or the CLI",
    ] = ""


class ProviderQuota(NamedTuple):
    op: Annotated[Str, "'configure' | 'get' | 'pause' | 'resume'"]
    name: Annotated[Str, "the quota's name"]
    limits: Annotated[OptJson, "configure: a JSON object unit -> units per period (each > 0)"] = ""
    period_ms: Annotated[OptInt, "configure: the window's length (ms, > 0)"] = ""
    max_concurrency: Annotated[OptInt, "configure: most runs at once (0 = no cap)"] = ""
    pause_ms: Annotated[OptInt, "pause: how long (ms)"] = ""
    reason: Annotated[OptStr, "pause: why, shown with the pause"] = ""


class Settle(NamedTuple):
    task_id: Annotated[Str, "the task"]
    token: Annotated[Str, "the claim token of the run that settles"]
    name: Annotated[Str, "the provider quota"]
    used: Annotated[Json, "a JSON object unit -> what the run really used (each >= 0)"]


class PqRun(NamedTuple):
    op: Annotated[Str, "'reserve' | 'settle' | 'extend' | 'end'"]
    name: Annotated[Str, "the provider quota"]
    lease_ms: Annotated[OptInt, "reserve, extend: the reservation holds until now + lease_ms"]
    units: Annotated[
        OptJson, "reserve: the estimate; settle: what the run really used ({unit: amount})"
    ]
    refund: Annotated[OptInt, "end: 1 gives the charge back (a run given back, not an attempt)"]
    n: Annotated[Int, "how many members follow (reserve, settle: 1)"]


class PqMember(NamedTuple):
    member: Annotated[Str, "a run: '<task key>\\0<claim token>'"]


class PqDefer(NamedTuple):
    task_id: Annotated[Str, "the task its claim handed over"]
    token: Annotated[Str, "the claim token"]
    wait_ms: Annotated[Int, "how long it waits delayed (pq_run 'reserve' said)"]
    name: Annotated[Str, "the quota that could not reserve (field 'quota_wait')"]


class Release(NamedTuple):
    pod: Annotated[Str, "the caller (the token alone decides)"]
    unstarted: Annotated[
        OptStr, "'1' = no handler began these runs (a hand-off): no history record; '' = some did"
    ]
    n: Annotated[Int, "how many held tasks follow"]


class Requeue(NamedTuple):
    pod: Annotated[Str, "the pod whose tasks are taken back"]
    keep_incarnation: Annotated[
        OptStr,
        "'' = take back everything and drop the worker record; else only other incarnations' tasks",
    ]
    tombstone_s: Annotated[
        OptStr,
        "the pod is gone from the Kubernetes API: for that many seconds no worker of it "
        "(its name, or <pod>#<i>) may register; '' = none",
    ] = ""


class Register(NamedTuple):
    pod: Annotated[Str, "the worker's pod name"]
    incarnation: Annotated[Str, "the worker's incarnation"]
    concurrency: Annotated[Int, "its slots"]
    host: Annotated[OptStr, "where it runs (opaque to the scripts)"]
    expected: Annotated[
        Str,
        "the incarnation whose record the caller judged gone: '' = none expected, '*' = take over "
        "whatever is there",
    ]


class Deregister(NamedTuple):
    pod: Annotated[Str, "the worker's pod name"]
    incarnation: Annotated[Str, "the worker's incarnation"]
    failed: Annotated[Int, "1: the worker failed, its tasks go back as lost (not released)"]


class Disown(NamedTuple):
    pod: Annotated[Str, "the worker's pod name"]
    incarnation: Annotated[Str, "the worker's incarnation"]
    n: Annotated[Int, "how many token bases follow"]


class TokenBase(NamedTuple):
    token_base: Annotated[Str, "the token base of a claim call whose reply never came"]


class Sweep(NamedTuple):
    bound: Annotated[Int, "most tasks handled per step (expired: a tenth of it)"]


class Repair(NamedTuple):
    bound: Annotated[Int, "most records read (a waiting task and each dependency: one each)"]
    cursor: Annotated[Int, "the rank in waiting to start from (0: the start of a pass)"]
    settle_ms: Annotated[
        Int, "a dependency that ended this recently, its resolve perhaps still queued: left"
    ]


class Checkpoint(NamedTuple):
    task_id: Annotated[Str, "the task"]
    token: Annotated[Str, "the claim token of the run that checkpoints"]
    state: Annotated[Json, "the state, JSON text (no NUL byte)"]
    keep: Annotated[Int, "1: kept with the task once it finished; 0: dropped then"]
    max_bytes: Annotated[Int, "the largest state stored (the caller's MAX_CHECKPOINT_BYTES)"]


class Emit(NamedTuple):
    task_id: Annotated[Str, "the task"]
    token: Annotated[Str, "the claim token of the run that emits"]
    kind: Annotated[Str, "'t': the chunk is text; 'j': JSON text"]
    data: Annotated[Bytes, "the chunk"]
    max_entries: Annotated[Int, "the most entries a task's output holds (MAX_OUTPUT_ENTRIES)"]
    max_bytes: Annotated[Int, "the most chunk bytes a task's output holds (MAX_OUTPUT_BYTES)"]


class Watch(NamedTuple):
    waiter: Annotated[Str, "the waiter's id (unique per wait)"]
    n: Annotated[Int, "how many task ids follow"]


class TaskId(NamedTuple):
    task_id: Annotated[Str, "a task's id"]


# -- control --------------------------------------------------------------------------------


class Cancel(NamedTuple):
    n: Annotated[Int, "how many task ids follow"]


class Promote(NamedTuple):
    n: Annotated[Int, "how many task ids follow"]


class Retry(NamedTuple):
    max_attempts: Annotated[OptInt, "the new budget; '' = keep the task's own, or the queue's"]
    mode: Annotated[
        Str,
        "'ids': the task ids that follow; 'flow': those ids, cancelled ones too; "
        "'scan': the filter below",
    ]
    reason: Annotated[OptStr, "scan: only this dead reason ('' = any)"]
    oldest_ms: Annotated[OptNumber, "scan: finished_at at least this (ms; -inf)"]
    newest_ms: Annotated[OptNumber, "scan: finished_at at most this (ms)"]
    offset: Annotated[OptInt, "scan: entries of the range to skip (a previous call's reply)"]
    bound: Annotated[OptInt, "scan: most entries looked at"]
    n: Annotated[Int, "ids: how many task ids follow (0 for a scan)"]


class Drop(NamedTuple):
    state: Annotated[Str, "done | dead | cancelled"]
    mode: Annotated[Str, "'ids': the task ids that follow; 'scan': the filter below"]
    reason: Annotated[OptStr, "scan: only this reason ('' = any)"]
    oldest_ms: Annotated[OptNumber, "scan: finished_at at least this (ms; -inf)"]
    newest_ms: Annotated[OptNumber, "scan: finished_at at most this (ms)"]
    offset: Annotated[OptInt, "scan: entries of the range to skip (a previous call's reply)"]
    bound: Annotated[OptInt, "scan: most entries looked at"]
    n: Annotated[Int, "ids: how many task ids follow (0 for a scan)"]


class Report(NamedTuple):
    n: Annotated[Int, "how many reports follow"]


class Reported(NamedTuple):
    task_id: Annotated[Str, "the task"]
    token: Annotated[Str, "the claim token of the run that reports"]
    progress: Annotated[OptJson, "{fraction, done, total, message}; '' = none"]
    cost: Annotated[OptInt, "the run's real cost; '' = none"]


# -- schedules ------------------------------------------------------------------------------


class SchedulePut(NamedTuple):
    name: Annotated[Str, "the schedule's name"]
    owner: Annotated[Str, "'' = the API, 'taskqueue' = a TaskQueue's spec"]
    take_over: Annotated[Int, "1: the caller may take over a schedule of the other owner"]
    first_slot: Annotated[OptInt, "epoch s; '' = none within the search horizon"]
    first_due_ms: Annotated[Int, "when the first slot is due (epoch ms)"]
    paused: Annotated[Int, "1 paused, 0 active"]
    n: Annotated[Int, "how many definition fields follow"]


class ScheduleField(NamedTuple):
    field: Annotated[
        Str,
        "cron | tz | payload | priority | max_attempts | cost | timeout | deadline_ms | catchup | "
        "catchup_limit | jitter_ms",
    ]
    value: Annotated[Str, "its stored text"]


class ScheduleDelete(NamedTuple):
    name: Annotated[Str, "the schedule's name"]
    owner: Annotated[Str, "the caller: '' = the API, 'taskqueue' = the operator"]
    take_over: Annotated[Int, "1: the caller may remove a schedule of the other owner"]


class SchedulePause(NamedTuple):
    name: Annotated[Str, "the schedule's name"]
    paused: Annotated[Int, "1 pause, 0 resume"]
    owner: Annotated[Str, "the caller's owner"]
    next_slot: Annotated[OptInt, "resume: the next slot (epoch s; '' = none)"]
    next_due_ms: Annotated[Int, "resume: its due time (epoch ms)"]


class ScheduleDue(NamedTuple):
    limit: Annotated[Int, "most schedules to claim"]
    lease_ms: Annotated[Int, "how long the claim holds them"]


class ScheduleFire(NamedTuple):
    n: Annotated[Int, "how many plans follow"]


class FirePlan(NamedTuple):
    name: Annotated[Str, "the schedule"]
    rev: Annotated[Str, "its revision as schedule_due read it"]
    expected: Annotated[Int, "its next slot as schedule_due read it"]
    slots: Annotated[Json, "the slots to fire: a JSON array of epoch seconds, ascending"]
    skipped: Annotated[Int, "missed slots the catch-up policy leaves out"]
    next_slot: Annotated[OptInt, "the new next slot (epoch s; '' = none within the horizon)"]
    next_due_ms: Annotated[Int, "its due time (epoch ms)"]


@dataclass(frozen=True, slots=True)
class Script:
    """One script's declaration: its arguments, its records, its reply."""

    name: str
    args: type[tuple[Any, ...]]
    reply: str
    record: type[tuple[Any, ...]] | None = None  # its count: the int argument n


_ENQUEUE_REPLY = (
    "[1, created_1, ..., created_N] (1 new, 0 the same task existed, unchanged); or "
    "[-1, index, size, max_payload_bytes] payload #index too large; or [-2, index, field] "
    "task #index names an existing task that differs in field; or [-3, index] task #index "
    "repeats an id of the call; or [-4, index, id] task #index waits for an id that is no "
    "task; or [-5] the parent's run no longer holds it; or [-6, pod, feature] flows or "
    "groups refused while pod, a live worker older than them, serves the queue (nothing "
    "stored in these six cases)"
)
_CLAIM_REPLY = (
    "[retry_after_ms (> 0: claim again after it; 1: expired tasks left to clear), "
    "next_due_ms (-1 none), more (1 still pending), task...]: each task one tagged "
    "record (claim record 3): '\\1' '3', then name, value pairs (id, token, attempts, "
    "max_attempts; lost, priority, cost unless 0, 0, 1; timeout, waited_ms, deadline, "
    "group, trace, after when set), an empty name and the payload, joined by NUL "
    "(docs/protocol.md 4.8)"
)
_SWEPT_REPLY = "[how many changed, the offset to go on from (-1: done)]"

#: Every script, in the order of lua/ (one atomic operation each).
SCRIPTS: dict[str, Script] = {
    s.name: s
    for s in (
        Script("enqueue", Enqueue, _ENQUEUE_REPLY, EnqueueTask),
        Script(
            "enqueue_plain",
            EnqueuePlain,
            "as enqueue's [1, ...], [-1, ...], [-2, ...] or [-3, ...]; or [0]: an idle worker "
            "waits, a new task is due now and hand_off is 1, nothing stored (send the tasks "
            "to enqueue)",
            PlainTask,
        ),
        Script("claim", Claim, _CLAIM_REPLY),
        Script(
            "extend",
            Extend,
            "['', lost ids...] then, when some held task's cancellation was asked for, '' "
            "and their ids; or [the pod's record] when another incarnation holds the pod "
            "(nothing extended)",
            Held,
        ),
        Script(
            "complete",
            Complete,
            "a string of one character per record: 1 completed, 2 result too large (dead), "
            "0 stale token (refused), 3 cancelled, 4 dead as a child it added failed, 5 "
            "waiting for children it added; with a claim: [that string, then claim's reply]",
            Completion,
        ),
        Script(
            "fail",
            Fail,
            "'delayed' | 'dead' | 'cancelled' | 'stale' (refused): the state it left",
        ),
        Script("release", Release, "how many were released", Held),
        Script("requeue", Requeue, "[requeued to pending, gone dead]"),
        Script(
            "register",
            Register,
            "[requeued, dead]; or [-1, the record of another incarnation, server time "
            "ms] when another than expected holds the pod (nothing changed); or [-2, until "
            "when (ms), server time ms] when the pod is gone (tombstoned; nothing changed)",
        ),
        Script("deregister", Deregister, "how many tasks were given back"),
        Script("disown", Disown, "how many tasks were released", TokenBase),
        Script(
            "sweep",
            Sweep,
            "[promoted, expired, requeued, lost_dead, pruned_done, pruned_dead, "
            "workers_dropped, pruned_cancelled]",
        ),
        Script(
            "repair",
            Repair,
            "[the next cursor, more (1: the pass goes on from the cursor, 0: it is over), "
            "then per task repaired: its id, the state it left in ('pending', 'done', "
            "'dead' or 'cancelled')]",
        ),
        Script(
            "schedule_put",
            SchedulePut,
            "[1] created, [2] changed, [0] unchanged, [-1, size, max] payload too large, "
            "[-2, owner] another owner's, [-6, pod, 'groups'] a group refused while pod, a "
            "live worker older than groups, serves the queue",
            ScheduleField,
        ),
        Script(
            "schedule_delete",
            ScheduleDelete,
            "[1] deleted, [0] none, [-2, owner] another owner's",
        ),
        Script(
            "schedule_pause",
            SchedulePause,
            "[1] changed, [0] it already was, [-1] none, [-2, owner] another owner's",
        ),
        Script(
            "schedule_due",
            ScheduleDue,
            "[now_ms, next_due_ms (-1 none), then 8 values per schedule: name, rev, "
            "next_slot, cron, tz, catchup, catchup_limit, jitter_ms]",
        ),
        Script(
            "schedule_fire",
            ScheduleFire,
            "[tasks created, then per plan 1 applied | 0 stale (nothing changed)]",
            FirePlan,
        ),
        Script(
            "cancel",
            Cancel,
            "per id: 'cancelled' | 'requested' | 'done' | 'dead' | 'finished' | 'missing'",
            TaskId,
        ),
        Script("retry", Retry, _SWEPT_REPLY, TaskId),
        Script(
            "promote",
            Promote,
            "a string of one character per id: 1 promoted to pending, 0 not delayed (unchanged)",
            TaskId,
        ),
        Script("drop", Drop, _SWEPT_REPLY, TaskId),
        Script(
            "report",
            Report,
            "a string of one character per report: 1 applied, 0 refused",
            Reported,
        ),
        Script(
            "checkpoint",
            Checkpoint,
            "1 stored; 0 refused (the run does not hold the task); -1 refused (too large, "
            "or holds a NUL byte)",
        ),
        Script(
            "emit",
            Emit,
            "the entry's id; or 0 refused (the run does not hold the task); -1 refused (the "
            "task's output is full)",
        ),
        Script(
            "watch",
            Watch,
            "a string of one character per id: F finished, W watched, A absent",
            TaskId,
        ),
        Script(
            "quota",
            Quota,
            "[until (epoch ms; 0 = no pause), streak]; or [-6, pod, feature] a pause or "
            "budget refused while pod, a live worker older than them, serves the queue",
        ),
        Script(
            "provider_quota",
            ProviderQuota,
            "[] no such quota; else [period_ms, max_concurrency, live reservations, until "
            "(ms; 0 = no pause), window start (ms), reason, then unit, limit, used per unit]",
        ),
        Script(
            "settle",
            Settle,
            "1 settled, 0 refused (stale token), -1 the task names no such quota, -2 no such "
            "quota, -3 the quota lies in another slot (settle with pq_run)",
        ),
        Script(
            "pq_run",
            PqRun,
            "reserve: 0 reserved, > 0 ms to wait, -2 no such quota; settle: 1 settled, 0 no "
            "such reservation, -2 no such quota; extend, end: how many members were found",
            PqMember,
        ),
        Script("pq_defer", PqDefer, "1 deferred; 0 refused (stale token)"),
    )
}
