"""The producer API's one façade: every public call of a queue, by feature, as a plan.

``Queue`` (sync) and ``AsyncQueue`` (asyncio) each run these plans (``runner``); their
class bodies name each call for type checkers, and ``runs_every_call`` refuses, as the
module is imported, a runner that misses one or runs another plan under its name. So
both APIs offer the same calls, with the same parameters, by construction.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from taskfleet.producer import (
    control,
    enqueueing,
    flowcontrol,
    grouping,
    operating,
    quotas,
    reading,
    scheduling,
    waiting,
)

__all__ = ["CALLS", "runs_every_call"]

#: Every public call, by name: the plan that does it.
CALLS: dict[str, Callable[..., Any]] = {
    # enqueueing
    "enqueue": enqueueing.enqueue,
    "enqueue_result": enqueueing.enqueue_result,
    "enqueue_many": enqueueing.enqueue_many,
    "enqueue_flow": enqueueing.enqueue_flow,
    "add_children": enqueueing.add_children,
    # reading
    "get": reading.get,
    "stats": reading.stats,
    "workers": reading.workers,
    "held_by": reading.held_by,
    "holdings": reading.holdings,
    "exists": reading.exists,
    "config": reading.config,
    "wait": waiting.wait,
    # controlling tasks
    "cancel": control.cancel,
    "cancel_many": control.cancel_many,
    "cancel_group": control.cancel_group,
    "retry": control.retry,
    "list": control.list_tasks,
    "purge_tasks": control.purge_tasks,
    "follow": control.follow,
    # flows
    "flow": flowcontrol.flow,
    "cancel_flow": flowcontrol.cancel_flow,
    "retry_flow": flowcontrol.retry_flow,
    # groups
    "set_group": grouping.set_group,
    "group_settings": grouping.group_settings,
    "groups": grouping.groups,
    # quotas
    "pause_claims": quotas.pause_claims,
    "resume_claims": quotas.resume_claims,
    "set_budget": quotas.set_budget,
    "quota": quotas.quota,
    # schedules
    "schedule": scheduling.schedule,
    "put_schedule": scheduling.put_schedule,
    "unschedule": scheduling.unschedule,
    "get_schedule": scheduling.get_schedule,
    "schedules": scheduling.schedules,
    "pause_schedule": scheduling.pause_schedule,
    "resume_schedule": scheduling.resume_schedule,
    "fire_due_schedules": scheduling.fire_due_schedules,
    # operating
    "configure": operating.configure,
    "requeue_pod": operating.requeue_pod,
    "repair": operating.repair,
    "sweep": operating.sweep,
    "purge": operating.purge,
}

#: Public names a runner has of its own (its life cycle), not plans.
OWN = frozenset({"close", "aclose"})

C = TypeVar("C", bound=type)


def runs_every_call(cls: C) -> C:
    """``cls`` if it runs every plan of ``CALLS`` under its name and has no other public
    call; else ``TypeError`` naming what is wrong (at import: the APIs cannot drift)."""
    public = {name for name in vars(cls) if not name.startswith("_")}
    wrong = sorted(
        name for name in CALLS if getattr(vars(cls).get(name), "__plan__", None) is not CALLS[name]
    )
    extra = sorted(public - CALLS.keys() - OWN - {"keys", "name"})
    if wrong or extra:
        raise TypeError(f"{cls.__name__} must run every call of facade.CALLS: {wrong or extra}")
    return cls
