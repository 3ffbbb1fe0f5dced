"""Reads of a flow's records (plain commands, no script): the results a task's
dependencies handed it (``after``; lua/includes/flow_input.lua).

A dependency done hands its result to each task waiting for it, in the script that
completed it: field ``in:<dependency id>`` of the dependant's hash, JSON text (``null``
for no result). A dependant's inputs together are bounded by the queue's
``max_payload_bytes``; a result that would pass the bound is not handed, and that
dependency is then absent from what ``dependency_results`` returns.
"""

from __future__ import annotations

import json
from typing import Any

from taskfleet.protocol.connect import SyncClient
from taskfleet.protocol.keys import QueueKeys
from taskfleet.protocol.tasks import stored_text

__all__ = ["DEPENDENCY_FAILED", "INPUT_PREFIX", "dependency_results"]

#: The field of a dependant's hash holding the result of one dependency.
INPUT_PREFIX = "in:"
#: The reason of a task ended dead because a dependency ended dead or cancelled (its
#: error then says which: ``dependency <id> ended <dead|cancelled|missing>``).
DEPENDENCY_FAILED = "dependency failed"


def dependency_results(client: SyncClient, keys: QueueKeys, task_id: str) -> dict[str, Any]:
    """The results handed to ``task_id`` by its dependencies, by their id, in the order of
    its ``after`` (two reads; a dependency whose result was not handed is absent)."""
    key = keys.task(task_id)
    raw = client.hget(key, "after")
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
