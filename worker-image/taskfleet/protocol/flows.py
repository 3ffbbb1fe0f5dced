"""Reads of a flow's records (plain commands, no script): the results a task's
dependencies handed it (``after``; lua/includes/flow_input.lua).

A dependency done hands its result to each task waiting for it, in the script that
completed it: field ``in:<dependency id>`` of the dependant's hash, JSON text (``null``
for no result). A dependant's inputs together are bounded by the queue's
``max_payload_bytes``; a result that would pass the bound is not handed, and that
dependency is then absent from what ``dependency_results`` returns.

A flow's record (``flow:<flow id>``, lua/includes/flow_add.lua and flow_member_end.lua):
its members open and ended by how, when it began and ended, and its outcome once ended;
``flow_record`` reads it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from taskfleet.protocol.calls import Call, one
from taskfleet.protocol.connect import SyncClient
from taskfleet.protocol.keys import QueueKeys
from taskfleet.protocol.tasks import stored_int, stored_text, stored_time

__all__ = [
    "DEPENDENCY_FAILED",
    "INPUT_PREFIX",
    "FlowRecord",
    "dependency_results",
    "flow_ids",
    "flow_record",
    "flow_records",
]


@dataclass(frozen=True, slots=True)
class FlowRecord:
    """One flow as its record stands: members open (not finished) and finished by how;
    ``outcome`` (done, failed or cancelled) and ``ended_at`` once the last one ended."""

    id: str
    open: int
    done: int
    dead: int
    cancelled: int
    started_at: datetime | None
    ended_at: datetime | None
    outcome: str | None

    @property
    def ended(self) -> bool:
        return self.ended_at is not None


_FLOW_FIELDS = ("open", "done", "dead", "cancelled", "started_at", "ended_at", "outcome")


def flow_record(keys: QueueKeys, flow_id: str) -> Call[FlowRecord | None]:
    """The record of flow ``flow_id`` (one HMGET); None when there is none (never a flow,
    or expired a retention after it ended)."""

    def parse(reply: Any) -> FlowRecord | None:
        h = {
            n: None if v is None else stored_text(v)
            for n, v in zip(_FLOW_FIELDS, reply, strict=True)
        }
        if h["started_at"] is None:
            return None
        count = {n: max(0, stored_int(h[n]) or 0) for n in ("open", "done", "dead", "cancelled")}
        return FlowRecord(
            flow_id,
            count["open"],
            count["done"],
            count["dead"],
            count["cancelled"],
            started_at=stored_time(h["started_at"]),
            ended_at=stored_time(h["ended_at"]),
            outcome=h["outcome"],
        )

    return one(("HMGET", keys.flow(flow_id), *_FLOW_FIELDS), parse)


def flow_ids(keys: QueueKeys, offset: int, count: int) -> Call[tuple[int, list[str]]]:
    """How many flows have not ended, and ids ``offset .. offset+count-1`` of them, the
    newest first (``flows``: by rank, O(log N + count))."""
    return Call(
        (("ZCARD", keys.flows), ("ZREVRANGE", keys.flows, offset, offset + count - 1)),
        lambda r: (int(r[0]), [stored_text(i) for i in r[1] or ()]),
    )


def flow_records(keys: QueueKeys, flow_ids: list[str]) -> Call[list[FlowRecord | None]]:
    """``flow_record`` of each id, in one pipeline."""
    calls = [flow_record(keys, f) for f in flow_ids]
    commands = tuple(c.commands[0] for c in calls) or (("PING",),)
    return Call(
        commands,
        lambda r: [c.decode([v]) for c, v in zip(calls, r, strict=False)] if flow_ids else [],
    )


#: The field of a dependant's hash holding the result of one dependency.
INPUT_PREFIX = "in:"
#: The reason of a task ended dead because a dependency ended dead or cancelled (its
#: error then says which: ``dependency <id> ended <dead|cancelled|missing>``).
DEPENDENCY_FAILED = "dependency failed"


def dependency_results(
    client: SyncClient, keys: QueueKeys, task_id: str, after: str | None = None
) -> dict[str, Any]:
    """The results handed to ``task_id`` by its dependencies, by their id, in the order of
    its ``after`` (a dependency whose result was not handed is absent). ``after``: that
    list as the claim record carried it (one read); None: read from the task (two)."""
    key = keys.task(task_id)
    raw = after if after is not None else client.hget(key, "after")
    if not raw:
        return {}
    try:
        after = json.loads(stored_text(raw))
    except ValueError:
        return {}
    if not isinstance(after, list) or not after:
        return {}
    ids = [str(dep) for dep in after]
    values = client.hmget(key, [INPUT_PREFIX + dep for dep in ids])
    out: dict[str, Any] = {}
    for dep, value in zip(ids, values, strict=True):
        if value is None:
            continue
        text = stored_text(value)
        try:
            out[dep] = json.loads(text)
        except ValueError:
            out[dep] = text  # written by a foreign producer: kept as text
    return out
