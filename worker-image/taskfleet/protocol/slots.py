"""A schedule's slots: the instants its cron expression names in its time zone. Pure.

A slot is an instant in epoch seconds. Each wall-clock time the cron expression matches
is a slot, with the convention of Vixie cron and cronie across daylight-saving changes:

- a time that does not exist (the clock jumps over it in spring): a *fixed-time*
  schedule (seconds, minutes and hours not wildcards, like ``30 2 * * *``) fires once at
  the instant of the jump, however many of its times the gap swallowed; a wildcard one
  (``*/15 * * * *``, ``0 * * * *``) has no slot there, as the clock never shows it;
- a time that exists twice (the clock goes back in autumn): a fixed-time schedule fires
  at its first occurrence only; a wildcard one at both, so ``0 * * * *`` still fires
  every real hour.

Transitions are read from the zone (``zoneinfo``); the arithmetic assumes a zone's
clock moves back by at most 3 hours at a time, which every zone in tzdata does.
"""

from __future__ import annotations

import functools
from datetime import UTC, datetime, timedelta, tzinfo
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from taskfleet.protocol.cron import DAY, Cron
from taskfleet.protocol.errors import InvalidArgument

__all__ = ["latest_slots", "next_slot", "slots_between", "zone"]

_NAIVE_EPOCH = datetime(1970, 1, 1)
#: Longest stretch of a clock going back (see the module docstring).
FOLD_MARGIN = 3 * 3600
#: How far ahead a slot is looked for (cron.HORIZON_DAYS, in seconds).
HORIZON = 9 * 366 * DAY


@functools.lru_cache(maxsize=1024)
def zone(name: str) -> tzinfo:
    """The zone named ``name`` (IANA, e.g. ``Europe/Paris``); ``InvalidArgument`` if unknown."""
    if name in ("UTC", "Etc/UTC", "Z"):
        return UTC
    try:
        if not name or name != name.strip() or ".." in name or name.startswith("/"):
            raise ValueError(name)
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise InvalidArgument(
            f"unknown time zone {name!r}: use an IANA name such as 'UTC' or 'Europe/Paris'"
        ) from None


def _offset_at(t: int, tz: tzinfo) -> int:
    off = datetime.fromtimestamp(t, tz).utcoffset()
    return 0 if off is None else int(off.total_seconds())


def _naive_offsets(n: int, tz: tzinfo) -> tuple[int, int]:
    """The offsets zoneinfo gives wall time ``n`` (naive seconds) with fold 0 and fold 1:
    equal for a time that exists once; fold 0's larger for a repeated time, smaller for
    a skipped one."""
    dt = _NAIVE_EPOCH + timedelta(seconds=n)
    o0 = dt.replace(tzinfo=tz, fold=0).utcoffset()
    o1 = dt.replace(tzinfo=tz, fold=1).utcoffset()
    return (
        0 if o0 is None else int(o0.total_seconds()),
        0 if o1 is None else int(o1.total_seconds()),
    )


def _transition_in(lo: int, hi: int, before: int, tz: tzinfo) -> int:
    """The first instant in (lo, hi] whose offset is not ``before`` (one is there)."""
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if _offset_at(mid, tz) == before:
            lo = mid
        else:
            hi = mid
    return hi


def _near_transition(t: int, tz: tzinfo) -> bool:
    """Whether the offset changes within ``FOLD_MARGIN`` of ``t``: only then can wall
    times beyond the ends of a range make slots inside it."""
    off = _offset_at(t, tz)
    return _offset_at(t - FOLD_MARGIN, tz) != off or _offset_at(t + FOLD_MARGIN, tz) != off


def _instants(cron: Cron, n: int, tz: tzinfo) -> list[int]:
    """The slots wall time ``n`` (a match of ``cron``) makes, by the module's convention."""
    o0, o1 = _naive_offsets(n, tz)
    if o0 == o1:
        return [n - o0]
    if o0 > o1:  # repeated: n - o0 is the first occurrence
        return [n - o0] if cron.fixed else [n - o0, n - o1]
    if not cron.fixed:  # skipped, and a wildcard schedule has no slot the clock never shows
        return []
    # Skipped: the jump happens in (n - o1, n - o0]; fire at it.
    return [_transition_in(n - o1, n - o0, o0, tz)]


def slots_between(cron: Cron, tz: tzinfo, after: int, until: int, limit: int) -> list[int]:
    """The slots in (after, until], ascending, at most the first ``limit``.

    Scans the wall-clock matches of the range, widened by a margin at an end near a
    transition (a repeated hour's second occurrence comes after later wall times' first).
    """
    if tz is UTC:
        out: list[int] = []
        n = cron.next_naive(after)
        while n is not None and n <= until and len(out) < limit:
            out.append(n)
            n = cron.next_naive(n)
        return out
    found: set[int] = set()
    start, end = after + _offset_at(after, tz), until + _offset_at(until, tz)
    if _near_transition(after, tz):
        start -= FOLD_MARGIN
    if _near_transition(until, tz):
        end += FOLD_MARGIN
    n = cron.next_naive(start)
    while n is not None and n <= end:
        for slot in _instants(cron, n, tz):
            if after < slot <= until:
                found.add(slot)
        n = cron.next_naive(n)
    return sorted(found)[:limit]


def next_slot(cron: Cron, tz: tzinfo, after: int) -> int | None:
    """The first slot strictly after instant ``after`` (epoch seconds); None when the
    expression names none within nine years."""
    if tz is UTC:
        return cron.next_naive(after)
    off = _offset_at(after, tz)
    if _offset_at(after + FOLD_MARGIN, tz) == off:
        n = cron.next_naive(after + off)
        if n is None:
            return None
        candidate = n - off
        # Same offset at both ends and a wall time that exists once: no transition can
        # have made a slot in between (n is the first wall-clock match after ours).
        if _offset_at(candidate, tz) == off and _naive_offsets(n, tz) == (off, off):
            return candidate
    # Near a transition: look in growing windows.
    window = 3600
    while window <= HORIZON:
        found = slots_between(cron, tz, after, after + window, 1)
        if found:
            return found[0]
        if cron.next_naive(after + _offset_at(after, tz) - FOLD_MARGIN) is None:
            return None
        window *= 8
    return None


def latest_slots(cron: Cron, tz: tzinfo, at: int, after: int, count: int) -> list[int]:
    """The latest ``count`` slots in (after, at], ascending (fewer when fewer exist)."""
    window = 60
    while True:
        lo = max(after, at - window)
        found = slots_between(cron, tz, lo, at, 1 << 62)
        if len(found) >= count or lo == after:
            return found[-count:] if count else []
        window *= 4
