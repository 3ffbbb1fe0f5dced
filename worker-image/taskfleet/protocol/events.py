"""The queue's event stream: turning it on and off, and reading it from an id.

The scripts append each task's lifecycle events to the ``events`` stream while the
``events_cap`` key holds its retention (``lua/includes/event.lua``); absent, they write
nothing. Each entry has the fields ``event``, ``id`` and, for started and failed,
``attempt``. A reader resumes from the last entry id it saw (docs/protocol.md, 4.17).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from taskfleet.protocol.calls import Call, one
from taskfleet.protocol.keys import QueueKeys
from taskfleet.protocol.tasks import stored_int, stored_text

__all__ = [
    "DEFAULT_EVENTS_RETENTION",
    "EVENT_KINDS",
    "QueueEvent",
    "events_off",
    "events_on",
    "last_event_id",
    "read_events",
]

#: Entries the stream keeps by default (XADD MAXLEN ~: a little more, trimmed in blocks).
DEFAULT_EVENTS_RETENTION = 100_000
#: What the scripts write.
EVENT_KINDS = (
    "enqueued",
    "started",
    "progress",
    "checkpointed",
    "done",
    "failed",
    "retried",
    "dead",
    "cancelled",
    "lost",
    "requeued",
)


@dataclass(frozen=True, slots=True)
class QueueEvent:
    """One event of a queue: ``id`` is its stream id (resume after it with ``since``)."""

    id: str
    event: str
    task_id: str
    attempt: int | None
    at: datetime


def events_on(keys: QueueKeys, retention: int) -> Call[None]:
    return one(("SET", keys.events_cap, str(retention)), lambda reply: None)


def events_off(keys: QueueKeys) -> Call[None]:
    """Stops the writes; what the stream holds stays readable."""
    return one(("DEL", keys.events_cap), lambda reply: None)


def last_event_id(keys: QueueKeys) -> Call[str]:
    """The newest entry's id, or '0-0' when the stream is empty or absent."""

    def decode(raw: Any) -> str:
        return stored_text(raw[0][0]) if raw else "0-0"

    return one(("XREVRANGE", keys.events, "+", "-", "COUNT", "1"), decode)


def read_events(keys: QueueKeys, since: str, block_ms: int, count: int) -> Call[list[QueueEvent]]:
    """The entries after ``since``, waiting up to ``block_ms`` for one (XREAD BLOCK)."""

    def decode(raw: Any) -> list[QueueEvent]:
        out: list[QueueEvent] = []
        if not raw:
            return out
        entries = raw[0][1] if isinstance(raw, list) else next(iter(raw.values()))[0]
        for entry_id, fields in entries:
            if isinstance(fields, dict):
                f = {stored_text(k): stored_text(v) for k, v in fields.items()}
            else:
                f = {
                    stored_text(fields[i]): stored_text(fields[i + 1])
                    for i in range(0, len(fields), 2)
                }
            sid = stored_text(entry_id)
            ms = int(sid.split("-", 1)[0])
            out.append(
                QueueEvent(
                    id=sid,
                    event=f.get("event", ""),
                    task_id=f.get("id", ""),
                    attempt=stored_int(f.get("attempt")),
                    at=datetime.fromtimestamp(ms / 1000, UTC),
                )
            )
        return out

    command = ("XREAD", "COUNT", str(count), "BLOCK", str(block_ms), "STREAMS", keys.events, since)
    return one(command, decode)
