"""The autoscaler's decision: worked examples, and properties over random loads, limits,
policies and sequences of sweeps (the pure function, no cluster)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from taskfleet_operator.autoscale import Decision, Limits, Load, Policy, Surplus, decide
from taskfleet_operator.models import RateLimit, TaskQueueSpec

MINUTE = 60.0


@pytest.mark.parametrize(
    ("load", "limits", "policy", "current", "replicas", "reason"),
    [
        # 12 + 8 tasks, 4 slots a pod: 5 pods, up at once from 2.
        (
            Load(12, 8),
            Limits(4),
            Policy(0, 10),
            2,
            5,
            "12 pending, 8 running, 0 due soon, 4 slots/pod: 5 pods",
        ),
        # maxConcurrency 12 keeps 3 pods of 4 busy.
        (
            Load(12, 8),
            Limits(4, max_concurrency=12),
            Policy(0, 10),
            2,
            3,
            "5 pods; capped by maxConcurrency 12: 3",
        ),
        # 10 tasks/s of 2.5 s each keep 25 slots busy: 7 pods of 4.
        (
            Load(100, 0),
            Limits(4, rate_limit_tasks=10, rate_limit_period_s=1, mean_task_s=2.5),
            Policy(1, 50),
            3,
            7,
            "capped by rateLimit 10/1s at 2.5s per task: 7",
        ),
        # The same rate limit with an unknown run time caps nothing.
        (
            Load(100, 0),
            Limits(4, rate_limit_tasks=10, rate_limit_period_s=1),
            Policy(1, 50),
            3,
            25,
            "100 pending, 0 running, 0 due soon, 4 slots/pod: 25 pods",
        ),
        # Delayed tasks due soon count; 50% keeps half of each pod's 4 slots spare.
        (
            Load(3, 2, due=3),
            Limits(4),
            Policy(0, 10, target_percent=50),
            0,
            4,
            "3 pending, 2 running, 3 due soon, 4 slots/pod at 50%: 4 pods",
        ),
        (Load(500, 0), Limits(4), Policy(1, 10), 10, 10, "125 pods; capped by maxReplicas 10: 10"),
        (Load(0, 0), Limits(4), Policy(2, 10), 0, 2, "0 pods; raised to minReplicas 2"),
        # minReplicas wins over what the limits can keep busy.
        (
            Load(40, 0),
            Limits(4, max_concurrency=4),
            Policy(3, 10),
            3,
            3,
            "capped by maxConcurrency 4: 1; raised to minReplicas 3",
        ),
        # One task is one pod, whatever the target; a tiny run time still keeps one pod.
        (Load(1, 0), Limits(1000), Policy(0, 10, target_percent=1), 0, 1, "1 pod"),
        (
            Load(9, 0),
            Limits(4, rate_limit_tasks=1, rate_limit_period_s=3600, mean_task_s=0.0),
            Policy(0, 10),
            0,
            1,
            "capped by rateLimit 1/3600s at 0s per task: 1",
        ),
    ],
)
def test_the_load_sets_the_pods_and_the_reason_shows_the_arithmetic(
    *, load: Load, limits: Limits, policy: Policy, current: int, replicas: int, reason: str
) -> None:
    decision = decide(load, limits, policy, current=current, surplus=None, now=1000.0)

    assert decision.replicas == replicas
    assert reason in decision.reason
    assert decision.surplus is None


def test_the_worked_example_of_the_operator_docs() -> None:
    """docs/operator.md, Autoscaling: concurrency 8 at 75%, maxConcurrency 20, 600 tasks a
    minute of 1.5 s each; 40 pending, 6 running, 3 due soon."""
    load, policy = Load(40, 6, due=3), Policy(0, 30, target_percent=75, stabilization_s=60)

    full = Limits(
        8, max_concurrency=20, rate_limit_tasks=600, rate_limit_period_s=60, mean_task_s=1.5
    )
    decision = decide(load, full, policy, current=0, surplus=None, now=0.0)
    assert decision.replicas == 2
    assert decision.reason == (
        "40 pending, 6 running, 3 due soon, 8 slots/pod at 75%: 9 pods; "
        "capped by rateLimit 600/60s at 1.5s per task: 2"
    )
    no_rate = Limits(8, max_concurrency=20)
    assert decide(load, no_rate, policy, current=0, surplus=None, now=0.0).replicas == 3
    assert decide(load, Limits(8), policy, current=0, surplus=None, now=0.0).replicas == 9


def test_scale_down_waits_for_the_window_then_keeps_the_most_the_load_needed_in_it() -> None:
    limits, policy = Limits(4), Policy(0, 10, stabilization_s=MINUTE)

    first = decide(Load(8, 0), limits, policy, current=8, surplus=None, now=100.0)  # needs 2 of 8
    assert first == Decision(8, first.reason, Surplus(since=100.0, peak=2))
    assert "holding 8: over-provisioned 0s of 60s" in first.reason

    busier = decide(
        Load(20, 0), limits, policy, current=8, surplus=first.surplus, now=130.0
    )  # needs 5
    assert (busier.replicas, busier.surplus) == (8, Surplus(since=100.0, peak=5))

    quiet = decide(Load(0, 0), limits, policy, current=8, surplus=busier.surplus, now=159.0)
    assert (quiet.replicas, quiet.surplus) == (8, Surplus(since=100.0, peak=5))

    # A minute over-provisioned: down to 5 (needed at 130), not to the 0 needed now; the
    # next spell starts at once, and reaches zero a window of no work later.
    down = decide(Load(0, 0), limits, policy, current=8, surplus=quiet.surplus, now=160.0)
    assert down == Decision(5, down.reason, Surplus(since=160.0, peak=0))
    assert "over-provisioned 60s: down to 5, the most needed meanwhile" in down.reason
    assert (
        decide(Load(0, 0), limits, policy, current=5, surplus=down.surplus, now=219.0).replicas == 5
    )
    assert (
        decide(Load(0, 0), limits, policy, current=5, surplus=down.surplus, now=220.0).replicas == 0
    )


def test_any_work_ends_the_spell_and_scales_up_at_once() -> None:
    limits, policy = Limits(4), Policy(0, 10, stabilization_s=MINUTE)
    idle_spell = Surplus(since=0.0, peak=0)

    decision = decide(Load(1, 0), limits, policy, current=0, surplus=idle_spell, now=30.0)

    assert (decision.replicas, decision.surplus) == (1, None)
    back_to_need = decide(Load(0, 4), limits, policy, current=1, surplus=idle_spell, now=1000.0)
    assert (back_to_need.replicas, back_to_need.surplus) == (1, None)


def test_a_zero_window_scales_down_at_once() -> None:
    decision = decide(
        Load(4, 0), Limits(4), Policy(0, 10, stabilization_s=0), current=9, surplus=None, now=5.0
    )

    assert (decision.replicas, decision.surplus) == (1, None)


def test_pods_the_limits_cannot_keep_busy_go_at_once_and_the_rest_wait() -> None:
    # maxConcurrency lowered to 12: 3 pods of 4 can run; the load needs 1.
    decision = decide(
        Load(2, 0), Limits(4, max_concurrency=12), Policy(0, 10), current=9, surplus=None, now=5.0
    )

    assert decision.replicas == 3
    assert "dropping 6 pods at once: at most 3 (maxConcurrency 12)" in decision.reason
    assert decision.surplus == Surplus(since=5.0, peak=1)


def test_a_lowered_max_replicas_applies_at_once() -> None:
    decision = decide(Load(0, 0), Limits(4), Policy(0, 4), current=9, surplus=None, now=5.0)

    assert decision.replicas == 4


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: Load(-1, 0), "task counts must be >= 0"),
        (lambda: Limits(0), "limits out of range"),
        (lambda: Limits(4, rate_limit_tasks=0), "rate_limit_tasks must be >= 1"),
        (lambda: Limits(4, mean_task_s=math.nan), "mean_task_s must be finite"),
        (lambda: Policy(3, 2), "min_replicas <= max_replicas"),
        (lambda: Policy(0, 0), "max >= 1"),
        (lambda: Policy(0, 1, target_percent=0), "policy out of range"),
    ],
)
def test_inputs_out_of_range_are_refused(make: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        make()


def test_limits_and_policy_are_read_from_the_spec_as_its_fields_say() -> None:
    spec = TaskQueueSpec.model_validate(
        {
            "image": "w:1",
            "handler": "app:run",
            "redis": {"url": "redis://redis:6379/0"},
            "concurrency": 8,
            "maxConcurrency": 20,
            "rateLimit": {"tasks": 600, "cost": 90000, "periodSeconds": 60},
            "autoscale": {"minReplicas": 0, "maxReplicas": 30, "targetUtilizationPercent": 75},
        }
    )
    assert spec.autoscale is not None

    assert Limits.of(spec, mean_task_s=2.0) == Limits(
        concurrency=8,
        max_concurrency=20,
        rate_limit_tasks=600,
        rate_limit_period_s=60.0,
        mean_task_s=2.0,
    )
    assert Policy.of(spec.autoscale) == Policy(0, 30, target_percent=75, stabilization_s=60.0)
    assert spec.autoscale.due_horizon_seconds == 5
    cost_only = spec.model_copy(update={"rate_limit": RateLimit(cost=90000, period_seconds=60)})
    assert Limits.of(cost_only, mean_task_s=2.0).rate_limit_tasks is None


# Properties. A reference of the rule, written from its statement, against which the
# function is checked on random inputs.


def bound_of(limits: Limits, policy: Policy) -> int:
    """The most pods worth running: maxReplicas and what each limit can keep busy."""
    bound = policy.max_replicas
    if limits.max_concurrency:
        bound = min(bound, math.ceil(limits.max_concurrency / limits.concurrency))
    if limits.rate_limit_tasks is not None and limits.mean_task_s is not None:
        busy = limits.rate_limit_tasks * limits.mean_task_s / limits.rate_limit_period_s
        bound = min(bound, max(1, math.ceil(busy / limits.concurrency)))
    return bound


def target_of(load: Load, limits: Limits, policy: Policy) -> int:
    need = math.ceil(load.work * 100 / (limits.concurrency * policy.target_percent))
    return max(policy.min_replicas, min(need, bound_of(limits, policy)))


# Counts lean to none and few, so quiet spells (and scale-to-zero) come up often.
counts = st.one_of(st.just(0), st.integers(0, 30), st.integers(0, 5000))
loads = st.one_of(st.just(Load(0, 0)), st.builds(Load, pending=counts, running=counts, due=counts))
limits_st = st.builds(
    Limits,
    concurrency=st.integers(1, 64),
    max_concurrency=st.one_of(st.just(0), st.integers(1, 2000)),
    rate_limit_tasks=st.one_of(st.none(), st.integers(1, 10_000)),
    rate_limit_period_s=st.floats(1, 86_400),
    mean_task_s=st.one_of(st.none(), st.floats(0, 3600)),
)


@st.composite
def policies(draw: st.DrawFn) -> Policy:
    max_replicas = draw(st.integers(1, 1000))
    return Policy(
        min_replicas=draw(st.integers(0, min(max_replicas, 20))),
        max_replicas=max_replicas,
        target_percent=draw(st.integers(1, 100)),
        stabilization_s=draw(st.sampled_from([0.0, 1.0, 30.0, 60.0, 600.0])),
    )


surpluses = st.one_of(
    st.none(), st.builds(Surplus, since=st.floats(0, 2000), peak=st.integers(0, 1000))
)


@settings(max_examples=500, deadline=None)
@given(
    load=loads,
    limits=limits_st,
    policy=policies(),
    current=st.integers(0, 1000),
    surplus=surpluses,
    now=st.floats(0, 4000),
)
def test_pods_stay_within_min_and_max_and_never_above_what_the_limits_keep_busy(
    *, load: Load, limits: Limits, policy: Policy, current: int, surplus: Surplus | None, now: float
) -> None:
    replicas = decide(load, limits, policy, current=current, surplus=surplus, now=now).replicas

    assert policy.min_replicas <= replicas <= policy.max_replicas
    assert replicas <= max(policy.min_replicas, bound_of(limits, policy))
    if load.work:
        assert replicas >= 1
    # Up at once: never fewer pods than the load needs (within the bounds).
    assert replicas >= target_of(load, limits, policy)


@settings(max_examples=500, deadline=None)
@given(
    a=loads,
    b=loads,
    limits=limits_st,
    policy=policies(),
    current=st.integers(0, 1000),
    surplus=surpluses,
    now=st.floats(0, 4000),
)
def test_more_load_never_means_fewer_pods(
    *,
    a: Load,
    b: Load,
    limits: Limits,
    policy: Policy,
    current: int,
    surplus: Surplus | None,
    now: float,
) -> None:
    low = Load(min(a.pending, b.pending), min(a.running, b.running), min(a.due, b.due))
    high = Load(max(a.pending, b.pending), max(a.running, b.running), max(a.due, b.due))

    assert (
        decide(low, limits, policy, current=current, surplus=surplus, now=now).replicas
        <= decide(high, limits, policy, current=current, surplus=surplus, now=now).replicas
    )


@dataclass(frozen=True)
class Sweep:
    now: float
    work: int
    target: int  # pods the load needed (within the bounds)
    replicas: int  # pods after the decision


def spell_of(history: list[Sweep], current: int) -> list[Sweep]:
    """The trailing sweeps since the fleet took its current size, every one of which left
    it larger than its load needed."""
    out: list[Sweep] = []
    for sweep in reversed(history):
        if sweep.replicas != current or sweep.target >= sweep.replicas:
            break
        out.append(sweep)
    return out


@settings(max_examples=300, deadline=None)
@given(
    limits=limits_st,
    policy=policies(),
    start=st.integers(0, 1000),
    steps=st.lists(st.tuples(st.floats(0.5, 40), loads), min_size=1, max_size=40),
)
def test_a_scale_down_comes_only_after_a_whole_window_over_provisioned(
    limits: Limits, policy: Policy, start: int, steps: list[tuple[float, Load]]
) -> None:
    """Sweeps at random intervals: a drop follows a window in which every sweep found the
    fleet larger than its load needed, keeps the most pods the load needed meanwhile (so
    zero only after a window without work), and every rise is immediate."""
    ceiling = max(policy.min_replicas, bound_of(limits, policy))
    current, surplus, now = min(start, ceiling), None, 0.0
    history: list[Sweep] = []
    for gap, load in steps:
        now += gap
        decision = decide(load, limits, policy, current=current, surplus=surplus, now=now)
        target = target_of(load, limits, policy)
        if target >= current:
            assert decision.replicas == target
        elif decision.replicas < current:
            # newest first: this sweep, then the spell's back to its first
            sweeps = [Sweep(now, load.work, target, current), *spell_of(history, current)]
            assert now - sweeps[-1].now >= policy.stabilization_s
            assert decision.replicas == max(s.target for s in sweeps)
            if decision.replicas == 0:
                assert all(s.work == 0 for s in sweeps)
        else:
            assert decision.replicas == current
        history.append(Sweep(now, load.work, target, decision.replicas))
        current, surplus = decision.replicas, decision.surplus
