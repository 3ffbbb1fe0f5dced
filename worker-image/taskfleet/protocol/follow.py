"""Following a task: what a follower writes and blocks on to be woken by its changes.

A follower sets ``follows`` (the queue has a follower) and makes the task's follow stream
``follow:<id>`` with one entry, both expiring a minute after it last refreshed them.
Each script that changes a task's state or progress (``lua/includes/event.lua``) reads
``follows`` with ``events_cap`` (one MGET) and, while it is set, adds the event's kind to
the task's follow stream when that exists. The follower blocks on that stream (XREAD
BLOCK) and reads the task when woken: no polling. A queue nobody follows pays nothing
more than that MGET; a task nobody follows, one EXISTS per change while the queue has a
follower.

Protocol layer.
"""

from __future__ import annotations

from typing import Any

from taskfleet.protocol.calls import Call, call, one
from taskfleet.protocol.keys import QueueKeys
from taskfleet.protocol.records import text

__all__ = ["FOLLOW_MAX", "FOLLOW_TTL_MS", "follow_block", "follow_join", "follow_refresh"]

#: How long ``follows`` and a follow stream outlive a follower's last refresh (ms).
FOLLOW_TTL_MS = 60_000
#: Entries a follow stream keeps (about: XADD MAXLEN ~), as the scripts trim it.
FOLLOW_MAX = 32


def follow_join(keys: QueueKeys, task_id: str) -> Call[str]:
    """Start following ``task_id``: the stream's newest entry id (the join's own); block
    after it to be woken by the next change."""
    stream = keys.follow(task_id)
    return call(
        [
            ("SET", keys.follows, "1", "PX", FOLLOW_TTL_MS),
            ("XADD", stream, "MAXLEN", "~", FOLLOW_MAX, "*", "event", "follow"),
            ("PEXPIRE", stream, FOLLOW_TTL_MS),
        ],
        lambda replies: text(replies[1]),
    )


def follow_refresh(keys: QueueKeys, task_id: str) -> Call[bool]:
    """Keep following for another ``FOLLOW_TTL_MS``; False when the stream is gone (join
    again)."""
    return call(
        [
            ("SET", keys.follows, "1", "PX", FOLLOW_TTL_MS),
            ("PEXPIRE", keys.follow(task_id), FOLLOW_TTL_MS),
        ],
        lambda replies: bool(replies[1]),
    )


def follow_block(keys: QueueKeys, task_id: str, after: str, block_ms: int) -> Call[str | None]:
    """Wait up to ``block_ms`` for a change after ``after``: the newest entry id, or None
    when none came."""
    stream = keys.follow(task_id)

    def decode(reply: Any) -> str | None:
        if not reply:
            return None
        # RESP2: [[key, entries]]; RESP3: {key: entries}
        entries = next(iter(reply.values())) if isinstance(reply, dict) else reply[0][1]
        if not entries:
            return None
        if isinstance(entries[-1], list | tuple):
            return text(entries[-1][0])
        return None

    return one(("XREAD", "COUNT", FOLLOW_MAX, "BLOCK", block_ms, "STREAMS", stream, after), decode)
