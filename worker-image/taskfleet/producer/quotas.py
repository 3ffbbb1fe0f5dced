"""Quotas: the queue's claim pause and spend budget (``protocol.quota``): pause or resume
the whole fleet's claims (or a group's), set the budget at run time, read both. Each
call is a plan (``runner``)."""

from __future__ import annotations

import math
from datetime import timedelta

from taskfleet.producer.runner import Plan, QueueBase
from taskfleet.protocol.config import QueueConfig
from taskfleet.protocol.errors import InvalidArgument
from taskfleet.protocol.groups import check_group
from taskfleet.protocol.keys import QueueKeys
from taskfleet.protocol.quota import BudgetLimit, QuotaOps, QuotaState, quota_state

__all__ = [
    "pause_claims",
    "pause_ms",
    "quota",
    "quota_ops",
    "resume_claims",
    "set_budget",
    "state_of",
]


def pause_claims(
    q: QueueBase,
    seconds: float | timedelta | None = None,
    *,
    reason: str = "",
    group: str | None = None,
) -> Plan[int]:
    """Stop every worker of the queue from claiming for ``seconds`` (None: the adaptive
    pause a rate limit without a retry-after sets), as when a handler raises
    ``RateLimited``; a longer pause already on is kept. Returns its end (epoch ms).
    ``group``: pause only that group's tasks (the other groups are claimed as before)."""
    until, _ = yield quota_ops(q.keys, group).pause(pause_ms(seconds), reason)
    return int(until)


def resume_claims(q: QueueBase, *, group: str | None = None) -> Plan[None]:
    """End the claim pause (``group``'s own, with a group) now and forget the rate
    limits met in a row."""
    yield quota_ops(q.keys, group).resume()


def set_budget(
    q: QueueBase, *, day: BudgetLimit = None, month: BudgetLimit = None, group: str | None = None
) -> Plan[None]:
    """The spend budget, set at run time over the config's ``budget_day`` /
    ``budget_month`` (a TaskQueue's ``budget``): cost units per UTC day / month; 0 =
    none; ``"default"`` = the config's again; None = left as it is. ``group``: that
    group's own budget, over the config's ``group_budget_day`` / ``group_budget_month``."""
    yield quota_ops(q.keys, group).budget(day=day, month=month)


def quota(q: QueueBase, *, group: str | None = None) -> Plan[QuotaState]:
    """The claim pause and the budget's spend (``group``'s own, with a group), as the
    scripts see them now."""
    ops = quota_ops(q.keys, group)
    now = yield q.reads.clock()
    raw = yield ops.read()
    return state_of(raw, now, (yield q.reads.config()), group)


def quota_ops(keys: QueueKeys, group: str | None) -> QuotaOps:
    """The quota calls of the queue, or (``group``, checked) of that group's own pause
    and budget."""
    return QuotaOps(keys, "" if group is None else check_group(group))


def pause_ms(seconds: float | timedelta | None) -> int | None:
    """``pause_claims``'s ``seconds`` checked, in ms (None: the adaptive pause)."""
    if seconds is None:
        return None
    value = seconds.total_seconds() if isinstance(seconds, timedelta) else seconds
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidArgument(f"seconds must be a number, not {seconds!r}")
    if not (math.isfinite(value) and value >= 0):
        raise InvalidArgument(f"seconds must be >= 0, not {seconds!r}")
    return int(value * 1000)


def state_of(
    raw: dict[str, str], now_ms: int, config: QueueConfig, group: str | None = None
) -> QuotaState:
    """``quota``'s answer from its three reads (the quota record, the clock, the config);
    with ``group``, that group's record under the config's per-group budget."""
    if group is not None:
        return quota_state(
            raw, now_ms, budget_day=config.group_budget_day, budget_month=config.group_budget_month
        )
    return quota_state(raw, now_ms, budget_day=config.budget_day, budget_month=config.budget_month)
