"""TaskQueue status: conditions and the counts the printer columns show.

Pure functions over plain dicts, so the handlers can compute the new status, compare it
with the current one, and patch only when something changed (every status patch is a
watch event for every client watching TaskQueues).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

READY = "Ready"
REDIS_REACHABLE = "RedisReachable"


def now_iso() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def find(conditions: Sequence[Mapping[str, Any]] | None, kind: str) -> Mapping[str, Any] | None:
    for condition in conditions or ():
        if condition.get("type") == kind:
            return condition
    return None


def is_false(conditions: Sequence[Mapping[str, Any]] | None, kind: str) -> bool:
    condition = find(conditions, kind)
    return condition is not None and condition.get("status") == "False"


def set_condition(
    conditions: Sequence[Mapping[str, Any]] | None,
    kind: str,
    status: bool,
    reason: str,
    message: str,
) -> list[dict[str, Any]]:
    """A new conditions list with ``kind`` set; its transition time moves only on a flip."""
    value = "True" if status else "False"
    previous = find(conditions, kind)
    since = now_iso()
    if previous is not None and previous.get("status") == value:
        since = previous.get("lastTransitionTime") or since
    updated = {
        "type": kind,
        "status": value,
        "reason": reason,
        "message": message[:1024],
        "lastTransitionTime": since,
    }
    others = [dict(c) for c in conditions or () if c.get("type") != kind]
    return sorted([*others, updated], key=lambda c: str(c["type"]))


def queue_counts(stats: Mapping[str, int], live_pods: int) -> dict[str, int]:
    return {
        "pending": stats.get("pending", 0),
        "delayed": stats.get("delayed", 0),
        "running": stats.get("running", 0),
        "dead": stats.get("dead", 0),
        "livePods": live_pods,
        "requeuedTotal": stats.get("requeued", 0),
    }


def changes(current: Mapping[str, Any] | None, desired: Mapping[str, Any]) -> dict[str, Any]:
    """The fields of ``desired`` that differ from ``current`` (a merge patch for status)."""
    current = current or {}
    return {key: value for key, value in desired.items() if current.get(key) != value}
