"""Reads that find the tasks of a flow (plain commands, no script): each task's links
up (its field ``after``: its dependencies and the children it added) and down (fields
``by:<id>``: the tasks that wait for it, written by lua/includes/flow_link.lua).

A flow's cancel and retry (``producer/flowcontrol.py``) walk these links a few hundred
tasks a round trip; every read is bounded (one ``HMGET`` and one ``HSCAN`` step of at
most ``BY_COUNT`` fields per task), so no call holds Redis long however large the flow.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from taskfleet.protocol.calls import Call, call, one
from taskfleet.protocol.keys import QueueKeys
from taskfleet.protocol.records import text

__all__ = ["BY_COUNT", "WAITED_BY_PREFIX", "Links", "links", "more_by"]

#: The field of a task's hash naming one task that waits for it (``by:<id>`` = 1).
WAITED_BY_PREFIX = "by:"
#: Fields per HSCAN step.
BY_COUNT = 1000


@dataclass(frozen=True, slots=True)
class Links:
    """One task's state (None: no such task) and links: ``after`` (what it waits for),
    ``by`` (what waits for it, as far as ``cursor`` has read; 0: all of them)."""

    state: str | None
    after: tuple[str, ...]
    by: tuple[str, ...]
    cursor: int


def _after(raw: Any) -> tuple[str, ...]:
    if raw is None:
        return ()
    try:
        ids = json.loads(text(raw))
    except ValueError:
        return ()
    return tuple(str(i) for i in ids) if isinstance(ids, list) else ()


def _scan_step(reply: Any) -> tuple[int, tuple[str, ...]]:
    """An HSCAN reply (cursor, fields): a dict from redis-py, a flat list in plain RESP."""
    cursor, found = reply
    names = found.keys() if isinstance(found, dict) else list(found)[::2]
    n = len(WAITED_BY_PREFIX)
    return int(cursor), tuple(text(name)[n:] for name in names)


def _by_scan(keys: QueueKeys, task_id: str, cursor: int) -> tuple[Any, ...]:
    return (
        "HSCAN",
        keys.task(task_id),
        cursor,
        "MATCH",
        WAITED_BY_PREFIX + "*",
        "COUNT",
        BY_COUNT,
    )


def links(keys: QueueKeys, task_ids: Sequence[str]) -> Call[list[Links]]:
    """Each task's state and links, in the order asked (one round trip)."""
    ids = list(task_ids)
    commands: list[tuple[Any, ...]] = []
    for i in ids:
        commands.append(("HMGET", keys.task(i), "state", "after"))
        commands.append(_by_scan(keys, i, 0))

    def decode(replies: Sequence[Any]) -> list[Links]:
        out: list[Links] = []
        for n in range(len(ids)):
            state, after = replies[2 * n]
            cursor, by = _scan_step(replies[2 * n + 1])
            out.append(Links(None if state is None else text(state), _after(after), by, cursor))
        return out

    return call(commands, decode)


def more_by(keys: QueueKeys, task_id: str, cursor: int) -> Call[tuple[int, tuple[str, ...]]]:
    """The next HSCAN step of the tasks that wait for ``task_id``: (cursor, ids)."""
    return one(_by_scan(keys, task_id, cursor), _scan_step)
