"""The script calls of the schedule store (``lua/schedule_*.lua``), as :class:`Op` values
that run on a sync client (the producer API, the operator) or an async one (the worker)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from taskfleet.protocol.errors import (
    InvalidPayload,
    OlderWorker,
    ProtocolError,
    ScheduleNotFound,
    ScheduleOwned,
)
from taskfleet.protocol.keys import QueueKeys
from taskfleet.protocol.records import text
from taskfleet.protocol.schedules import Due, FirePlan, ScheduleDef
from taskfleet.protocol.scripts import Op
from taskfleet.protocol.signatures import (
    FirePlan as FireRecord,
)
from taskfleet.protocol.signatures import (
    ScheduleDelete,
    ScheduleDue,
    ScheduleField,
    ScheduleFire,
    SchedulePause,
    SchedulePut,
    with_records,
)

__all__ = ["CREATED", "UNCHANGED", "UPDATED", "DueBatch", "Fired", "ScheduleOps"]

#: What a put did.
UNCHANGED, CREATED, UPDATED = 0, 1, 2


@dataclass(frozen=True, slots=True)
class DueBatch:
    """Due schedules claimed by one firer; ``next_due_ms``: the earliest due time left
    in the due set (None: empty), so the firer knows how long it may wait."""

    now_ms: int
    next_due_ms: int | None
    due: list[Due]


@dataclass(frozen=True, slots=True)
class Fired:
    """What one fire call did: tasks enqueued, and per plan whether it applied (False:
    the schedule had moved on or changed since it was read; nothing was done)."""

    created: int
    applied: list[bool]


def _code(raw: Any, script: str) -> list[Any]:
    if not isinstance(raw, list) or not raw:
        raise ProtocolError(f"{script}: unexpected reply {raw!r}")
    return raw


class ScheduleOps:
    """Builds the schedule scripts' :class:`Op` values for one queue."""

    def __init__(self, keys: QueueKeys) -> None:
        self._k = keys
        self._queue = keys.queue

    def put(
        self,
        definition: ScheduleDef,
        *,
        owner: str,
        take_over: bool,
        paused: bool,
        first_slot: int | None,
        first_due_ms: int,
    ) -> Op[int]:
        """Reply: CREATED, UPDATED or UNCHANGED; raises ``InvalidPayload`` (over the queue's
        ``max_payload_bytes``) or ``ScheduleOwned``."""
        fields = [ScheduleField(name, value) for name, value in definition.fields()]
        head = SchedulePut(
            name=definition.name,
            owner=owner,
            take_over=1 if take_over else 0,
            first_slot="" if first_slot is None else first_slot,
            first_due_ms=first_due_ms,
            paused=1 if paused else 0,
            n=len(fields),
        )
        args = with_records(head, fields)

        def decode(raw: Any) -> int:
            reply = _code(raw, "schedule_put")
            code = int(reply[0])
            if code == -1:
                raise InvalidPayload(
                    f"payload of schedule {definition.name!r} is {int(reply[1])} bytes; the "
                    f"queue allows {int(reply[2])} (max_payload_bytes)"
                )
            if code == -2:
                raise ScheduleOwned(definition.name, text(reply[1]))
            if code == -6:
                raise OlderWorker(self._queue, text(reply[1]), text(reply[2]))
            return code

        return Op("schedule_put", self._k.script("schedule_put"), args, decode)

    def delete(self, name: str, *, owner: str, take_over: bool = False) -> Op[bool]:
        """Reply: True if deleted, False if there was none; raises ``ScheduleOwned``."""

        def decode(raw: Any) -> bool:
            reply = _code(raw, "schedule_delete")
            if int(reply[0]) == -2:
                raise ScheduleOwned(name, text(reply[1]))
            return int(reply[0]) == 1

        args = ScheduleDelete(name=name, owner=owner, take_over=1 if take_over else 0)
        return Op("schedule_delete", self._k.script("schedule_delete"), args, decode)

    def pause(
        self, name: str, paused: bool, *, owner: str, next_slot: int | None, next_due_ms: int
    ) -> Op[bool]:
        """Reply: True if changed, False if it already was; raises ``ScheduleNotFound`` or
        ``ScheduleOwned``."""

        def decode(raw: Any) -> bool:
            reply = _code(raw, "schedule_pause")
            code = int(reply[0])
            if code == -1:
                raise ScheduleNotFound(name)
            if code == -2:
                raise ScheduleOwned(name, text(reply[1]))
            return code == 1

        args = SchedulePause(
            name=name,
            paused=1 if paused else 0,
            owner=owner,
            next_slot="" if next_slot is None else next_slot,
            next_due_ms=next_due_ms,
        )
        return Op("schedule_pause", self._k.script("schedule_pause"), args, decode)

    def due(self, limit: int, lease_ms: int) -> Op[DueBatch]:
        def decode(raw: Any) -> DueBatch:
            reply = _code(raw, "schedule_due")
            if len(reply) < 2 or (len(reply) - 2) % 8:
                raise ProtocolError(f"schedule_due: unexpected reply {raw!r}")
            entries: list[Due] = []
            for i in range(2, len(reply), 8):
                try:
                    entries.append(
                        Due(
                            text(reply[i]),
                            text(reply[i + 1]),
                            int(reply[i + 2]),
                            text(reply[i + 3]),
                            text(reply[i + 4]),
                            text(reply[i + 5]),
                            int(reply[i + 6] or 1),
                            int(reply[i + 7] or 0),
                        )
                    )
                except ValueError:  # a hash edited by hand: its lease brings it back
                    continue
            left = int(reply[1])
            return DueBatch(int(reply[0]), None if left < 0 else left, entries)

        args = ScheduleDue(limit=limit, lease_ms=lease_ms)
        return Op("schedule_due", self._k.script("schedule_due"), args, decode)

    def fire(self, plans: Sequence[FirePlan]) -> Op[Fired]:
        records = [
            FireRecord(
                name=p.name,
                rev=p.rev,
                expected=p.expected,
                slots=json.dumps(p.slots, separators=(",", ":")),
                skipped=p.skipped,
                next_slot="" if p.next_slot is None else p.next_slot,
                next_due_ms=p.next_due_ms,
            )
            for p in plans
        ]
        args = with_records(ScheduleFire(n=len(records)), records)

        def decode(raw: Any) -> Fired:
            reply = _code(raw, "schedule_fire")
            if len(reply) != len(plans) + 1:
                raise ProtocolError(f"schedule_fire: unexpected reply {raw!r}")
            return Fired(int(reply[0]), [int(x) == 1 for x in reply[1:]])

        return Op("schedule_fire", self._k.script("schedule_fire"), args, decode)
