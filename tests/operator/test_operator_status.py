"""Status conditions and spec errors: what users read in `kubectl get/describe tq`."""

from __future__ import annotations

from typing import Any

import pytest
from taskfleet_operator import reconcile, status
from taskfleet_operator.models import TaskQueueSpec

SPEC: dict[str, Any] = {
    "image": "w:1",
    "handler": "app:run",
    "redis": {"url": "redis://r:6379/0"},
    "replicas": 2,
}


def test_a_condition_keeps_its_transition_time_until_its_status_flips() -> None:
    first = status.set_condition(None, "RedisReachable", True, "Connected", "ok")
    stamped = [{**c, "lastTransitionTime": "2026-01-01T00:00:00Z"} for c in first]

    same = status.set_condition(stamped, "RedisReachable", True, "Connected", "still ok")
    flipped = status.set_condition(stamped, "RedisReachable", False, "RedisUnreachable", "down")

    assert same[0]["lastTransitionTime"] == "2026-01-01T00:00:00Z"
    assert same[0]["message"] == "still ok"
    assert flipped[0]["lastTransitionTime"] != "2026-01-01T00:00:00Z"
    assert (flipped[0]["status"], flipped[0]["reason"]) == ("False", "RedisUnreachable")


def test_setting_one_condition_leaves_the_others_alone() -> None:
    conditions = status.set_condition(None, "Ready", False, "WorkersNotReady", "0 of 2")
    conditions = status.set_condition(conditions, "RedisReachable", True, "Connected", "ok")

    assert [c["type"] for c in conditions] == ["Ready", "RedisReachable"]
    assert status.find(conditions, "Ready") is not None
    assert status.is_false(conditions, "Ready")
    assert not status.is_false(conditions, "RedisReachable")


@pytest.mark.parametrize(
    ("redis_ok", "ready_replicas", "expected"),
    [
        (True, 2, ("True", "WorkersReady")),
        (True, 1, ("False", "WorkersNotReady")),
        (False, 2, ("False", "RedisUnreachable")),
    ],
)
def test_ready_needs_redis_and_every_requested_worker(
    redis_ok: bool, ready_replicas: int, expected: tuple[str, str]
) -> None:
    spec = TaskQueueSpec.model_validate(SPEC)
    reason = "Connected" if redis_ok else "RedisUnreachable"
    conditions = status.set_condition(None, "RedisReachable", redis_ok, reason, "")

    ready = status.find(status.ready_condition(conditions, spec.replicas, ready_replicas), "Ready")

    assert ready is not None
    assert (ready["status"], ready["reason"]) == expected


def test_status_patches_carry_only_what_changed() -> None:
    current = {"pending": 3, "running": 1, "conditions": []}

    assert status.changes(current, {"pending": 3, "running": 2}) == {"running": 2}
    assert status.changes(None, {"pending": 0}) == {"pending": 0}
    counts = status.queue_counts({"pending": 1, "dead": 2, "requeued": 5}, live_pods=3)
    assert counts == {
        "pending": 1,
        "delayed": 0,
        "running": 0,
        "dead": 2,
        "livePods": 3,
        "requeuedTotal": 5,
    }


def test_an_invalid_spec_names_every_field_at_fault_in_one_message() -> None:
    raw = {**SPEC, "replicas": -1, "schedules": [{"name": "x", "cron": "61 * * * * *"}]}

    with pytest.raises(reconcile.InvalidSpec) as invalid:
        reconcile.parse_spec(raw)

    message = str(invalid.value)
    assert message.startswith("invalid spec: ")
    assert "replicas:" in message
    assert "schedules.0.cron:" in message


def test_a_refused_schedule_sets_ready_false_with_an_event_only_when_the_message_changes() -> None:
    errors = {"huge": "payload is 2000000 bytes; the queue allows 1048576 (max_payload_bytes)"}

    conditions, event = status.schedules_refused([], errors)
    again, repeat = status.schedules_refused(conditions, errors)
    other, changed = status.schedules_refused(again, {**errors, "b": "bad"})

    ready = status.find(conditions, status.READY)
    assert ready is not None
    assert (ready["status"], ready["reason"]) == ("False", "InvalidSpec")
    assert ready["message"] == f"schedule huge: {errors['huge']}"
    assert event == ready["message"]
    assert repeat is None
    assert changed is not None and changed.startswith("schedule b: bad; schedule huge:")
    assert status.find(other, status.READY) is not None


def test_a_deployments_index_entry_keeps_only_its_replica_counts() -> None:
    body = {
        "metadata": {"name": "q", "namespace": "ns", "managedFields": [{"manager": "x"}]},
        "spec": {"replicas": 3, "template": {"spec": {"containers": [{"name": "w"}]}}},
        "status": {
            "replicas": 3,
            "readyReplicas": 2,
            "conditions": [{"type": "Available", "status": "True"}],
        },
    }
    entry = status.deployment_entry(body)
    assert dict(entry["status"]) == {"replicas": 3, "readyReplicas": 2}
    assert dict(entry["spec"]) == {"replicas": 3}
    assert status.deployment_status(entry) == (3, 2)
    spec = TaskQueueSpec.model_validate(
        {
            "image": "w",
            "handler": "m:f",
            "redis": {"url": "redis://r:6379/0"},
            "autoscale": {"minReplicas": 1, "maxReplicas": 5},
        }
    )
    assert status.wanted_replicas(spec, entry) == 3
    # Deployments with the same counts share one read-only entry.
    again = status.deployment_entry({**body, "metadata": {"name": "other"}})
    assert again is entry
    with pytest.raises(TypeError):
        entry["status"]["replicas"] = 4  # type: ignore[index]
    # A Deployment the controller has not reported on yet.
    fresh = status.deployment_entry({"spec": {"replicas": 1}})
    assert status.deployment_status(fresh) == (0, 0)
