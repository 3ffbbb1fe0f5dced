"""Slot arithmetic (pure): cron fields, DST gaps and repeats, leap days, catch-up.

The fast path of ``next_slot`` is checked against a reference that knows nothing but the
convention: every wall-clock minute of a window mapped to its instants one by one.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, tzinfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from taskfleet.protocol.cron import parse_cron
from taskfleet.protocol.errors import InvalidArgument
from taskfleet.protocol.schedules import Due, plan
from taskfleet.protocol.slots import latest_slots, next_slot, slots_between, zone

NY = zone("America/New_York")
PARIS = zone("Europe/Paris")
LORD_HOWE = zone("Australia/Lord_Howe")  # a 30-minute DST shift


def at(text: str, tz: tzinfo = UTC, fold: int = 0) -> int:
    return int(datetime.fromisoformat(text).replace(tzinfo=tz, fold=fold).timestamp())


def walls(slots: list[int], tz: tzinfo) -> list[str]:
    return [datetime.fromtimestamp(s, tz).strftime("%m-%d %H:%M%z") for s in slots]


def following(cron: str, tz: tzinfo, start: int, n: int) -> list[int]:
    out, t = [], start
    for _ in range(n):
        nxt = next_slot(parse_cron(cron), tz, t)
        assert nxt is not None
        out.append(nxt)
        t = nxt
    return out


def test_a_fixed_time_in_the_spring_gap_fires_once_at_the_jump() -> None:
    got = following("30 2 * * *", NY, at("2025-03-08T12:00", NY), 3)
    assert walls(got, NY) == ["03-09 03:00-0400", "03-10 02:30-0400", "03-11 02:30-0400"]


def test_several_fixed_times_in_the_gap_fire_once_together() -> None:
    got = following("0,15,30,45 2 * * *", NY, at("2025-03-09T00:00", NY), 2)
    assert walls(got, NY) == ["03-09 03:00-0400", "03-10 02:00-0400"]


def test_a_wildcard_schedule_has_no_slot_in_the_gap() -> None:
    got = following("0 * * * *", NY, at("2025-03-09T00:30", NY), 3)
    assert walls(got, NY) == ["03-09 01:00-0500", "03-09 03:00-0400", "03-09 04:00-0400"]


def test_a_fixed_time_in_the_repeated_hour_fires_once_at_its_first_occurrence() -> None:
    got = following("30 1 * * *", NY, at("2025-11-01T12:00", NY), 2)
    assert walls(got, NY) == ["11-02 01:30-0400", "11-03 01:30-0500"]


def test_a_wildcard_schedule_fires_in_both_occurrences_of_the_repeated_hour() -> None:
    got = following("*/30 * * * *", NY, at("2025-11-02T00:45", NY), 5)
    assert walls(got, NY) == [
        "11-02 01:00-0400",
        "11-02 01:30-0400",
        "11-02 01:00-0500",
        "11-02 01:30-0500",
        "11-02 02:00-0500",
    ]


def test_from_inside_the_second_occurrence_a_fixed_time_waits_for_the_next_day() -> None:
    start = at("2025-11-02T01:10", NY, fold=1)
    assert walls(following("30 1 * * *", NY, start, 1), NY) == ["11-03 01:30-0500"]


def test_a_half_hour_shift_follows_the_same_convention() -> None:
    # Lord Howe goes from +10:30 to +11 at 02:00 on the first Sunday of October.
    got = following("15 2 * * *", LORD_HOWE, at("2025-10-04T12:00", LORD_HOWE), 2)
    assert walls(got, LORD_HOWE) == ["10-05 02:30+1100", "10-06 02:15+1100"]


def test_feb_29_fires_in_leap_years_only_and_skips_2100() -> None:
    got = following("0 0 29 2 *", UTC, at("2095-01-01T00:00"), 3)
    assert walls(got, UTC) == ["02-29 00:00+0000"] * 3
    years = [datetime.fromtimestamp(s, UTC).year for s in got]
    assert years == [2096, 2104, 2108]


def test_both_day_fields_restricted_match_either_like_vixie_cron() -> None:
    got = following("0 0 13 * 5", UTC, at("2026-03-01T00:00"), 4)
    days = [datetime.fromtimestamp(s, UTC).strftime("%d %a") for s in got]
    assert days == ["06 Fri", "13 Fri", "20 Fri", "27 Fri"]


def test_a_seconds_field_and_names_and_macros_parse() -> None:
    assert following("*/20 * * * * *", UTC, at("2026-01-01T00:00"), 3)[-1] == at("2026-01-01T00:01")
    assert parse_cron("0 9 * jan-mar mon-fri").weekdays == frozenset(range(1, 6))
    assert parse_cron("@hourly").minutes == (0,)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "empty"),
        ("* * * *", "has 4 fields"),
        ("60 * * * *", "minute field: '60' is outside 0-59"),
        ("* 24 * * *", "hour field"),
        ("*/0 * * * *", "step '0' must be a positive number"),
        ("5-1 * * * *", "runs backwards"),
        ("x * * * *", "'x' is not a number"),
        ("0 0 30 2 *", "never matches"),
    ],
)
def test_a_bad_cron_is_refused_with_one_line_saying_what_is_wrong(text: str, message: str) -> None:
    with pytest.raises(InvalidArgument, match=message):
        parse_cron(text)


def test_an_unknown_zone_is_refused() -> None:
    with pytest.raises(InvalidArgument, match="unknown time zone 'Europe/Atlantis'"):
        zone("Europe/Atlantis")


def reference_slots(cron: str, tz: tzinfo, after: int, until: int) -> list[int]:
    """Every wall minute of the window (with margins), mapped by the convention alone."""
    c = parse_cron(cron)
    out: set[int] = set()
    start = datetime.fromtimestamp(after, UTC).replace(tzinfo=None) - timedelta(hours=16)
    end = datetime.fromtimestamp(until, UTC).replace(tzinfo=None) + timedelta(hours=16)
    wall = start.replace(second=0)
    while wall <= end:
        d = wall
        matches = (
            d.second in c.seconds
            and d.minute in c.minutes
            and d.hour in c.hours
            and c.day_matches(d.toordinal())
        )
        if matches:
            first = int(d.replace(tzinfo=tz, fold=0).timestamp())
            second = int(d.replace(tzinfo=tz, fold=1).timestamp())
            back = datetime.fromtimestamp(first, tz).replace(tzinfo=None)
            if back != d:  # skipped: fixed-time fires at the jump
                if c.fixed:
                    jump = min(first, second)
                    while (
                        datetime.fromtimestamp(jump, tz).utcoffset()
                        == datetime.fromtimestamp(jump - 1, tz).utcoffset()
                    ):
                        jump += 1
                    out.add(jump)
            elif first != second and not c.fixed:
                out.update((first, second))
            else:
                out.add(first)
        wall += timedelta(minutes=1)
    return sorted(s for s in out if after < s <= until)


CRONS = st.sampled_from(
    [
        "0 * * * *",
        "*/15 * * * *",
        "30 2 * * *",
        "0 1 * * *",
        "45 1,2,3 * * *",
        "0 0 * * 0",
        "0 12 29 2 *",
        "15 0-3 1 * *",
        "*/7 1-2 * 3,10,11 *",
    ]
)
ZONES = st.sampled_from(["UTC", "America/New_York", "Europe/Paris", "Australia/Lord_Howe"])
# Around the 2025-2026 transitions of those zones, and ordinary days.
STARTS = st.sampled_from(
    [
        "2025-03-09",
        "2025-03-30",
        "2025-10-05",
        "2025-10-26",
        "2025-11-02",
        "2028-02-28",
        "2026-06-15",
    ]
).flatmap(lambda day: st.integers(-30 * 3600, 30 * 3600).map(lambda d: at(day + "T00:00") + d))


@settings(max_examples=150, deadline=None)
@given(cron=CRONS, tz_name=ZONES, start=STARTS)
def test_next_slot_and_slots_between_agree_with_the_minute_by_minute_reference(
    cron: str, tz_name: str, start: int
) -> None:
    tz = zone(tz_name)
    window = 36 * 3600
    expected = reference_slots(cron, tz, start, start + window)
    assert slots_between(parse_cron(cron), tz, start, start + window, 10_000) == expected
    chained, t = [], start
    while True:
        t_next = next_slot(parse_cron(cron), tz, t)
        if t_next is None or t_next > start + window:
            break
        chained.append(t_next)
        t = t_next
    assert chained == expected


@settings(max_examples=100, deadline=None)
@given(cron=CRONS, tz_name=ZONES, start=STARTS, count=st.integers(1, 5))
def test_latest_slots_are_the_last_of_the_window(
    cron: str, tz_name: str, start: int, count: int
) -> None:
    tz = zone(tz_name)
    every = slots_between(parse_cron(cron), tz, start - 40 * 86_400, start, 100_000)
    assert latest_slots(parse_cron(cron), tz, start, start - 40 * 86_400, count) == every[-count:]


def due(cron: str, next_slot_: int, catchup: str = "latest", limit: int = 100) -> Due:
    return Due("s", "1", next_slot_, cron, "UTC", catchup, limit, 0)


def test_on_time_the_due_slot_fires_and_the_next_one_follows() -> None:
    slot = at("2026-01-01T03:00")
    p = plan(due("0 3 * * *", slot), (slot + 5) * 1000)
    assert (p.slots, p.skipped, p.next_slot) == ([slot], 0, slot + 86_400)


def test_after_downtime_latest_fires_only_the_latest_missed_slot_and_counts_the_rest() -> None:
    slot = at("2026-01-01T00:00")
    p = plan(due("0 * * * *", slot), (slot + 5 * 3600 + 10) * 1000)
    assert (p.slots, p.skipped, p.next_slot) == ([slot + 5 * 3600], 5, slot + 6 * 3600)


def test_after_downtime_all_fires_every_missed_slot_up_to_the_bound() -> None:
    slot = at("2026-01-01T00:00")
    now_ms = (slot + 5 * 3600 + 10) * 1000
    every = plan(due("0 * * * *", slot, "all", 10), now_ms)
    assert every.slots == [slot + h * 3600 for h in range(6)] and every.skipped == 0
    bounded = plan(due("0 * * * *", slot, "all", 2), now_ms)
    assert bounded.slots == [slot + 4 * 3600, slot + 5 * 3600] and bounded.skipped == 4
    assert bounded.next_slot == slot + 6 * 3600


def test_a_stored_cron_that_no_longer_parses_fires_nothing_and_leaves_the_due_set() -> None:
    p = plan(due("not a cron", 100), 200_000)
    assert (p.slots, p.next_slot) == ([], None)
