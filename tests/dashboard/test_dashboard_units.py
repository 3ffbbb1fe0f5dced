"""The dashboard's pure parts: rates from samples, the chart, values as shown."""

from __future__ import annotations

import pytest
from taskfleet.dashboard import charts, display
from taskfleet.dashboard.sampler import Sample, rates
from taskfleet.dashboard.settings import DashboardSettings


def test_rates_are_per_second_between_samples_and_a_counter_that_went_down_reads_zero() -> None:
    samples = [
        Sample(1_000, {"completed": 0, "failed": 0}),
        Sample(3_000, {"completed": 10, "failed": 2}),
        Sample(4_000, {"completed": 4, "failed": 3}),  # purged meanwhile
    ]
    assert rates(samples) == {
        "done": [(3_000, 5.0), (4_000, 0.0)],
        "failed": [(3_000, 1.0), (4_000, 1.0)],
    }


def test_per_minute_counts_read_as_rates_the_minute_under_way_over_its_elapsed_part() -> None:
    minutes = [(100, 120, 6), (101, 60, 0), (102, 30, 3), (103, 5, 5)]
    at_ms = 102 * 60_000 + 30_000  # half-way through minute 102; 103 has not begun
    assert charts.minute_series(minutes, at_ms) == {
        "done": [(101 * 60_000, 2.0), (102 * 60_000, 1.0), (at_ms, 1.0)],
        "failed": [(101 * 60_000, 0.1), (102 * 60_000, 0.0), (at_ms, 0.1)],
    }
    svg = str(charts.rate_chart(charts.minute_series(minutes, at_ms), charts.HOUR_MS))
    assert "per minute, over the last hour" in svg and "-60 min" in svg


def test_the_chart_waits_for_two_rates_then_draws_one_line_per_series() -> None:
    assert "collecting" in charts.rate_chart({"done": [(1, 1.0)], "failed": [(1, 0.0)]}, 600_000)
    svg = charts.rate_chart(
        {"done": [(1_000, 2.0), (6_000, 4.0)], "failed": [(1_000, 0.0), (6_000, 0.0)]}, 600_000
    )
    assert svg.count("<polyline") == 2 and "done 4.0/s, failed 0.0/s; peak 4.0/s" in svg
    assert "style=" not in svg and "<script" not in svg


@pytest.mark.parametrize(
    ("progress", "expected"),
    [
        (0.25, 0.25),
        (40, 0.4),
        ({"done": 3, "total": 4}, 0.75),
        ({"current": 9, "total": 3}, 1.0),
        ({"done": 1, "total": 0}, None),
        (True, None),
        ("half", None),
        (float("nan"), None),
        (250, None),
    ],
)
def test_a_progress_value_reads_as_a_fraction_only_when_it_clearly_is_one(
    progress: object, expected: float | None
) -> None:
    assert display.fraction(progress) == expected


def test_shown_values_are_capped_saying_how_much_was_left_out() -> None:
    assert display.capped("abc", 5) == "abc"
    assert display.capped("x" * 10, 4) == "xxxx\n… (6 more characters not shown)"
    assert display.pretty({"b": 1, "a": "<"}) == '{\n  "a": "<",\n  "b": 1\n}'
    assert display.one_line("Traceback\n  File x\nValueError: bad\n") == "ValueError: bad"
    assert display.url_part("a/b?c#d e") == "a%2Fb%3Fc%23d%20e"
    assert display.age(None) == "-" and display.age(90) == "1.5m"


def test_settings_refuse_what_the_dashboard_cannot_do() -> None:
    with pytest.raises(ValueError, match="invalid queue name"):
        DashboardSettings(redis_url="redis://x", queues=("{bad}",))
    with pytest.raises(ValueError, match="actions need a token"):
        DashboardSettings(redis_url="redis://x", read_only=False)
    with pytest.raises(ValueError, match="at least 16 characters"):
        DashboardSettings(redis_url="redis://x", read_only=False, token="short")
    secret = "s3cret-token-0123456789"
    assert secret not in repr(DashboardSettings("redis://x", read_only=False, token=secret))
    with pytest.raises(ValueError, match="page_size"):
        DashboardSettings(redis_url="redis://x", page_size=0)
