"""How many worker pods a queue's load calls for: a pure decision, no I/O.

The operator counts the load and remembers the surplus; this module only does the
arithmetic, so every rule is checked by calling one function with numbers:

- pods the load needs = ceil(work / (concurrency x targetUtilizationPercent / 100)),
  work = pending + running + delayed tasks due within ``dueHorizonSeconds``;
  at least 1 while there is any work;
- never more pods than the queue's limits can keep busy: ``maxConcurrency`` feeds
  ceil(maxConcurrency / concurrency) pods, a rate of R tasks per P seconds with a mean
  run time of D seconds feeds ceil(R x D / P / concurrency) (Little's law; only when D
  is known);
- then within [minReplicas, maxReplicas] (minReplicas wins over the limits);
- up at once; down only once the fleet has been larger than the load needed for the
  whole stabilisation window, and then to the most pods the load needed during it (so a
  dip at the end of the window does not count, and the fleet reaches zero only after a
  window without any work).

A rate limit on cost units bounds no task count (a task may cost 0), so it caps nothing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from taskfleet.protocol.defaults import DEFAULT

from taskfleet_operator.models import Autoscale, TaskQueueSpec


@dataclass(frozen=True, slots=True)
class Load:
    """What the queue holds now; ``due`` = delayed tasks due within the due horizon."""

    pending: int
    running: int
    due: int = 0

    def __post_init__(self) -> None:
        if min(self.pending, self.running, self.due) < 0:
            raise ValueError(f"task counts must be >= 0: {self}")

    @property
    def work(self) -> int:
        return self.pending + self.running + self.due


@dataclass(frozen=True, slots=True)
class Limits:
    """What bounds the fleet's useful size, as the queue's config states it.

    ``max_concurrency`` 0 is no limit and ``rate_limit_tasks`` None no rate limit, as in
    ``QueueConfig``; ``mean_task_s`` is the mean run time of recent tasks, None when not
    known (then the rate limit caps nothing).
    """

    concurrency: int
    max_concurrency: int = DEFAULT.max_concurrency
    rate_limit_tasks: int | None = DEFAULT.rate_limit_tasks
    rate_limit_period_s: float = DEFAULT.rate_limit_period_s
    mean_task_s: float | None = None

    def __post_init__(self) -> None:
        if self.concurrency < 1 or self.max_concurrency < 0 or self.rate_limit_period_s <= 0:
            raise ValueError(f"limits out of range: {self}")
        if self.rate_limit_tasks is not None and self.rate_limit_tasks < 1:
            raise ValueError(f"rate_limit_tasks must be >= 1: {self}")
        if self.mean_task_s is not None and not (0 <= self.mean_task_s < math.inf):
            raise ValueError(f"mean_task_s must be finite and >= 0: {self}")

    @classmethod
    def of(cls, spec: TaskQueueSpec, mean_task_s: float | None = None) -> Limits:
        rate = spec.rate_limit
        return cls(
            concurrency=spec.pod_slots(),
            max_concurrency=spec.max_concurrency,
            rate_limit_tasks=rate.tasks if rate is not None else None,
            rate_limit_period_s=float(rate.period_seconds)
            if rate is not None and rate.period_seconds
            else DEFAULT.rate_limit_period_s,
            mean_task_s=mean_task_s,
        )


@dataclass(frozen=True, slots=True)
class Policy:
    """``spec.autoscale`` as the decision reads it (the due horizon shapes ``Load``)."""

    min_replicas: int
    max_replicas: int
    target_percent: int = 100
    stabilization_s: float = 60.0

    def __post_init__(self) -> None:
        if not 0 <= self.min_replicas <= self.max_replicas or self.max_replicas < 1:
            raise ValueError(f"need 0 <= min_replicas <= max_replicas, max >= 1: {self}")
        if not 1 <= self.target_percent <= 100 or self.stabilization_s < 0:
            raise ValueError(f"policy out of range: {self}")

    @classmethod
    def of(cls, autoscale: Autoscale) -> Policy:
        return cls(
            min_replicas=autoscale.min_replicas,
            max_replicas=autoscale.max_replicas,
            target_percent=autoscale.target_utilization_percent,
            stabilization_s=float(autoscale.scale_down_stabilization_seconds),
        )


@dataclass(frozen=True, slots=True)
class Surplus:
    """The fleet has been larger than its load needed since ``since``; ``peak`` is the
    most pods the load needed meanwhile (what a scale-down at the window's end keeps)."""

    since: float
    peak: int


@dataclass(frozen=True, slots=True)
class Decision:
    """Pods to ask for, why (one line for ``status.scalingReason``), and the surplus to
    pass to the next decision."""

    replicas: int
    reason: str
    surplus: Surplus | None


def _pods(n: int) -> str:
    return f"{n} pod" if n == 1 else f"{n} pods"


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _caps(limits: Limits) -> list[tuple[int, str]]:
    """The most pods each of the queue's limits can keep busy, with how to say it; at
    least 1, since every limit lets some task run."""
    caps: list[tuple[int, str]] = []
    if limits.max_concurrency:
        pods = _ceil_div(limits.max_concurrency, limits.concurrency)
        caps.append((pods, f"maxConcurrency {limits.max_concurrency}"))
    if limits.rate_limit_tasks is not None and limits.mean_task_s is not None:
        busy = limits.rate_limit_tasks * limits.mean_task_s / limits.rate_limit_period_s
        pods = max(1, math.ceil(busy / limits.concurrency))
        caps.append(
            (
                pods,
                f"rateLimit {limits.rate_limit_tasks}/{limits.rate_limit_period_s:g}s "
                f"at {limits.mean_task_s:.3g}s per task",
            )
        )
    return caps


def decide(
    load: Load,
    limits: Limits,
    policy: Policy,
    *,
    current: int,
    surplus: Surplus | None,
    now: float,
) -> Decision:
    """Pods for ``load`` given the fleet has ``current`` now; ``surplus`` is the previous
    decision's (None at first, after a restart, or when the fleet was not too large)."""
    slots = limits.concurrency * policy.target_percent
    need = _ceil_div(load.work * 100, slots)  # exact: no float in the load's arithmetic
    per_pod = f"{limits.concurrency} slots/pod" + (
        f" at {policy.target_percent}%" if policy.target_percent != 100 else ""
    )
    words = [
        f"{load.pending} pending, {load.running} running, {load.due} due soon, "
        f"{per_pod}: {_pods(need)}"
    ]
    # The most pods worth running: maxReplicas and what the limits can keep busy.
    bound, bound_by = policy.max_replicas, f"maxReplicas {policy.max_replicas}"
    for pods, what in _caps(limits):
        if pods < bound:
            bound, bound_by = pods, what
    target = min(need, bound)
    if target < need:
        words.append(f"capped by {bound_by}: {bound}")
    if target < policy.min_replicas:
        target = policy.min_replicas
        words.append(f"raised to minReplicas {policy.min_replicas}")
    ceiling = max(bound, policy.min_replicas)
    held = min(current, ceiling)  # pods beyond the limits keep nothing busy: they go at once
    if target >= held:
        return Decision(target, "; ".join(words), None)
    if held < current:
        words.append(f"dropping {_pods(current - held)} at once: at most {held} ({bound_by})")

    if surplus is None:
        surplus = Surplus(since=now, peak=target)
    else:
        surplus = Surplus(since=surplus.since, peak=max(surplus.peak, target))
    elapsed = now - surplus.since
    window = policy.stabilization_s
    if elapsed < window:
        words.append(f"holding {held}: over-provisioned {max(elapsed, 0.0):.0f}s of {window:g}s")
        return Decision(held, "; ".join(words), surplus)
    replicas = min(surplus.peak, held)
    words.append(f"over-provisioned {elapsed:.0f}s: down to {replicas}, the most needed meanwhile")
    # A new spell starts now if the load already needs fewer than that.
    after = Surplus(since=now, peak=target) if target < replicas else None
    return Decision(replicas, "; ".join(words), after)
