"""Groups: a queue's tenants, claimed fairly in turn (``protocol.groups``): set a group's
own settings, read them, and the groups with work. Each call is a plan (``runner``)."""

from __future__ import annotations

from taskfleet.producer.runner import Plan, QueueBase
from taskfleet.protocol import groups as layout
from taskfleet.protocol.groups import GroupCount, GroupSettings, check_fair_by, check_group

__all__ = ["fair_by", "group_settings", "groups", "set_fair_by", "set_group"]


def set_group(q: QueueBase, group: str, settings: GroupSettings) -> Plan[None]:
    """Replace ``group``'s own settings (weight, max_concurrency, rate_limit_tasks,
    rate_limit_cost; None: the queue's default for every group holds). The next
    claim applies them."""
    yield layout.set_group(q.keys, check_group(group), settings)


def group_settings(q: QueueBase, group: str) -> Plan[GroupSettings]:
    found: GroupSettings = yield layout.group_settings(q.keys, check_group(group))
    return found


def groups(q: QueueBase) -> Plan[list[GroupCount]]:
    """Every group with pending or running tasks, and how many of each (pending:
    ready to run; its delayed ones are not counted), most pending first."""
    names = yield layout.group_names(q.keys)
    now = yield q.reads.clock()
    return layout.by_load((yield layout.group_counts(q.keys, names, now)))


def set_fair_by(q: QueueBase, unit: str | None) -> Plan[None]:
    """Make groups fair by their settled use of ``unit`` of the provider quotas their
    tasks name (``"output_tokens"``, say), weighted as by claims; None or ``"claims"``:
    fair by claims again. A claim charges a task's estimate, its settlement the rest."""
    yield layout.set_fair_by(q.keys, check_fair_by(unit))


def fair_by(q: QueueBase) -> Plan[str | None]:
    """The unit groups are fair by; None: by claims."""
    found: str | None = yield layout.fair_by(q.keys)
    return found
