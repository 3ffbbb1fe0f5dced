"""The queue's event stream for producers: ``configure_events`` and ``events``."""

from __future__ import annotations

import re

from taskfleet.producer.runner import Emit, Plan, QueueBase
from taskfleet.protocol import events as stream
from taskfleet.protocol.errors import InvalidArgument

__all__ = ["configure_events", "events"]

_STREAM_ID = re.compile(r"^\d{1,20}(-\d{1,20})?$")
#: How long one blocking read waits before it is sent again (a reconnect point, no poll).
BLOCK_MS = 5000


def configure_events(
    q: QueueBase, enabled: bool = True, *, retention: int = stream.DEFAULT_EVENTS_RETENTION
) -> Plan[None]:
    """Turn the queue's event stream on (keeping about ``retention`` events) or off.
    Off by default: then the scripts write nothing."""
    if isinstance(retention, bool) or not isinstance(retention, int) or not retention >= 1:
        raise InvalidArgument(f"retention must be a positive number of events, not {retention!r}")
    if enabled:
        yield stream.events_on(q.keys, retention)
    else:
        yield stream.events_off(q.keys)


def events(q: QueueBase, since: str | None = None, *, batch: int = 500) -> Plan[None]:
    """Yield the queue's events after ``since`` (a stream id; '0': all still retained;
    None: from now on), in order, for ever; each read blocks until some arrive."""
    if since is not None and not _STREAM_ID.fullmatch(since):
        raise InvalidArgument(f"since must be a stream id such as '1700000000000-0', not {since!r}")
    if since is None:
        since = yield stream.last_event_id(q.keys)
    assert since is not None
    while True:
        found = yield stream.read_events(q.keys, since, BLOCK_MS, batch)
        for event in found:
            yield Emit(event)
            since = event.id
