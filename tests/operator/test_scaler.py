"""The autoscaler's loop around the pure decision: what it reads from a real Redis, which
busy pods it keeps, when it writes status, and the replicas the reconcile applies."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from taskfleet.producer.queue import Queue
from taskfleet.protocol.keys import QueueKeys
from taskfleet.protocol.reads import QueueReads
from taskfleet_operator import builders, reconcile, scaler
from taskfleet_operator.autoscale import Limits, Load
from taskfleet_operator.models import TaskQueueSpec
from taskfleet_operator.scaler import Reading, ScalerState

from tests.fixtures_redis import server_ms

FIELDS: dict[str, Any] = {
    "image": "w:1",
    "handler": "app:run",
    "redis": {"url": "redis://r:6379/0"},
    "replicas": 3,
    "concurrency": 2,
}
AUTOSCALED = TaskQueueSpec.model_validate(
    {
        **FIELDS,
        "autoscale": {
            "minReplicas": 1,
            "maxReplicas": 6,
            "targetUtilizationPercent": 100,
            "scaleDownStabilizationSeconds": 0,
        },
    }
)
FIXED = TaskQueueSpec.model_validate(FIELDS)


def pod(name: str, *, terminating: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if terminating:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"metadata": meta}


@pytest.mark.parametrize(
    ("target", "current", "busy", "allowed"),
    [
        (5, 2, 2, 5),  # up: as decided
        (2, 2, 2, 2),  # unchanged
        (1, 4, 0, 1),  # down, every pod idle: as decided
        (1, 4, 3, 3),  # down, 3 busy: the busy stay
        (0, 4, 4, 4),  # every pod busy: none goes yet
        (2, 4, 1, 2),  # one busy pod fits in what stays
    ],
)
def test_going_down_keeps_every_busy_pod(
    target: int, current: int, busy: int, allowed: int
) -> None:
    assert scaler.spare_busy_pods(target, current, busy) == allowed


def test_busy_pods_are_those_holding_a_task_and_not_already_leaving() -> None:
    pods = [pod("a"), pod("b"), pod("c", terminating=True), pod("d")]
    inflight = {"a": 2, "b": 0, "c": 1, "gone": 5}

    assert scaler.busy_pods(pods, inflight) == 1


def test_the_mean_duration_skips_unfinished_and_garbled_tasks() -> None:
    replies = [
        [b"1000", b"3000"],  # 2 s
        [b"5000", b"9000"],  # 4 s
        [b"5000", None],  # not finished
        [b"oops", b"9000"],  # a foreign client's field
        [b"9000", b"8000"],  # a clock step backwards
    ]
    spans = QueueReads(QueueKeys("q")).run_seconds(["a", "b", "c", "d", "e"]).decode(replies)

    assert scaler.mean(spans) == pytest.approx(3.0)
    assert scaler.mean([]) is None


def reading(pending: int, running: int = 0, inflight: dict[str, int] | None = None) -> Reading:
    return Reading(Load(pending, running), inflight or {}, None)


def decide_turn(
    state: ScalerState, load: Reading, *, current: int, pods: list[dict[str, Any]], now: float
) -> scaler.Turn:
    assert AUTOSCALED.autoscale is not None
    return scaler.turn(
        state,
        AUTOSCALED.autoscale,
        lambda mean: Limits.of(AUTOSCALED, mean),
        load,
        current=current,
        pods=lambda: pods,
        now=now,
    )


def test_a_turn_keeps_the_busy_pods_and_says_so() -> None:
    state = ScalerState()
    pods = [pod("a"), pod("b"), pod("c"), pod("d")]

    result = decide_turn(state, reading(0, 2, {"a": 1, "b": 1}), current=4, pods=pods, now=100.0)

    assert (result.before, result.replicas) == (4, 2)
    assert result.decision.replicas == 1  # 2 running tasks fit in one pod of 2 slots
    assert "1 busy pod(s) stay until idle" in result.reason


def test_a_turn_up_does_not_list_pods() -> None:
    def no_pods() -> list[dict[str, Any]]:
        raise AssertionError("going up needs no pod list")

    assert AUTOSCALED.autoscale is not None
    result = scaler.turn(
        ScalerState(),
        AUTOSCALED.autoscale,
        lambda mean: Limits.of(AUTOSCALED, mean),
        reading(9),
        current=1,
        pods=no_pods,
        now=0.0,
    )

    assert result.replicas == 5


def test_status_is_written_at_once_on_a_change_and_otherwise_now_and_then() -> None:
    state = ScalerState()
    pods: list[dict[str, Any]] = []

    def at(now: float, pending: int, current: int) -> dict[str, Any] | None:
        result = decide_turn(state, reading(pending), current=current, pods=pods, now=now)
        return scaler.status_due(state, result, now)

    assert at(0.0, 4, 1) == {"desiredReplicas": 2, "scalingReason": reason_for(4)}
    assert at(1.0, 4, 2) is None  # the same decision, the same words
    assert at(2.0, 3, 2) is None  # the same replicas, other words: not yet
    assert at(2.0 + scaler.STATUS_EVERY_S, 3, 2) == {
        "desiredReplicas": 2,
        "scalingReason": reason_for(3),
    }  # now and then
    assert at(13.0, 9, 3) == {"desiredReplicas": 5, "scalingReason": reason_for(9)}


def reason_for(pending: int) -> str:
    pods = -(-pending // 2)
    return f"{pending} pending, 0 running, 0 due soon, 2 slots/pod: {pods} pods"


@pytest.mark.parametrize(
    ("spec", "deployed", "replicas"),
    [
        (FIXED, None, 3),
        (FIXED, 7, 3),  # kubectl scale on the Deployment: the TaskQueue's count wins
        (AUTOSCALED, None, 1),  # new: minReplicas, the autoscaler raises it
        (AUTOSCALED, 4, 4),  # what the autoscaler set stays
        (AUTOSCALED, 0, 1),  # below minReplicas (minReplicas raised): up to it
        (AUTOSCALED, 9, 6),  # above maxReplicas (maxReplicas lowered): down to it
    ],
)
def test_the_reconcile_keeps_what_the_autoscaler_set_within_its_bounds(
    spec: TaskQueueSpec, deployed: int | None, replicas: int
) -> None:
    assert builders.fleet_replicas(spec, deployed) == replicas


def test_scaling_an_autoscaled_queue_by_hand_is_answered_not_applied() -> None:
    scaled = [("change", ("spec", "replicas"), 3, 8)]
    other = [("change", ("spec", "concurrency"), 2, 4)]

    message = reconcile.replicas_ignored(scaled, AUTOSCALED)
    assert message is not None
    assert "spec.replicas (3) is ignored while spec.autoscale is set" in message
    assert "1..6" in message
    assert reconcile.replicas_ignored(other, AUTOSCALED) is None
    assert reconcile.replicas_ignored(scaled, FIXED) is None


def test_the_reading_counts_pending_running_due_work_and_live_workers(
    queue: Queue, make_broker: Callable[..., Any]
) -> None:
    for i in range(5):
        queue.enqueue({"i": i})
    queue.enqueue({"soon": True}, delay=2)
    queue.enqueue({"later": True}, delay=600)
    broker = make_broker(queue.name, pod="pod-a")
    broker.register(4)
    claimed_at = server_ms(queue.client)
    done, _held = broker.claim(2).tasks
    broker.complete(done.id, done.token)
    finished_by = server_ms(queue.client)
    # No heartbeat since the claim: the worker's record still says 0 in flight, the
    # queue's own records say 1, and 1 is what keeps the pod from being removed.

    read = scaler.read_queue(queue, due_horizon_s=5)

    assert read.load == Load(pending=3, running=1, due=1)
    assert read.inflight == {"pod-a": 1}
    assert read.mean_task_s is not None
    assert 0 <= read.mean_task_s <= (finished_by - claimed_at) / 1000  # the one done task
