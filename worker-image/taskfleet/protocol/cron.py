"""Cron expressions: parsed once, matched against wall-clock times. Pure, no time zones.

Five fields (``minute hour day-of-month month day-of-week``) as in crontab(5), or six
with a leading seconds field (as BullMQ's and Spring's cron do). Each field takes ``*``,
numbers, ranges ``a-b``, steps ``*/n`` and ``a-b/n``, lists ``a,b``; months and weekdays
also take names (``jan``, ``mon``); weekday 7 is Sunday like 0. Macros: ``@yearly``
(``@annually``), ``@monthly``, ``@weekly``, ``@daily`` (``@midnight``), ``@hourly``.
As in Vixie cron, when both day fields are restricted a day matches either of them.

A wall-clock time here is "naive seconds": seconds since 1970-01-01 00:00 on the clock
of the schedule's zone (``slots`` maps them to instants, DST included).
"""

from __future__ import annotations

import bisect
import functools
from dataclasses import dataclass, field
from datetime import date

from taskfleet.protocol.errors import InvalidArgument

__all__ = ["DAY", "EPOCH_ORDINAL", "Cron", "parse_cron"]

DAY = 86_400
EPOCH_ORDINAL = date(1970, 1, 1).toordinal()
#: How far ahead a search for the next matching day looks: 9 years covers Feb 29 across
#: a century year that is not a leap year (2096 -> 2104).
HORIZON_DAYS = 9 * 366

_MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
_DAYS = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")
_MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
MAX_CRON_LENGTH = 200


def _ascii_digits(text: str) -> bool:
    return text.isascii() and text.isdigit()


def _number(text: str, names: tuple[str, ...], offset: int, what: str) -> int:
    lowered = text.lower()
    if names and lowered in names:
        return names.index(lowered) + offset
    if not _ascii_digits(text):  # str.isdigit and int() also take other scripts' digits
        raise ValueError(f"{what} field: {text!r} is not a number")
    return int(text)


def _field(
    text: str, lo: int, hi: int, what: str, *, names: tuple[str, ...] = (), offset: int = 0
) -> tuple[int, ...]:
    values: set[int] = set()
    for part in text.split(","):
        body, _, step_text = part.partition("/")
        step = 1
        if step_text:
            if not _ascii_digits(step_text) or int(step_text) == 0:
                raise ValueError(f"{what} field: step {step_text!r} must be a positive number")
            step = int(step_text)
        if body in ("*", "?"):
            start, end = lo, hi
        elif "-" in body:
            a, _, b = body.partition("-")
            start, end = _number(a, names, offset, what), _number(b, names, offset, what)
        else:
            start = _number(body, names, offset, what)
            end = hi if step_text else start
        if not (lo <= start <= hi and lo <= end <= hi):
            raise ValueError(f"{what} field: {part!r} is outside {lo}-{hi}")
        if start > end:
            raise ValueError(f"{what} field: range {part!r} runs backwards")
        values.update(range(start, end + 1, step))
    return tuple(sorted(values))


@dataclass(frozen=True)
class Cron:
    """A parsed cron expression. ``fixed``: its seconds, minutes and hours are not
    wildcards (crontab(5)'s "fixed-time" jobs, which DST moves rather than skips)."""

    text: str
    seconds: tuple[int, ...]
    minutes: tuple[int, ...]
    hours: tuple[int, ...]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]  # 0 = Sunday
    day_or: bool  # both day fields restricted: a day matches either
    fixed: bool
    _day_cache: dict[int, bool] = field(default_factory=dict, compare=False, repr=False)

    def day_matches(self, ordinal: int) -> bool:
        cached = self._day_cache.get(ordinal)
        if cached is not None:
            return cached
        d = date.fromordinal(ordinal)
        by_day = d.day in self.days
        by_weekday = (d.isoweekday() % 7) in self.weekdays
        ok = d.month in self.months and (
            (by_day or by_weekday) if self.day_or else (by_day and by_weekday)
        )
        if len(self._day_cache) > 4096:
            self._day_cache.clear()
        self._day_cache[ordinal] = ok
        return ok

    def _time_after(self, sod: int) -> int | None:
        """The first matching second of the day after second-of-day ``sod`` (-1: any)."""
        if sod < 0:
            return self.hours[0] * 3600 + self.minutes[0] * 60 + self.seconds[0]
        h, rest = divmod(sod, 3600)
        m, s = divmod(rest, 60)
        hours, minutes, seconds = self.hours, self.minutes, self.seconds
        i = bisect.bisect_left(hours, h)
        if i < len(hours) and hours[i] == h:
            j = bisect.bisect_left(minutes, m)
            if j < len(minutes) and minutes[j] == m:
                k = bisect.bisect_right(seconds, s)
                if k < len(seconds):
                    return sod - s + seconds[k]
                j += 1
            if j < len(minutes):
                return h * 3600 + minutes[j] * 60 + seconds[0]
            i += 1
        if i < len(hours):
            return hours[i] * 3600 + minutes[0] * 60 + seconds[0]
        return None

    def next_naive(self, after: int) -> int | None:
        """The first matching wall-clock second strictly after ``after`` (naive seconds),
        or None when none comes within ``HORIZON_DAYS``."""
        ordinal, sod = divmod(after, DAY)
        ordinal += EPOCH_ORDINAL
        if self.day_matches(ordinal):
            t = self._time_after(sod)
            if t is not None:
                return (ordinal - EPOCH_ORDINAL) * DAY + t
        first = self._time_after(-1)
        assert first is not None
        day = ordinal + 1
        end = ordinal + HORIZON_DAYS
        while day <= end:
            d = date.fromordinal(day)
            if d.month not in self.months:  # jump to the first of the next month
                y, mo = (d.year + 1, 1) if d.month == 12 else (d.year, d.month + 1)
                day = date(y, mo, 1).toordinal()
                continue
            if self.day_matches(day):
                return (day - EPOCH_ORDINAL) * DAY + first
            day += 1
        return None


@functools.lru_cache(maxsize=4096)
def parse_cron(text: str) -> Cron:
    """Parse a cron expression; ``InvalidArgument`` (a ``ValueError``) says what is wrong."""
    if not isinstance(text, str) or not text.strip():
        raise InvalidArgument("cron expression is empty")
    if len(text) > MAX_CRON_LENGTH:
        raise InvalidArgument(f"cron expression is longer than {MAX_CRON_LENGTH} characters")
    expanded = _MACROS.get(text.strip().lower(), text)
    parts = expanded.split()
    if len(parts) == 5:
        parts = ["0", *parts]
    elif len(parts) != 6:
        raise InvalidArgument(
            f"cron {text!r} has {len(parts)} fields; expected 5 (minute hour day month "
            "weekday) or 6 (second first), or a macro like @daily"
        )
    try:
        seconds = _field(parts[0], 0, 59, "second")
        minutes = _field(parts[1], 0, 59, "minute")
        hours = _field(parts[2], 0, 23, "hour")
        days = _field(parts[3], 1, 31, "day-of-month")
        months = _field(parts[4], 1, 12, "month", names=_MONTHS, offset=1)
        weekdays = _field(parts[5], 0, 7, "day-of-week", names=_DAYS)
    except ValueError as error:
        raise InvalidArgument(f"cron {text!r}: {error}") from None
    day_star = parts[3].startswith(("*", "?"))
    weekday_star = parts[5].startswith(("*", "?"))
    cron = Cron(
        text=text,
        seconds=seconds,
        minutes=minutes,
        hours=hours,
        days=frozenset(days),
        months=frozenset(months),
        weekdays=frozenset(w % 7 for w in weekdays),
        day_or=not day_star and not weekday_star,
        fixed=not any(p.startswith("*") for p in parts[:3]),
    )
    if not _ever_matches(cron):
        raise InvalidArgument(f"cron {text!r} never matches a date (e.g. 30 February)")
    return cron


def _ever_matches(cron: Cron) -> bool:
    """Day-of-month and month can rule out every date (``0 0 31 4 *``)."""
    longest = {2: 29, 4: 30, 6: 30, 9: 30, 11: 30}
    if cron.day_or or not cron.weekdays:
        return True
    return any(min(cron.days) <= longest.get(m, 31) for m in cron.months)
