"""The worker's log lines on stderr: ``key=value`` (greppable) or JSON, one per event."""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any


class _KeyValueFormatter(logging.Formatter):
    """``ts=... level=info event=task_done task=... ms=12.3``: one greppable line per event."""

    def format(self, record: logging.LogRecord) -> str:
        fields = _record_fields(record)
        return " ".join(f"{key}={_kv(value)}" for key, value in fields.items())


class _JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return json.dumps(_record_fields(record), default=str)


def _record_fields(record: logging.LogRecord) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
        "level": record.levelname.lower(),
        "event": record.getMessage(),
    }
    fields.update(getattr(record, "fields", {}))
    if record.exc_info and record.exc_info[1] is not None:
        exc = record.exc_info[1]
        fields["error"] = f"{type(exc).__name__}: {exc}"
    return fields


def _kv(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    text = str(value)
    if text == "" or any(c in text for c in ' "=\n\t'):
        return json.dumps(text)
    return text


def configure_logging(fmt: str, level: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_JsonFormatter() if fmt == "json" else _KeyValueFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
