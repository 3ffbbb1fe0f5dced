"""A small inline SVG chart of rates: pure, from the sampler's rates to markup.

Inline SVG with presentation attributes only (no style attribute, no script), so the
page's Content-Security-Policy needs no 'unsafe-inline'. Every value drawn is a number
this module formats; the only text is the legend it writes itself.
"""

from __future__ import annotations

from markupsafe import Markup

#: What a chart of the queue's per-minute counts spans (ms).
HOUR_MS = 3_600_000

WIDTH = 240
HEIGHT = 56
PAD = 2
#: room under the plot for the time axis' labels, and beside it for the peak's
AXIS = 10
#: stroke colour of each series (the legend's names)
COLOURS = {"done": "#2e7d32", "failed": "#c62828"}


def rate_chart(series: dict[str, list[tuple[int, float]]], span_ms: int) -> Markup:
    """Each series as a line over the last ``span_ms`` (x: time, y: 0..the highest rate)."""
    points = [p for values in series.values() for p in values]
    if all(len(values) < 2 for values in series.values()):  # a line needs two points
        return Markup('<span class="muted">collecting samples…</span>')
    end = max(at for at, _ in points)
    start = end - span_ms
    peak = max(rate for _, rate in points)
    top = peak or 1.0  # all zero: a flat line along the bottom
    lines = []
    for name, values in series.items():
        shown = [(at, rate) for at, rate in values if at >= start]
        if not shown:
            continue
        coords = " ".join(f"{_x(at, start, span_ms):.1f},{_y(rate, top):.1f}" for at, rate in shown)
        colour = COLOURS.get(name, "#555")
        lines.append(
            f'<polyline fill="none" stroke="{colour}" stroke-width="1.5" points="{coords}"/>'
        )
    latest = {name: values[-1][1] if values else 0.0 for name, values in series.items()}
    label = ", ".join(f"{name} {rate:,.1f}/s" for name, rate in latest.items())
    title = f"{label}; peak {peak:,.1f}/s over the last {span_ms // 60000} min"
    if span_ms >= HOUR_MS:
        title = f"{label} (this minute); peak {peak:,.1f}/s, per minute, over the last hour"
    return Markup(
        f'<svg class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" height="{HEIGHT}" '
        f'role="img" aria-label="{title}"><title>{title}</title>'
        f'<line x1="0" y1="{HEIGHT - AXIS - PAD}" x2="{WIDTH}" y2="{HEIGHT - AXIS - PAD}" '
        'stroke="#999"/>' + "".join(lines) + _axis(span_ms, peak) + "</svg>"
    )


def minute_series(
    minutes: list[tuple[int, int, int]], at_ms: int
) -> dict[str, list[tuple[int, float]]]:
    """Per-minute counts (minute, completed, failed) as rates per second, each at its
    minute's end; the minute under way at ``at_ms`` over its elapsed part (from 10 s in,
    else left out: a few seconds' count is noise). Pure."""
    done: list[tuple[int, float]] = []
    failed: list[tuple[int, float]] = []
    for minute, completed, fails in minutes:
        start = minute * 60_000
        seconds = min(60.0, (at_ms - start) / 1000)
        if seconds < 10:
            continue
        end = start + int(seconds * 1000)
        done.append((end, completed / seconds))
        failed.append((end, fails / seconds))
    return {"done": done, "failed": failed}


def _axis(span_ms: int, peak: float) -> str:
    """The time axis' ticks and labels (minutes ago, "now") and the peak's value."""
    base = HEIGHT - AXIS - PAD
    minutes = max(1, span_ms // 60000)
    marks = []
    for i in range(3):
        x = PAD + (WIDTH - 2 * PAD) * i / 2
        ago = minutes - minutes * i // 2
        label = "now" if i == 2 else f"-{ago} min"
        anchor = ("start", "middle", "end")[i]
        marks.append(
            f'<line x1="{x:.1f}" y1="{base}" x2="{x:.1f}" y2="{base + 3}" stroke="#999"/>'
            f'<text x="{x:.1f}" y="{HEIGHT - 1}" text-anchor="{anchor}" fill="#888">{label}</text>'
        )
    marks.append(f'<text x="{PAD}" y="9" fill="#888">{peak:,.1f}/s</text>')
    return "".join(marks)


def _x(at_ms: int, start_ms: int, span_ms: int) -> float:
    return PAD + (WIDTH - 2 * PAD) * max(0.0, (at_ms - start_ms) / span_ms)


def _y(rate: float, top: float) -> float:
    return HEIGHT - AXIS - PAD - (HEIGHT - AXIS - 2 * PAD) * min(1.0, rate / top)
