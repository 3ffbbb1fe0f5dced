"""Every Redis key name of a queue, in one place.

All keys of one queue share the hash tag ``{<queue>}``, so a queue lives on one Redis
Cluster slot and every Lua script touches one slot only. A script receives as KEYS only
the keys it uses (the bundle manifest's ``uses_keys``: :meth:`QueueKeys.script`); the Lua
sources name them ``K_<NAME>`` (the bundle writes ``KEYS[i]``), so Lua never spells a key
name.
"""

from __future__ import annotations

import re

from taskfleet.protocol import bundle

PREFIX = "tf"

#: Every key a script may use, in the order a script's ``uses_keys`` lists them.
#: ``task``, ``pod``, ``sched``, ``wake``, ``schedule``, ``waiter``, ``dependants``,
#: ``flow``, ``output`` and ``follow`` are prefixes: the script appends the id, pod or name.
SCRIPT_KEYS: tuple[str, ...] = (
    "task",
    "pending",
    "delayed",
    "running",
    "done",
    "dead",
    "deadlines",
    "pod",
    "workers",
    "config",
    "seq",
    "stats",
    "bucket_tasks",
    "bucket_cost",
    "notify",
    "sched",
    "idle",
    "wake",
    "demand",
    "schedule",
    "schedules",
    "schedule_due",
    "schedules_owned",
    "cancelled",
    "waiter",
    "deadline_runs",
    "quota",
    "waiting",
    "dependants",
    "flow_backlog",
    "groups",
    "group_pending",
    "group_running",
    "group",
    "group_bucket",
    "groups_parked",
    "groups_pending",
    "flow",
    "flows",
    "levels",
    "tombstones",
    "output",
    "events",
    "events_cap",
    "groups_fair",
    "rate",
    "follows",
    "follow",
)

#: What each of :data:`SCRIPT_KEYS` is: its Redis type and what it holds (the bundle's
#: manifest and docs/protocol-scripts.md are generated from this).
KEY_DOCS: dict[str, tuple[str, str]] = {
    "task": ("hash", "one task's record; the key is the prefix and the task's id"),
    "pending": (
        "zset",
        "ids of tasks ready to run, lowest score first: higher priority first, FIFO within "
        "a priority, released and taken-back tasks ahead of new ones",
    ),
    "delayed": ("zset", "ids of tasks waiting for their run_at; score: run_at (epoch ms)"),
    "running": ("zset", "ids of running tasks; score: lease_until (epoch ms)"),
    "done": ("zset", "ids of done tasks kept done_retention_s; score: finished_at (epoch ms)"),
    "dead": ("zset", "ids of dead tasks kept dead_retention_s; score: finished_at (epoch ms)"),
    "deadlines": ("zset", "ids of tasks with a start deadline; score: the deadline (epoch ms)"),
    "pod": ("set", "ids of the tasks a pod holds; the key is the prefix and the pod's name"),
    "workers": ("hash", "pod name -> the pod's worker record (JSON)"),
    "config": ("hash", "the queue's config; an absent or empty field takes its default"),
    "seq": ("string", "the counter pending scores are made from (INCR)"),
    "stats": ("hash", "the queue's counters (HINCRBY)"),
    "bucket_tasks": ("hash", "the token bucket of rate_limit_tasks: tokens, ts (epoch ms)"),
    "bucket_cost": ("hash", "the token bucket of rate_limit_cost: tokens, ts (epoch ms)"),
    "notify": ("list", "wake-up tokens idle workers block on, at most 16"),
    "sched": (
        "string",
        "the slot a TaskQueue schedule last fired before schedules were stored as data; the "
        "key is the prefix and the schedule's name",
    ),
    "idle": (
        "zset",
        "idle workers blocked on their wake list, member '<pod>\\0<incarnation>'; score: "
        "until when the registration holds (epoch ms)",
    ),
    "wake": (
        "list",
        "claim records producers handed to an idle worker; the key is the prefix and the pod",
    ),
    "demand": ("list", "at most one element: new work no idle worker took, for the autoscaler"),
    "schedule": ("hash", "one schedule's record; the key is the prefix and its name"),
    "schedules": ("set", "every schedule's name"),
    "schedule_due": ("zset", "names of active schedules; score: when next due (epoch ms)"),
    "schedules_owned": ("set", "the schedule names a TaskQueue's spec owns"),
    "cancelled": ("zset", "ids of cancelled tasks kept dead_retention_s; score: finished_at"),
    "waiter": (
        "list",
        "ids of a producer's watched tasks as they finish, expiring a minute after its last "
        "push; the key is the prefix and the waiter's id",
    ),
    "deadline_runs": (
        "zset",
        "stretches of pending holding only never-started tasks with a deadline, in deadline "
        "order (a claim steps over their expired part at once), member '<lo>:<last deadline>'; "
        "score: the stretch's highest pending score",
    ),
    "quota": (
        "hash",
        "the queue's claim pause (a provider's rate limit met: until, streak, pause_ms) and "
        "spend budget (run-time limits, the current day's and month's spend)",
    ),
    "waiting": (
        "zset",
        "ids of tasks waiting for their dependencies (field 'after') to be done; score: when "
        "they began to wait (epoch ms)",
    ),
    "dependants": (
        "set",
        "ids of the waiting tasks that wait on one task; the key is the prefix and that task's id",
    ),
    "flow_backlog": (
        "list",
        "'<d|x|c><id>': finished tasks (done, dead, cancelled) whose dependants one call left "
        "unresolved, taken up by later completes and sweeps",
    ),
    "groups": (
        "zset",
        "the fair-claim ring: groups with pending tasks a claim may take now ('' stands for the "
        "ungrouped tasks while groups are in use); score: the group's virtual time (lowest "
        "is served next)",
    ),
    "group_pending": (
        "zset",
        "one group's pending tasks, ordered as pending is; the key is the prefix and the group",
    ),
    "group_running": ("hash", "group -> how many of its tasks run now (absent: none)"),
    "group": (
        "hash",
        "one group's settings set at run time (weight, max_concurrency, rate_limit_tasks, "
        "rate_limit_cost); the key is the prefix and the group",
    ),
    "group_bucket": (
        "hash",
        "one group's token buckets: tasks, cost, ts (epoch ms); the key is the prefix and the "
        "group; expires once full again",
    ),
    "groups_parked": (
        "zset",
        "groups with pending tasks held back by their own limits; score: when to look again "
        "(epoch ms; +inf: at its concurrency cap, until one of its tasks leaves running)",
    ),
    "groups_pending": (
        "string",
        "how many tasks wait in the groups' own zsets (pending's size leaves them out)",
    ),
    "flow": (
        "hash",
        "one flow's record (open, done, dead, cancelled, started_at, ended_at, outcome); the key "
        "is the prefix and the flow's id (its first task's); expires a retention after it ends",
    ),
    "flows": ("zset", "ids of the flows not ended; score: when each began (epoch ms)"),
    "levels": (
        "string",
        "set for a second after a call using flows, groups, claim pauses or budgets found no "
        "live worker older than them: such calls read the worker records at most once a second",
    ),
    "tombstones": (
        "zset",
        "pods gone from the Kubernetes API whose workers may not register again; score: "
        "until when (epoch ms)",
    ),
    "output": (
        "stream",
        "one task's streamed output (emit), each entry marked with its attempt, then an end "
        "entry when it finishes; the key is the prefix and the task's id",
    ),
    "events": (
        "stream",
        "the queue's lifecycle events (event, id, attempt), written while events_cap is set",
    ),
    "events_cap": (
        "string",
        "set while the queue's events are on: how many entries the events stream keeps",
    ),
    "groups_fair": (
        "string",
        "the unit of provider quotas the fair-claim ring charges groups by (their settled "
        "use of it); absent: by claims, one per task",
    ),
    "rate": (
        "hash",
        "one minute's completed and failed counts (the dashboard's charts), expiring about an "
        "hour after it; the key is the prefix and the minute (epoch ms // 60000)",
    ),
    "follows": (
        "string",
        "set while someone follows a task of the queue (Queue.follow); expires a minute "
        "after a follower last read",
    ),
    "follow": (
        "stream",
        "one followed task's changes (event <kind>), which wake its followers; made by its "
        "first follower, capped near 32 entries, expires a minute after a follower last "
        "read; the key is the prefix and the task's id",
    ),
}

_INDEX = {name: i for i, name in enumerate(SCRIPT_KEYS)}

#: Keys shared by every queue of a Redis (provider quotas, docs/quotas.md): name -> (full
#: prefix, Redis type, what it holds). A script has each as a string constant (written in
#: by the bundle), never from KEYS: they lie outside the queue's slot (a Redis Cluster limit).
SHARED_KEYS: dict[str, tuple[str, str, str]] = {
    "pquota": (
        f"{PREFIX}:pquota:",
        "hash",
        "one provider quota: period_ms, concurrency (its cap), limit:<unit>, the current window "
        "(window, used:<unit>) and its pause (until, reason); the key is the prefix and the "
        "quota's name",
    ),
    "pquota_holds": (
        f"{PREFIX}:pquota-holds:",
        "zset",
        "a provider quota's concurrency reservations, member '<task key>\\0<claim token>'; "
        "score: when taken (epoch ms); the key is the prefix and the quota's name",
    ),
}

# Quota and unit names: no braces, ':' or whitespace, like a queue's.
_QUOTA_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$")
_UNIT_NAME = re.compile(r"^[a-z][a-z0-9_]{0,63}$")


def validate_quota_name(name: str) -> str:
    if not isinstance(name, str) or not _QUOTA_NAME.fullmatch(name):
        raise ValueError(
            f"invalid quota name {name!r}: use 1-200 characters of letters, digits, '.', '_' "
            "or '-', starting with a letter or digit"
        )
    return name


def validate_unit_name(name: str) -> str:
    if not isinstance(name, str) or not _UNIT_NAME.fullmatch(name):
        raise ValueError(
            f"invalid quota unit {name!r}: use 1-64 lower-case letters, digits or '_', "
            "starting with a letter (requests, input_tokens, output_tokens, ...)"
        )
    return name


def provider_quota_key(name: str) -> str:
    """The hash of provider quota ``name`` (SHARED_KEYS['pquota'])."""
    return SHARED_KEYS["pquota"][0] + validate_quota_name(name)


def provider_quota_holds_key(name: str) -> str:
    """The concurrency reservations of provider quota ``name``."""
    return SHARED_KEYS["pquota_holds"][0] + validate_quota_name(name)


# Hash-tag braces would split the queue over slots; ':' and whitespace make keys ambiguous.
_QUEUE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$")


def validate_queue_name(name: str) -> str:
    if not isinstance(name, str) or not _QUEUE_NAME.fullmatch(name):
        raise ValueError(
            f"invalid queue name {name!r}: use 1-200 characters of letters, digits, '.', '_' "
            "or '-', starting with a letter or digit"
        )
    return name


class QueueKeys:
    """Key names of one queue: ``tf:{<queue>}:<part>``."""

    __slots__ = (
        "_by_script",
        "bucket_cost",
        "bucket_tasks",
        "cancelled",
        "config",
        "dead",
        "deadline_runs",
        "deadlines",
        "delayed",
        "demand",
        "dependants_prefix",
        "done",
        "events",
        "events_cap",
        "flow_backlog",
        "flow_prefix",
        "flows",
        "follow_prefix",
        "follows",
        "group_bucket_prefix",
        "group_pending_prefix",
        "group_prefix",
        "group_running",
        "groups",
        "groups_fair",
        "groups_parked",
        "groups_pending",
        "idle",
        "levels",
        "notify",
        "output_prefix",
        "pending",
        "pod_prefix",
        "prefix",
        "queue",
        "quota",
        "rate_prefix",
        "running",
        "sched_prefix",
        "schedule_due",
        "schedule_prefix",
        "schedules",
        "schedules_owned",
        "script_keys",
        "seq",
        "stats",
        "task_prefix",
        "tombstones",
        "waiter_prefix",
        "waiting",
        "wake_prefix",
        "workers",
    )

    def __init__(self, queue: str) -> None:
        self.queue = validate_queue_name(queue)
        self.prefix = f"{PREFIX}:{{{queue}}}:"
        p = self.prefix
        self.task_prefix = p + "task:"
        self.pending = p + "pending"
        self.delayed = p + "delayed"
        self.running = p + "running"
        self.done = p + "done"
        self.dead = p + "dead"
        self.cancelled = p + "cancelled"
        # ids of tasks with a start deadline, score = deadline (ms): expiry without a scan
        self.deadlines = p + "deadlines"
        # stretches of pending whose tasks all have a deadline, in deadline order: a claim
        # steps over the expired part of one at once (lua/includes/deadline_run.lua)
        self.deadline_runs = p + "deadlines:runs"
        self.pod_prefix = p + "pod:"
        self.workers = p + "workers"
        self.config = p + "config"
        self.seq = p + "seq"
        self.stats = p + "stats"
        self.bucket_tasks = p + "bucket:tasks"
        self.bucket_cost = p + "bucket:cost"
        self.notify = p + "notify"
        # the last slot a TaskQueue schedule fired before schedules were stored as data:
        # read once when the operator first syncs that schedule into the store
        self.sched_prefix = p + "sched:"
        # idle workers blocked on their wake list, member "<pod>\0<incarnation>", score = ms
        # until which the registration holds; a producer claims a new task for one of them
        # and pushes it onto ``wake:<pod>`` (saves the worker its claim round trip)
        self.idle = p + "idle"
        self.wake_prefix = p + "wake:"
        # at most one element: pushed when tasks become pending that no idle worker took,
        # for whoever sizes the fleet (the operator's autoscaler blocks on it)
        self.demand = p + "demand"
        # schedules as data: one hash per schedule, the set of every name, and the names
        # of active ones scored by when each is next due (ms; see protocol/schedules.py)
        self.schedule_prefix = p + "schedule:"
        self.schedules = p + "schedules"
        self.schedule_due = p + "schedules:due"
        # the names a TaskQueue's spec owns (the operator deletes those its spec dropped)
        self.schedules_owned = p + "schedules:taskqueue"
        # a producer's wait: the ids of watched tasks as they finish (watch.lua), a list
        # that expires a minute after its last push
        self.waiter_prefix = p + "waiter:"
        # the claim pause a provider's rate limit set for the whole fleet, and the spend
        # budget's run-time limits and spend (lua/includes/quota_*.lua)
        self.quota = p + "quota"
        # flows: tasks waiting on others (state waiting), the dependants of each task, and
        # finished tasks whose dependants are still to resolve (lua/includes/flow_resolve.lua)
        self.waiting = p + "waiting"
        self.dependants_prefix = p + "dependants:"
        self.flow_backlog = p + "flows:backlog"
        # a flow's record (members open and ended, its outcome) and the flows not ended
        # (lua/includes/flow_member_end.lua)
        self.flow_prefix = p + "flow:"
        self.flows = p + "flows"
        # groups (fair claiming between them, lua/includes/group_*.lua): the ring of groups
        # with claimable tasks, each group's pending tasks, running counts, settings, token
        # buckets, and the groups held back by their own limits
        self.groups = p + "groups"
        self.group_pending_prefix = p + "gpending:"
        self.group_running = p + "groups:running"
        self.group_prefix = p + "group:"
        self.group_bucket_prefix = p + "gbucket:"
        self.groups_parked = p + "groups:parked"
        self.groups_pending = p + "groups:pending"
        # the unit groups are fair by (spend, settled), when not by claims
        self.groups_fair = p + "groups:fair"
        # set for a second once a check found no live worker older than this release's
        # features (lua/includes/older_worker.lua): the next calls skip the check
        self.levels = p + "levels"
        # pods the operator found gone from the API, scored by until when their workers
        # may not register again (a force-deleted pod's container outlives its pod)
        self.tombstones = p + "tombstones"
        # a task's streamed output (emit.lua), kept as long as the task
        self.output_prefix = p + "output:"
        # the queue's lifecycle events, written while events_cap holds their retention
        # (lua/includes/event.lua); absent: off, and scripts pay one GET
        self.events = p + "events"
        self.events_cap = p + "events:cap"
        # each minute's completed and failed counts, for charts (lua/includes/rate_note.lua)
        self.rate_prefix = p + "rate:"
        # set while someone follows a task, and each followed task's wake-up stream
        # (lua/includes/event.lua): scripts read follows with events_cap (one MGET)
        self.follows = p + "follows"
        self.follow_prefix = p + "follow:"
        by_name = {
            "task": self.task_prefix,
            "pod": self.pod_prefix,
            "sched": self.sched_prefix,
            "wake": self.wake_prefix,
            "schedule": self.schedule_prefix,
            "waiter": self.waiter_prefix,
            "dependants": self.dependants_prefix,
            "group_pending": self.group_pending_prefix,
            "group": self.group_prefix,
            "group_bucket": self.group_bucket_prefix,
            "flow": self.flow_prefix,
            "output": self.output_prefix,
            "rate": self.rate_prefix,
            "follow": self.follow_prefix,
        }
        #: every key of :data:`SCRIPT_KEYS`, in that order
        self.script_keys: tuple[str, ...] = tuple(
            by_name.get(name) or getattr(self, name) for name in SCRIPT_KEYS
        )
        self._by_script: dict[str, tuple[str, ...]] = {}

    def script(self, name: str) -> tuple[str, ...]:
        """KEYS of a call of script ``name``: the keys it uses, in its ``uses_keys`` order."""
        found = self._by_script.get(name)
        if found is None:
            found = self._by_script[name] = tuple(
                self.script_keys[_INDEX[k]] for k in bundle.manifest()["scripts"][name]["uses_keys"]
            )
        return found

    def task(self, task_id: str) -> str:
        return self.task_prefix + task_id

    def output(self, task_id: str) -> str:
        return self.output_prefix + task_id

    def rate(self, minute: int) -> str:
        """The counts of one minute (``epoch ms // 60000``)."""
        return f"{self.rate_prefix}{minute}"

    def follow(self, task_id: str) -> str:
        return self.follow_prefix + task_id

    def pod(self, pod: str) -> str:
        return self.pod_prefix + pod

    def sched(self, name: str) -> str:
        return self.sched_prefix + name

    def schedule(self, name: str) -> str:
        return self.schedule_prefix + name

    def finished(self, state: str) -> str:
        """The zset of finished tasks in ``state`` (done, dead or cancelled)."""
        return {"done": self.done, "dead": self.dead, "cancelled": self.cancelled}[state]

    def group_pending(self, group: str) -> str:
        return self.group_pending_prefix + group

    def group(self, group: str) -> str:
        return self.group_prefix + group

    def wake(self, pod: str) -> str:
        return self.wake_prefix + pod

    def waiter(self, waiter: str) -> str:
        return self.waiter_prefix + waiter

    def dependants(self, task_id: str) -> str:
        return self.dependants_prefix + task_id

    def flow(self, flow_id: str) -> str:
        return self.flow_prefix + flow_id

    @property
    def pattern(self) -> str:
        """SCAN pattern matching every key of the queue (the braces are literal in globs)."""
        return f"{PREFIX}:\\{{{self.queue}\\}}:*"
