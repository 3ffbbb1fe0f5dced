"""How the dashboard words values (pure): spans in human units, limits as durations,
one-line relative times, shortened ids, a progress value's message, and the rate chart's
time axis."""

from __future__ import annotations

from datetime import UTC, datetime

from taskfleet.dashboard import charts, display


def test_spans_read_in_at_most_two_human_units() -> None:
    assert display.duration(None) == "-"
    assert display.duration(0) == "0 s"
    assert display.duration(0.25) == "250 ms"
    assert display.duration(45) == "45 s"
    assert display.duration(90) == "1 min 30 s"
    assert display.duration(1800) == "30 min"
    assert display.duration(7500) == "2 h 5 min"
    assert display.duration(259200.0) == "3 d"
    assert display.duration(3 * 86400 + 4 * 3600 + 59) == "3 d 4 h"


def test_limits_render_as_durations_and_sizes_with_plain_names() -> None:
    assert display.limit_name("dead_retention_s") == "dead retention"
    assert display.limit_value("dead_retention_s", 259200.0) == "3 d"
    assert display.limit_value("max_payload_bytes", 1048576) == "1.0 MiB"
    assert display.limit_value("rate_limit_tasks", None) == "none"
    assert display.limit_value("max_concurrency", 7) == "7"


def test_times_are_one_line_and_relative_and_ids_shortened() -> None:
    at = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
    now_ms = int(at.timestamp() * 1000)
    assert display.ago(at, now_ms + 180_000) == "3 min ago"
    assert display.ago(at, now_ms - 20_000) == "in 20 s"
    assert display.ago(None, now_ms) == "-"
    assert display.short_id("8b2b03e233ccd234f3661b54633d9059") == "8b2b03e2…"
    assert display.short_id("short") == "short"


def test_a_progress_values_message_is_its_words() -> None:
    assert (
        display.progress_message({"done": 1, "total": 4, "message": "step\\ntwo"}) == "step\\ntwo"
    )
    assert display.progress_message({"done": 1, "total": 4}) == ""
    assert display.progress_message("uploading") == "uploading"
    assert display.progress_message(0.5) == ""


def test_the_rate_chart_has_a_time_axis_and_its_peak() -> None:
    series = {"done": [(0, 1.0), (300_000, 4.0), (600_000, 2.0)], "failed": [(0, 0), (600_000, 0)]}
    svg = str(charts.rate_chart(series, 600_000))
    assert ">-10 min</text>" in svg and ">-5 min</text>" in svg and ">now</text>" in svg
    assert ">4.0/s</text>" in svg
