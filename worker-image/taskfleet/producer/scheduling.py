"""The producer's side of the schedule store: a schedule's arguments checked and encoded
(pure), its first slot from the server's clock, and a sync firer for the operator's sweep
and anyone firing without a worker (``Queue.fire_due_schedules``)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from taskfleet.producer.encoding import _seconds, checked_int, encode_payload
from taskfleet.protocol import bounds
from taskfleet.protocol.calls import run
from taskfleet.protocol.connect import SyncClient
from taskfleet.protocol.errors import InvalidArgument
from taskfleet.protocol.groups import check_group
from taskfleet.protocol.reads import QueueReads
from taskfleet.protocol.schedule_ops import ScheduleOps
from taskfleet.protocol.schedules import (
    FIRE_BATCH,
    FIRE_LEASE_MS,
    MAX_JITTER_S,
    Schedule,
    ScheduleDef,
    due_ms,
    first_slot,
    plan,
    validate_schedule_name,
)
from taskfleet.protocol.scripts import SyncScripts

__all__ = ["fire_due", "read_all", "schedule_def"]


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
    group: str | None = None,
) -> ScheduleDef:
    """``Queue.schedule``'s arguments as a definition; ``InvalidArgument`` /
    ``InvalidPayload`` (both ``ValueError``) name what is wrong."""
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
    return ScheduleDef(
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


def first_due(definition: ScheduleDef, now_ms: int) -> tuple[int | None, int]:
    """The first slot after ``now_ms`` and when it is due."""
    slot = first_slot(definition.cron, definition.tz, now_ms)
    return slot, 0 if slot is None else due_ms(definition.name, slot, definition.jitter_ms)


def read_all(client: SyncClient, reads: QueueReads) -> list[Schedule]:
    """Every schedule of the queue, by name, in two round trips."""
    return run(client, reads.schedules(run(client, reads.schedule_names())))


def fire_due(
    scripts: SyncScripts, ops: ScheduleOps, *, max_calls: int = 10, batch: int = FIRE_BATCH
) -> int:
    """Fire what is due now, up to ``max_calls`` batches; returns the tasks enqueued."""
    created = 0
    for _ in range(max_calls):
        claimed = scripts.run(ops.due(batch, FIRE_LEASE_MS))
        if claimed.due:
            plans = [plan(d, claimed.now_ms) for d in claimed.due]
            created += scripts.run(ops.fire(plans)).created
        if len(claimed.due) < batch:
            break
    return created
