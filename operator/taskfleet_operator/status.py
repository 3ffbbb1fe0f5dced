"""TaskQueue status: what to write to it and which events to post, from what was read.

Pure functions over plain values: `after_sweep` and `after_rejection` take what a
handler read (the spec, the Deployment's status, the queue's counts, the previous
status, the errors it met) and return a `StatusUpdate`, the status fields that changed
and the events to post; the handlers only apply it. Only changed fields are patched:
every status patch is a watch event for every client watching TaskQueues.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from types import MappingProxyType
from typing import Any, Literal, NamedTuple, Protocol

from taskfleet.producer.reading import older_workers_note
from taskfleet.protocol.quota import QuotaState
from taskfleet.protocol.records import CURRENT_LEVEL

from taskfleet_operator.builders import selector_string
from taskfleet_operator.models import TaskQueueSpec

READY = "Ready"
REDIS_REACHABLE = "RedisReachable"
#: False when the queue's Redis may delete keys when full (maxmemory-policy).
REDIS_NO_EVICTION = "RedisNoEviction"
#: False while the fleet may not claim: a provider's rate limit paused it, or a spend
#: budget is spent for the period.
CLAIMING = "Claiming"
#: False while a live worker of the queue serves a level below records.CURRENT_LEVEL (a
#: 0.1.x worker: flows, groups, claim pauses and spend budgets go wrong silently).
WORKERS_CURRENT = "WorkersCurrent"
#: status.scalingReason of a queue without autoscale.
FIXED_REASON = "spec.replicas"
# The condition message's bound in the CRD; longer messages are cut to it.
MESSAGE_BOUND = 1024


class Event(NamedTuple):
    """A Kubernetes event to post on the TaskQueue."""

    type: Literal["Normal", "Warning"]
    reason: str
    message: str


class StatusUpdate(NamedTuple):
    """A merge patch for status (only what changed) and the events to post, in order."""

    patch: dict[str, Any]
    events: list[Event]


@dataclass(frozen=True)
class Failure:
    """A generation of the spec the create/update handler could not apply, with the Ready
    reason and message it reported: the sweep keeps reporting it until one applies."""

    generation: int | None
    reason: str
    message: str


@dataclass(frozen=True)
class Outage:
    """Why the sweep could not use the queue: `SecretUnavailable`, a server fault's
    reason (`outages.Fault`: `RedisUnreachable`, `RedisAuthRefused`, `RedisBusy`,
    `RedisLoading`, `RedisOutOfMemory`, `RedisReadOnly`, ...; ``parked``: its server is
    parked until its probe succeeds) or `RedisError` (this sweep's call failed)."""

    reason: str
    message: str
    parked: bool = False


class Report(Protocol):
    """What a sweep that reached Redis saw and did (`sweeper.SweepReport`)."""

    @property
    def stats(self) -> Mapping[str, int]: ...  # the queue's counts (`Queue.stats`)

    @property
    def requeued(self) -> Mapping[str, int]: ...  # tasks taken back, by gone pod

    @property
    def schedule_errors(self) -> Mapping[str, str]: ...  # schedules the queue refused

    @property
    def quota(self) -> QuotaState | None: ...  # the claim pause and the budget's spend

    @property
    def older_workers(self) -> Sequence[str]: ...  # live workers of an older level, by pod

    @property
    def older_level(self) -> int: ...  # the lowest level among them


@dataclass(frozen=True)
class Swept:
    """What one sweep of a TaskQueue read and did: everything its status depends on."""

    name: str
    spec: TaskQueueSpec
    previous: Mapping[str, Any]  # the status as read
    deployment: Mapping[str, Any] | None  # the worker Deployment (its status), if any
    live_pods: int
    outcome: Report | Outage  # the sweep's report, or why it could not reach Redis
    failure: Failure | None = None  # the handler's failure for this generation (`failure_of`)
    # The server's maxmemory-policy as last checked (None: not checked yet).
    eviction_policy: str | None = None
    # What this sweep loop already announced by an event (the outage's reason, the unsafe
    # policy): ``previous`` may not show the last status patch yet, and an event must not
    # be posted twice for one change.
    announced: frozenset[str] = frozenset()


def failure_of(failure: Failure | None, generation: int | None) -> Failure | None:
    """``failure`` if it is that of ``generation``: a newer spec has not been tried yet."""
    return failure if failure is not None and failure.generation == generation else None


def now_iso() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def find(conditions: Sequence[Mapping[str, Any]] | None, kind: str) -> Mapping[str, Any] | None:
    for condition in conditions or ():
        if condition.get("type") == kind:
            return condition
    return None


def is_false(conditions: Sequence[Mapping[str, Any]] | None, kind: str) -> bool:
    condition = find(conditions, kind)
    return condition is not None and condition.get("status") == "False"


def set_condition(
    conditions: Sequence[Mapping[str, Any]] | None,
    kind: str,
    status: bool,
    reason: str,
    message: str,
    *,
    now: str | None = None,
) -> list[dict[str, Any]]:
    """A new conditions list with ``kind`` set; its transition time moves only on a flip."""
    value = "True" if status else "False"
    previous = find(conditions, kind)
    since = now or now_iso()
    if previous is not None and previous.get("status") == value:
        since = previous.get("lastTransitionTime") or since
    updated = {
        "type": kind,
        "status": value,
        "reason": reason,
        "message": message[:MESSAGE_BOUND],
        "lastTransitionTime": since,
    }
    others = [dict(c) for c in conditions or () if c.get("type") != kind]
    return sorted([*others, updated], key=lambda c: str(c["type"]))


def queue_counts(stats: Mapping[str, int], live_pods: int) -> dict[str, int]:
    return {
        "pending": stats.get("pending", 0),
        "delayed": stats.get("delayed", 0),
        "running": stats.get("running", 0),
        "dead": stats.get("dead", 0),
        "livePods": live_pods,
        "requeuedTotal": stats.get("requeued", 0),
    }


def changes(current: Mapping[str, Any] | None, desired: Mapping[str, Any]) -> dict[str, Any]:
    """The fields of ``desired`` that differ from ``current`` (a merge patch for status)."""
    current = current or {}
    return {key: value for key, value in desired.items() if current.get(key) != value}


_DEPLOYMENT_ENTRIES: dict[tuple[Any, Any, Any], Mapping[str, Any]] = {}


def deployment_entry(deployment: Mapping[str, Any]) -> Mapping[str, Any]:
    """What the operator keeps of a worker Deployment (its index entry): spec.replicas and
    status.replicas and readyReplicas, in the Deployment's own shape, which
    `deployment_status` and `wanted_replicas` read. Entries with the same numbers are one
    shared read-only object (most fleets at rest have the same few numbers)."""
    status = deployment.get("status") or {}
    numbers = (
        (deployment.get("spec") or {}).get("replicas"),
        status.get("replicas"),
        status.get("readyReplicas"),
    )
    entry = _DEPLOYMENT_ENTRIES.get(numbers)
    if entry is None:
        entry = MappingProxyType(
            {
                "spec": MappingProxyType({"replicas": numbers[0]}),
                "status": MappingProxyType({"replicas": numbers[1], "readyReplicas": numbers[2]}),
            }
        )
        if len(_DEPLOYMENT_ENTRIES) < 4096:  # bounded: odd numbers get their own
            entry = _DEPLOYMENT_ENTRIES.setdefault(numbers, entry)
    return entry


def deployment_status(deployment: Mapping[str, Any] | None) -> tuple[int, int]:
    """(replicas, readyReplicas) as the Deployment reports them (0 before it reports)."""
    reported = (deployment or {}).get("status") or {}
    return int(reported.get("replicas") or 0), int(reported.get("readyReplicas") or 0)


def wanted_replicas(spec: TaskQueueSpec, deployment: Mapping[str, Any] | None) -> int:
    """The pods the fleet should have ready: ``spec.replicas``, or for an autoscaled queue
    what the autoscaler last asked of the Deployment (``minReplicas`` before it exists)."""
    if spec.autoscale is None:
        return spec.replicas
    asked = ((deployment or {}).get("spec") or {}).get("replicas")
    return spec.autoscale.min_replicas if asked is None else int(asked)


def ready_condition(
    conditions: list[dict[str, Any]],
    wanted: int,
    ready_replicas: int,
    *,
    now: str | None = None,
) -> list[dict[str, Any]]:
    if is_false(conditions, REDIS_REACHABLE):
        why = (find(conditions, REDIS_REACHABLE) or {}).get("reason", "")
        return set_condition(
            conditions,
            READY,
            False,
            "RedisUnreachable",
            f"the queue's Redis cannot be used ({why}: see the RedisReachable condition)",
            now=now,
        )
    if ready_replicas < wanted:
        return set_condition(
            conditions,
            READY,
            False,
            "WorkersNotReady",
            f"{ready_replicas} of {wanted} worker pods ready",
            now=now,
        )
    return set_condition(
        conditions, READY, True, "WorkersReady", f"{ready_replicas} worker pods ready", now=now
    )


def schedules_refused(
    conditions: list[dict[str, Any]], errors: Mapping[str, str], *, now: str | None = None
) -> tuple[list[dict[str, Any]], str | None]:
    """Ready=False/InvalidSpec naming the schedules the queue refused, and the message to
    post as an event: only when it changes, not at every sweep."""
    message = "; ".join(f"schedule {name}: {error}" for name, error in sorted(errors.items()))
    message = message[:MESSAGE_BOUND]  # so the comparison holds next sweep
    previous = find(conditions, READY) or {}
    news = (
        None
        if (previous.get("reason"), previous.get("message")) == ("InvalidSpec", message)
        else message
    )
    return set_condition(conditions, READY, False, "InvalidSpec", message, now=now), news


def _redis_reachability(
    swept: Swept, conditions: list[dict[str, Any]], now: str
) -> tuple[list[dict[str, Any]], list[Event]]:
    """RedisReachable from the sweep, with an event when an outage starts or changes
    kind, one per pod whose tasks were taken back, and one when Redis answers again."""
    outcome = swept.outcome
    if isinstance(outcome, Outage):
        previous = find(conditions, REDIS_REACHABLE) or {}
        starts = (previous.get("status"), previous.get("reason")) != ("False", outcome.reason)
        starts = starts and outcome.reason not in swept.announced
        events = [Event("Warning", outcome.reason, outcome.message)] if starts else []
        conditions = set_condition(
            conditions, REDIS_REACHABLE, False, outcome.reason, outcome.message, now=now
        )
        return conditions, events
    events = [
        Event(
            "Normal",
            "Requeued",
            f"requeued {count} tasks of pod {pod}: pod {pod} is gone from the API",
        )
        for pod, count in outcome.requeued.items()
    ]
    if is_false(conditions, REDIS_REACHABLE):
        events.append(Event("Normal", "RedisReachable", "Redis is reachable again"))
    conditions = set_condition(
        conditions, REDIS_REACHABLE, True, "Connected", "Redis answers", now=now
    )
    return conditions, events


def _warned_condition(
    conditions: list[dict[str, Any]],
    kind: str,
    healthy: tuple[str, str] | None,
    warning: tuple[str, str],
    recovered: tuple[str, str],
    *,
    now: str,
    announced: frozenset[str],
    key: str,
) -> tuple[list[dict[str, Any]], list[Event]]:
    """``kind`` True with ``healthy`` (reason, message), or, when that is None, False with
    ``warning``: a Warning event when it turns False or its message changes (not at every
    sweep, nor while ``announced`` holds ``key``: the status read may lag the last
    sweep's write), a Normal ``recovered`` (reason, message) event when it turns True
    again."""
    previous = find(conditions, kind) or {}
    if healthy is not None:
        was_false = previous.get("status") == "False"
        events = [Event("Normal", *recovered)] if was_false else []
        return set_condition(conditions, kind, True, *healthy, now=now), events
    reason, message = warning
    changed = (previous.get("status"), previous.get("message")) != ("False", message)
    changed = changed and key not in announced
    events = [Event("Warning", reason, message)] if changed else []
    return set_condition(conditions, kind, False, reason, message, now=now), events


def eviction_condition(
    conditions: list[dict[str, Any]],
    policy: str | None,
    *,
    now: str,
    announced: frozenset[str] = frozenset(),
) -> tuple[list[dict[str, Any]], list[Event]]:
    """RedisNoEviction from the server's maxmemory-policy, with a warning when it turns
    False (not at every sweep) and a note when it turns True again."""
    if policy is None:
        return conditions, []
    message = (
        f"Redis maxmemory-policy is {policy}: when full, Redis deletes keys, acknowledged "
        "tasks among them; set maxmemory-policy noeviction (docs/redis.md)"
    )
    return _warned_condition(
        conditions,
        REDIS_NO_EVICTION,
        ("NoEviction", "maxmemory-policy is noeviction: a full Redis refuses writes")
        if policy == "noeviction"
        else None,
        ("EvictionPolicy", message),
        ("NoEviction", "Redis maxmemory-policy is noeviction again"),
        now=now,
        announced=announced,
        key=f"EvictionPolicy:{policy}",
    )


def _utc(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def claiming_condition(
    conditions: list[dict[str, Any]], quota: QuotaState | None, *, now: str
) -> tuple[list[dict[str, Any]], list[Event]]:
    """Claiming: False while a provider's rate limit pauses the fleet's claims
    (RateLimited) or a spend budget is spent (BudgetSpent); an event when that begins
    and when claims go on again."""
    if quota is None:
        return conditions, []
    previous = find(conditions, CLAIMING) or {}
    if quota.paused:
        reason = "RateLimited"
        message = f"a provider's rate limit paused claims until {_utc(quota.paused_until_ms)}"
        if quota.reason:
            message += f": {quota.reason}"
    elif quota.budget_spent:
        reason = "BudgetSpent"
        day = quota.day_left == 0
        limit = quota.day_limit if day else quota.month_limit
        ends = quota.day_end_ms if day else quota.month_end_ms
        message = (
            f"the {'daily' if day else 'monthly'} budget of {limit} cost units is spent; "
            f"claims go on at {_utc(ends)}"
        )
    else:
        events = []
        if previous.get("status") == "False":
            events.append(Event("Normal", "Claiming", "claims go on"))
        message = "the fleet claims tasks"
        return set_condition(conditions, CLAIMING, True, "Claiming", message, now=now), events
    fresh = (previous.get("status"), previous.get("reason")) != ("False", reason)
    events = [Event("Warning", reason, message)] if fresh else []
    return set_condition(conditions, CLAIMING, False, reason, message, now=now), events


def _spec_features(spec: TaskQueueSpec) -> list[str]:
    """The spec's fields that only workers of this release's level keep."""
    fields = {"budget": spec.budget, "groups": spec.groups, "throttle": spec.throttle}
    return [f"spec.{name}" for name, value in fields.items() if value is not None]


def workers_message(spec: TaskQueueSpec, pods: Sequence[str], level: int) -> str:
    """WorkersCurrent=False's message: the older workers (a few named) and what they miss."""
    message = older_workers_note(pods, level)
    features = _spec_features(spec)
    if features:
        verb = "is" if len(features) == 1 else "are"
        them = "them" if len(pods) > 1 else "it"
        message += f"; this TaskQueue's {', '.join(features)} {verb} not kept by {them}"
    return message[:MESSAGE_BOUND]


def workers_condition(
    conditions: list[dict[str, Any]],
    spec: TaskQueueSpec,
    report: Report,
    *,
    now: str,
    announced: frozenset[str] = frozenset(),
) -> tuple[list[dict[str, Any]], list[Event]]:
    """WorkersCurrent: False (OlderWorkers) while a live worker serves a level below
    CURRENT_LEVEL, with a warning when that starts or its message changes (not at every
    sweep) and a note when every live worker is current again."""
    older = report.older_workers
    message = workers_message(spec, older, report.older_level) if older else ""
    return _warned_condition(
        conditions,
        WORKERS_CURRENT,
        None if older else ("Current", f"no live worker of a level below {CURRENT_LEVEL}"),
        ("OlderWorkers", message),
        (WORKERS_CURRENT, "every live worker serves this release's features"),
        now=now,
        announced=announced,
        key=f"OlderWorkers:{message}",
    )


def announced_after(swept: Swept) -> frozenset[str]:
    """What stays announced after this sweep (`Swept.announced`): the outage's reason
    while it lasts, the unsafe policy while it stays."""
    held = set()
    if isinstance(swept.outcome, Outage):
        held.add(swept.outcome.reason)
    if swept.eviction_policy not in (None, "noeviction"):
        held.add(f"EvictionPolicy:{swept.eviction_policy}")
    outcome = swept.outcome
    if not isinstance(outcome, Outage) and outcome.older_workers:
        message = workers_message(swept.spec, outcome.older_workers, outcome.older_level)
        held.add(f"OlderWorkers:{message}")
    elif isinstance(outcome, Outage):  # not read this sweep: what was announced stays
        held |= {key for key in swept.announced if key.startswith("OlderWorkers:")}
    return frozenset(held)


def after_sweep(swept: Swept, *, now: str) -> StatusUpdate:
    """The status a sweep leads to, and the events it posts.

    Ready reports, first, the handler's failure for this generation (the sweep does not
    hide it), then schedules the queue refused, then Redis and the workers.
    """
    outcome = swept.outcome
    conditions, events = _redis_reachability(
        swept, list(swept.previous.get("conditions") or []), now
    )
    conditions, evicting = eviction_condition(
        conditions, swept.eviction_policy, now=now, announced=swept.announced
    )
    events.extend(evicting)
    desired: dict[str, Any] = {}
    if not isinstance(outcome, Outage):
        desired.update(queue_counts(outcome.stats, swept.live_pods))
        conditions, pausing = claiming_condition(conditions, outcome.quota, now=now)
        events.extend(pausing)
        conditions, older = workers_condition(
            conditions, swept.spec, outcome, now=now, announced=swept.announced
        )
        events.extend(older)
    replicas, ready = deployment_status(swept.deployment)
    desired["replicas"] = replicas
    desired["readyReplicas"] = ready
    desired["selector"] = selector_string(swept.name)
    if swept.spec.autoscale is None:  # an autoscaled queue's are the autoscaler's to write
        desired["desiredReplicas"] = swept.spec.replicas
        desired["scalingReason"] = FIXED_REASON
    refused = {} if isinstance(outcome, Outage) else outcome.schedule_errors
    if swept.failure is not None:
        failure = swept.failure
        conditions = set_condition(
            conditions, READY, False, failure.reason, failure.message, now=now
        )
    elif refused:
        conditions, news = schedules_refused(conditions, refused, now=now)
        if news:
            events.append(Event("Warning", "InvalidSpec", news))
    else:
        wanted = wanted_replicas(swept.spec, swept.deployment)
        conditions = ready_condition(conditions, wanted, ready, now=now)
    desired["conditions"] = conditions
    return StatusUpdate(changes(swept.previous, desired), events)


def after_rejection(previous: Mapping[str, Any], failure: Failure, *, now: str) -> StatusUpdate:
    """Ready=False with the failure's reason and message, and a warning event saying it."""
    conditions = set_condition(
        previous.get("conditions"), READY, False, failure.reason, failure.message, now=now
    )
    return StatusUpdate(
        {"conditions": conditions}, [Event("Warning", failure.reason, failure.message)]
    )
