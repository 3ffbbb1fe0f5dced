"""Schedules: a task once per slot of a cron (``Queue.schedule`` ... ``fire_due_schedules``).

A schedule's arguments are checked and encoded here (``schedule_def``, pure, written
once), its first slot comes from the server's clock, and each call is a plan
(``runner``) of ``schedule_ops`` scripts and reads."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from taskfleet.producer.encoding import _seconds, checked_int, encode_payload
from taskfleet.producer.runner import Plan, QueueBase, taking
from taskfleet.protocol import bounds
from taskfleet.protocol.errors import InvalidArgument, ScheduleNotFound
from taskfleet.protocol.groups import check_group
from taskfleet.protocol.schedule_ops import DueBatch
from taskfleet.protocol.schedules import (
    FIRE_BATCH,
    FIRE_LEASE_MS,
    MAX_JITTER_S,
    OWNER_API,
    Schedule,
    ScheduleDef,
    due_ms,
    first_slot,
    plan,
    validate_schedule_name,
)
from taskfleet.protocol.scripts import Op

__all__ = [
    "Scheduled",
    "due_now",
    "fire_claimed",
    "fire_due_schedules",
    "get_schedule",
    "pause_schedule",
    "put_schedule",
    "resume_schedule",
    "schedule",
    "schedule_def",
    "schedules",
    "unschedule",
]


@dataclass(frozen=True, slots=True)
class Scheduled:
    """``Queue.schedule``'s arguments, checked: the definition, and whether it starts
    paused."""

    definition: ScheduleDef
    paused: bool


def schedule_def(
    name: str,
    cron: str,
    payload: dict[str, Any],
    *,
    tz: str = "UTC",
    catchup: str = "latest",
    catchup_limit: int = 100,
    jitter: float | timedelta = 0,
    priority: int = 0,
    max_attempts: int | None = None,
    cost: int = 1,
    timeout: float | timedelta | None = None,
    deadline: float | timedelta | None = None,
    paused: bool = False,
    group: str | None = None,
) -> Scheduled:
    """``Queue.schedule``'s arguments as a definition, and whether it starts paused;
    ``InvalidArgument`` / ``InvalidPayload`` (both ``ValueError``) name what is wrong."""
    validate_schedule_name(name)
    if not isinstance(cron, str):
        raise InvalidArgument("cron must be a string, e.g. '0 3 * * *'")
    if not isinstance(tz, str):
        raise InvalidArgument("tz must be an IANA zone name, e.g. 'Europe/Paris'")
    checked_int(priority, "priority", bounds.PRIORITY_MIN, bounds.PRIORITY_MAX)
    if max_attempts is not None:
        checked_int(max_attempts, "max_attempts", 1, bounds.MAX_ATTEMPTS)
    checked_int(cost, "cost", 0, bounds.MAX_COST)
    checked_int(catchup_limit, "catchup_limit", 1, 10_000)
    jitter_s = _seconds(jitter, "jitter", MAX_JITTER_S) or 0.0
    timeout_s = _seconds(timeout, "timeout", bounds.MAX_TIMEOUT_S)
    deadline_s = _seconds(deadline, "deadline", bounds.MAX_DEADLINE_S)
    for what, value in (("jitter", jitter_s), ("timeout", timeout_s), ("deadline", deadline_s)):
        if value is not None and value < 0:
            raise InvalidArgument(f"{what} must not be negative")
    if timeout_s == 0:
        raise InvalidArgument("timeout must be positive")
    definition = ScheduleDef(
        name=name,
        cron=cron,
        payload=encode_payload(payload),
        tz=tz,
        priority=priority,
        max_attempts=max_attempts,
        cost=cost,
        timeout_s=timeout_s,
        deadline_ms=None if deadline_s is None else int(deadline_s * 1000),
        catchup=catchup,
        catchup_limit=catchup_limit,
        jitter_ms=int(jitter_s * 1000),
        group=None if group is None else check_group(group),
    )
    return Scheduled(definition, paused)


def first_due(definition: ScheduleDef, now_ms: int) -> tuple[int | None, int]:
    """The first slot after ``now_ms`` and when it is due."""
    slot = first_slot(definition.cron, definition.tz, now_ms)
    return slot, 0 if slot is None else due_ms(definition.name, slot, definition.jitter_ms)


@taking(schedule_def)
def schedule(q: QueueBase, scheduled: Scheduled) -> Plan[Schedule]:
    """Create or change the schedule ``name``: a task with ``payload`` once per slot of
    ``cron`` (five fields, or six with seconds first) in zone ``tz``; returns it as stored.

    ``catchup`` after downtime: ``latest`` fires the latest missed slot only, ``all``
    every missed slot, at most ``catchup_limit`` (the latest ones). ``jitter``: each
    slot fires up to that many seconds late (a fixed draw per slot), to spread
    schedules that share a time. ``priority``, ``max_attempts``, ``cost``, ``timeout``
    apply to each task; ``deadline``: seconds after its firing by which it must start;
    ``group``: each task's group (fair claiming between groups, the group's limits).
    Changing the cron, zone or jitter starts again from the next slot after now;
    changing anything else keeps the slot to fire next. Raises ``InvalidArgument``
    (bad cron, unknown zone, a bound), ``InvalidPayload``, ``ScheduleOwned`` (a
    TaskQueue's spec holds that name).
    """
    yield from put_schedule(q, scheduled.definition, paused=scheduled.paused)
    found = yield from get_schedule(q, scheduled.definition.name)
    assert found is not None
    return found


def put_schedule(
    q: QueueBase,
    definition: ScheduleDef,
    *,
    paused: bool = False,
    owner: str = OWNER_API,
    take_over: bool = False,
) -> Plan[int]:
    """Store a validated definition (the operator's sync uses ``owner`` 'taskqueue'
    and ``take_over``); returns CREATED, UPDATED or UNCHANGED (``schedule_ops``)."""
    slot, due = first_due(definition, (yield q.reads.clock()))
    op = q.schedule_ops.put(
        definition,
        owner=owner,
        take_over=take_over,
        paused=paused,
        first_slot=slot,
        first_due_ms=due,
    )
    created: int = yield op
    return created


def unschedule(
    q: QueueBase, name: str, *, owner: str = OWNER_API, take_over: bool = False
) -> Plan[bool]:
    """Delete the schedule ``name``; False if there was none. Tasks it fired stay."""
    validate_schedule_name(name)
    deleted: bool = yield q.schedule_ops.delete(name, owner=owner, take_over=take_over)
    return deleted


def get_schedule(q: QueueBase, name: str) -> Plan[Schedule | None]:
    validate_schedule_name(name)
    found: Schedule | None = yield q.reads.schedule(name)
    return found


def schedules(q: QueueBase) -> Plan[list[Schedule]]:
    """Every schedule of the queue, sorted by name (two round trips)."""
    found: list[Schedule] = yield q.reads.schedules((yield q.reads.schedule_names()))
    return found


def pause_schedule(q: QueueBase, name: str) -> Plan[bool]:
    """Stop firing ``name`` (False if it was paused); slots that pass are not fired."""
    validate_schedule_name(name)
    op = q.schedule_ops.pause(name, True, owner=OWNER_API, next_slot=None, next_due_ms=0)
    changed: bool = yield op
    return changed


def resume_schedule(q: QueueBase, name: str) -> Plan[bool]:
    """Fire ``name`` again from its first slot after now (False if it was active)."""
    found = yield from get_schedule(q, name)
    if found is None:
        raise ScheduleNotFound(name)
    now = yield q.reads.clock()
    slot = first_slot(found.cron, found.tz, now)
    due = 0 if slot is None else due_ms(name, slot, int(found.jitter_s * 1000))
    op = q.schedule_ops.pause(name, False, owner=OWNER_API, next_slot=slot, next_due_ms=due)
    changed: bool = yield op
    return changed


def fire_due_schedules(q: QueueBase, *, max_calls: int = 10) -> Plan[int]:
    """Fire the slots due now (what every worker does in the background); returns
    the tasks enqueued. Safe to run anywhere, any number of times at once."""
    claimed = yield q.schedule_ops.due(FIRE_BATCH, FIRE_LEASE_MS)
    created: int = yield from fire_claimed(q, claimed, max_calls=max_calls)
    return created


def due_now(q: QueueBase) -> Op[DueBatch]:
    """The call that claims the slots due now, `fire_claimed`'s first: to send in a
    pipeline with other calls (the operator's sweep)."""
    return q.schedule_ops.due(FIRE_BATCH, FIRE_LEASE_MS)


def fire_claimed(q: QueueBase, claimed: DueBatch, *, max_calls: int = 10) -> Plan[int]:
    """Fire the slots ``claimed`` (the reply of `due_now`), then claim and fire more while
    a claim came back full, ``max_calls`` claims in all; returns the tasks enqueued."""
    created = 0
    for call in range(max_calls):
        if call:
            claimed = yield due_now(q)
        if claimed.due:
            plans = [plan(d, claimed.now_ms) for d in claimed.due]
            created += (yield q.schedule_ops.fire(plans)).created
        if len(claimed.due) < FIRE_BATCH:
            break
    return created
