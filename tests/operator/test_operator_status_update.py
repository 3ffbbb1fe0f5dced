"""What a sweep or a rejected spec writes to a TaskQueue's status and which events it
posts: pure functions of what was read, checked in tables without an apiserver."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
from taskfleet_operator import reconcile, status
from taskfleet_operator.models import TaskQueueSpec
from taskfleet_operator.status import Event, Failure, Outage, Swept

NOW = "2026-03-04T05:06:07Z"
BEFORE = "2026-01-01T00:00:00Z"
SPEC_FIELDS = {
    "image": "w:1",
    "handler": "app:run",
    "redis": {"url": "redis://r:6379/0"},
    "replicas": 2,
}
SPEC = TaskQueueSpec.model_validate(SPEC_FIELDS)
STATS = {"pending": 4, "delayed": 1, "running": 2, "dead": 0, "requeued": 7}
UNREACHABLE = Outage("RedisUnreachable", "cannot reach Redis: ConnectionError: refused")
NO_SECRET = Outage("SecretUnavailable", "Secret ns/redis-auth is missing or unreadable")
REJECTED = Failure(3, "DeploymentRejected", "the worker Deployment was rejected: bad toleration")


@dataclass(frozen=True)
class Report:
    """The fields of `sweeper.SweepReport` the status reads."""

    stats: dict[str, int] = field(default_factory=lambda: dict(STATS))
    requeued: dict[str, int] = field(default_factory=dict)
    schedule_errors: dict[str, str] = field(default_factory=dict)
    quota: Any = None
    older_workers: tuple[str, ...] = ()
    older_level: int = 2


def condition(kind: str, value: bool, reason: str, message: str = "") -> dict[str, Any]:
    return {
        "type": kind,
        "status": "True" if value else "False",
        "reason": reason,
        "message": message,
        "lastTransitionTime": BEFORE,
    }


def deployment(ready: int, replicas: int = 2) -> dict[str, Any]:
    return {"status": {"replicas": replicas, "readyReplicas": ready}}


REACHABLE = condition("RedisReachable", True, "Connected", "Redis answers")
DOWN = condition("RedisReachable", False, "RedisUnreachable", UNREACHABLE.message)
READY = condition("Ready", True, "WorkersReady", "2 worker pods ready")
#: What a sweep that read no worker of an older level adds.
CURRENT = {"WorkersCurrent": ("True", "Current")}


def swept(
    outcome: Report | Outage,
    *,
    previous: dict[str, Any] | None = None,
    ready: int = 2,
    failure: Failure | None = None,
) -> Swept:
    return Swept("emails", SPEC, previous or {}, deployment(ready), 1, outcome, failure)


def conditions_of(
    update: status.StatusUpdate, previous: dict[str, Any]
) -> dict[str, tuple[str, str]]:
    """(status, reason) by type, from the patch or, when unchanged, the previous status."""
    listed = update.patch.get("conditions", previous.get("conditions", []))
    return {c["type"]: (c["status"], c["reason"]) for c in listed}


CASES: list[tuple[str, Swept, dict[str, tuple[str, str]], list[Event]]] = [
    (
        "first sweep, workers starting",
        swept(Report(), ready=1),
        {"RedisReachable": ("True", "Connected"), "Ready": ("False", "WorkersNotReady"), **CURRENT},
        [],
    ),
    (
        "every worker ready",
        swept(Report(), previous={"conditions": [REACHABLE]}),
        {"RedisReachable": ("True", "Connected"), "Ready": ("True", "WorkersReady"), **CURRENT},
        [],
    ),
    (
        "Redis answers again",
        swept(Report(), previous={"conditions": [DOWN]}),
        {"RedisReachable": ("True", "Connected"), "Ready": ("True", "WorkersReady"), **CURRENT},
        [Event("Normal", "RedisReachable", "Redis is reachable again")],
    ),
    (
        "tasks of gone pods taken back",
        swept(
            Report(requeued={"emails-a": 3, "emails-b": 1}), previous={"conditions": [REACHABLE]}
        ),
        {"RedisReachable": ("True", "Connected"), "Ready": ("True", "WorkersReady"), **CURRENT},
        [
            Event(
                "Normal",
                "Requeued",
                "requeued 3 tasks of pod emails-a: pod emails-a is gone from the API",
            ),
            Event(
                "Normal",
                "Requeued",
                "requeued 1 tasks of pod emails-b: pod emails-b is gone from the API",
            ),
        ],
    ),
    (
        "an outage starts",
        swept(UNREACHABLE, previous={"conditions": [REACHABLE, READY]}),
        {"RedisReachable": ("False", "RedisUnreachable"), "Ready": ("False", "RedisUnreachable")},
        [Event("Warning", "RedisUnreachable", UNREACHABLE.message)],
    ),
    (
        "an outage goes on",
        swept(UNREACHABLE, previous={"conditions": [DOWN]}),
        {"RedisReachable": ("False", "RedisUnreachable"), "Ready": ("False", "RedisUnreachable")},
        [],
    ),
    (
        "an outage changes kind",
        swept(NO_SECRET, previous={"conditions": [DOWN]}),
        {"RedisReachable": ("False", "SecretUnavailable"), "Ready": ("False", "RedisUnreachable")},
        [Event("Warning", "SecretUnavailable", NO_SECRET.message)],
    ),
    (
        "the handler's failure holds over ready workers",
        swept(Report(), previous={"conditions": [REACHABLE, READY]}, failure=REJECTED),
        {
            "RedisReachable": ("True", "Connected"),
            "Ready": ("False", "DeploymentRejected"),
            **CURRENT,
        },
        [],
    ),
    (
        "the handler's failure holds over an outage",
        swept(UNREACHABLE, previous={"conditions": [DOWN]}, failure=REJECTED),
        {"RedisReachable": ("False", "RedisUnreachable"), "Ready": ("False", "DeploymentRejected")},
        [],
    ),
    (
        "a schedule refused",
        swept(
            Report(schedule_errors={"huge": "payload too large"}),
            previous={"conditions": [REACHABLE]},
        ),
        {"RedisReachable": ("True", "Connected"), "Ready": ("False", "InvalidSpec"), **CURRENT},
        [Event("Warning", "InvalidSpec", "schedule huge: payload too large")],
    ),
    (
        "a schedule still refused",
        swept(
            Report(schedule_errors={"huge": "payload too large"}),
            previous={
                "conditions": [
                    REACHABLE,
                    condition("Ready", False, "InvalidSpec", "schedule huge: payload too large"),
                ]
            },
        ),
        {"RedisReachable": ("True", "Connected"), "Ready": ("False", "InvalidSpec"), **CURRENT},
        [],
    ),
]


@pytest.mark.parametrize(
    ("swept_", "conditions", "events"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_a_sweep_sets_the_conditions_and_posts_the_events_its_outcome_calls_for(
    swept_: Swept, conditions: dict[str, tuple[str, str]], events: list[Event]
) -> None:
    update = status.after_sweep(swept_, now=NOW)

    assert conditions_of(update, dict(swept_.previous)) == conditions
    assert update.events == events


def test_a_sweep_that_reached_redis_writes_the_counts_replicas_and_selector() -> None:
    update = status.after_sweep(swept(Report(), ready=1), now=NOW)

    patch = dict(update.patch)
    assert patch.pop("conditions")
    assert patch == {
        "pending": 4,
        "delayed": 1,
        "running": 2,
        "dead": 0,
        "livePods": 1,
        "requeuedTotal": 7,
        "replicas": 2,
        "readyReplicas": 1,
        "selector": "taskfleet.dev/queue=emails",
        "desiredReplicas": 2,
        "scalingReason": "spec.replicas",
    }


AUTOSCALED = TaskQueueSpec.model_validate(
    {**SPEC_FIELDS, "autoscale": {"minReplicas": 0, "maxReplicas": 5}}
)


@pytest.mark.parametrize(
    ("asked", "ready", "expected"),
    [
        (0, 0, ("True", "WorkersReady")),  # scaled to zero on purpose
        (3, 2, ("False", "WorkersNotReady")),
        (3, 3, ("True", "WorkersReady")),
        (None, 0, ("True", "WorkersReady")),  # no Deployment yet: minReplicas 0
    ],
)
def test_an_autoscaled_queue_is_ready_when_the_pods_the_autoscaler_asked_for_are(
    asked: int | None, ready: int, expected: tuple[str, str]
) -> None:
    found = {"status": {"replicas": asked or 0, "readyReplicas": ready}}
    if asked is not None:
        found["spec"] = {"replicas": asked}
    swept_ = Swept("emails", AUTOSCALED, {"conditions": [REACHABLE]}, found, ready, Report())

    update = status.after_sweep(swept_, now=NOW)

    assert conditions_of(update, {})["Ready"] == expected
    # desiredReplicas and scalingReason are the autoscaler's to write, not the sweep's
    assert not {"desiredReplicas", "scalingReason"} & set(update.patch)


def test_an_outage_keeps_the_last_counts_and_still_reports_the_deployment() -> None:
    previous = {"pending": 9, "replicas": 2, "readyReplicas": 2, "conditions": [REACHABLE]}

    update = status.after_sweep(swept(UNREACHABLE, previous=previous, ready=1), now=NOW)

    assert not {"pending", "delayed", "running", "dead", "livePods", "requeuedTotal"} & set(
        update.patch
    )
    assert update.patch["readyReplicas"] == 1
    assert "replicas" not in update.patch  # unchanged


def test_a_sweep_that_changes_nothing_patches_nothing() -> None:
    first = status.after_sweep(swept(Report()), now=NOW)
    previous = dict(first.patch)

    again = status.after_sweep(swept(Report(), previous=previous), now="2026-03-04T05:06:09Z")

    assert again == status.StatusUpdate({}, [])


def test_a_condition_flips_at_the_sweeps_time_and_otherwise_keeps_its_own() -> None:
    update = status.after_sweep(swept(UNREACHABLE, previous={"conditions": [REACHABLE]}), now=NOW)

    times = {c["type"]: c["lastTransitionTime"] for c in update.patch["conditions"]}
    assert times == {"RedisReachable": NOW, "Ready": NOW}
    # Conditions are kept sorted by type, as written: the same list is no change.
    current = condition("WorkersCurrent", True, "Current", "no live worker of a level below 2")
    previous = {"conditions": [READY, REACHABLE, current]}
    kept = status.after_sweep(swept(Report(), previous=previous), now=NOW)
    assert "conditions" not in kept.patch


def test_a_rejected_spec_sets_ready_false_with_its_reason_and_warns() -> None:
    previous = {"conditions": [REACHABLE, READY], "pending": 3}

    update = status.after_rejection(previous, REJECTED, now=NOW)

    assert update.patch == {
        "conditions": [
            {
                "type": "Ready",
                "status": "False",
                "reason": "DeploymentRejected",
                "message": REJECTED.message,
                "lastTransitionTime": NOW,
            },
            REACHABLE,
        ]
    }
    assert update.events == [Event("Warning", "DeploymentRejected", REJECTED.message)]


@pytest.mark.parametrize(
    ("failure", "generation", "held"),
    [(None, 3, False), (REJECTED, 3, True), (REJECTED, 4, False)],
    ids=["none", "this generation", "a newer generation is not held back"],
)
def test_a_failure_holds_only_for_the_generation_that_failed(
    failure: Failure | None, generation: int, held: bool
) -> None:
    assert (status.failure_of(failure, generation) is not None) == held


@pytest.mark.parametrize(
    ("present", "failure", "observed", "restore"),
    [
        (False, None, 1, True),
        (True, None, 1, False),
        (False, REJECTED, 1, False),
        (False, None, None, False),
    ],
    ids=[
        "deleted behind the operator's back",
        "present",
        "the handler could not apply it",
        "never applied yet",
    ],
)
def test_the_sweep_restores_only_a_deployment_that_went_missing_after_it_was_applied(
    present: bool, failure: Failure | None, observed: int | None, restore: bool
) -> None:
    status_ = {} if observed is None else {"observedGeneration": observed}

    lost = reconcile.deployment_lost(deployment(2) if present else None, failure, status_)

    assert lost == restore


def test_claiming_turns_false_while_a_rate_limit_pauses_or_a_budget_is_spent() -> None:
    from taskfleet.protocol.quota import quota_state

    now = 1_700_000_000_000
    paused = quota_state(
        {"until": str(now + 30_000), "reason": "429 from the provider"},
        now,
        budget_day=None,
        budget_month=None,
    )
    conditions, events = status.claiming_condition([], paused, now="t1")
    [claiming] = conditions
    assert (claiming["status"], claiming["reason"]) == ("False", "RateLimited")
    assert "429 from the provider" in claiming["message"]
    assert [e.reason for e in events] == ["RateLimited"]
    # still paused at the next sweep: no second event
    assert status.claiming_condition(conditions, paused, now="t2")[1] == []
    day = quota_state({}, now, budget_day=None, budget_month=None).day
    spent = quota_state({"day": day, "day_spent": "100"}, now, budget_day=100, budget_month=None)
    conditions, events = status.claiming_condition(conditions, spent, now="t3")
    assert (
        conditions[0]["reason"] == "BudgetSpent"
        and "daily budget of 100" in conditions[0]["message"]
    )
    assert [e.reason for e in events] == ["BudgetSpent"]
    free = quota_state({}, now, budget_day=None, budget_month=None)
    conditions, events = status.claiming_condition(conditions, free, now="t4")
    assert conditions[0]["status"] == "True"
    assert [(e.type, e.reason) for e in events] == [("Normal", "Claiming")]


def test_live_workers_of_an_older_level_turn_workers_current_false_with_one_warning() -> None:
    spec = TaskQueueSpec.model_validate({**SPEC_FIELDS, "budget": {"day": 100}})
    older = Report(older_workers=("a", "b", "c", "d", "e"), older_level=1)

    def after(
        outcome: Report | Outage, previous: dict[str, Any], announced: frozenset[str] = frozenset()
    ) -> tuple[Swept, status.StatusUpdate]:
        swept_ = Swept("emails", spec, previous, deployment(2), 5, outcome, announced=announced)
        return swept_, status.after_sweep(swept_, now=NOW)

    swept_, first = after(older, {"conditions": [REACHABLE, READY]})
    found = status.find(first.patch["conditions"], "WorkersCurrent")
    assert found is not None and (found["status"], found["reason"]) == ("False", "OlderWorkers")
    message = found["message"]
    assert message.startswith("workers a, b, c and 2 more run taskfleet 0.1.x (level 1): ")
    assert "flows, groups, claim pauses and spend budgets are not served by them" in message
    assert message.endswith("this TaskQueue's spec.budget is not kept by them")
    assert first.events == [Event("Warning", "OlderWorkers", message)]
    # The next sweep, whether or not its read of the status shows the patch yet: no event.
    announced = status.announced_after(swept_)
    assert not after(older, {"conditions": [REACHABLE, READY]}, announced)[1].events
    assert after(older, dict(first.patch))[1] == status.StatusUpdate({}, [])
    # Other pods: the message changes, and says so once.
    _, other = after(
        Report(older_workers=("f",), older_level=1), {"conditions": first.patch["conditions"]}
    )
    assert [e.message.split(" (level 1)")[0] for e in other.events] == [
        "worker f runs taskfleet 0.1.x"
    ]
    # An outage neither clears nor repeats it.
    _, down = after(UNREACHABLE, {"conditions": first.patch["conditions"]})
    assert status.find(down.patch["conditions"], "WorkersCurrent") == found
    assert [e.reason for e in down.events] == ["RedisUnreachable"]
    # Every live worker current again: True, and a note.
    _, back = after(Report(), {"conditions": first.patch["conditions"]})
    found = status.find(back.patch["conditions"], "WorkersCurrent")
    assert found is not None and (found["status"], found["reason"]) == ("True", "Current")
    assert back.events == [
        Event("Normal", "WorkersCurrent", "every live worker serves this release's features")
    ]
