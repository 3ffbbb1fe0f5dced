"""What holds a queue's claims back, read for a reader (the dashboard, ``top``): the claim
pause and budget (``quota``), the rate limits' token buckets as the claim refills them,
and the groups whose own claim pause is on. Plain reads, bounded: two round trips, the
second only for parked groups (at most ``PAUSED_READ``). No pydantic at import.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from taskfleet.protocol.calls import Call, Command
from taskfleet.protocol.keys import QueueKeys
from taskfleet.protocol.records import BUCKET_FIELDS, hash_of, text

__all__ = [
    "DEAD_COUNTER",
    "PAUSED_READ",
    "Bucket",
    "GroupPause",
    "Holdbacks",
    "bucket_used",
    "group_pauses",
    "holdbacks",
]

#: The counter of tasks that ever went dead (``tasks.COUNTERS``): the alarms watch its rise.
DEAD_COUNTER = "dead_total"
#: Parked groups read to find those paused (the claim parks a paused group until its end).
PAUSED_READ = 100


@dataclass(frozen=True, slots=True)
class Bucket:
    """A rate limit's token bucket as stored: tokens and when (epoch ms); None: absent
    (the claim reads it as full)."""

    tokens: float | None
    ts: int | None


@dataclass(frozen=True, slots=True)
class GroupPause:
    """A group whose own claim pause is on: until when (epoch ms) and why."""

    group: str
    until_ms: int
    reason: str


@dataclass(frozen=True, slots=True)
class Holdbacks:
    """The quota hash as stored, both buckets, the parked groups with a finite score."""

    quota: dict[str, str]
    tasks: Bucket
    cost: Bucket
    parked: list[tuple[str, float]]


def _bucket(reply: Any) -> Bucket:
    tokens, ts = (None if v is None else text(v) for v in reply)
    try:
        t = float(tokens) if tokens is not None else None
        at = int(float(ts)) if ts is not None else None
    except ValueError:
        return Bucket(None, None)
    if t is None or at is None or not math.isfinite(t):
        return Bucket(None, None)
    return Bucket(t, at)


def _scored(reply: Any) -> list[tuple[str, float]]:
    items = list(reply or ())
    if items and isinstance(items[0], list | tuple):
        pairs = [(m, s) for m, s in items]
    else:
        pairs = list(zip(items[::2], items[1::2], strict=True))
    return [(text(m), float(text(s) if isinstance(s, bytes) else s)) for m, s in pairs]


def holdbacks(keys: QueueKeys) -> Call[Holdbacks]:
    """The quota hash, both buckets and up to ``PAUSED_READ`` parked groups, one round trip."""
    commands: tuple[Command, ...] = (
        ("HGETALL", keys.quota),
        ("HMGET", keys.bucket_tasks, *BUCKET_FIELDS),
        ("HMGET", keys.bucket_cost, *BUCKET_FIELDS),
        ("ZRANGE", keys.groups_parked, 0, PAUSED_READ - 1, "WITHSCORES"),
    )

    def decode(r: Sequence[Any]) -> Holdbacks:
        parked = [(g, s) for g, s in _scored(r[3]) if math.isfinite(s)]
        return Holdbacks(hash_of(r[0]), _bucket(r[1]), _bucket(r[2]), parked)

    return Call(commands, decode)


def group_pauses(keys: QueueKeys, groups: Sequence[str], now_ms: int) -> Call[list[GroupPause]]:
    """Of ``groups``, those whose own claim pause is on at ``now_ms``, with its reason."""
    names = list(groups)
    commands: list[Command] = [("HMGET", keys.group(g), "until", "reason") for g in names]

    def decode(r: Sequence[Any]) -> list[GroupPause]:
        out = []
        for g, (until, reason) in zip(names, r if names else [], strict=True):
            try:
                end = int(float(text(until))) if until is not None else 0
            except ValueError:
                end = 0
            if end > now_ms:
                out.append(GroupPause(g, end, "" if reason is None else text(reason)))
        return out

    return Call(tuple(commands) or (("PING",),), decode)


def bucket_used(bucket: Bucket, limit: int | None, period_s: float, now_ms: int) -> int | None:
    """Tokens of ``limit`` used now, refilled as the claim refills them (``claim_tasks``'s
    ``load_bucket``); None: no such limit. Pure."""
    if not limit or limit <= 0 or period_s <= 0:
        return None
    if bucket.tokens is None or bucket.ts is None:
        return 0
    rate = limit / (period_s * 1000)
    tokens = min(float(limit), bucket.tokens + max(0, now_ms - bucket.ts) * rate)
    return max(0, math.ceil(limit - tokens - 1e-9))
