"""Schedules as data: what one is, as stored, and what a firer does with a due one. Pure.

A queue's schedules live in Redis (``keys``: a hash ``schedule:<name>`` each, the set
``schedules`` of every name, and ``schedules:due``, the active ones scored by when each
is next due). Any number of firers (every worker, the operator's sweep) fire them:

1. ``schedule_due`` claims a batch of due schedules for a short lease, so racing firers
   take different ones, and returns each one's revision, next slot and timing;
2. :func:`plan` computes, here in Python, which slots to fire (the catch-up policy after
   downtime) and the next slot and due time (cron, time zone and DST: ``slots``);
3. ``schedule_fire`` checks that the revision and next slot are still what the firer
   read (compare-and-set), enqueues one task per slot and stores the next slot, for the
   whole batch in one call. The next slot only moves forward, so each slot fires once;
   a firer that loses the race, or dies, changes nothing.
"""

from __future__ import annotations

import json
import re
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from taskfleet.protocol.cron import parse_cron
from taskfleet.protocol.errors import InvalidArgument
from taskfleet.protocol.groups import group_problem
from taskfleet.protocol.slots import latest_slots, next_slot, slots_between, zone

__all__ = [
    "CATCHUP_POLICIES",
    "FIRE_BATCH",
    "FIRE_LEASE_MS",
    "Due",
    "FirePlan",
    "Schedule",
    "ScheduleDef",
    "due_ms",
    "first_slot",
    "plan",
    "validate_schedule_name",
]

#: After downtime: fire the latest missed slot only, or every missed slot (up to a bound).
CATCHUP_POLICIES = ("latest", "all")
MAX_CATCHUP_LIMIT = 10_000
#: Missed slots counted as skipped per catch-up, at most (counting is a scan).
MAX_SKIPPED_COUNT = 1000
MAX_JITTER_S = 86_400
#: Schedules one fire call takes at most: a call stays a few milliseconds of Redis time.
FIRE_BATCH = 500
#: How long a firer holds the schedules it claimed before another may take them.
FIRE_LEASE_MS = 10_000
OWNER_API = ""
OWNER_TASKQUEUE = "taskqueue"

# In the task id `sched:<name>:<slot>` (at most 200 characters) and in key names.
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,99}$")


def validate_schedule_name(name: object) -> str:
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise InvalidArgument(
            f"invalid schedule name {name!r}: use 1-100 letters, digits, '.', '_', ':' or "
            "'-', starting with a letter or digit"
        )
    return name


def due_ms(name: str, slot: int, jitter_ms: int) -> int:
    """When slot ``slot`` is due: the slot plus the schedule's jitter for it, a fixed
    fraction of ``jitter_ms`` drawn from the name and slot (every firer agrees on it)."""
    if jitter_ms <= 0:
        return slot * 1000
    return slot * 1000 + zlib.crc32(f"{name}\0{slot}".encode()) % (jitter_ms + 1)


def first_slot(cron: str, tz: str, now_ms: int) -> int | None:
    """The first slot strictly after ``now_ms`` (None: none within nine years)."""
    return next_slot(parse_cron(cron), zone(tz), now_ms // 1000)


@dataclass(frozen=True)
class ScheduleDef:
    """A schedule's definition, validated (``producer.scheduling`` builds it from the
    API's arguments, the operator from a TaskQueue's spec); ``payload`` is JSON text."""

    name: str
    cron: str
    payload: str
    tz: str = "UTC"
    priority: int = 0
    max_attempts: int | None = None
    cost: int = 1
    timeout_s: float | None = None
    deadline_ms: int | None = None  # relative to the firing
    catchup: str = "latest"
    catchup_limit: int = 100
    jitter_ms: int = 0
    group: str | None = None  # each task's group (fair claiming between groups)

    def __post_init__(self) -> None:
        validate_schedule_name(self.name)
        if self.group is not None and (problem := group_problem(self.group)):
            raise InvalidArgument(problem)
        parse_cron(self.cron)  # InvalidArgument with what is wrong
        zone(self.tz)
        if self.catchup not in CATCHUP_POLICIES:
            raise InvalidArgument(
                f"catchup must be one of {', '.join(CATCHUP_POLICIES)}, not {self.catchup!r}"
            )
        if not 1 <= self.catchup_limit <= MAX_CATCHUP_LIMIT:
            raise InvalidArgument(f"catchup_limit must be between 1 and {MAX_CATCHUP_LIMIT}")
        if not 0 <= self.jitter_ms <= MAX_JITTER_S * 1000:
            raise InvalidArgument(f"jitter must be between 0 and {MAX_JITTER_S} seconds")

    def fields(self) -> list[tuple[str, str]]:
        """The definition as the store's hash fields (strings; '' = the queue's default)."""

        def opt(value: float | None) -> str:
            return "" if value is None else repr(value) if isinstance(value, float) else str(value)

        return [
            ("cron", self.cron),
            ("tz", self.tz),
            ("payload", self.payload),
            ("priority", str(self.priority)),
            ("max_attempts", opt(self.max_attempts)),
            ("cost", str(self.cost)),
            ("timeout", opt(self.timeout_s)),
            ("deadline_ms", opt(self.deadline_ms)),
            ("catchup", self.catchup),
            ("catchup_limit", str(self.catchup_limit)),
            ("jitter_ms", str(self.jitter_ms)),
            ("group", self.group or ""),
        ]


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _int(value: str, default: int | None) -> int | None:
    try:
        return int(value)
    except ValueError:
        return default


@dataclass(frozen=True)
class Schedule:
    """A schedule as read from the store (``Queue.schedules()``, ``taskfleet schedule ls``)."""

    name: str
    cron: str
    tz: str
    payload: dict[str, Any]
    priority: int
    max_attempts: int | None
    cost: int
    timeout_s: float | None
    deadline_s: float | None
    catchup: str
    catchup_limit: int
    jitter_s: float
    paused: bool
    owner: str  # '' = the API / CLI, 'taskqueue' = a TaskQueue's spec
    last_slot: int | None  # epoch seconds of the last slot fired
    next_slot: int | None  # epoch seconds of the next slot to fire (None: none ahead)
    fired: int  # tasks enqueued
    skipped: int  # missed slots the catch-up policy did not fire (at most 1000 counted each time)
    error: str  # why the last slot fired nothing ('' = it fired)
    group: str | None = None  # each task's group

    @property
    def next_due_ms(self) -> int | None:
        if self.next_slot is None or self.paused:
            return None
        return due_ms(self.name, self.next_slot, int(self.jitter_s * 1000))

    @classmethod
    def from_hash(cls, raw: Mapping[Any, Any]) -> Schedule:
        h = {_text(k): _text(v) for k, v in raw.items()}
        try:
            payload = json.loads(h.get("payload") or "{}")
        except ValueError:
            payload = {}
        timeout = h.get("timeout", "")
        deadline = _int(h.get("deadline_ms", ""), None)
        return cls(
            name=h.get("name", ""),
            cron=h.get("cron", ""),
            tz=h.get("tz", "UTC"),
            payload=payload if isinstance(payload, dict) else {},
            priority=_int(h.get("priority", ""), 0) or 0,
            max_attempts=_int(h.get("max_attempts", ""), None),
            cost=_int(h.get("cost", ""), 1) or 0,
            timeout_s=float(timeout) if timeout else None,
            deadline_s=None if deadline is None else deadline / 1000,
            catchup=h.get("catchup", "latest"),
            catchup_limit=_int(h.get("catchup_limit", ""), 100) or 100,
            jitter_s=(_int(h.get("jitter_ms", ""), 0) or 0) / 1000,
            paused=h.get("paused") == "1",
            owner=h.get("owner", ""),
            last_slot=_int(h.get("last_slot", ""), None),
            next_slot=_int(h.get("next_slot", ""), None),
            fired=_int(h.get("fired", ""), 0) or 0,
            skipped=_int(h.get("skipped", ""), 0) or 0,
            error=h.get("error", ""),
            group=h.get("group") or None,
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "cron": self.cron,
            "tz": self.tz,
            "payload": self.payload,
            "priority": self.priority,
            "group": self.group,
            "max_attempts": self.max_attempts,
            "cost": self.cost,
            "timeout_s": self.timeout_s,
            "deadline_s": self.deadline_s,
            "catchup": self.catchup,
            "catchup_limit": self.catchup_limit,
            "jitter_s": self.jitter_s,
            "paused": self.paused,
            "owner": self.owner or "api",
            "last_slot": self.last_slot,
            "next_slot": self.next_slot,
            "next_due_ms": self.next_due_ms,
            "fired": self.fired,
            "skipped": self.skipped,
            "error": self.error,
        }


@dataclass(frozen=True, slots=True)
class Due:
    """A due schedule as ``schedule_due`` returns it: what a firer needs to plan."""

    name: str
    rev: str
    next_slot: int
    cron: str
    tz: str
    catchup: str
    catchup_limit: int
    jitter_ms: int


@dataclass(frozen=True, slots=True)
class FirePlan:
    """What one firer asks ``schedule_fire`` to do for one schedule, if it is still as read."""

    name: str
    rev: str
    expected: int  # the next slot the firer read
    slots: list[int]  # to fire, ascending
    skipped: int  # missed slots the catch-up policy leaves out
    next_slot: int | None
    next_due_ms: int


def plan(due: Due, now_ms: int) -> FirePlan:
    """Which slots of ``due`` to fire at ``now_ms`` and what comes next.

    On time (the slot after the due one is still ahead) the due slot fires. After
    downtime, when several slots have passed: ``latest`` fires the latest of them only;
    ``all`` fires each, or when more than ``catchup_limit`` passed, the latest that many.
    A schedule whose stored cron or zone no longer parses fires nothing and leaves the
    due set (``next_slot`` None).
    """
    try:
        cron, tz = parse_cron(due.cron), zone(due.tz)
    except InvalidArgument:
        return FirePlan(due.name, due.rev, due.next_slot, [], 0, None, 0)
    now = now_ms // 1000
    s = due.next_slot
    if s > now:  # not due yet (its due time was moved by hand): re-score only
        return FirePlan(due.name, due.rev, s, [], 0, s, due_ms(due.name, s, due.jitter_ms))
    following = next_slot(cron, tz, s)
    fire, skipped = [s], 0
    if following is not None and following <= now:  # downtime: several slots passed
        bound = due.catchup_limit if due.catchup == "all" else 1
        missed = slots_between(cron, tz, s - 1, now, bound + MAX_SKIPPED_COUNT)
        if due.catchup == "all" and len(missed) <= bound:
            fire = missed
        else:
            fire = latest_slots(cron, tz, now, s - 1, bound)
            skipped = len([m for m in missed if m < fire[0]])
        following = next_slot(cron, tz, fire[-1])
    next_due = 0 if following is None else due_ms(due.name, following, due.jitter_ms)
    return FirePlan(due.name, due.rev, s, fire, skipped, following, next_due)
