"""The producer API's one façade: every public call of a queue, by feature, as a plan.

``Queue`` (sync) and ``AsyncQueue`` (asyncio) each run these plans (``runner``); their
class bodies name each call of ``Plans`` for type checkers, and ``runs_every_call`` refuses, as the
module is imported, a runner that misses one or runs another plan under its name. So
both APIs offer the same calls, with the same parameters, by construction.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from taskfleet.producer import (
    control,
    enqueueing,
    events,
    flowcontrol,
    grouping,
    operating,
    quotas,
    reading,
    scheduling,
    waiting,
)

__all__ = ["CALLS", "Plans", "runs_every_call"]


class Plans:
    """Every public call of a queue, by feature: the plan that does it (``runner``)."""

    # enqueueing
    enqueue = staticmethod(enqueueing.enqueue)
    enqueue_result = staticmethod(enqueueing.enqueue_result)
    enqueue_many = staticmethod(enqueueing.enqueue_many)
    enqueue_flow = staticmethod(enqueueing.enqueue_flow)
    add_children = staticmethod(enqueueing.add_children)
    # reading
    get = staticmethod(reading.get)
    stats = staticmethod(reading.stats)
    workers = staticmethod(reading.workers)
    held_by = staticmethod(reading.held_by)
    holdings = staticmethod(reading.holdings)
    exists = staticmethod(reading.exists)
    config = staticmethod(reading.config)
    wait = staticmethod(waiting.wait)
    # controlling tasks
    cancel = staticmethod(control.cancel)
    cancel_many = staticmethod(control.cancel_many)
    cancel_group = staticmethod(control.cancel_group)
    promote = staticmethod(control.promote)
    promote_many = staticmethod(control.promote_many)
    retry = staticmethod(control.retry)
    list = staticmethod(control.list_tasks)
    purge_tasks = staticmethod(control.purge_tasks)
    follow = staticmethod(control.follow)
    stream = staticmethod(control.stream)
    # the queue's event stream
    configure_events = staticmethod(events.configure_events)
    events = staticmethod(events.events)
    # flows
    flow = staticmethod(flowcontrol.flow)
    cancel_flow = staticmethod(flowcontrol.cancel_flow)
    retry_flow = staticmethod(flowcontrol.retry_flow)
    # groups
    set_group = staticmethod(grouping.set_group)
    group_settings = staticmethod(grouping.group_settings)
    groups = staticmethod(grouping.groups)
    set_fair_by = staticmethod(grouping.set_fair_by)
    fair_by = staticmethod(grouping.fair_by)
    # quotas
    pause_claims = staticmethod(quotas.pause_claims)
    resume_claims = staticmethod(quotas.resume_claims)
    set_budget = staticmethod(quotas.set_budget)
    quota = staticmethod(quotas.quota)
    # schedules
    schedule = staticmethod(scheduling.schedule)
    put_schedule = staticmethod(scheduling.put_schedule)
    unschedule = staticmethod(scheduling.unschedule)
    get_schedule = staticmethod(scheduling.get_schedule)
    schedules = staticmethod(scheduling.schedules)
    pause_schedule = staticmethod(scheduling.pause_schedule)
    resume_schedule = staticmethod(scheduling.resume_schedule)
    fire_due_schedules = staticmethod(scheduling.fire_due_schedules)
    # operating
    configure = staticmethod(operating.configure)
    requeue_pod = staticmethod(operating.requeue_pod)
    repair = staticmethod(operating.repair)
    sweep = staticmethod(operating.sweep)
    purge = staticmethod(operating.purge)


#: The same, by name.
CALLS: dict[str, Callable[..., Any]] = {
    name: getattr(Plans, name) for name in vars(Plans) if not name.startswith("_")
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
