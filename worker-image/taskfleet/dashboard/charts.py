"""A small inline SVG chart of rates: pure, from the sampler's rates to markup.

Inline SVG with presentation attributes only (no style attribute, no script), so the
page's Content-Security-Policy needs no 'unsafe-inline'. Every value drawn is a number
this module formats; the only text is the legend it writes itself.
"""

from __future__ import annotations

from markupsafe import Markup

WIDTH = 240
HEIGHT = 56
PAD = 2
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
    return Markup(
        f'<svg class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" height="{HEIGHT}" '
        f'role="img" aria-label="{title}"><title>{title}</title>'
        f'<line x1="0" y1="{HEIGHT - PAD}" x2="{WIDTH}" y2="{HEIGHT - PAD}" stroke="#ccc"/>'
        + "".join(lines)
        + "</svg>"
    )


def _x(at_ms: int, start_ms: int, span_ms: int) -> float:
    return PAD + (WIDTH - 2 * PAD) * max(0.0, (at_ms - start_ms) / span_ms)


def _y(rate: float, top: float) -> float:
    return HEIGHT - PAD - (HEIGHT - 2 * PAD) * min(1.0, rate / top)
