"""How values are shown: ages, times, JSON pretty-printed and capped, a progress value
read as a fraction, a worker's level and the line about older workers (the CLI's words).
Pure; Jinja2 escapes whatever these return."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

from taskfleet.producer import reading
from taskfleet.producer.flowtree import fraction
from taskfleet.producer.overview import WorkerView
from taskfleet.protocol.records import CURRENT_LEVEL, RELEASE_OF_LEVEL

__all__ = [
    "age",
    "ago",
    "ago_s",
    "capped",
    "duration",
    "epoch",
    "fraction",
    "level",
    "limit_name",
    "limit_value",
    "older",
    "older_note",
    "one_line",
    "pretty",
    "progress_message",
    "short_id",
    "url_part",
    "when",
]

#: Characters of a payload, result, progress or error shown on a task's page.
SHOWN_CHARS = 64 * 1024
#: Characters of an error shown in a row of a list.
ROW_ERROR_CHARS = 160


def age(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    seconds = max(0.0, seconds)
    if seconds < 60:
        return f"{seconds:.1f}s"
    if seconds < 3600:
        return f"{seconds / 60:.1f}m"
    if seconds < 86400:
        return f"{seconds / 3600:.1f}h"
    return f"{seconds / 86400:.1f}d"


#: (seconds, unit) from the largest, for ``duration``.
_UNITS = ((86400, "d"), (3600, "h"), (60, "min"), (1, "s"))


def duration(seconds: float | None) -> str:
    """A span in at most two human units: ``45 s``, ``1 min 30 s``, ``3 d``, ``2 h 5 min``;
    under a second in ms. "-" for None."""
    if seconds is None:
        return "-"
    if seconds < 0:
        seconds = 0.0
    if seconds < 1:
        return "0 s" if seconds == 0 else f"{round(seconds * 1000)} ms"
    left = round(seconds)
    parts: list[str] = []
    for size, unit in _UNITS:
        if left >= size:
            parts.append(f"{left // size} {unit}")
            left %= size
        elif parts:
            break
        if len(parts) == 2:
            break
    return " ".join(parts)


def ago(at: datetime | None, now_ms: int | None) -> str:
    """How long ago (or from now) ``at`` was, in one line: ``3 min ago``, ``in 20 s``."""
    if at is None or now_ms is None:
        return "-"
    delta = now_ms / 1000 - at.timestamp()
    shown = duration(abs(delta))
    return f"{shown} ago" if delta >= 0 else f"in {shown}"


def progress_message(progress: Any) -> str:
    """The words of a progress value: its ``message`` (or ``msg``, ``status``) when it is an
    object, itself when text; "" for a bare number (the bar says it)."""
    if isinstance(progress, dict):
        for key in ("message", "msg", "status", "step"):
            value = progress.get(key)
            if isinstance(value, str):
                return one_line(value)
        return ""
    return one_line(progress) if isinstance(progress, str) else ""


def epoch(seconds: int) -> str:
    """Epoch seconds as ``2024-05-01 12:00:03 UTC``."""
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def ago_s(seconds: int, now_ms: int) -> str:
    """``ago`` of epoch seconds."""
    return ago(datetime.fromtimestamp(seconds, UTC), now_ms)


def limit_value(key: str, value: Any) -> str:
    """A config value as a reader wants it: a span (``*_s``) in human units, the rest as
    stored; None as "none"."""
    if value is None:
        return "none"
    if key.endswith("_s") and isinstance(value, int | float) and not isinstance(value, bool):
        return duration(float(value))
    if isinstance(value, int) and not isinstance(value, bool) and key.endswith("_bytes"):
        return f"{value / 1024:,.0f} KiB" if value < 1024 * 1024 else f"{value / 1048576:,.1f} MiB"
    return str(value)


def limit_name(key: str) -> str:
    """A config key as a label: ``dead_retention_s`` -> ``dead retention``."""
    for suffix in ("_s", "_bytes"):
        if key.endswith(suffix):
            key = key[: -len(suffix)]
    return key.replace("_", " ")


def short_id(value: str, keep: int = 8) -> str:
    """A long id cut to its first ``keep`` characters and an ellipsis (the full one is in
    the link and its title)."""
    return value if len(value) <= keep + 1 else value[:keep] + "…"


def when(at: datetime | None, now_ms: int | None = None) -> str:
    """``2024-05-01 12:00:03 UTC``, with how long ago when the server's time is known."""
    if at is None:
        return "-"
    stamp = at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    if now_ms is None:
        return stamp
    delta = now_ms / 1000 - at.timestamp()
    return f"{stamp} ({age(abs(delta))} {'ago' if delta >= 0 else 'from now'})"


def capped(text: str, limit: int = SHOWN_CHARS) -> str:
    """``text`` cut at ``limit`` characters, saying how many were left out."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}\n… ({len(text) - limit:,} more characters not shown)"


def pretty(value: Any, limit: int = SHOWN_CHARS) -> str:
    """A stored JSON value indented (a string a foreign producer stored, as is), capped."""
    if isinstance(value, str):
        return capped(value, limit)
    try:
        shown = json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False)
    except (TypeError, ValueError):
        shown = repr(value)
    return capped(shown, limit)


def one_line(text: str, limit: int = ROW_ERROR_CHARS) -> str:
    """The last non-empty line of an error (a traceback ends with the exception), capped."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    line = lines[-1] if lines else ""
    return line if len(line) <= limit else line[: limit - 1] + "…"


def url_part(value: str) -> str:
    """A task id or queue name as one path segment (an id may hold '/', '?' or '#')."""
    return quote(value, safe="")


def older(level: int) -> bool:
    """Whether a worker of ``level`` misses features this release's producers may use."""
    return level < CURRENT_LEVEL


def level(value: int) -> str:
    """A worker's level, with the release it is when older (``1 (0.1.x)``, as ``taskfleet
    top`` shows it)."""
    release = RELEASE_OF_LEVEL.get(value)
    return f"{value} ({release})" if older(value) and release else str(value)


def older_note(workers: Sequence[WorkerView]) -> str:
    """The line ``taskfleet workers`` prints under its list when live workers of an older
    release serve the queue (what they do not serve), or "" when none does."""
    return reading.older_note(workers)
